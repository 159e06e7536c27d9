import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { AppError } from '../../platform/http/errors.js';
import { DOCKERFILE_INSTRUCTIONS, KNOWN_OS, planFromBuilder, planFromDockerfile, type BuilderInput } from './plan.js';
import { rejection } from '../../../test/helpers.js';

const HOST = { os: 'debian-12', kind: 'host' } as const;
const NODE = '20.20.2';

/** Asserts a 400 naming `field`, and returns its message (without the `field: ` prefix). */
function rejects400(fn: () => unknown, field: string): string {
  const err = rejection(fn, AppError);
  expect(err.status).toBe(400);
  expect(err.code).toBe('invalid_request');
  expect(err.details?.issues?.[0]?.path).toBe(field);
  expect(err.message.startsWith(`${field}: `)).toBe(true);
  return err.details!.issues![0].message;
}

const build = (input: BuilderInput) => planFromBuilder(input, HOST, NODE);
const builderError = (input: unknown, field: string) => rejects400(() => planFromBuilder(input as BuilderInput, HOST, NODE), field);
const dockerfileError = (text: string) => rejects400(() => planFromDockerfile(text), 'dockerfile');

const APT_TAIL = ['apt-get clean', 'rm -rf /var/lib/apt/lists/*'];

describe('exports', () => {
  it("knows the spec's os values and documents the Dockerfile instructions", () => {
    expect(KNOWN_OS).toEqual(['ubuntu-22.04', 'ubuntu-24.04', 'debian-12', 'alpine-3.19']);
    expect(DOCKERFILE_INSTRUCTIONS).toEqual(['FROM', 'RUN', 'ENV', 'WORKDIR', 'ARG', 'LABEL']);
  });
});

describe('planFromBuilder: os', () => {
  it('plans on whatever base it is given and accepts every known os by name', () => {
    expect(build({}).steps).toEqual([]);
    for (const os of KNOWN_OS) expect(build({ os }).steps).toEqual([]);
  });

  it('an empty builder is a valid plan with no steps', () => {
    expect(build({})).toEqual({
      from: null,
      base: HOST,
      steps: [],
      env: {},
      workdir: null,
      labels: {},
      summary: { apt: [], npm: [], pip: [], runtimes: [], dockerfileInstructions: [] },
    });
    expect(build({ apt: [], npm: [], pip: [], runtimes: [], env: {} }).steps).toEqual([]);
  });

  it('refuses unknown systems, listing the known values', () => {
    for (const os of ['windows', 'Debian-12', 'debian-11', '']) {
      const message = builderError({ os }, 'os');
      expect(message).toContain(`unknown operating system ${JSON.stringify(os)}`);
      expect(message).toContain('use one of ubuntu-22.04, ubuntu-24.04, debian-12, alpine-3.19');
    }
  });

  it('says not implemented when the host itself has no package catalogue', () => {
    const err = rejection(() => planFromBuilder({}, { os: 'ubuntu-24.04', kind: 'host' }, NODE), AppError);
    expect(err.status).toBe(501);
    expect(rejection(() => planFromBuilder({}, { os: 'alpine-3.19', kind: 'host' }, NODE), AppError).status).toBe(501);
  });
});

describe('planFromBuilder: runtimes', () => {
  it('maps each runtime to its Debian packages in one apt step', () => {
    const plan = build({
      runtimes: [
        { name: 'python', version: '3.11' },
        { name: 'go', version: '1.19' },
        { name: 'java', version: '17' },
        { name: 'ruby', version: '3.1' },
        { name: 'rust', version: '*' },
        { name: 'node', version: '20' },
      ],
    });
    expect(plan.summary.runtimes).toEqual([
      { name: 'python', version: '3.11', packages: ['python3', 'python3-pip', 'python3-venv'] },
      { name: 'go', version: '1.19', packages: ['golang-go'] },
      { name: 'java', version: '17', packages: ['openjdk-17-jdk-headless'] },
      { name: 'ruby', version: '3.1', packages: ['ruby-full'] },
      { name: 'rust', version: '1.63', packages: ['rustc', 'cargo'] },
      { name: 'node', version: NODE, packages: [] },
    ]);
    expect(plan.steps).toHaveLength(1);
    expect(plan.steps[0].script).toBe(
      [
        'export DEBIAN_FRONTEND=noninteractive',
        'apt-get update -q',
        'apt-get install -y -q --no-install-recommends python3 python3-pip python3-venv golang-go openjdk-17-jdk-headless ruby-full rustc cargo',
        ...APT_TAIL,
      ].join('\n'),
    );
    expect(plan.summary.apt).toEqual([]);
  });

  it('accepts "*", "latest", "x"-suffixed and dotted prefixes of the available version', () => {
    for (const version of ['3', '3.11', '*', 'latest', 'LATEST', '3.x', '3.11.x', '3.*', ' 3.11 ']) {
      expect(build({ runtimes: [{ name: 'python', version }] }).summary.runtimes[0].version).toBe('3.11');
    }
    for (const version of ['1', '1.19', '*']) expect(build({ runtimes: [{ name: 'golang', version }] }).summary.runtimes[0].name).toBe('go');
    for (const version of ['1.63', 'latest']) expect(build({ runtimes: [{ name: 'rust', version }] }).steps).toHaveLength(1);
  });

  it('node uses the base layer: no packages, no step, any prefix of the host version', () => {
    for (const version of ['*', 'latest', '20', '20.20', '20.20.2', 'v20', '20.x']) {
      const plan = build({ runtimes: [{ name: 'node', version }] });
      expect(plan.steps).toEqual([]);
      expect(plan.summary.runtimes).toEqual([{ name: 'node', version: NODE, packages: [] }]);
    }
    expect(planFromBuilder({ runtimes: [{ name: 'nodejs', version: '22' }] }, HOST, '22.3.0').summary.runtimes[0]).toEqual({
      name: 'node',
      version: '22.3.0',
      packages: [],
    });
  });

  it('defaults the node version to the running process', () => {
    const major = process.versions.node.split('.')[0];
    expect(planFromBuilder({ runtimes: [{ name: 'node', version: major }] }, HOST).summary.runtimes[0].version).toBe(process.versions.node);
  });

  it('refuses versions Debian 12 does not provide, saying which it does', () => {
    expect(builderError({ runtimes: [{ name: 'python', version: '3.12' }] }, 'runtimes[0].version')).toBe(
      'got "3.12": Debian 12 provides python 3.11 and no other python version can be installed here; use "3.11", "3", "*" or "latest"',
    );
    expect(builderError({ runtimes: [{ name: 'python', version: '2' }] }, 'runtimes[0].version')).toContain('python 3.11');
    expect(builderError({ runtimes: [{ name: 'python', version: '3.1' }] }, 'runtimes[0].version')).toContain('python 3.11');
    expect(builderError({ runtimes: [{ name: 'python', version: '3.11.2' }] }, 'runtimes[0].version')).toContain('python 3.11');
    expect(
      builderError(
        {
          runtimes: [
            { name: 'go', version: '1.19' },
            { name: 'java', version: '21' },
          ],
        },
        'runtimes[1].version',
      ),
    ).toContain('Debian 12 provides java 17');
    expect(builderError({ runtimes: [{ name: 'go', version: '1.22' }] }, 'runtimes[0].version')).toContain('go 1.19');
    expect(builderError({ runtimes: [{ name: 'ruby', version: '3.3' }] }, 'runtimes[0].version')).toContain('ruby 3.1');
    expect(builderError({ runtimes: [{ name: 'rust', version: '1.80' }] }, 'runtimes[0].version')).toContain('rust 1.63');
    expect(builderError({ runtimes: [{ name: 'python', version: '' }] }, 'runtimes[0].version')).toContain('"3.11"');
    expect(builderError({ runtimes: [{ name: 'python', version: 3 }] }, 'runtimes[0].version')).toContain('got a version string');
  });

  it('refuses another Node than the base layer has, naming it', () => {
    expect(builderError({ runtimes: [{ name: 'node', version: '18' }] }, 'runtimes[0].version')).toBe(
      'got "18": the base layer has node 20.20.2 (/usr/bin/node, with npm) and no other Node version can be installed here; use "20.20.2", "20.20", "20", "*" or "latest"',
    );
    expect(builderError({ runtimes: [{ name: 'nodejs', version: '20.19' }] }, 'runtimes[0].version')).toContain('node 20.20.2');
  });

  it('refuses unknown runtimes, listing the known names', () => {
    expect(builderError({ runtimes: [{ name: 'perl', version: '5' }] }, 'runtimes[0].name')).toBe(
      'unknown runtime "perl"; known runtimes are python, node, nodejs, go, golang, java, ruby, rust',
    );
    expect(builderError({ runtimes: [{ name: 'python', version: '3' }, { version: '1' }] }, 'runtimes[1].name')).toContain('python, node');
    expect(builderError({ runtimes: [null] }, 'runtimes[0]')).toContain('{ name, version }');
    expect(builderError({ runtimes: 'python' }, 'runtimes')).toContain('list');
  });

  it('names are case-insensitive and repeated runtimes count once', () => {
    const plan = build({
      runtimes: [
        { name: 'Python', version: '3' },
        { name: 'python3', version: '*' },
        { name: 'go', version: '1.19' },
      ],
    });
    expect(plan.summary.runtimes.map((r) => r.name)).toEqual(['python', 'go']);
    expect(plan.steps[0].script).toContain('--no-install-recommends python3 python3-pip python3-venv golang-go\n');
  });
});

