import { createHmac, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { addOrgMember, createOrgAdmin, testDatabaseUrl, testRedisUrl, type Actor, type Harness } from '../../../test/harness.js';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { readSse, until } from '../../../test/helpers.js';
import { describeNeeding, replicaNeed } from '../../../test/needs.js';
import { buildApp, closeDeps, createDeps } from '../../app.js';
import { parseConfig } from '../../config.js';
import type { Deps } from '../../platform/context.js';
import type { App } from '../../platform/http/server.js';
import { liveNodes, signHop } from '../../platform/nodes/index.js';

// Two Hangar replicas on one machine (ADR 0024), as a deployment runs them: one PostgreSQL database and one Redis,
// one HANGAR_SECRET_KEY; each its own HANGAR_NODE_ID, data directory, sandbox directory and sandbox subnet. Clients
// talk real HTTP to either one; a sandbox's requests reach its node whichever replica they were sent to.

const PG_URL = testDatabaseUrl ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = testRedisUrl ?? 'redis://127.0.0.1:6379';
const need = await replicaNeed(PG_URL, REDIS_URL);

interface Node extends Harness {
  id: string;
  url: string;
  env: Record<string, string>;
}

const schema = `t_${randomBytes(6).toString('hex')}`;
const secret = randomBytes(32).toString('hex');
const dirs: string[] = [];
let fake: FakeOpenAI;

function nodeEnv(id: string, octet: number, memoryMb: number): Record<string, string> {
  const dataDir = mkdtempSync(path.join(tmpdir(), `hangar-node-${id}-`));
  dirs.push(dataDir);
  // Kept between runs, as the default folder is (its base layer is reused).
  const sandboxDir = `/var/lib/hangar/sbx-${id.slice(-1)}`;
  mkdirSync(sandboxDir, { recursive: true });
  return {
    DATABASE_URL: `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}schema=${schema}`,
    REDIS_URL,
    HANGAR_SECRET_KEY: secret,
    HANGAR_NODE_ID: id,
    HANGAR_DATA_DIR: dataDir,
    HANGAR_SANDBOX_DIR: sandboxDir,
    HANGAR_SANDBOX_SUBNET: `10.${octet}.0.0/16`,
    HANGAR_NODE_MEMORY_MB: String(memoryMb),
    HANGAR_NODE_HEARTBEAT_MS: '200',
    HANGAR_NODE_DEAD_AFTER_MS: '1500',
    HANGAR_TEMPLATE_PREBUILD: 'false',
    HANGAR_VALIDATE_RESPONSES: 'true',
    HANGAR_OPENAI_BASE_URL: fake.url,
    HANGAR_OPENAI_API_KEY: 'sk-platform',
    HANGAR_OPENAI_MODELS: 'm1',
    LOG_LEVEL: 'silent',
    HOST: '127.0.0.1',
    PORT: '0',
  };
}

/** Starts a node (or restarts one: the same env, so the same node id and folders) and listens on a free port. */
async function startNode(env: Record<string, string>): Promise<Node> {
  const deps: Deps = await createDeps(parseConfig(env));
  let app: App;
  try {
    app = await buildApp(deps);
  } catch (err) {
    await closeDeps(deps);
    throw err;
  }
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    id: env.HANGAR_NODE_ID!,
    url,
    env,
    app,
    deps,
    dataDir: env.HANGAR_DATA_DIR!,
    // The node stops; its containers stay (they outlive Hangar), as when a host's Hangar dies.
    async close() {
      await app.close();
      await closeDeps(deps);
    },
  };
}

async function bothLive(via: Node, ids: string[]) {
  await until(`nodes ${ids.join(', ')} to be live`, async () => {
    const live = await liveNodes(via.deps);
    return ids.every((id) => live.some((n) => n.id === id && n.url));
  });
}

