import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testDatabaseUrl } from './harness.js';
import { listeningUrl } from './serve.js';

/**
 * A crash between metering and charging: a process meters tool calls (the usage rows commit) and is killed with
 * SIGKILL before it charges them. The next `hangar serve` on the same database charges each exactly once at
 * start-up, and a second kill and restart charges nothing more.
 */

const BIN = path.resolve(import.meta.dirname, '../bin/hangar.js');
const CHILD = path.resolve(import.meta.dirname, 'billing-crash-child.ts');
const CALLS = 40;
const TOOL_PRICE_MICROS = 1_000; // the free plan's toolExecutionMicros

describe('billing across a crash', () => {
  const schema = `t_${randomBytes(6).toString('hex')}`;
  let dataDir: string;
  let env: Record<string, string>;
  let init: { apiKey: string; orgId: string; userId: string };
  let server: ChildProcess | null = null;

  beforeAll(() => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'hangar-billing-crash-'));
    env = { ...(process.env as Record<string, string>) };
    for (const k of ['DATABASE_URL', 'REDIS_URL', 'HANGAR_SECRET_KEY', 'PORT', 'HOST']) delete env[k];
    Object.assign(env, {
      HANGAR_DATA_DIR: dataDir,
      LOG_LEVEL: 'silent',
      HOST: '127.0.0.1',
      PORT: '0',
      HANGAR_TEMPLATE_PREBUILD: 'false',
      HANGAR_SERVICES: 'billing',
      HANGAR_SIGNUP_CREDITS_CENTS: '500',
    });
    if (testDatabaseUrl) env.DATABASE_URL = `${testDatabaseUrl}${testDatabaseUrl.includes('?') ? '&' : '?'}schema=${schema}`;
    const res = spawnSync(process.execPath, [BIN, 'init', '--json'], { env, encoding: 'utf8', timeout: 60_000 });
    expect(res.status, res.stderr).toBe(0);
    init = JSON.parse(res.stdout);
  });

  afterAll(async () => {
    if (server && server.exitCode === null) server.kill('SIGKILL');
    if (testDatabaseUrl) {
      const client = new pg.Client({ connectionString: testDatabaseUrl });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client.end();
    }
    rmSync(dataDir, { recursive: true, force: true });
  });

  async function serve(): Promise<string> {
    server = spawn(process.execPath, [BIN, 'serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    return listeningUrl(server, 60_000);
  }

  async function killServer() {
    const s = server!;
    const exited = new Promise((resolve) => s.once('exit', resolve));
    s.kill('SIGKILL');
    await exited;
  }

  const credits = async (base: string) => {
    const res = await fetch(`${base}/v1/billing/credits`, { headers: { 'x-api-key': init.apiKey } });
    expect(res.status).toBe(200);
    return ((await res.json()) as { data: { balanceMicros: number } }).data.balanceMicros;
  };

  const charges = async (base: string) => {
    const res = await fetch(`${base}/v1/billing/credits/history?limit=200`, { headers: { 'x-api-key': init.apiKey } });
    const body = (await res.json()) as { data: { kind: string; amountMicros: number }[] };
    return body.data.filter((e) => e.kind === 'usage_charge');
  };

  it('charges usage metered by a killed process exactly once, at the next start', async () => {
    // Control: before the crash, only the sign-up credits.
    let base = await serve();
    expect(await credits(base)).toBe(5_000_000);
    await killServer();

    const child = spawnSync(process.execPath, ['--import', 'tsx', CHILD, init.orgId, init.userId, String(CALLS)], {
      env,
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(child.stdout).toContain('metered');
    expect(child.signal).toBe('SIGKILL');

    base = await serve();
    expect(await credits(base)).toBe(5_000_000 - CALLS * TOOL_PRICE_MICROS);
    const first = await charges(base);
    expect(first).toHaveLength(CALLS);
    expect(first.every((c) => c.amountMicros === -TOOL_PRICE_MICROS)).toBe(true);

    // Killed again and restarted: nothing is charged twice.
    await killServer();
    base = await serve();
    expect(await credits(base)).toBe(5_000_000 - CALLS * TOOL_PRICE_MICROS);
    expect(await charges(base)).toHaveLength(CALLS);
    await killServer();
  }, 180_000);
});