describe('planFromBuilder: on an OS image', () => {
  const image = (os: string) => ({ os, kind: 'image' as const });
  const on = (os: string, input: BuilderInput) => planFromBuilder(input, image(os), NODE);
  const all = ['python', 'node', 'go', 'java', 'ruby', 'rust'].map((name) => ({ name, version: '*' }));

  it.each([
    ['debian-12', { python: '3.11', node: '18', go: '1.19', java: '17', ruby: '3.1', rust: '1.63' }, 'openjdk-17-jdk-headless'],
    ['ubuntu-22.04', { python: '3.10', node: '12', go: '1.18', java: '17', ruby: '3.0', rust: '1.75' }, 'openjdk-17-jdk-headless'],
    ['ubuntu-24.04', { python: '3.12', node: '18', go: '1.22', java: '21', ruby: '3.2', rust: '1.75' }, 'openjdk-21-jdk-headless'],
  ])('%s: runtimes are the distribution’s own packages and versions', (os, versions, jdk) => {
    const plan = on(os, { runtimes: all });
    expect(plan.base).toEqual(image(os));
    expect(Object.fromEntries(plan.summary.runtimes.map((r) => [r.name, r.version]))).toEqual(versions);
    expect(plan.summary.runtimes.find((r) => r.name === 'node')!.packages).toEqual(['nodejs', 'npm']);
    expect(plan.steps[0].script).toContain(
      `--no-install-recommends python3 python3-pip python3-venv nodejs npm golang-go ${jdk} ruby-full rustc cargo\n`,
    );
  });

  it('names the distribution when another version is asked for', () => {
    const err = rejection(() => on('ubuntu-24.04', { runtimes: [{ name: 'python', version: '3.11' }] }), AppError);
    expect(err.status).toBe(400);
    expect(err.message).toContain('Ubuntu 24.04 provides python 3.12');
    expect(err.message).toContain('use "3.12", "3", "*" or "latest"');
  });

  it('installs the distribution’s npm (with nodejs) for npm packages, and python3-pip for pip ones', () => {
    const plan = on('debian-12', { npm: ['left-pad'], pip: ['requests'], apt: ['jq'] });
    expect(plan.summary.apt).toEqual(['python3-pip', 'npm', 'jq']);
    expect(plan.steps.map((st) => st.title)).toEqual(['apt-get install python3-pip npm jq', 'npm install -g left-pad', 'pip install requests']);
    // On the host's userland, npm is the base layer's own.
    expect(build({ npm: ['left-pad'] }).summary.apt).toEqual([]);
  });

  it('gives Ubuntu 22.04’s pip 22.0 only the options it knows', () => {
    expect(on('ubuntu-22.04', { pip: ['requests'] }).steps[1].script).toBe('python3 -m pip install --no-cache-dir requests');
    expect(on('ubuntu-24.04', { pip: ['requests'] }).steps[1].script).toBe(
      'python3 -m pip install --no-cache-dir --break-system-packages --root-user-action=ignore requests',
    );
  });

  it('installs runtimes on alpine-3.19 with apk, from Alpine’s own packages', () => {
    const plan = on('alpine-3.19', {
      runtimes: ['python', 'node', 'go', 'java', 'ruby', 'rust'].map((name) => ({ name, version: 'latest' })),
      env: { A: '1' },
    });
    expect(plan.summary.runtimes.map((r) => `${r.name} ${r.version}`)).toEqual([
      'python 3.11',
      'node 20',
      'go 1.21',
      'java 17',
      'ruby 3.2',
      'rust 1.72',
    ]);
    expect(plan.steps).toEqual([
      {
        kind: 'run',
        title: 'apk add python3 py3-pip nodejs npm go openjdk17-jdk ruby rust cargo',
        script: "export A='1'\napk add --no-cache --no-progress python3 py3-pip nodejs npm go openjdk17-jdk ruby rust cargo",
      },
    ]);
    const err = rejection(() => on('alpine-3.19', { runtimes: [{ name: 'python', version: '3.12' }] }), AppError);
    expect(err.message).toContain('Alpine 3.19 provides python 3.11');
  });

  it('on alpine-3.19, `apt` names Alpine packages (apk), and pip brings py3-pip', () => {
    const plan = on('alpine-3.19', {
      apt: ['build-base', 'musl-dev', 'libstdc++', 'py3_odd', 'curl=8.5.0-r0'],
      pip: ['requests'],
      npm: ['left-pad'],
    });
    expect(plan.summary.apt).toEqual(['py3-pip', 'npm', 'build-base', 'musl-dev', 'libstdc++', 'py3_odd', 'curl=8.5.0-r0']);
    expect(plan.steps.map((st) => st.title)).toEqual([
      'apk add py3-pip npm build-base musl-dev libstdc++ py3_odd curl=8.5.0-r0',
      'npm install -g left-pad',
      'pip install requests',
    ]);
    expect(plan.steps[2].script).toBe('python3 -m pip install --no-cache-dir --break-system-packages --root-user-action=ignore requests');
    const err = rejection(() => on('alpine-3.19', { apt: ['--allow-untrusted'] }), AppError);
    expect(err.status).toBe(400);
    expect(err.message).toContain('is not an Alpine package name');
  });
});