/** A client's HTTP call to a node. */
async function api(node: Node, actor: Pick<Actor, 'headers'>, method: string, url: string, body?: unknown, headers: Record<string, string> = {}) {
  const init: RequestInit = { method, headers: { ...actor.headers, ...headers } };
  if (body !== undefined) {
    init.body = typeof body === 'string' || body instanceof Uint8Array ? (body as BodyInit) : JSON.stringify(body);
    if (!(typeof body === 'string' || body instanceof Uint8Array)) (init.headers as Record<string, string>)['content-type'] = 'application/json';
  }
  const res = await fetch(`${node.url}${url}`, init);
  const text = await res.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    // a download
  }
  return { status: res.status, text, json, headers: res.headers };
}

async function create(via: Node, actor: Actor, body: Record<string, unknown> = {}) {
  const res = await api(via, actor, 'POST', '/v1/sandboxes', { network: false, ...body });
  expect(res.status, res.text).toBe(201);
  return res.json.data as { id: string; nodeId: string; state: string };
}

async function run(via: Node, actor: Actor, id: string, cmd: string) {
  const res = await api(via, actor, 'POST', `/v1/sandboxes/${id}/commands`, { cmd });
  expect(res.status, res.text).toBe(200);
  return res.json.data as { stdout: string; exitCode: number };
}

