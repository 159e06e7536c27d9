import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeDeps, createDeps } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { testDatabaseUrl, testRedisUrl } from './harness.js';
import { listeningUrl } from './serve.js';
import { until } from './helpers.js';

/**
 * A real restart: `hangar serve` is killed with SIGKILL (no clean shutdown) and started again on the same data
 * directory and database. Sandboxes are runc containers that do not belong to the Hangar process, so they must
 * still be there, and one whose container vanished meanwhile must come back as `stopped`, ready to resume.
 */

const BIN = path.resolve(import.meta.dirname, '../bin/hangar.js');
const SANDBOX_DIR = path.resolve(process.env.HANGAR_SANDBOX_DIR ?? '/var/lib/hangar/sandboxes');

describe('sandboxes across a Hangar restart', () => {
  const schema = `t_${randomBytes(6).toString('hex')}`;
  let dataDir: string;
  let env: Record<string, string>;
  let apiKey: string;
  let server: { child: ChildProcess; base: string } | null = null;

  beforeAll(() => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'hangar-restart-'));
    env = { ...(process.env as Record<string, string>) };
    for (const k of ['DATABASE_URL', 'REDIS_URL', 'HANGAR_SECRET_KEY', 'PORT', 'HOST']) delete env[k];
    Object.assign(env, { HANGAR_DATA_DIR: dataDir, LOG_LEVEL: 'silent', HOST: '127.0.0.1', PORT: '0', HANGAR_TEMPLATE_PREBUILD: 'false' });
    if (testDatabaseUrl) env.DATABASE_URL = `${testDatabaseUrl}${testDatabaseUrl.includes('?') ? '&' : '?'}schema=${schema}`;
    if (testRedisUrl) env.REDIS_URL = testRedisUrl;

    const init = spawnSync(process.execPath, [BIN, 'init', '--json'], { env, encoding: 'utf8', timeout: 30_000 });
    expect(init.status, init.stderr).toBe(0);
    apiKey = JSON.parse(init.stdout).apiKey;
  });

  afterAll(async () => {
    if (server) await kill(server.child);
    // Whatever is left of this installation (containers, mounts, layers, runc state) goes with it.
    const deps = await createDeps(loadConfig(env));
    try {
      await deps.sandboxes.removeInstallation();
    } finally {
      await closeDeps(deps);
    }
    if (testDatabaseUrl) {
      const client = new pg.Client({ connectionString: testDatabaseUrl });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client.end();
    }
    rmSync(dataDir, { recursive: true, force: true });
  });

  async function start() {
    const child = spawn(process.execPath, [BIN, 'serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    server = { child, base: await listeningUrl(child) };
    return server;
  }

  async function api(method: string, url: string, body?: unknown, raw?: string) {
    const res = await fetch(`${server!.base}${url}`, {
      method,
      headers: {
        'x-api-key': apiKey,
        ...(body !== undefined ? { 'content-type': 'application/json' } : raw !== undefined ? { 'content-type': 'application/octet-stream' } : {}),
      },
      body: body !== undefined ? JSON.stringify(body) : raw,
    });
    const text = await res.text();
    const isJson = (res.headers.get('content-type') ?? '').startsWith('application/json');
    return { status: res.status, text, body: isJson && text ? JSON.parse(text) : undefined };
  }

  async function run(id: string, cmd: string, extra: Record<string, unknown> = {}) {
    const res = await api('POST', `/v1/sandboxes/${id}/commands`, { cmd, ...extra });
    expect(res.status, res.text).toBe(extra.background ? 201 : 200);
    return res.body.data;
  }

  async function readCount(id: string): Promise<number> {
    const res = await api('GET', `/v1/sandboxes/${id}/files/content?path=count`);
    return res.status === 200 ? Number(res.text) : 0;
  }

  it('keeps a running sandbox running: its files, its background process and commands survive a SIGKILL of Hangar', async () => {
    await start();
    const created = await api('POST', '/v1/sandboxes', { network: false, name: 'survivor' });
    expect(created.status, created.text).toBe(201);
    const id = created.body.data.id as string;

    const content = `written before the crash ${randomBytes(8).toString('hex')}`;
    expect((await api('PUT', `/v1/sandboxes/${id}/files/content?path=notes/before.txt`, undefined, content)).status).toBe(200);
    const loop = await run(id, 'i=0; while true; do i=$((i+1)); echo $i > count.tmp; mv count.tmp count; sleep 0.05; done', { background: true });
    await until('the loop to count', async () => (await readCount(id)) >= 3);
    const beforeCrash = await readCount(id);

    await kill(server!.child, 'SIGKILL');
    server = null;
    // With Hangar gone the loop keeps counting: its writable layer on the host shows it.
    const countFile = path.join(SANDBOX_DIR, installIdOf(id), 'containers', id, 'upper/root/home/user/count');
    const whileDown = Number(readFileSync(countFile, 'utf8'));
    await until('the loop to count while Hangar is down', async () => Number(readFileSync(countFile, 'utf8')) > whileDown);
    await start();

    const after = await api('GET', `/v1/sandboxes/${id}`);
    expect(after.status).toBe(200);
    expect(after.body.data).toMatchObject({ id, name: 'survivor', state: 'running' });
    expect((await api('GET', `/v1/sandboxes/${id}/files/content?path=notes/before.txt`)).text).toBe(content);
    const afterRestart = await readCount(id);
    expect(afterRestart).toBeGreaterThan(Math.max(beforeCrash, whileDown));
    await until('the loop to go on counting', async () => (await readCount(id)) > afterRestart);
    const proc = await api('GET', `/v1/sandboxes/${id}/processes/${loop.pid}`);
    expect(proc.body.data).toMatchObject({ pid: loop.pid, running: true });
    expect((await run(id, 'echo alive; cat notes/before.txt')).stdout).toBe(`alive\n${content}`);
    const events = (await api('GET', `/v1/sandboxes/${id}/activity`)).body.data.events.map((e: { eventType: string }) => e.eventType);
    expect(events).toEqual(['sandbox.created']);

    expect((await api('DELETE', `/v1/sandboxes/${id}`)).status).toBe(204);
    expect((await api('GET', `/v1/sandboxes/${id}`)).body.data.state).toBe('destroyed');
  });

  it('marks a sandbox whose container vanished while Hangar was down as stopped; resume starts it again over its files', async () => {
    if (!server) await start();
    const created = await api('POST', '/v1/sandboxes', { network: false });
    expect(created.status, created.text).toBe(201);
    const id = created.body.data.id as string;
    const content = `kept across a lost container ${randomBytes(8).toString('hex')}`;
    expect((await api('PUT', `/v1/sandboxes/${id}/files/content?path=keep.txt`, undefined, content)).status).toBe(200);
    await run(id, 'sleep 1000', { background: true });

    await kill(server!.child, 'SIGKILL');
    server = null;
    // Behind Hangar's back, as a host reboot would.
    const installId = installIdOf(id);
    execFileSync('runc', ['--root', `/run/hangar/runc/${installId}`, 'delete', '--force', id]);
    expect(runcIds(installId)).not.toContain(id);
    await start();

    const stopped = await api('GET', `/v1/sandboxes/${id}`);
    expect(stopped.body.data.state).toBe('stopped');
    const events = (await api('GET', `/v1/sandboxes/${id}/activity`)).body.data.events;
    expect(events[0]).toMatchObject({ eventType: 'sandbox.stopped', status: 'failed' });
    const refused = await api('POST', `/v1/sandboxes/${id}/commands`, { cmd: 'true' });
    expect(refused.status).toBe(409);
    expect(refused.body.error).toMatchObject({ code: 'invalid_state', state: 'stopped' });

    const resumed = await api('POST', `/v1/sandboxes/${id}/resume`);
    expect(resumed.status, resumed.text).toBe(200);
    expect(resumed.body.data.state).toBe('running');
    expect(runcIds(installId)).toContain(id);
    expect((await api('GET', `/v1/sandboxes/${id}/files/content?path=keep.txt`)).text).toBe(content);
    // Its processes did not survive the lost container; new ones run.
    const ps = await run(id, 'ps -eo args');
    expect(ps.stdout).not.toContain('sleep 1000');
    expect((await run(id, 'id -un')).stdout).toBe('user\n');
    expect((await api('GET', `/v1/sandboxes/${id}/activity`)).body.data.events[0]).toMatchObject({
      eventType: 'sandbox.resumed',
      metadata: { from: 'stopped' },
    });

    expect((await api('DELETE', `/v1/sandboxes/${id}`)).status).toBe(204);
    expect(runcIds(installId)).not.toContain(id);
  });
});

function installIdOf(sandboxId: string): string {
  const found = readdirSync(SANDBOX_DIR).find((d) => existsSync(path.join(SANDBOX_DIR, d, 'containers', sandboxId)));
  if (!found) throw new Error(`no installation folder under ${SANDBOX_DIR} holds ${sandboxId}`);
  return found;
}

function runcIds(installId: string): string[] {
  const out = execFileSync('runc', ['--root', `/run/hangar/runc/${installId}`, 'list', '--format', 'json'], { encoding: 'utf8' }).trim();
  return ((JSON.parse(out || 'null') ?? []) as { id: string }[]).map((c) => c.id);
}

function kill(child: ChildProcess, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill(signal);
  });
}