describe('planFromBuilder: packages', () => {
  it('installs apt, then npm, then pip, each in its own step with quoted names', () => {
    const plan = build({
      apt: ['git', 'curl', 'libssl-dev=3.0.11-1~deb12u2', 'g++'],
      npm: ['typescript@^5', '@types/node', 'pnpm@9.1.0'],
      pip: ['requests>=2,<3', 'numpy==1.26.4', 'uvicorn[standard]'],
    });
    expect(plan.steps.map((s) => s.title)).toEqual([
      'apt-get install python3-pip git curl libssl-dev=3.0.11-1~deb12u2 g++',
      'npm install -g typescript@^5 @types/node pnpm@9.1.0',
      'pip install requests>=2,<3 numpy==1.26.4 uvicorn[standard]',
    ]);
    expect(plan.steps[0]).toEqual({
      kind: 'run',
      title: 'apt-get install python3-pip git curl libssl-dev=3.0.11-1~deb12u2 g++',
      script: [
        'export DEBIAN_FRONTEND=noninteractive',
        'apt-get update -q',
        "apt-get install -y -q --no-install-recommends python3-pip git curl 'libssl-dev=3.0.11-1~deb12u2' g++",
        ...APT_TAIL,
      ].join('\n'),
    });
    expect(plan.steps[1].script).toBe("npm install -g --no-audit --no-fund 'typescript@^5' @types/node pnpm@9.1.0");
    expect(plan.steps[2].script).toBe(
      "python3 -m pip install --no-cache-dir --break-system-packages --root-user-action=ignore 'requests>=2,<3' numpy==1.26.4 'uvicorn[standard]'",
    );
    expect(plan.summary).toMatchObject({
      apt: ['python3-pip', 'git', 'curl', 'libssl-dev=3.0.11-1~deb12u2', 'g++'],
      npm: ['typescript@^5', '@types/node', 'pnpm@9.1.0'],
      pip: ['requests>=2,<3', 'numpy==1.26.4', 'uvicorn[standard]'],
      runtimes: [],
    });
  });

  it('pip alone brings python3-pip through apt; with the python runtime it is not repeated', () => {
    const alone = build({ pip: ['requests'] });
    expect(alone.steps.map((s) => s.title)).toEqual(['apt-get install python3-pip', 'pip install requests']);
    expect(alone.steps[0].script).toContain('--no-install-recommends python3-pip\n');

    const withPython = build({ runtimes: [{ name: 'python', version: '3' }], apt: ['python3-pip', 'jq'], pip: ['requests'] });
    expect(withPython.steps[0].script).toContain('--no-install-recommends python3 python3-pip python3-venv jq\n');
    expect(withPython.summary.apt).toEqual(['jq']);
  });

  it('npm needs no apt step: npm comes with the base layer', () => {
    const plan = build({ npm: ['typescript'] });
    expect(plan.steps).toEqual([{ kind: 'run', title: 'npm install -g typescript', script: 'npm install -g --no-audit --no-fund typescript' }]);
  });

  it('drops repeated packages, keeping the first', () => {
    const plan = build({ apt: ['git', 'curl', 'git'], npm: ['a', 'b', 'a'], pip: ['x', 'x', 'y'] });
    expect(plan.summary.apt).toEqual(['python3-pip', 'git', 'curl']);
    expect(plan.summary.npm).toEqual(['a', 'b']);
    expect(plan.summary.pip).toEqual(['x', 'y']);
    expect(plan.steps[1].script).toBe('npm install -g --no-audit --no-fund a b');
  });

  it('truncates long step titles to 80 characters', () => {
    const apt = Array.from({ length: 30 }, (_, i) => `package-${i}`);
    const plan = build({ apt });
    expect(plan.steps[0].title).toBe(`${`apt-get install ${apt.join(' ')}`.slice(0, 80)}…`);
    expect(plan.steps[0].script).toContain(apt.join(' '));
  });

  it('accepts exactly 200 packages and refuses 201', () => {
    const names = Array.from({ length: 200 }, (_, i) => `pkg${i}`);
    expect(build({ apt: names }).summary.apt).toHaveLength(200);
    expect(build({ npm: names }).summary.npm).toHaveLength(200);
    expect(build({ pip: names }).summary.pip).toHaveLength(200);
    for (const field of ['apt', 'npm', 'pip'] as const) {
      expect(builderError({ [field]: [...names, 'one-more'] }, field)).toBe('at most 200 packages (got 201)');
    }
  });

  it('refuses lists that are not lists of strings', () => {
    expect(builderError({ apt: 'git' }, 'apt')).toContain('must be a list of Debian package names');
    expect(builderError({ npm: ['ok', 3] }, 'npm[1]')).toContain('must be a string');
    expect(builderError({ pip: [null] }, 'pip[0]')).toContain('must be a string');
  });

  it.each([
    ['Git', 'uppercase'],
    ['-y', 'an option'],
    ['--allow-unauthenticated', 'an option'],
    ['a', 'one character'],
    ['git;rm', 'shell'],
    ['git curl', 'a space'],
    ['$(id)', 'substitution'],
    ['git/bookworm-backports', 'a release selector'],
    ['git=', 'an empty version'],
    ['git=1.0 bad', 'a space in the version'],
    ['./local.deb', 'a path'],
    ['', 'empty'],
  ])('refuses the apt name %j (%s) naming its index', (name) => {
    const message = builderError({ apt: ['git', 'curl', 'jq', name] }, 'apt[3]');
    expect(message).toContain(`${JSON.stringify(name)} is not a Debian package name`);
  });

  it.each([
    'typescript',
    '@types/node',
    '@scope/pkg@>=1.2 <2',
    'left-pad@1.3.0',
    'pkg@latest',
    'pkg@next',
    'pkg@1.x || 2.x',
    'JSONStream',
    'lodash.merge',
    'a',
  ])('accepts the npm spec %j', (spec) => {
    expect(build({ npm: [spec] }).summary.npm).toEqual([spec]);
  });

  it.each([
    ['-g', 'must not start with "-"'],
    ['--registry=https://evil.example', 'must not start with "-"'],
    ['git+https://github.com/a/b.git', 'not a URL, path or git spec'],
    ['https://example.com/a.tgz', 'not a URL, path or git spec'],
    ['github:user/repo', 'not a URL, path or git spec'],
    ['file:../pkg', 'not a URL, path or git spec'],
    ['npm:other', 'not a URL, path or git spec'],
    ['./pkg', 'not a URL, path or git spec'],
    ['/abs/pkg', 'not a URL, path or git spec'],
    ['~/pkg', 'not a URL, path or git spec'],
    ['pkg.tgz', 'looks like a tarball'],
    ['pkg@1.0.0.tar.gz', 'looks like a tarball'],
    ['user/repo', 'is not an npm package name'],
    ['@scope', 'is not an npm package name'],
    ['_private', 'is not an npm package name'],
    ['has space', 'is not an npm package name'],
    ['pkg;id', 'is not an npm package name'],
    ['pkg@', 'invalid version'],
    ['pkg@ 1', 'invalid version'],
    ['pkg@$(id)', 'invalid version'],
    ['', 'is not an npm package name'],
  ])('refuses the npm spec %j naming its index', (spec, why) => {
    const message = builderError({ npm: ['ok', spec] }, 'npm[1]');
    expect(message).toContain(JSON.stringify(spec));
    expect(message).toContain(why);
  });

  it.each(['requests', 'requests==2.31.0', 'requests>=2,<3', 'Django~=4.2', 'uvicorn[standard]', 'a[b,c]>=1', 'zope.interface', 'x', 'pkg != 1.0'])(
    'accepts the pip requirement %j',
    (req) => {
      expect(build({ pip: [req] }).summary.pip).toEqual([req]);
    },
  );

  it.each([
    ['-r', 'must not start with "-"'],
    ['--index-url=https://evil.example', 'must not start with "-"'],
    ['-e.', 'must not start with "-"'],
    ['git+https://github.com/a/b', 'not a URL, path or marker'],
    ['pkg @ https://example.com/pkg.whl', 'not a URL, path or marker'],
    ['./dir', 'not a URL, path or marker'],
    ['/abs/dir', 'not a URL, path or marker'],
    ["pkg; python_version<'3.12'", 'not a URL, path or marker'],
    ['pkg-1.0-py3-none-any.whl', 'looks like an archive'],
    ['pkg.tar.gz', 'looks like an archive'],
    ['pkg.zip', 'looks like an archive'],
    ['pkg==', 'is not a PyPI requirement'],
    ['_pkg', 'is not a PyPI requirement'],
    ['pkg$(id)', 'is not a PyPI requirement'],
    ['', 'is not a PyPI requirement'],
  ])('refuses the pip requirement %j naming its index', (req, why) => {
    const message = builderError({ pip: ['ok', 'fine', req] }, 'pip[2]');
    expect(message).toContain(JSON.stringify(req));
    expect(message).toContain(why);
  });
});

