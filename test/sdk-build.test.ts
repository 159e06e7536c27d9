import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '..');
const DIST = path.join(ROOT, 'packages/sdk/dist');

describe('@hangar/sdk as published', () => {
  it('builds with `npm run build -w @hangar/sdk`, and plain Node imports dist/index.js and calls the API with it', async () => {
    await run('npm', ['run', 'build', '-w', '@hangar/sdk'], { cwd: ROOT, timeout: 240_000 });
    const files = readdirSync(DIST, { recursive: true }).map(String);
    expect(files).toEqual(expect.arrayContaining(['index.js', 'index.d.ts', 'client.js', 'threads.d.ts', path.join('generated', 'openapi.d.ts')]));
    // Browser-safe: no `node:` module anywhere in what is shipped (the ws fallback is a dynamic import of a variable).
    for (const f of files.filter((f) => f.endsWith('.js'))) expect(readFileSync(path.join(DIST, f), 'utf8'), f).not.toMatch(/['"]node:/);

    const server = createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ data: [{ slug: 'seen', auth: req.headers.authorization }], meta: { requestId: 'r' } }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const script = [
        "const sdk = await import('@hangar/sdk');",
        `const hangar = new sdk.Hangar({ apiKey: 'hgr_live_k', baseUrl: '${base}' });`,
        'const agents = await hangar.agents.list();',
        'console.log(JSON.stringify({ agents, exports: Object.keys(sdk).sort() }));',
      ].join('\n');
      // Plain Node, from the repository root: `@hangar/sdk` resolves through node_modules to the package's `import` export.
      const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, timeout: 30_000 });
      const out = JSON.parse(stdout) as { agents: unknown[]; exports: string[] };
      expect(out.agents).toEqual([{ slug: 'seen', auth: 'Bearer hgr_live_k' }]);
      expect(out.exports).toEqual(expect.arrayContaining(['Hangar', 'HangarError', 'NotFoundError', 'RateLimitError', 'AuthenticationError']));
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }, 300_000);
});
