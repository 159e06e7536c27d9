import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testDatabaseUrl } from './harness.js';
import { listeningUrl } from './serve.js';

const BIN = path.resolve(import.meta.dirname, '../bin/hangar.js');

describe('hangar CLI', () => {
  let env: Record<string, string>;
  let dataDir: string;
  const schema = `cli_${randomBytes(5).toString('hex')}`;

  beforeAll(() => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'hangar-cli-'));
    env = { ...(process.env as Record<string, string>), HANGAR_DATA_DIR: dataDir, LOG_LEVEL: 'silent' };
    delete env.DATABASE_URL;
    delete env.HANGAR_SECRET_KEY;
    if (testDatabaseUrl) env.DATABASE_URL = `${testDatabaseUrl}?schema=${schema}`;
  });
  afterAll(async () => {
    rmSync(dataDir, { recursive: true, force: true });
    if (testDatabaseUrl) {
      const client = new pg.Client({ connectionString: testDatabaseUrl });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client.end();
    }
  });

  const run = (args: string[], extra: Record<string, string> = {}) =>
    spawnSync(process.execPath, [BIN, ...args], { env: { ...env, ...extra }, encoding: 'utf8', timeout: 30_000 });

  let init: { userId: string; orgId: string; apiKey: string; projectId: string; workspaceId: string };

  it('init suggests a request to the address the server will really use (PORT, HOST, HANGAR_BASE_URL)', () => {
    const fresh = (extra: Record<string, string>) => {
      const dir = mkdtempSync(path.join(tmpdir(), 'hangar-cli-init-'));
      try {
        const { DATABASE_URL: _, ...sqlite } = env;
        const r = spawnSync(process.execPath, [BIN, 'init'], {
          env: { ...sqlite, HANGAR_DATA_DIR: dir, ...extra },
          encoding: 'utf8',
          timeout: 30_000,
        });
        expect(r.status, r.stderr).toBe(0);
        return r.stdout;
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    };
    expect(fresh({ PORT: '9191', HOST: '0.0.0.0' })).toContain('curl -H "X-API-Key: <key>" http://127.0.0.1:9191/v1/me');
    expect(fresh({ PORT: '8088', HOST: '127.0.0.5' })).toContain('http://127.0.0.5:8088/v1/me');
    expect(fresh({ HANGAR_BASE_URL: 'https://hangar.example.com' })).toContain('https://hangar.example.com/v1/me');
  });

  it('init --json prints exactly the ids and key, and a second init refuses and changes nothing', () => {
    const first = run(['init', '--json']);
    expect(first.status, first.stderr).toBe(0);
    init = JSON.parse(first.stdout);
    expect(Object.keys(init)).toEqual(['userId', 'orgId', 'apiKey', 'projectId', 'workspaceId']);
    expect(init.apiKey).toMatch(/^hgr_live_[0-9A-Za-z]{40}$/);

    const second = run(['init', '--json']);
    expect(second.status).not.toBe(0);
    expect(second.stderr).toMatch(/already initialized/);
    expect(second.stdout).toBe('');
  });

  it('stops with one clear line naming a bad setting', () => {
    const bad = run(['serve', '--service', 'orchestrator,nope']);
    expect(bad.status).toBe(2);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
    expect(bad.stderr).toMatch(/--service: unknown service "nope"/);

    const url = run(['migrate'], { DATABASE_URL: 'mysql://localhost/db' });
    expect(url.status).toBe(2);
    expect(url.stderr).toMatch(/^hangar: DATABASE_URL:/);

    const dir = run(['migrate'], { HANGAR_DATA_DIR: '/etc/passwd/hangar' });
    expect(dir.status).toBe(2);
    expect(dir.stderr).toMatch(/^hangar: HANGAR_DATA_DIR:/);
  });

  it('serves the API: the init key, a key from `keys create` and a token from `token` all work; a subset of services serves only its routes', async () => {
    const created = run(['keys', 'create', '--scopes', 'storage:read,activity:read', '--name', 'ci', '--json']);
    expect(created.status, created.stderr).toBe(0);
    const limitedKey = JSON.parse(created.stdout).apiKey as string;
    const token = run(['token', '--user', init.userId]);
    expect(token.status, token.stderr).toBe(0);

    const server = spawn(process.execPath, [BIN, 'serve'], { env: { ...env, PORT: '0' }, stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      const base = await listeningUrl(server);
      const me = await fetch(`${base}/v1/me`, { headers: { 'x-api-key': init.apiKey } });
      expect(me.status).toBe(200);
      expect(me.headers.get('x-api-version')).toBe('v1');
      expect((await me.json()).data.currentOrganizationId).toBe(init.orgId);

      const files = await fetch(`${base}/v1/workspaces/${init.workspaceId}/files`, { headers: { 'x-api-key': limitedKey } });
      expect(files.status).toBe(200);
      const denied = await fetch(`${base}/v1/api-keys`, { headers: { 'x-api-key': limitedKey } });
      expect(denied.status).toBe(403);

      const session = await fetch(`${base}/v1/me`, { headers: { authorization: `Bearer ${token.stdout.trim()}` } });
      expect(session.status).toBe(200);
      expect((await session.json()).data.authType).toBe('session');

      const docs = await fetch(`${base}/v1/openapi.json`);
      expect((await docs.json()).openapi).toMatch(/^3\./);
    } finally {
      server.kill('SIGTERM');
    }

    const billingOnly = spawn(process.execPath, [BIN, 'serve', '--service', 'billing'], {
      env: { ...env, PORT: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const base = await listeningUrl(billingOnly);
      const credits = await fetch(`${base}/v1/billing/credits`, { headers: { 'x-api-key': init.apiKey } });
      expect(credits.status).toBe(200);
      expect((await credits.json()).data.balanceCents).toBeGreaterThan(0);
      const notHere = await fetch(`${base}/v1/me`, { headers: { 'x-api-key': init.apiKey } });
      expect(notHere.status).toBe(404);
    } finally {
      billingOnly.kill('SIGTERM');
    }
    // Five CLI processes and two servers start one after another: on a busy two-core machine that is over 30 s.
  }, 120_000);
});