describe('planFromBuilder: env', () => {
  it('bakes env into the plan and exports it at the head of every step', () => {
    const env = { PIP_INDEX_URL: 'https://mirror.example/simple', QUOTED: "it's $HOME", PATH: '/opt/tools/bin:/usr/bin:/bin' };
    const plan = build({ apt: ['jq'], npm: ['typescript'], pip: ['requests'], env });
    expect(plan.env).toEqual(env);
    const head = [
      "export PIP_INDEX_URL='https://mirror.example/simple'",
      "export QUOTED='it'\\''s $HOME'",
      "export PATH='/opt/tools/bin:/usr/bin:/bin'",
    ].join('\n');
    for (const step of plan.steps) expect(step.script.startsWith(`${head}\n`)).toBe(true);
    // our DEBIAN_FRONTEND comes after the user's env so it wins
    expect(plan.steps[0].script).toBe(
      [
        head,
        'export DEBIAN_FRONTEND=noninteractive',
        'apt-get update -q',
        'apt-get install -y -q --no-install-recommends python3-pip jq',
        ...APT_TAIL,
      ].join('\n'),
    );
  });

  it('env alone is a plan with no steps', () => {
    const plan = build({ env: { A: '1' } });
    expect(plan.steps).toEqual([]);
    expect(plan.env).toEqual({ A: '1' });
  });

  it('refuses bad names, non-string or long values, and more than 100 variables', () => {
    expect(builderError({ env: { '1A': 'x' } }, 'env.1A')).toContain('not a valid variable name');
    expect(builderError({ env: { 'A-B': 'x' } }, 'env.A-B')).toContain('not a valid variable name');
    expect(builderError({ env: { 'A B': 'x' } }, 'env.A B')).toContain('not a valid variable name');
    expect(builderError({ env: { '': 'x' } }, 'env.')).toContain('not a valid variable name');
    expect(builderError({ env: { A: 1 } }, 'env.A')).toBe('must be a string');
    expect(builderError({ env: { A: 'x'.repeat(4097) } }, 'env.A')).toBe('value must be at most 4096 characters');
    expect(build({ env: { A: 'x'.repeat(4096) } }).env.A).toHaveLength(4096);
    expect(builderError({ env: { A: 'a\u0000b' } }, 'env.A')).toBe('value must not contain NUL');
    expect(builderError({ env: ['A=1'] }, 'env')).toContain('must be an object');
    const many = Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`V${i}`, 'x']));
    expect(builderError({ env: many }, 'env')).toBe('at most 100 variables (got 101)');
    delete many.V100;
    expect(Object.keys(build({ env: many }).env)).toHaveLength(100);
  });

  it('keeps a "__proto__" key as plain data', () => {
    const env = JSON.parse('{"__proto__": "x", "A": "1"}') as Record<string, string>;
    const plan = build({ env });
    expect(Object.keys(plan.env)).toEqual(['__proto__', 'A']);
    expect(Object.getPrototypeOf(plan.env)).toBe(Object.prototype);
  });
});

