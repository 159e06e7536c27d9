import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { until } from '../helpers.js';
import { cliEnvironment, listeningUrl } from '../serve.js';
import { launchBrowser, shot } from './browser.js';

const BIN = path.resolve(import.meta.dirname, '../../bin/hangar.js');

describe('a new user: hangar init, npm start, open / and sign in with the printed key', () => {
  const { env, cleanup } = cliEnvironment('first-run');
  afterAll(cleanup);

  it('works as README says', async () => {
    const init = spawnSync(process.execPath, [BIN, 'init', '--org', 'First Run'], { env, encoding: 'utf8', timeout: 60_000 });
    expect(init.status, init.stderr).toBe(0);
    expect(init.stdout).toMatch(/Sign in to the web console at http:\/\/127\.0\.0\.1:8080\//);
    const key = init.stdout.match(/Admin API key\s+(hgr_live_\S+)/)![1]!;

    const server = spawn(process.execPath, [BIN, 'serve'], { env: { ...env, PORT: '0' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    server.stdout!.on('data', (d) => (out += d));
    const browser = await launchBrowser();
    try {
      const base = await listeningUrl(server, 60_000);
      await until('the console address printed', () => out.includes('Web console:'));
      expect(out).toContain(`Web console:   ${base}/`);
      const page = await browser.newPage();
      await page.goto(`${base}/`);
      await page.getByLabel('API key or session token').fill(key);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('button', { name: 'Sign out' }).waitFor();
      expect(await page.getByTestId('org-name').textContent()).toBe('First Run');
      await page.waitForFunction(() => !document.querySelector('main .loading'), undefined, { timeout: 30_000 });
      await shot(page, 'first-run-overview');
    } finally {
      await browser.close();
      server.kill('SIGTERM');
    }
  }, 120_000);
});
