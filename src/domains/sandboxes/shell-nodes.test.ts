import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createOrgAdmin, testDatabaseUrl, testRedisUrl, type Actor } from '../../../test/harness.js';
import { until } from '../../../test/helpers.js';
import { describeNeeding, replicaNeed } from '../../../test/needs.js';
import { openError, ShellClient } from '../../../test/shell-client.js';
import { buildApp, closeDeps, createDeps } from '../../app.js';
import { parseConfig } from '../../config.js';
import type { Deps } from '../../platform/context.js';
import type { App } from '../../platform/http/server.js';
import { liveNodes } from '../../platform/nodes/index.js';

// The shell of a sandbox on replica B, opened through replica A (ADR 0024, ADR 0046): A forwards the WebSocket
// upgrade (the caller's credentials and a signed hop) and splices the two connections.

const PG_URL = testDatabaseUrl ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = testRedisUrl ?? 'redis://127.0.0.1:6379';
const need = await replicaNeed(PG_URL, REDIS_URL);
const schema = `t_${randomBytes(6).toString('hex')}`;
const secret = randomBytes(32).toString('hex');
const dirs: string[] = [];

interface Node {
  id: string;
  url: string;
  app: App;
  deps: Deps;
}

async function startNode(id: string, octet: number): Promise<Node> {
  const dataDir = mkdtempSync(path.join(tmpdir(), `hangar-${id}-`));
  dirs.push(dataDir);
  const sandboxDir = `/var/lib/hangar/sbx-${id}`; // kept between runs (its base layer is reused)
  mkdirSync(sandboxDir, { recursive: true });
  const deps = await createDeps(
    parseConfig({
      DATABASE_URL: `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}schema=${schema}`,
      REDIS_URL,
      HANGAR_SECRET_KEY: secret,
      HANGAR_NODE_ID: id,
      HANGAR_DATA_DIR: dataDir,
      HANGAR_SANDBOX_DIR: sandboxDir,
      HANGAR_SANDBOX_SUBNET: `10.${octet}.0.0/16`,
      HANGAR_NODE_HEARTBEAT_MS: '200',
      HANGAR_NODE_DEAD_AFTER_MS: '1500',
      HANGAR_TEMPLATE_PREBUILD: 'false',
      HANGAR_VALIDATE_RESPONSES: 'true',
      LOG_LEVEL: 'silent',
      HOST: '127.0.0.1',
      PORT: '0',
    }),
  );
  let app: App;
  try {
    app = await buildApp(deps);
  } catch (err) {
    await closeDeps(deps);
    throw err;
  }
  return { id, url: await app.listen({ host: '127.0.0.1', port: 0 }), app, deps };
}

describeNeeding(need, 'a shell across two replicas', () => {
  let a: Node;
  let b: Node;
  let owner: Actor;
  let sandboxId: string;

  beforeAll(async () => {
    a = await startNode('shell-a', 95);
    b = await startNode('shell-b', 96);
    expect(b.deps.sandboxes.available, b.deps.sandboxes.unavailableReason ?? '').toBe(true);
    await until('both nodes to be live', async () => {
      const live = await liveNodes(a.deps);
      return [a.id, b.id].every((id) => live.some((n) => n.id === id && n.url));
    });
    owner = await createOrgAdmin({ app: a.app, deps: a.deps, dataDir: '', close: async () => undefined });
    const res = await fetch(`${b.url}/v1/sandboxes`, {
      method: 'POST',
      headers: { ...owner.headers, 'content-type': 'application/json' },
      body: JSON.stringify({ network: false }),
    });
    const body = await res.json();
    expect(res.status, JSON.stringify(body)).toBe(201);
    expect(body.data.nodeId).toBe(b.id);
    sandboxId = body.data.id;
  }, 120_000);

  afterAll(async () => {
    for (const n of [a, b]) {
      if (!n) continue;
      for (const id of (await n.deps.sandboxes.list().catch(() => new Map())).keys()) await n.deps.sandboxes.destroy(id).catch(() => undefined);
    }
    for (const n of [a, b]) {
      if (!n) continue;
      await n.app.close().catch(() => undefined);
      await n.deps.sandboxes.removeInstallation().catch(() => undefined);
      await closeDeps(n.deps).catch(() => undefined);
    }
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }, 120_000);

  it('opens the shell of a sandbox on B through A', async () => {
    const shell = await ShellClient.open(a.url, sandboxId, owner.headers, '?cols=90&rows=20');
    shell.type('echo $((6*7)) on $(hostname); stty size\n');
    await shell.waitFor(/42 on \S+\r\n20 90\r\n/);
    shell.resize(120, 40);
    await until('the resize to reach B', async () => {
      shell.type('stty size\n');
      await new Promise((r) => setTimeout(r, 100));
      return /40 120\r\n/.test(shell.text);
    });
    shell.type('exit 5\n');
    expect((await shell.closed).code).toBe(1000);
    expect(shell.frames.at(-1)).toEqual({ type: 'exit', code: 5, signal: null, timedOut: false });
  });

  it('forwards a browser’s upgrade with its credential in the query, and relays B’s refusals of it', async () => {
    const shell = await ShellClient.open(a.url, sandboxId, {}, `?api_key=${owner.key}&cols=60&rows=10`);
    shell.type('echo query-$((6*7)); stty size\n');
    await shell.waitFor(/query-42\r\n10 60\r\n/);
    shell.type('exit\n');
    expect((await shell.closed).code).toBe(1000);
    const byToken = await ShellClient.open(a.url, sandboxId, {}, `?token=${owner.token}&org_id=${owner.orgId}&command=true`);
    expect((await byToken.closed).code).toBe(1000);
    const stranger = await createOrgAdmin({ app: a.app, deps: a.deps, dataDir: '', close: async () => undefined });
    expect((await openError(a.url, sandboxId, {}, `?api_key=${stranger.key}`)).status).toBe(404);
    expect((await openError(a.url, sandboxId, {}, `?api_key=${owner.key}&token=${owner.token}`)).status).toBe(400);
    expect((await openError(a.url, sandboxId, {}, `?api_key=${owner.key}&cols=0`)).status).toBe(400); // B's answer, relayed
  });

  it('relays B’s refusals, and refuses forged hop headers', async () => {
    const stranger = await createOrgAdmin({ app: a.app, deps: a.deps, dataDir: '', close: async () => undefined });
    // Control: the owner's upgrade through A opens (above); a stranger's is A's own 404 (another organization's
    // sandbox is never forwarded).
    expect((await openError(a.url, sandboxId, stranger.headers)).status).toBe(404);
    const forged = await openError(b.url, sandboxId, {
      ...owner.headers,
      'x-hangar-node-from': a.id,
      'x-hangar-node-to': b.id,
      'x-hangar-node-timestamp': String(Date.now()),
      'x-hangar-node-nonce': randomBytes(16).toString('hex'),
      'x-hangar-node-signature': 'f'.repeat(64),
    });
    expect(forged.status).toBe(401);
    expect((await openError(a.url, sandboxId, owner.headers, '?cols=0')).status).toBe(400);
  });
});