describe('planFromDockerfile: parsing', () => {
  it('a lone FROM is a plan with no steps', () => {
    expect(planFromDockerfile('FROM base-ubuntu\n')).toEqual({
      from: 'base-ubuntu',
      steps: [],
      env: {},
      workdir: null,
      labels: {},
      summary: { apt: [], npm: [], pip: [], runtimes: [], dockerfileInstructions: ['FROM base-ubuntu'] },
    });
  });

  it('skips comments and blank lines, takes keywords in any case and handles CRLF and a BOM', () => {
    const plan = planFromDockerfile('\uFEFF# a template\r\n\r\n  from base-ubuntu\r\n# install\r\nrun echo hi\r\nRuN echo  # not a comment\r\n');
    expect(plan.from).toBe('base-ubuntu');
    expect(plan.steps.map((s) => s.script)).toEqual(['set +e\necho hi', 'set +e\necho  # not a comment']);
    expect(plan.summary.dockerfileInstructions).toEqual(['FROM base-ubuntu', 'RUN echo hi', 'RUN echo # not a comment']);
  });

  it('joins "\\" continuations like Docker, dropping comment and blank lines inside them', () => {
    const text = [
      'FROM base-ubuntu',
      'RUN apt-get update && \\',
      '    # why we need git',
      '',
      '    apt-get install -y git \\  ',
      '    && echo done',
      'COPY . .',
    ].join('\n');
    expect(dockerfileError(text)).toMatch(/^line 7: COPY is not supported/);
    const plan = planFromDockerfile(text.split('\nCOPY')[0]);
    expect(plan.steps[0].script).toBe('set +e\napt-get update &&     apt-get install -y git     && echo done');
    expect(plan.steps[0].title).toBe('RUN apt-get update && apt-get install -y git && echo done');
  });

  it('a continuation at the end of the file ends the instruction', () => {
    expect(planFromDockerfile('FROM base-ubuntu\nRUN echo a \\').steps[0].script).toBe('set +e\necho a');
  });

  it('ignores the syntax directive and refuses another escape character', () => {
    expect(planFromDockerfile('# syntax=docker/dockerfile:1\n# escape=\\\nFROM base-ubuntu').from).toBe('base-ubuntu');
    expect(dockerfileError('# syntax=docker/dockerfile:1\n# escape=`\nFROM base-ubuntu')).toMatch(/^line 2: the escape directive is not supported/);
  });

  it('refuses more than 64 KiB, more than 200 instructions and NUL', () => {
    const big = `FROM base-ubuntu\nRUN echo ${'x'.repeat(64 * 1024)}`;
    expect(dockerfileError(big)).toMatch(/^must be at most 64 KiB/);
    const runs = (n: number) => ['FROM base-ubuntu', ...Array.from({ length: n }, (_, i) => `RUN echo ${i}`)].join('\n');
    expect(planFromDockerfile(runs(199)).steps).toHaveLength(199);
    expect(dockerfileError(runs(200))).toBe('line 201: too many instructions; a Dockerfile may have at most 200');
    expect(dockerfileError('FROM base-ubuntu\nRUN echo \u0000')).toBe('must not contain NUL');
  });
});

describe('planFromDockerfile: FROM', () => {
  it('must come first (only ARG may precede it), naming the line', () => {
    expect(dockerfileError('# c\n\nRUN echo hi\nFROM base-ubuntu')).toBe(
      'line 3: RUN comes before FROM; a Dockerfile must start with FROM <template>, such as FROM base-ubuntu (only ARG may come first)',
    );
    expect(dockerfileError('ENV A=1\nFROM base-ubuntu')).toMatch(/^line 1: ENV comes before FROM/);
    expect(dockerfileError('WORKDIR /x\nFROM base-ubuntu')).toMatch(/^line 1: WORKDIR comes before FROM/);
    expect(dockerfileError('LABEL a=b\nFROM base-ubuntu')).toMatch(/^line 1: LABEL comes before FROM/);
  });

  it('is required', () => {
    for (const text of ['', '# only a comment\n', 'ARG A=1']) {
      expect(dockerfileError(text)).toBe('FROM <template> is required, naming the template to build on, such as FROM base-ubuntu');
    }
  });

  it('appears exactly once', () => {
    expect(dockerfileError('FROM base-ubuntu\nRUN true\nFROM other')).toBe('line 3: only one FROM is allowed; multi-stage builds are not supported');
  });

  it.each(['debian:12', 'debian:bookworm', 'docker.io/library/ubuntu', 'ubuntu@sha256:abcd', 'ghcr.io/org/img:1'])(
    'refuses the image reference %s, explaining FROM names a template slug',
    (image) => {
      expect(dockerfileError(`FROM ${image}`)).toBe(
        `line 1: FROM names a Hangar template slug such as base-ubuntu, not a container image ("${image}"); templates build on this server's own userland`,
      );
    },
  );

  it('refuses scratch, AS, flags, extra words, bad slugs and an empty FROM', () => {
    expect(dockerfileError('FROM scratch')).toMatch(/^line 1: FROM scratch is not supported/);
    expect(dockerfileError('FROM base-ubuntu AS build')).toBe('line 1: FROM ... AS <name> is not supported: a template is built in one stage');
    expect(dockerfileError('FROM base-ubuntu as build')).toMatch(/AS <name> is not supported/);
    expect(dockerfileError('FROM --platform=linux/amd64 base-ubuntu')).toBe('line 1: FROM --platform is not supported');
    expect(dockerfileError('FROM a b')).toBe('line 1: FROM takes exactly one template slug, such as FROM base-ubuntu');
    expect(dockerfileError('FROM Base-Ubuntu')).toMatch(/^line 1: FROM "Base-Ubuntu" is not a template slug/);
    expect(dockerfileError('FROM -base')).toMatch(/is not a template slug/);
    expect(dockerfileError(`FROM ${'a'.repeat(64)}`)).toMatch(/is not a template slug/);
    expect(planFromDockerfile(`FROM ${'a'.repeat(63)}`).from).toBe('a'.repeat(63));
    expect(dockerfileError('FROM')).toBe('line 1: FROM needs a template slug, such as FROM base-ubuntu');
  });

  it('expands ARGs declared before it, and only those', () => {
    expect(planFromDockerfile('ARG BASE=my-python\nFROM ${BASE}').from).toBe('my-python');
    expect(planFromDockerfile('ARG V=2\nFROM tools-v$V').from).toBe('tools-v2');
    expect(dockerfileError('ARG BASE\nFROM $BASE')).toMatch(/^line 2: ARG BASE has no default/);
    expect(dockerfileError('FROM $NOPE')).toMatch(/^line 1: FROM "" is not a template slug/);
  });
});