describeNeeding(need, 'sandboxes across two replicas', () => {
  let a: Node;
  let b: Node;
  let owner: Actor;
  let stranger: Actor;
  let member: Actor;

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    a = await startNode(nodeEnv('replica-a', 91, 2048));
    b = await startNode(nodeEnv('replica-b', 92, 8192));
    expect(a.deps.sandboxes.available, a.deps.sandboxes.unavailableReason ?? '').toBe(true);
    expect(b.deps.sandboxes.available, b.deps.sandboxes.unavailableReason ?? '').toBe(true);
    await bothLive(a, [a.id, b.id]);
    owner = await createOrgAdmin(a);
    stranger = await createOrgAdmin(a);
    member = await addOrgMember(a, owner);
  }, 120_000);

  afterAll(async () => {
    // Remove every container of both before either installation's runc state (shared on one host) goes.
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
    await fake?.stop();
  }, 120_000);

  it('refuses forged, misaddressed and replayed node-forwarding headers, even with the owner’s valid key', async () => {
    const box = await create(b, owner); // B places on itself: both are empty, B has more free memory
    expect(box.nodeId).toBe(b.id);
    const url = `/v1/sandboxes/${box.id}`;
    // Control: the owner's plain request answers.
    expect((await api(b, owner, 'GET', url)).status).toBe(200);

    const forged = {
      'x-hangar-node-from': a.id,
      'x-hangar-node-to': b.id,
      'x-hangar-node-timestamp': String(Date.now()),
      'x-hangar-node-nonce': randomBytes(16).toString('hex'),
    };
    const bad = await api(b, owner, 'GET', url, undefined, { ...forged, 'x-hangar-node-signature': 'f'.repeat(64) });
    expect(bad.status, bad.text).toBe(401);
    expect(bad.json.error.code).toBe('unauthenticated');
    // Signed with a key of the attacker's own (not derived from HANGAR_SECRET_KEY).
    const own = createHmac('sha256', randomBytes(32)).update('anything').digest('hex');
    expect((await api(b, owner, 'GET', url, undefined, { ...forged, 'x-hangar-node-signature': own })).status).toBe(401);
    // One header alone is refused too (it would otherwise mark the request as already forwarded).
    expect((await api(b, owner, 'GET', url, undefined, { 'x-hangar-node-from': a.id })).status).toBe(401);

    // A genuine hop, made by A for B: accepted once; the same headers again (a replay) are refused.
    const genuine = signHop(a.deps, 'GET', url, b.id, { 'x-api-key': owner.headers['x-api-key'] });
    expect((await api(b, owner, 'GET', url, undefined, genuine)).status).toBe(200);
    expect((await api(b, owner, 'GET', url, undefined, genuine)).status).toBe(401);
    // A hop A signed for B is refused by A (misaddressed), and a hop signed for another caller's key by B.
    const forB = signHop(a.deps, 'GET', url, b.id, { 'x-api-key': owner.headers['x-api-key'] });
    expect((await api(a, owner, 'GET', url, undefined, forB)).status).toBe(401);
    const forStranger = signHop(a.deps, 'GET', url, b.id, { 'x-api-key': stranger.headers['x-api-key'] });
    expect((await api(b, owner, 'GET', url, undefined, forStranger)).status).toBe(401);
    await api(b, owner, 'DELETE', url);
  });

  it('a sandbox on B is used through A: commands, SSE, uploads and downloads, pause, resume, destroy', async () => {
    const box = await create(b, owner);
    expect(box.nodeId).toBe(b.id);
    const got = await api(a, owner, 'GET', `/v1/sandboxes/${box.id}`);
    expect(got.status).toBe(200);
    expect(got.json.data.nodeId).toBe(b.id);
    expect(got.json.data.usage.diskBytes).toBeGreaterThan(0); // only B can measure it: the read went there

    expect(await run(a, owner, box.id, 'echo "$HANGAR_SANDBOX_ID on $(hostname)"')).toMatchObject({
      exitCode: 0,
      stdout: `${box.id} on sandbox-${box.id.slice(-6).toLowerCase()}\n`,
    });

    // A streamed command through A: its events arrive as B sends them.
    const sse = await fetch(`${a.url}/v1/sandboxes/${box.id}/commands`, {
      method: 'POST',
      headers: { ...owner.headers, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ cmd: 'for i in 1 2 3; do echo line $i; sleep 0.1; done' }),
    });
    expect(sse.status).toBe(200);
    expect(sse.headers.get('content-type')).toContain('text/event-stream');
    const events = await readSse(sse);
    expect(events[0]!.event).toBe('start');
    expect(
      events
        .filter((e) => e.event === 'stdout')
        .map((e) => e.data.data)
        .join(''),
    ).toBe('line 1\nline 2\nline 3\n');
    expect(events.at(-1)).toMatchObject({ event: 'exit', data: { exitCode: 0 } });

    // A client of A that goes away ends the command on B (the disconnect travels along).
    const abort = new AbortController();
    const long = await fetch(`${a.url}/v1/sandboxes/${box.id}/commands`, {
      method: 'POST',
      headers: { ...owner.headers, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ cmd: 'sleep 300' }),
      signal: abort.signal,
    });
    const [start] = await readSse(long, (e) => e.event === 'start');
    const pid = start!.data.pid as number;
    abort.abort();
    await until('the abandoned command to end on B', async () => {
      const p = await api(b, owner, 'GET', `/v1/sandboxes/${box.id}/processes/${pid}`);
      return p.status === 200 && p.json.data.status !== 'running';
    });

    // 3 MiB up through A, streamed to B, and back down through A.
    const bytes = randomBytes(3 * 1024 * 1024);
    const up = await api(a, owner, 'PUT', `/v1/sandboxes/${box.id}/files/content?path=data.bin`, bytes, {
      'content-type': 'application/octet-stream',
    });
    expect(up.status, up.text).toBe(200);
    expect(up.json.data.size).toBe(bytes.length);
    const down = await fetch(`${a.url}/v1/sandboxes/${box.id}/files/content?path=data.bin`, { headers: owner.headers });
    expect(down.status).toBe(200);
    expect(Buffer.from(await down.arrayBuffer()).equals(bytes)).toBe(true);
    expect((await run(b, owner, box.id, 'sha256sum data.bin')).stdout.split(' ')[0]).toBe(
      (await import('node:crypto')).createHash('sha256').update(bytes).digest('hex'),
    );

    const paused = await api(a, owner, 'POST', `/v1/sandboxes/${box.id}/pause`);
    expect(paused.status, paused.text).toBe(200);
    expect(paused.json.data.state).toBe('paused');
    const resumed = await api(a, owner, 'POST', `/v1/sandboxes/${box.id}/resume`);
    expect(resumed.status, resumed.text).toBe(200);
    expect(resumed.json.data.state).toBe('running');
    // The activity of a sandbox is answered by any replica from the database.
    await expectActivity(a, owner, { eventType: 'sandbox.resumed', resourceType: 'sandbox', resourceId: box.id });

    expect((await api(a, owner, 'DELETE', `/v1/sandboxes/${box.id}`)).status).toBe(204);
    expect((await b.deps.sandboxes.list()).has(box.id)).toBe(false);
  });

  it('another organization gets 404 through forwarding, another member too; the owner’s same requests answer', async () => {
    const box = await create(b, owner);
    const paths: Array<[string, string, unknown?]> = [
      ['GET', `/v1/sandboxes/${box.id}`],
      ['POST', `/v1/sandboxes/${box.id}/commands`, { cmd: 'true' }],
      ['GET', `/v1/sandboxes/${box.id}/files?path=.`],
      ['GET', `/v1/sandboxes/${box.id}/processes`],
    ];
    for (const [method, url, body] of paths) {
      expect((await api(a, owner, method, url, body)).status, `${method} ${url} as the owner`).toBe(200);
      for (const who of [stranger, member]) {
        const res = await api(a, who, method, url, body);
        expect(res.status, `${method} ${url}: ${res.text}`).toBe(404);
        expect(res.json.error.code).toBe('not_found');
      }
    }
    for (const who of [stranger, member]) expect((await api(a, who, 'DELETE', `/v1/sandboxes/${box.id}`)).status).toBe(404);
    expect((await api(a, owner, 'DELETE', `/v1/sandboxes/${box.id}`)).status).toBe(204);
  });

  it('a run on a thread whose sandbox is on B, sent to A, runs on B: its tools see the files of the earlier run', async () => {
    const agent = await api(a, owner, 'POST', '/v1/agents', {
      slug: 'coder',
      executionMode: 'in_sandbox',
      model: 'm1',
      instructions: 'You write code.',
      tools: ['exec_command', 'apply_patch', 'write_stdin'],
    });
    expect(agent.status, agent.text).toBe(201);
    fake.script(
      { toolCalls: [{ id: 'c1', name: 'exec_command', arguments: JSON.stringify({ cmd: 'echo made-on-b > note.txt' }) }] },
      { text: 'made' },
    );
    const first = await api(b, owner, 'POST', '/v1/run', { agent: 'coder', prompt: 'make a note' });
    expect(first.status, first.text).toBe(200);
    expect(first.json.data.status).toBe('completed');
    const box = await api(a, owner, 'GET', `/v1/sandboxes/${first.json.data.sandboxId}`);
    expect(box.json.data.nodeId).toBe(b.id); // the run on B made the thread's sandbox there

    fake.script({ toolCalls: [{ id: 'c2', name: 'exec_command', arguments: JSON.stringify({ cmd: 'cat note.txt' }) }] }, { text: 'read' });
    const second = await api(a, owner, 'POST', '/v1/run', { agent: 'coder', prompt: 'read the note', threadId: first.json.data.threadId });
    expect(second.status, second.text).toBe(200);
    expect(second.json.data).toMatchObject({ status: 'completed', result: 'read', sandboxId: first.json.data.sandboxId });
    const events = await api(a, owner, 'GET', `/v1/threads/${first.json.data.threadId}/events?limit=500`);
    const results = (events.json.data.events as Array<{ runId: string; type: string; payload: any }>).filter(
      (e) => e.runId === second.json.data.runId && e.type === 'tool_result',
    );
    expect(results).toHaveLength(1);
    expect(results[0]!.payload.output).toContain('made-on-b');
    const row = await a.deps.db.kysely.selectFrom('agent_runs').select('node_id').where('id', '=', second.json.data.runId).executeTakeFirstOrThrow();
    expect(row.node_id).toBe(b.id);
    expect((await api(a, owner, 'DELETE', `/v1/sandboxes/${first.json.data.sandboxId}`)).status).toBe(204);
  });

  it('places a new sandbox on the live node with room: fewest running, then most free memory', async () => {
    // A offers 2048 MiB, B 8192; nothing runs.
    const first = await create(a, owner, { memoryMb: 1024 }); // a tie on running: B has more free memory
    expect(first.nodeId).toBe(b.id);
    const second = await create(a, owner, { memoryMb: 1024 }); // A runs fewer
    expect(second.nodeId).toBe(a.id);
    const third = await create(b, owner, { memoryMb: 1536 }); // one each; A has 1024 free, not enough
    expect(third.nodeId).toBe(b.id);
    const fourth = await create(b, owner, { memoryMb: 512 }); // A runs fewer and has room
    expect(fourth.nodeId).toBe(a.id);
    for (const box of [first, second, third, fourth]) {
      expect((await run(a, owner, box.id, 'echo ok')).stdout).toBe('ok\n');
      expect((await api(b, owner, 'DELETE', `/v1/sandboxes/${box.id}`)).status).toBe(204);
    }
  });

  it('a node that dies has its sandboxes marked stopped by the other; back, they resume on it with their files', async () => {
    const box = await create(b, owner);
    expect(box.nodeId).toBe(b.id);
    await run(a, owner, box.id, 'echo kept > note.txt');
    const running = await api(a, owner, 'GET', `/v1/sandboxes/${box.id}`);
    expect(running.json.data.state).toBe('running');

    await b.close(); // Hangar on B is gone; its container is left running
    const stopped = await until(
      'the sandbox of the silent node to be stopped',
      async () => {
        const res = await api(a, owner, 'GET', `/v1/sandboxes/${box.id}`);
        return res.status === 200 && res.json.data.state === 'stopped' && res.json.data;
      },
      { timeoutMs: 15_000, intervalMs: 100 },
    );
    expect(stopped.nodeId).toBe(b.id);
    await expectActivity(a, owner, {
      eventType: 'sandbox.stopped',
      resourceType: 'sandbox',
      resourceId: box.id,
      metadata: { trigger: 'node_dead', node: b.id },
    });
    // The platform lost the node: the sandbox's running time is forgiven, not charged.
    const charges = await a.deps.db.kysely.selectFrom('usage_events').select('state').where('subject', '=', box.id).execute();
    expect(charges.map((c) => c.state)).toEqual(['forgiven']);
    // While B is away, what needs its container says why.
    const refused = await api(a, owner, 'POST', `/v1/sandboxes/${box.id}/resume`);
    expect(refused.status, refused.text).toBe(503);
    expect(refused.json.error.message).toContain(`node "${b.id}"`);
    // New sandboxes go to the node that is left.
    const elsewhere = await create(a, owner);
    expect(elsewhere.nodeId).toBe(a.id);
    expect((await api(a, owner, 'DELETE', `/v1/sandboxes/${elsewhere.id}`)).status).toBe(204);

    b = await startNode(b.env); // B comes back (a new port: its heartbeat says where)
    await bothLive(a, [b.id]);
    await until('B to register its new address', async () => (await liveNodes(a.deps)).find((n) => n.id === b.id)?.url === b.url);
    const back = await api(a, owner, 'POST', `/v1/sandboxes/${box.id}/resume`);
    expect(back.status, back.text).toBe(200);
    expect(back.json.data).toMatchObject({ state: 'running', nodeId: b.id });
    expect((await run(a, owner, box.id, 'cat note.txt')).stdout).toBe('kept\n');
    expect((await api(a, owner, 'DELETE', `/v1/sandboxes/${box.id}`)).status).toBe(204);
  }, 60_000);
});
