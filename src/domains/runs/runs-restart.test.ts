import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { createHarness, createOrgAdmin, json, testDatabaseUrl, type Actor, type Harness } from '../../../test/harness.js';
import { buildApp, closeDeps, createDeps } from '../../app.js';
import type { Deps } from '../../platform/context.js';
import type { App } from '../../platform/http/server.js';
import { uuid } from '../../platform/ids.js';
import { acquireRunLock, appendDurable } from '../threads/index.js';

const STOPPED = 'the server stopped while this run was in progress';

type Call = (actor: Actor, method: 'GET' | 'POST', url: string, payload?: unknown) => Promise<{ statusCode: number; body: string }>;
const caller =
  (app: () => App): Call =>
  (actor, method, url, payload) =>
    app().inject({ method, url, headers: actor.headers, payload: payload as object });

/**
 * A run as a process that died mid-run leaves it: its record `running` on `nodeId`, its thread lock held
 * (for `lockMs`; negative: already lapsed) and its first frames in the thread. Nothing in memory holds it.
 */
async function leftRunning(deps: Deps, actor: Actor, agentId: string, threadId: string, nodeId: string, lockMs: number): Promise<string> {
  const runId = uuid();
  expect((await acquireRunLock(deps, threadId, runId, lockMs)).acquired).toBe(true);
  const now = new Date().toISOString();
  await deps.db.kysely
    .insertInto('agent_runs')
    .values({
      id: runId,
      org_id: actor.orgId,
      agent_id: agentId,
      agent_slug: 'plain',
      thread_id: threadId,
      rollout_id: null,
      sandbox_id: null,
      target_device_id: null,
      execution_mode: 'managed',
      model: 'm1',
      status: 'running',
      result: null,
      error: null,
      usage: JSON.stringify({
        promptTokens: 0,
        completionTokens: 0,
        totalTokens: 0,
        inputTokens: 0,
        outputTokens: 0,
        cachedInputTokens: 0,
        reasoningTokens: 0,
      }),
      iterations: 1,
      node_id: nodeId,
      metadata: '{}',
      created_by_user_id: actor.userId,
      created_at: now,
      finished_at: null,
    })
    .execute();
  await appendDurable(deps, threadId, [
    { type: 'run_started', runId, payload: { runId, agent: 'plain', model: 'm1', executionMode: 'managed', sandboxId: null, targetDeviceId: null } },
    { type: 'user_message', runId, payload: { text: 'Interrupted' } },
  ]);
  return runId;
}

describe('runs interrupted by a server stop', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let admin: Actor;
  let agentId: string;
  let restarted: { deps: Deps; app: App } | null = null;
  const call = caller(() => h.app);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness({ HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_OPENAI_MODELS: 'm1' });
    admin = await createOrgAdmin(h);
    const res = await call(admin, 'POST', '/v1/agents', { slug: 'plain', model: 'm1', instructions: 'You are terse.' });
    expect(res.statusCode, res.body).toBe(201);
    agentId = json(res).data.id;
  });
  afterAll(async () => {
    if (restarted) {
      await restarted.app.close();
      await closeDeps(restarted.deps);
    }
    await h?.close();
    await fake?.stop();
  });

  const openThread = async (c: Call) => {
    const res = await c(admin, 'POST', '/v1/run', { agent: 'plain', prompt: 'Open a thread' });
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data.threadId as string;
  };

  it('a restart on the same database finishes this node’s running runs as failed; the thread takes a new run and cancel is 409', async () => {
    const thread = await openThread(call);
    const other = await openThread(call);
    const runId = await leftRunning(h.deps, admin, agentId, thread, h.deps.config.sandboxes.nodeId, 120_000);
    // Control: a run another replica is still running (its lock is fresh) is left alone.
    const elsewhere = await leftRunning(h.deps, admin, agentId, other, 'replica-alive', 120_000);
    // Before the restart the thread is busy with the interrupted run.
    const busy = await call(admin, 'POST', '/v1/run', { agent: 'plain', prompt: 'Too early', threadId: thread });
    expect(busy.statusCode, busy.body).toBe(409);

    // The same installation starts again on the same database (new process state, same node).
    const deps = await createDeps(h.deps.config);
    const app = await buildApp(deps).catch(async (err) => {
      await closeDeps(deps);
      throw err;
    });
    restarted = { deps, app };
    const afterRestart = caller(() => app);

    const run = await afterRestart(admin, 'GET', `/v1/runs/${runId}`);
    expect(run.statusCode, run.body).toBe(200);
    expect(json(run).data).toMatchObject({ runId, status: 'failed', error: STOPPED });
    expect(json(run).data.finishedAt).toBeTruthy();

    const events = json(await afterRestart(admin, 'GET', `/v1/threads/${thread}/events?limit=500`)).data.events as {
      type: string;
      runId: string | null;
      payload: any;
    }[];
    expect(events.filter((e) => e.runId === runId).map((e) => e.type)).toEqual(['run_started', 'user_message', 'run_completed']);
    expect(events.at(-1)!.payload).toMatchObject({ runId, status: 'failed', error: STOPPED });

    const activity = json(await afterRestart(admin, 'GET', `/v1/activity?agent_run_id=${runId}`)).data.events as {
      eventType: string;
      status: string;
      summary: string;
    }[];
    expect(activity.map((a) => a.eventType)).toContain('agent.run.failed');
    expect(activity.find((a) => a.eventType === 'agent.run.failed')).toMatchObject({ status: 'failed', summary: STOPPED });

    const cancel = await afterRestart(admin, 'POST', `/v1/runs/${runId}/cancel`);
    expect(cancel.statusCode, cancel.body).toBe(409);
    expect(json(cancel).error).toMatchObject({ code: 'invalid_state', state: 'failed' });

    const next = await afterRestart(admin, 'POST', '/v1/run', { agent: 'plain', prompt: 'Again', threadId: thread });
    expect(next.statusCode, next.body).toBe(200);
    expect(json(next).data).toMatchObject({ threadId: thread, status: 'completed' });

    // The other replica's run is still its own: still running, and cancel sends the caller there.
    expect(json(await afterRestart(admin, 'GET', `/v1/runs/${elsewhere}`)).data.status).toBe('running');
    const there = await afterRestart(admin, 'POST', `/v1/runs/${elsewhere}/cancel`);
    expect(there.statusCode, there.body).toBe(503);
  });

  it('a run whose replica died (its thread lock lapsed) is finished as failed by cancel instead of a 503, and the thread is free', async () => {
    const thread = await openThread(call);
    const runId = await leftRunning(h.deps, admin, agentId, thread, 'replica-gone', -1000);
    const cancel = await call(admin, 'POST', `/v1/runs/${runId}/cancel`);
    expect(cancel.statusCode, cancel.body).toBe(409);
    expect(json(cancel).error).toMatchObject({ code: 'invalid_state', state: 'failed' });
    expect(json(await call(admin, 'GET', `/v1/runs/${runId}`)).data).toMatchObject({ status: 'failed', error: STOPPED });
    const next = await call(admin, 'POST', '/v1/run', { agent: 'plain', prompt: 'Again', threadId: thread });
    expect(next.statusCode, next.body).toBe(200);
  });
});