describe('planFromDockerfile: RUN', () => {
  it('makes one step per RUN, titled with the first 80 characters', () => {
    const long = `echo ${'a'.repeat(100)}`;
    const plan = planFromDockerfile(`FROM base-ubuntu\nRUN apt-get update\nRUN ${long}`);
    expect(plan.steps).toEqual([
      { kind: 'run', title: 'RUN apt-get update', script: 'set +e\napt-get update' },
      { kind: 'run', title: `RUN ${long.slice(0, 80)}…`, script: `set +e\n${long}` },
    ]);
  });

  it('exec form joins its arguments shell-quoted, without expansion', () => {
    const plan = planFromDockerfile('FROM base-ubuntu\nRUN ["/bin/bash", "-c", "echo $HOME it\'s"]');
    expect(plan.steps[0].script).toBe("set +e\n/bin/bash -c 'echo $HOME it'\\''s'");
    expect(plan.steps[0].title).toBe("RUN /bin/bash -c 'echo $HOME it'\\''s'");
  });

  it('something that only looks like exec form is shell form, as in Docker', () => {
    expect(planFromDockerfile('FROM base-ubuntu\nRUN [ -f /etc/os-release ] && echo yes').steps[0].script).toBe(
      'set +e\n[ -f /etc/os-release ] && echo yes',
    );
    expect(planFromDockerfile('FROM base-ubuntu\nRUN ["echo", 1]').steps[0].script).toBe('set +e\n["echo", 1]');
  });

  it('refuses an empty RUN, an empty exec form, flags and heredocs, naming the line', () => {
    expect(dockerfileError('FROM base-ubuntu\nRUN')).toBe('line 2: RUN needs a command');
    expect(dockerfileError('FROM base-ubuntu\nRUN []')).toBe('line 2: RUN [] has no command');
    expect(dockerfileError('FROM base-ubuntu\n\nRUN --mount=type=cache,target=/root/.cache pip install x')).toBe(
      'line 3: RUN --mount is not supported: a build step is a plain shell command',
    );
    expect(dockerfileError('FROM base-ubuntu\nRUN --network=none true')).toMatch(/^line 2: RUN --network is not supported/);
    expect(dockerfileError('FROM base-ubuntu\nRUN --security=insecure true')).toMatch(/^line 2: RUN --security is not supported/);
    expect(dockerfileError('FROM base-ubuntu\nRUN cat <<EOF > /etc/motd\nhello\nEOF')).toMatch(
      /^line 2: RUN with a heredoc \(<<EOF\) is not supported/,
    );
    expect(dockerfileError('FROM base-ubuntu\nRUN <<-"END"\necho\nEND')).toMatch(/^line 2: RUN with a heredoc/);
    expect(planFromDockerfile('FROM base-ubuntu\nRUN echo $((1<<4))').steps).toHaveLength(1);
  });
});

