/**
 * Architecture rules checked by `npm run depcheck` (and therefore by `.ci/run`). See
 * docs/adr/0017-enforced-architecture-rules.md for why they exist. Tests (test/, bench/, *.test.ts) may reach
 * into internals and are not cruised.
 * @type {import('dependency-cruiser').IConfiguration}
 */
module.exports = {
  forbidden: [
    {
      name: 'domain-internals',
      comment:
        "A domain uses another domain only through that domain's index.ts (its exported verbs), never its service, " +
        'schemas or helpers directly.',
      severity: 'error',
      from: { path: '^src/domains/([^/]+)/' },
      to: {
        path: '^src/domains/([^/]+)/',
        pathNot: ['^src/domains/$1/', '^src/domains/[^/]+/index\\.ts$'],
      },
    },
    {
      name: 'entry-imports-domain-internals',
      comment: "The composition root and the CLI (src/*.ts) use a domain only through its index.ts, like other domains do.",
      severity: 'error',
      from: { path: '^src/[^/]+\\.ts$' },
      to: { path: '^src/domains/[^/]+/', pathNot: '^src/domains/[^/]+/index\\.ts$' },
    },
    {
      name: 'platform-imports-domain',
      comment: 'src/platform/ is shared infrastructure below the domains; it must not depend on any of them.',
      severity: 'error',
      from: { path: '^src/platform/' },
      to: { path: '^src/domains/' },
    },
    {
      name: 'route-imports-database',
      comment:
        "A route file stays HTTP-only: it calls its domain's service verbs and never touches the database layer.",
      severity: 'error',
      from: { path: ['^src/domains/[^/]+/routes\\.ts$', 'routes[^/]*\\.ts$'] },
      to: { path: ['^src/platform/db/', '^src/database\\.ts$'] },
    },
    {
      name: 'route-imports-driver',
      comment: 'A route file never imports a database or cache driver package.',
      severity: 'error',
      from: { path: ['^src/domains/[^/]+/routes\\.ts$', 'routes[^/]*\\.ts$'] },
      to: {
        dependencyTypes: ['npm', 'npm-dev', 'npm-optional', 'npm-peer', 'npm-bundled', 'npm-no-pkg', 'npm-unknown'],
        path: '(^|/)node_modules/(kysely|pg|better-sqlite3|ioredis)/',
      },
    },
    {
      name: 'domain-cycle',
      comment: 'Domains form a directed graph: no cycle between two or more domains.',
      severity: 'error',
      from: { path: '^src/domains/([^/]+)/' },
      to: {
        circular: true,
        viaSomeNot: '^src/domains/$1/',
      },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: ['^test/', '^bench/', '\\.test\\.ts$'] },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
      extensions: ['.ts', '.js', '.cjs', '.mjs', '.json'],
    },
  },
};