describe('two apps in one process', () => {
  const sharedSchema = `t_${randomBytes(6).toString('hex')}`;
  let fake: FakeOpenAI;
  let dir: string;
  let a: Harness;
  let b: Harness;
  let admin: Actor;

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    dir = mkdtempSync(path.join(tmpdir(), 'hangar-two-apps-'));
    // Both apps open one database: the SQLite file in the shared data directory, or one PostgreSQL schema.
    const env = {
      HANGAR_DATA_DIR: dir,
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'm1',
      ...(testDatabaseUrl ? { DATABASE_URL: `${testDatabaseUrl}${testDatabaseUrl.includes('?') ? '&' : '?'}schema=${sharedSchema}` } : {}),
    };
    a = await createHarness({ ...env, HANGAR_NODE_ID: 'replica-a' });
    b = await createHarness({ ...env, HANGAR_NODE_ID: 'replica-b' });
    admin = await createOrgAdmin(a);
    const res = await a.app.inject({ method: 'POST', url: '/v1/agents', headers: admin.headers, payload: { slug: 'plain', model: 'm1' } });
    expect(res.statusCode, res.body).toBe(201);
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await fake?.stop();
    rmSync(dir, { recursive: true, force: true });
    if (testDatabaseUrl) {
      const client = new pg.Client({ connectionString: testDatabaseUrl });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${sharedSchema}" CASCADE`);
      await client.end();
    }
  });

  it('share no runtime state: a run in progress on one is not the other’s to cancel', async () => {
    fake.script({ text: Array.from({ length: 40 }, (_, i) => `w${i} `), chunkDelayMs: 100 });
    const pending = a.app.inject({ method: 'POST', url: '/v1/run', headers: admin.headers, payload: { agent: 'plain', prompt: 'Talk slowly' } });
    const runId = await vi.waitFor(
      async () => {
        const row = await a.deps.db.kysely.selectFrom('agent_runs').select('id').where('status', '=', 'running').executeTakeFirst();
        if (!row) throw new Error('no run yet');
        return row.id;
      },
      { timeout: 10_000, interval: 25 },
    );
    const fromB = await b.app.inject({ method: 'POST', url: `/v1/runs/${runId}/cancel`, headers: admin.headers });
    expect(fromB.statusCode, fromB.body).toBe(503);
    const fromA = await a.app.inject({ method: 'POST', url: `/v1/runs/${runId}/cancel`, headers: admin.headers });
    expect(fromA.statusCode, fromA.body).toBe(200);
    expect(json(fromA).data).toMatchObject({ runId, status: 'cancelled' });
    expect((await pending).statusCode).toBe(200);
  });
});