describe('planFromDockerfile: ENV, ARG, WORKDIR, LABEL', () => {
  it('later RUN steps export the ENV declared before them, in order; earlier ones do not see it', () => {
    const plan = planFromDockerfile(
      ['FROM base-ubuntu', 'RUN echo first', 'ENV B=2 A=1', 'RUN echo second', 'ENV C="three 3" B=22', 'RUN echo third'].join('\n'),
    );
    expect(plan.steps.map((s) => s.script)).toEqual([
      'set +e\necho first',
      "export B='2'\nexport A='1'\nset +e\necho second",
      "export B='22'\nexport A='1'\nexport C='three 3'\nset +e\necho third",
    ]);
    expect(plan.env).toEqual({ B: '22', A: '1', C: 'three 3' });
  });

  it('parses quoted, escaped and legacy ENV forms', () => {
    const plan = planFromDockerfile(
      [
        'FROM base-ubuntu',
        `ENV SINGLE='a $b "c"' DOUBLE="x \\"y\\" \\$z" ESCAPED=one\\ two EMPTY= EQ=a=b`,
        'ENV LEGACY value with   spaces',
        'env lower=case',
      ].join('\n'),
    );
    expect(plan.env).toEqual({
      SINGLE: 'a $b "c"',
      DOUBLE: 'x "y" $z',
      ESCAPED: 'one two',
      EMPTY: '',
      EQ: 'a=b',
      LEGACY: 'value with   spaces',
      lower: 'case',
    });
  });

  it('expands $VAR and ${VAR} from earlier ENV, the parent env and the base PATH, like Docker', () => {
    const plan = planFromDockerfile(
      [
        'FROM base-ubuntu',
        'ENV APP=/opt/app',
        'ENV PATH=$APP/bin:$PATH BIN=${APP}/bin SAME_LINE=$BIN UNSET=[$NOPE] DEF=${NOPE:-fallback} ALT=${APP:+set} NOALT=${NOPE:+x}',
        "ENV LITERAL='$APP' ESC=\\$APP",
      ].join('\n'),
    );
    expect(plan.env).toEqual({
      APP: '/opt/app',
      PATH: '/opt/app/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      BIN: '/opt/app/bin',
      SAME_LINE: '', // a pair sees the variables as they were before its line
      UNSET: '[]',
      DEF: 'fallback',
      ALT: 'set',
      NOALT: '',
      LITERAL: '$APP',
      ESC: '$APP',
    });
    const inherited = planFromDockerfile('FROM py\nENV PATH=/x:$PATH HOME2=$HOME', { env: { PATH: '/py/bin:/usr/bin', HOME: '/home/user' } });
    expect(inherited.env).toEqual({ PATH: '/x:/py/bin:/usr/bin', HOME2: '/home/user' });
  });

  it('refuses bad ENV names, values and forms, naming the line', () => {
    expect(dockerfileError('FROM base-ubuntu\nENV 1A=x')).toBe('line 2: ENV name "1A" must be letters, digits and "_", not starting with a digit');
    expect(dockerfileError('FROM base-ubuntu\nENV A-B=x')).toMatch(/^line 2: ENV name "A-B"/);
    expect(dockerfileError('FROM base-ubuntu\nENV')).toBe('line 2: ENV needs a name and a value (ENV NAME=value)');
    expect(dockerfileError('FROM base-ubuntu\nENV ONLY')).toBe('line 2: ENV ONLY has no value; write ENV NAME=value');
    expect(dockerfileError('FROM base-ubuntu\nENV A=1 B')).toBe('line 2: ENV expects NAME=value pairs; "B" has no "="');
    expect(dockerfileError('FROM base-ubuntu\nENV =x')).toMatch(/^line 2: ENV has a pair with no name/);
    expect(dockerfileError('FROM base-ubuntu\nENV A="open')).toBe('line 2: unterminated double quote');
    expect(dockerfileError("FROM base-ubuntu\nENV A='open")).toBe('line 2: unterminated single quote');
    expect(dockerfileError('FROM base-ubuntu\nENV A=${B')).toBe('line 2: missing "}" in variable substitution');
    expect(dockerfileError('FROM base-ubuntu\nENV A=${B/x/y}')).toMatch(/^line 2: unsupported substitution "\$\{B\/x\/y\}"/);
    expect(dockerfileError('FROM base-ubuntu\nENV A=${}')).toMatch(/^line 2: bad substitution/);
    expect(dockerfileError('FROM base-ubuntu\nENV A="${NOPE:?must be set}"')).toBe('line 2: NOPE: must be set');
    expect(dockerfileError(`FROM base-ubuntu\nENV A=${'x'.repeat(4097)}`)).toBe('line 2: ENV A: value must be at most 4096 characters');
    const many = Array.from({ length: 101 }, (_, i) => `ENV V${i}=x`).join('\n');
    expect(dockerfileError(`FROM base-ubuntu\n${many}`)).toBe('line 102: too many ENV variables; at most 100');
  });

  it('refuses substitutions nested deeper than 32 levels with a 400 (9,000 levels overflowed the stack)', () => {
    const nest = (n: number) => `${'${A:-'.repeat(n)}x${'}'.repeat(n)}`;
    expect(dockerfileError(`FROM base-ubuntu\nENV B=${nest(9000)}`)).toBe('line 2: variable substitutions are nested more than 32 deep');
    expect(dockerfileError(`FROM base-ubuntu\nENV B="${nest(33)}"`)).toBe('line 2: variable substitutions are nested more than 32 deep');
    const ok = planFromDockerfile(`FROM base-ubuntu\nENV B=${nest(32)}`);
    expect(ok.env.B).toBe('x');
  });

  it('ARG defaults are exported to later RUN steps but not baked into the template', () => {
    const plan = planFromDockerfile(
      ['FROM base-ubuntu', 'ARG VERSION=1.2.3 CHANNEL', 'ENV TOOL_VERSION=$VERSION', 'RUN echo $VERSION ${CHANNEL:-stable}'].join('\n'),
    );
    expect(plan.env).toEqual({ TOOL_VERSION: '1.2.3' });
    expect(plan.steps[0].script).toBe("export VERSION='1.2.3'\nexport TOOL_VERSION='1.2.3'\nset +e\necho $VERSION ${CHANNEL:-stable}");
  });

  it('an ARG without a default may be declared but not used', () => {
    for (const use of ['RUN echo $TOKEN', 'RUN echo ${TOKEN}', 'RUN echo ${TOKEN:?}', 'ENV A=$TOKEN', 'WORKDIR /x/${TOKEN}', 'LABEL a=$TOKEN']) {
      expect(dockerfileError(`FROM base-ubuntu\nARG TOKEN\n${use}`)).toBe(
        'line 3: ARG TOKEN has no default and is used here; Hangar builds take no build arguments, so give it one (ARG TOKEN=value)',
      );
    }
    expect(planFromDockerfile('FROM base-ubuntu\nARG TOKEN\nRUN echo $TOKENS ${TOKEN:-none}').steps).toHaveLength(1);
    expect(planFromDockerfile('FROM base-ubuntu\nARG TOKEN\nENV A=${TOKEN:-none}').env).toEqual({ A: 'none' });
    expect(planFromDockerfile('FROM base-ubuntu\nARG TOKEN\nENV TOKEN=set\nRUN echo $TOKEN').steps).toHaveLength(1);
  });

  it('ENV wins over an ARG of the same name, as in Docker', () => {
    const plan = planFromDockerfile('FROM base-ubuntu\nENV MODE=env\nARG MODE=arg\nENV OUT=$MODE\nRUN echo');
    expect(plan.env).toEqual({ MODE: 'env', OUT: 'env' });
    expect(plan.steps[0].script).toBe("export MODE='env'\nexport OUT='env'\nset +e\necho");
  });

  it('an ARG before FROM is only seen in FROM, unless declared again after it', () => {
    const plan = planFromDockerfile('ARG V=7\nFROM base-ubuntu\nENV A=[$V]\nARG V\nENV B=[$V]\nRUN true');
    expect(plan.env).toEqual({ A: '[]', B: '[7]' });
    expect(plan.steps[0].script).toBe("export A='[]'\nexport V='7'\nexport B='[7]'\nset +e\ntrue");
  });

  it('refuses bad ARG names', () => {
    expect(dockerfileError('FROM base-ubuntu\nARG 9x=1')).toBe('line 2: ARG name "9x" must be letters, digits and "_", not starting with a digit');
    expect(dockerfileError('FROM base-ubuntu\nARG')).toMatch(/^line 2: ARG needs a name/);
  });

  it('WORKDIR: absolute or resolved against the current one; later RUN steps mkdir -p and cd into it', () => {
    const plan = planFromDockerfile(
      ['FROM base-ubuntu', 'ENV A=1', 'WORKDIR /srv/app', 'RUN make', 'WORKDIR ./sub/../build/', "WORKDIR 'with space'", 'RUN make install'].join(
        '\n',
      ),
    );
    expect(plan.workdir).toBe('/srv/app/build/with space');
    expect(plan.steps.map((s) => s.script)).toEqual([
      "export A='1'\nmkdir -p /srv/app\ncd /srv/app\nset +e\nmake",
      "export A='1'\nmkdir -p '/srv/app/build/with space'\ncd '/srv/app/build/with space'\nset +e\nmake install",
    ]);
  });

  it('WORKDIR expands variables, resolves relative paths against / or the parent, and is created even with no RUN after it', () => {
    const plan = planFromDockerfile('FROM base-ubuntu\nARG APP=api\nENV ROOT=/opt\nWORKDIR $ROOT/${APP}\nRUN true\nWORKDIR ../web');
    expect(plan.workdir).toBe('/opt/web');
    expect(plan.steps.at(-1)).toEqual({ kind: 'run', title: 'WORKDIR /opt/web', script: 'mkdir -p /opt/web' });
    expect(planFromDockerfile('FROM base-ubuntu\nWORKDIR app').workdir).toBe('/app');
    expect(planFromDockerfile('FROM base-ubuntu\nWORKDIR ../../..').workdir).toBe('/');
    expect(planFromDockerfile('FROM child\nWORKDIR src', { workdir: '/home/user/project' }).workdir).toBe('/home/user/project/src');
    expect(planFromDockerfile('FROM child\nRUN pwd', { workdir: '/home/user' })).toMatchObject({ workdir: null, steps: [{ script: 'set +e\npwd' }] });
    // a WORKDIR followed by a RUN needs no extra step
    expect(planFromDockerfile('FROM base-ubuntu\nWORKDIR /w\nRUN true').steps).toHaveLength(1);
  });

  it('refuses an empty or control-character WORKDIR', () => {
    expect(dockerfileError('FROM base-ubuntu\nWORKDIR')).toMatch(/^line 2: WORKDIR needs a path/);
    expect(dockerfileError('FROM base-ubuntu\nWORKDIR $NOPE')).toBe('line 2: WORKDIR path is empty after substitution');
    expect(dockerfileError('FROM base-ubuntu\nWORKDIR "/a\tb"')).toBe('line 2: WORKDIR path must not contain control characters');
    expect(dockerfileError(`FROM base-ubuntu\nWORKDIR /${'a'.repeat(1100)}`)).toBe('line 2: WORKDIR path must be at most 1024 bytes');
  });

  it('LABEL takes key=value pairs (quoted keys too) and the legacy form', () => {
    const plan = planFromDockerfile(
      'FROM base-ubuntu\nARG REV=abc\nLABEL org.opencontainers.image.title="My tools" "com.example.rev"=$REV\nLABEL maintainer someone@example.com',
    );
    expect(plan.labels).toEqual({ 'org.opencontainers.image.title': 'My tools', 'com.example.rev': 'abc', maintainer: 'someone@example.com' });
    expect(plan.env).toEqual({});
    expect(dockerfileError('FROM base-ubuntu\nLABEL "bad key"=x')).toMatch(/^line 2: LABEL key "bad key"/);
    const many = Array.from({ length: 101 }, (_, i) => `l${i}=x`).join(' ');
    expect(dockerfileError(`FROM base-ubuntu\nLABEL ${many}`)).toBe('line 2: too many labels; at most 100');
  });
});

