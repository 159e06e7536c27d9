import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import WebSocket from 'ws';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { createHarness, createOrgAdmin, json, testDatabaseUrl, testRedisUrl, type Actor, type Harness } from '../../../test/harness.js';
import { until } from '../../../test/helpers.js';
import { describeNeeding, replicaNeed } from '../../../test/needs.js';
import { linkDevice } from '../../../test/runmesh.js';

// Two Hangar replicas on one PostgreSQL schema and one Redis (ADR 0024, 0029): the device holds its connection to
// replica A, the run is started on replica B, the device's frames go to B, and a subscriber on A watches them.

const PG_URL = testDatabaseUrl ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = testRedisUrl ?? 'redis://127.0.0.1:6379';
const need = await replicaNeed(PG_URL, REDIS_URL);

describeNeeding(need, 'local-device runs across two replicas', () => {
  const schema = `t_${randomBytes(6).toString('hex')}`;
  const secret = randomBytes(32).toString('hex');
  let fake: FakeOpenAI;
  let a: Harness;
  let b: Harness;
  let urlA: string;
  let admin: Actor;

  const env = (node: string) => ({
    DATABASE_URL: `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}schema=${schema}`,
    REDIS_URL,
    HANGAR_SECRET_KEY: secret,
    HANGAR_NODE_ID: node,
    HANGAR_OPENAI_BASE_URL: fake.url,
    HANGAR_OPENAI_API_KEY: 'sk-platform',
    HANGAR_OPENAI_MODELS: 'm1',
  });

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    a = await createHarness(env('mesh-a'));
    b = await createHarness(env('mesh-b'));
    await a.app.listen({ host: '127.0.0.1', port: 0 });
    urlA = `http://127.0.0.1:${(a.app.server.address() as AddressInfo).port}`;
    admin = await createOrgAdmin(a);
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
    await fake?.stop();
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
  });

  it('a run started on B reaches the device connected to A; its frames posted to B reach a subscriber on A; cancel on B reaches the device', async () => {
    const d = await linkDevice(a, admin, 'roaming');
    const create = await b.app.inject({
      method: 'POST',
      url: '/v1/agents',
      headers: admin.headers,
      payload: { slug: 'remote', executionMode: 'local-desktop', targetDeviceId: d.nodeId, model: 'm1' },
    });
    expect(create.statusCode, create.body).toBe(201);

    const messages: any[] = [];
    const sock = new WebSocket(`${urlA.replace('http', 'ws')}/v1/runmesh/connect`, { headers: { authorization: `Bearer ${d.token}` } });
    sock.on('message', (m) => messages.push(JSON.parse(String(m))));
    await until('hello from A', () => messages.find((m) => m.type === 'hello'));

    const started = json(
      await b.app.inject({ method: 'POST', url: '/v1/run', headers: admin.headers, payload: { agent: 'remote', prompt: 'hello from B' } }),
    ).data;
    expect(started.status).toBe('registered');
    const run = await until('the run reached the device on A', () => messages.find((m) => m.type === 'run' && m.run.runId === started.runId)?.run);
    sock.send(JSON.stringify({ type: 'accept', runId: run.runId }));
    await until(
      'running',
      async () => json(await b.app.inject({ method: 'GET', url: `/v1/runs/${run.runId}`, headers: admin.headers })).data.status === 'running',
    );

    const frames: any[] = [];
    const sub = new WebSocket(`${urlA.replace('http', 'ws')}/v1/threads/${run.threadId}/events?api_key=${admin.key}`);
    sub.on('message', (m) => frames.push(JSON.parse(String(m))));
    await until('snapshot', () => frames.find((f) => f.type === 'snapshot'));

    const device = { authorization: `Bearer ${d.token}` };
    const post = (frame: object) =>
      b.app.inject({ method: 'POST', url: '/v1/thread-events', headers: device, payload: { threadId: run.threadId, frame } });
    const base = { runId: run.runId, rolloutId: run.rolloutId };
    expect((await post({ ...base, type: 'assistant_message_delta', sequenceNumber: 1, messageId: 'm1', delta: 'Hi' })).statusCode).toBe(202);
    expect((await post({ ...base, type: 'assistant_message', sequenceNumber: 1, payload: { messageId: 'm1', text: 'Hi there' } })).statusCode).toBe(
      200,
    );
    await until('frames on A', () => frames.find((f) => f.type === 'assistant_message'));
    expect(frames.map((f) => f.type)).toEqual(['snapshot', 'assistant_message_delta', 'assistant_message']);

    // Cancel on B: the device on A is told, and the run is cancelled.
    const cancel = await b.app.inject({ method: 'POST', url: `/v1/runs/${run.runId}/cancel`, headers: admin.headers });
    expect(json(cancel).data.status).toBe('cancelled');
    await until('cancel reached the device on A', () => messages.find((m) => m.type === 'cancel' && m.runId === run.runId));
    await until('run_completed on A', () => frames.find((f) => f.type === 'run_completed'));
    sub.close();
    sock.close();
  });
});
