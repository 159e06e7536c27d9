import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createHarness, json } from '../../../test/harness.js';

describe('serving the web console', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('where it was not built, / answers 503 saying how to build it (and the API is unaffected)', async () => {
    const empty = mkdtempSync(path.join(tmpdir(), 'hangar-console-none-'));
    dirs.push(empty);
    const h = await createHarness({ HANGAR_CONSOLE_DIR: empty });
    try {
      for (const url of ['/', '/threads/x']) {
        const res = await h.app.inject({ method: 'GET', url });
        expect(res.statusCode).toBe(503);
        expect(json(res).error.message).toMatch(/not built.*npm install/);
        expect(json(res).error.requestId).toBeTruthy();
      }
      expect((await h.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    } finally {
      await h.close();
    }
  });

  it('serves a given build: index for pages, files by path, compressed when asked, nothing outside it', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'hangar-console-'));
    dirs.push(dir);
    mkdirSync(path.join(dir, 'assets'));
    writeFileSync(path.join(dir, 'index.html'), `<!doctype html><title>t</title>${'<!-- pad -->'.repeat(100)}`);
    writeFileSync(path.join(dir, 'assets', 'app-abc123.js'), `console.log(${JSON.stringify('x'.repeat(2000))});`);
    writeFileSync(path.join(dir, 'robots.txt'), 'User-agent: *\nDisallow: /\n');
    const h = await createHarness({ HANGAR_CONSOLE_DIR: dir });
    try {
      const page = await h.app.inject({ method: 'GET', url: '/activity?kind=run.created', headers: { 'accept-encoding': 'gzip' } });
      expect(page.statusCode).toBe(200);
      expect(page.headers['content-encoding']).toBe('gzip');
      expect(page.headers['content-security-policy']).toContain("default-src 'none'");
      expect(page.headers['x-content-type-options']).toBe('nosniff');
      const js = await h.app.inject({ method: 'GET', url: '/assets/app-abc123.js' });
      expect(js.statusCode).toBe(200);
      expect(js.headers['content-type']).toBe('text/javascript; charset=utf-8');
      expect(js.headers['cache-control']).toBe('public, max-age=31536000, immutable');
      expect((await h.app.inject({ method: 'GET', url: '/robots.txt' })).body).toContain('Disallow');
      for (const url of ['/assets/../index.html', '/assets/%2e%2e/%2e%2e/package.json', '/assets/nope.js', '/package.json']) {
        const res = await h.app.inject({ method: 'GET', url });
        expect(res.statusCode, url).toBe(404);
      }
      const head = await h.app.inject({ method: 'HEAD', url: '/' });
      expect(head.statusCode).toBe(200);
    } finally {
      await h.close();
    }
  });
});