describe('planFromDockerfile: unsupported instructions', () => {
  it.each([
    'COPY . /app',
    'ADD https://example.com/x /x',
    'CMD ["node"]',
    'ENTRYPOINT ["sh"]',
    'EXPOSE 80',
    'VOLUME /data',
    'HEALTHCHECK NONE',
    'SHELL ["/bin/bash", "-c"]',
    'ONBUILD RUN true',
    'STOPSIGNAL SIGTERM',
    'MAINTAINER me',
    'USER root',
    'user user',
  ])('refuses %s with its line number and the supported list', (instruction) => {
    const keyword = instruction.split(' ')[0].toUpperCase();
    const message = dockerfileError(`FROM base-ubuntu\n# comment\n${instruction}`);
    expect(message.startsWith(`line 3: ${keyword} is not supported: `)).toBe(true);
    expect(message.endsWith('. Supported instructions are FROM, RUN, ENV, WORKDIR, ARG, LABEL')).toBe(true);
  });

  it('explains why USER and COPY are refused', () => {
    expect(dockerfileError('FROM base-ubuntu\nUSER user')).toContain('builds run as root and sandboxes always run as the unprivileged user "user"');
    expect(dockerfileError('FROM base-ubuntu\nCOPY a b')).toContain('no build context');
  });

  it('refuses unknown instructions the same way', () => {
    expect(dockerfileError('FROM base-ubuntu\nRUN true\nINSTALL git')).toBe(
      'line 3: unknown instruction "INSTALL". Supported instructions are FROM, RUN, ENV, WORKDIR, ARG, LABEL',
    );
    expect(dockerfileError('COPY a b\nFROM base-ubuntu')).toMatch(/^line 1: COPY is not supported/);
  });
});

describe('the scripts run under /bin/sh -ec', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'hangar-plan-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const sh = (script: string) => execFileSync('/bin/sh', ['-ec', script], { cwd: dir, encoding: 'utf8', env: { PATH: process.env.PATH } });

  it('a Dockerfile step sees its ENV and ARG values verbatim, in its WORKDIR', () => {
    const plan = planFromDockerfile(
      [
        'FROM base-ubuntu',
        `ARG GREETING="hello 'world'"`,
        `ENV WEIRD="a \\"b\\" \\$c \`d\` \\\\e" NEXT=$GREETING`,
        `WORKDIR ${dir}/work dir`,
        'RUN printf "%s|%s|%s|%s\\n" "$GREETING" "$WEIRD" "$NEXT" "$(pwd)"',
      ].join('\n'),
    );
    expect(sh(plan.steps[0].script)).toBe(`hello 'world'|a "b" $c \`d\` \\e|hello 'world'|${dir}/work dir\n`);
  });

  it('like Docker, a failing command midway does not stop a RUN, and its exit status decides', () => {
    const plan = planFromDockerfile('FROM base-ubuntu\nRUN false; echo still here\nRUN echo before; false');
    expect(sh(plan.steps[0].script)).toBe('still here\n');
    expect(() => sh(plan.steps[1].script)).toThrow();
  });

  it('exec form passes each argument as one word', () => {
    const plan = planFromDockerfile(`FROM base-ubuntu\nRUN ["printf", "[%s]", "a b", "it's", "$HOME", "*"]`);
    expect(sh(plan.steps[0].script)).toBe("[a b][it's][$HOME][*]");
  });

  it('builder env values reach the step verbatim', () => {
    const plan = build({ npm: ['x'], env: { V: `it's "$(id)" \`x\`` } });
    const head = plan.steps[0].script.split('\n').slice(0, -1).join('\n');
    expect(sh(`${head}\nprintf %s "$V"`)).toBe(`it's "$(id)" \`x\``);
  });
});
