import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { sleep, until } from '../../../test/helpers.js';
import { linkDevice } from '../../../test/runmesh.js';
import { failUndispatchedLocalRuns } from '../runs/service.js';

/** A device's dispatch connection as the protocol sees it (ADR 0029): messages in, and a way to send. */
class DeviceSocket {
  readonly messages: any[] = [];
  closed: { code: number; reason: string } | null = null;
  constructor(readonly ws: WebSocket) {
    ws.on('message', (d) => this.messages.push(JSON.parse(String(d))));
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: String(reason) };
    });
  }
  static async open(base: string, token: string): Promise<DeviceSocket> {
    const ws = new WebSocket(`${base.replace('http', 'ws')}/v1/runmesh/connect`, { headers: { authorization: `Bearer ${token}` } });
    const s = new DeviceSocket(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    });
    await until('hello', () => s.messages.find((m) => m.type === 'hello'));
    return s;
  }
  send(m: unknown) {
    this.ws.send(JSON.stringify(m));
  }
  run(runId: string) {
    return until(`run ${runId} delivered`, () => this.messages.find((m) => m.type === 'run' && m.run.runId === runId)?.run);
  }
  close() {
    this.ws.close();
  }
}

describe('local-device runs through the mesh', () => {
  let h: Harness;
  let fake: FakeOpenAI;
  let admin: Actor;
  let base: string;
  let device: Awaited<ReturnType<typeof linkDevice>>;
  const auth = () => ({ authorization: `Bearer ${device.token}` });

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness({
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'm1',
      // Long enough that a loaded machine never reaches it by accident; the tests of the timeout move the deadline.
      HANGAR_RUNMESH_DISPATCH_TIMEOUT_SECONDS: '30',
    });
    await h.app.listen({ host: '127.0.0.1', port: 0 });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    admin = await createOrgAdmin(h);
    device = await linkDevice(h, admin, 'workstation');
    const agent = await h.app.inject({
      method: 'POST',
      url: '/v1/agents',
      headers: admin.headers,
      payload: {
        slug: 'local',
        executionMode: 'local-desktop',
        targetDeviceId: device.nodeId,
        model: 'm1',
        tools: ['exec_command'],
        instructions: 'Be brief.',
      },
    });
    expect(agent.statusCode, agent.body).toBe(201);
  });
  afterAll(async () => {
    await h.close();
    await fake.stop();
  });

  const startRun = async (prompt: string, extra: object = {}) => {
    const res = await h.app.inject({ method: 'POST', url: '/v1/run', headers: admin.headers, payload: { agent: 'local', prompt, ...extra } });
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data;
  };
  const post = (body: object, headers = auth()) => h.app.inject({ method: 'POST', url: '/v1/thread-events', headers, payload: body });
  const getRun = async (id: string) => json(await h.app.inject({ method: 'GET', url: `/v1/runs/${id}`, headers: admin.headers })).data;

  it('a run waits for its device, is delivered when it connects, and the device’s model calls and frames make the thread', async () => {
    const run = await startRun('Write a file');
    expect(run).toMatchObject({ status: 'registered', executionMode: 'local-desktop', targetDeviceId: device.nodeId });
    // The thread is busy while the device may still take it.
    const busy = await h.app.inject({
      method: 'POST',
      url: '/v1/run',
      headers: admin.headers,
      payload: { agent: 'local', prompt: 'again', threadId: run.threadId },
    });
    expect(busy.statusCode).toBe(409);

    const sock = await DeviceSocket.open(base, device.token);
    const delivered = await sock.run(run.runId);
    expect(delivered).toMatchObject({
      threadId: run.threadId,
      agent: { slug: 'local', tools: ['exec_command'], instructions: 'Be brief.' },
      resume: false,
    });
    expect(delivered.messages.at(-1)).toEqual({ role: 'user', content: 'Write a file' });
    const node = json(await h.app.inject({ method: 'GET', url: `/v1/runmesh/nodes/${device.nodeId}`, headers: admin.headers })).data;
    expect(node.online).toBe(true);

    // Frames before accepting are refused.
    const early = await post({
      threadId: run.threadId,
      frame: { type: 'assistant_message', runId: run.runId, rolloutId: delivered.rolloutId, sequenceNumber: 1, payload: { text: 'x' } },
    });
    expect(early.statusCode).toBe(409);
    sock.send({ type: 'accept', runId: run.runId });
    await until('running', async () => (await getRun(run.runId)).status === 'running');

    // The model, through the platform, with the run's agent's model; metered against the run.
    fake.script({
      toolCalls: [{ id: 'call_1', name: 'exec_command', arguments: JSON.stringify({ cmd: 'echo hi' }) }],
      usage: { prompt: 11, completion: 7 },
    });
    const modelRes = await fetch(`${base}/v1/runmesh/runs/${run.runId}/model`, {
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/json' },
      body: JSON.stringify({
        messages: delivered.messages,
        system: 'Be brief.',
        tools: [
          { name: 'exec_command', description: 'run', parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] } },
        ],
      }),
    });
    expect(modelRes.status).toBe(200);
    const lines = (await modelRes.text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines[0]).toEqual({ type: 'start', model: 'm1' });
    expect(lines.find((l) => l.type === 'tool-call')).toMatchObject({ id: 'call_1', name: 'exec_command', input: { cmd: 'echo hi' } });
    expect(fake.requests.at(-1)!.body.model).toBe('m1');

    const rollout = delivered.rolloutId;
    const durable = (n: number, type: string, payload: object) =>
      post({ threadId: run.threadId, frame: { type, runId: run.runId, rolloutId: rollout, sequenceNumber: n, payload } });
    const live = await post({
      threadId: run.threadId,
      frame: { type: 'tool_output_delta', runId: run.runId, rolloutId: rollout, sequenceNumber: 1, toolCallId: 'call_1', delta: 'hi\n' },
    });
    expect(live.statusCode).toBe(202);
    const first = await durable(1, 'tool_call', { toolCallId: 'call_1', name: 'exec_command', input: { cmd: 'echo hi' } });
    expect(first.statusCode, first.body).toBe(200);
    expect(json(first).data).toMatchObject({ accepted: true, duplicate: false });
    // A retry of the same counter appends nothing; a gap is refused.
    expect(json(await durable(1, 'tool_call', { toolCallId: 'call_1', name: 'exec_command', input: {} })).data).toMatchObject({ duplicate: true });
    expect((await durable(5, 'tool_result', { toolCallId: 'call_1', name: 'exec_command', output: 'x', isError: false })).statusCode).toBe(409);
    expect(
      (await durable(2, 'tool_result', { toolCallId: 'call_1', name: 'exec_command', output: 'exit code 0\nstdout:\nhi', isError: false }))
        .statusCode,
    ).toBe(200);
    expect((await durable(3, 'assistant_message', { messageId: 'm_1', text: 'Done.' })).statusCode).toBe(200);
    const done = await durable(4, 'run_completed', {
      runId: run.runId,
      status: 'completed',
      usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2, cachedInputTokens: 0, reasoningTokens: 0 },
      iterations: 2,
      error: null,
    });
    expect(done.statusCode, done.body).toBe(200);

    const final = await getRun(run.runId);
    // Usage is the platform's count of the run's model calls, not what the device said.
    expect(final).toMatchObject({ status: 'completed', iterations: 2, usage: { inputTokens: 11, outputTokens: 7 } });
    const events = json(await h.app.inject({ method: 'GET', url: `/v1/threads/${run.threadId}/events`, headers: admin.headers })).data.events;
    expect(events.map((e: { type: string }) => e.type)).toEqual([
      'run_started',
      'user_message',
      'tool_call',
      'tool_result',
      'assistant_message',
      'run_completed',
    ]);
    expect(events.map((e: { sequence: number }) => e.sequence)).toEqual([1, 2, 3, 4, 5, 6]);
    // The run has ended: the device may not write to it any more, and the thread is free.
    expect((await durable(5, 'assistant_message', { text: 'late' })).statusCode).toBe(409);
    const next = await startRun('again', { threadId: run.threadId });
    expect(next.status).toBe('registered');
    await h.app.inject({ method: 'POST', url: `/v1/runs/${next.runId}/cancel`, headers: admin.headers });
    sock.close();
  });

  it('a device credential cannot write to a run that is not its own, nor to another thread', async () => {
    const other = await linkDevice(h, admin, 'other');
    const run = await startRun('mine');
    const sock = await DeviceSocket.open(base, device.token);
    const delivered = await sock.run(run.runId);
    sock.send({ type: 'accept', runId: run.runId });
    await until('running', async () => (await getRun(run.runId)).status === 'running');
    const frame = { type: 'assistant_message', runId: run.runId, rolloutId: delivered.rolloutId, sequenceNumber: 1, payload: { text: 'forged' } };
    expect((await post({ threadId: run.threadId, frame }, { authorization: `Bearer ${other.token}` })).statusCode).toBe(404);
    const elsewhere = await startRun('a different thread');
    expect((await post({ threadId: elsewhere.threadId, frame })).statusCode).toBe(400);
    await h.app.inject({ method: 'POST', url: `/v1/runs/${elsewhere.runId}/cancel`, headers: admin.headers });
    // Cancel reaches the device; its later frames are refused.
    const cancel = await h.app.inject({ method: 'POST', url: `/v1/runs/${run.runId}/cancel`, headers: admin.headers });
    expect(json(cancel).data.status).toBe('cancelled');
    await until('cancel sent', () => sock.messages.find((m) => m.type === 'cancel' && m.runId === run.runId));
    expect((await post({ threadId: run.threadId, frame })).statusCode).toBe(409);
    sock.close();
  });

  it('revoking the node during a run fails the run and closes the device’s connection with 4401', async () => {
    const d = await linkDevice(h, admin, 'doomed');
    await h.app.inject({
      method: 'POST',
      url: '/v1/agents',
      headers: admin.headers,
      payload: { slug: 'doomed', executionMode: 'local-desktop', targetDeviceId: d.nodeId, model: 'm1' },
    });
    const res = await h.app.inject({ method: 'POST', url: '/v1/run', headers: admin.headers, payload: { agent: 'doomed', prompt: 'work' } });
    const run = json(res).data;
    const sock = await DeviceSocket.open(base, d.token);
    await sock.run(run.runId);
    sock.send({ type: 'accept', runId: run.runId });
    await until('running', async () => (await getRun(run.runId)).status === 'running');
    await h.app.inject({ method: 'POST', url: `/v1/runmesh/nodes/${d.nodeId}/revoke`, headers: admin.headers, payload: { reason: 'lost' } });
    await until('closed', () => sock.closed);
    expect(sock.closed!.code).toBe(4401);
    const final = await getRun(run.runId);
    expect(final).toMatchObject({ status: 'failed' });
    expect(final.error).toContain('revoked');
    // A new run on the revoked node is refused.
    expect(
      (await h.app.inject({ method: 'POST', url: '/v1/run', headers: admin.headers, payload: { agent: 'doomed', prompt: 'again' } })).statusCode,
    ).toBe(409);
  });

  /** As if the dispatch timeout had passed for this run (the sweeper runs every 5 s here). */
  const overdue = (runId: string) =>
    h.deps.db.kysely
      .updateTable('runmesh_dispatches')
      .set({ deadline_at: new Date(Date.now() - 1000).toISOString() })
      .where('run_id', '=', runId)
      .execute();

  it('a run whose device never takes it fails after the dispatch timeout, saying so', async () => {
    const run = await startRun('nobody home');
    await sleep(200);
    expect((await getRun(run.runId)).status).toBe('registered');
    await overdue(run.runId);
    await until('failed', async () => (await getRun(run.runId)).status === 'failed', { timeoutMs: 20_000 });
    expect((await getRun(run.runId)).error).toContain('did not take the run within 30 s');
  });

  it('a device that drops mid-run gets the run again (resume) when it is back in time, and the run goes on', async () => {
    const run = await startRun('long job');
    let sock = await DeviceSocket.open(base, device.token);
    const delivered = await sock.run(run.runId);
    sock.send({ type: 'accept', runId: run.runId });
    await until('running', async () => (await getRun(run.runId)).status === 'running');
    sock.ws.terminate();
    await sleep(300);
    sock = await DeviceSocket.open(base, device.token);
    const again = await sock.run(run.runId);
    expect(again.resume).toBe(true);
    const frame = { type: 'assistant_message', runId: run.runId, rolloutId: delivered.rolloutId, sequenceNumber: 1, payload: { text: 'still here' } };
    expect((await post({ threadId: run.threadId, frame })).statusCode).toBe(200);
    // Gone for good this time: once it has been away for the timeout, the run fails.
    const disconnects = async () =>
      json(await h.app.inject({ method: 'GET', url: `/v1/runmesh/audit?node_id=${device.nodeId}&event=device.disconnected`, headers: admin.headers }))
        .data.events.length;
    const before = await disconnects();
    sock.ws.terminate();
    await until('the server saw it go', async () => (await disconnects()) > before);
    expect((await getRun(run.runId)).status).toBe('running');
    await overdue(run.runId);
    await until('failed', async () => (await getRun(run.runId)).status === 'failed', { timeoutMs: 20_000 });
    expect((await getRun(run.runId)).error).toContain('did not come back within 30 s');
  });

  it('a queued run whose agent was deleted fails when its device comes, saying why; one never handed to the mesh fails in the runs’ sweep', async () => {
    await h.app.inject({
      method: 'POST',
      url: '/v1/agents',
      headers: admin.headers,
      payload: { slug: 'short-lived', executionMode: 'local-desktop', targetDeviceId: device.nodeId, model: 'm1' },
    });
    const run = json(
      await h.app.inject({ method: 'POST', url: '/v1/run', headers: admin.headers, payload: { agent: 'short-lived', prompt: 'x' } }),
    ).data;
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/short-lived', headers: admin.headers })).statusCode).toBeLessThan(300);
    const sock = await DeviceSocket.open(base, device.token);
    await until('failed', async () => (await getRun(run.runId)).status === 'failed');
    expect((await getRun(run.runId)).error).toContain('could not be sent to its device');
    expect(sock.messages.find((m) => m.type === 'run' && m.run.runId === run.runId)).toBeUndefined();
    sock.close();

    // A run the mesh never got (as if the server stopped right after recording it), old enough: the runs' sweep ends it.
    const lost = await startRun('lost');
    await h.deps.db.kysely.deleteFrom('runmesh_dispatches').where('run_id', '=', lost.runId).execute();
    await h.deps.db.kysely
      .updateTable('agent_runs')
      .set({ created_at: new Date(Date.now() - 3_600_000).toISOString() })
      .where('id', '=', lost.runId)
      .execute();
    expect(await failUndispatchedLocalRuns(h.deps)).toBe(1);
    expect(await getRun(lost.runId)).toMatchObject({ status: 'failed', error: 'the server stopped before the run was handed to its device' });
  });

  it('stream: true follows the device’s frames until run_completed', async () => {
    const sock = await DeviceSocket.open(base, device.token);
    const streamed = fetch(`${base}/v1/run`, {
      method: 'POST',
      headers: { 'x-api-key': admin.key, 'content-type': 'application/json' },
      body: JSON.stringify({ agent: 'local', prompt: 'stream it', stream: true }),
    }).then((r) => r.text());
    const delivered = await until(
      'a run delivered',
      () => sock.messages.find((m) => m.type === 'run' && m.run.messages.at(-1)?.content === 'stream it')?.run,
    );
    sock.send({ type: 'accept', runId: delivered.runId });
    await until('running', async () => (await getRun(delivered.runId)).status === 'running');
    const frame = (n: number, type: string, payload: object) => ({
      threadId: delivered.threadId,
      frame: { type, runId: delivered.runId, rolloutId: delivered.rolloutId, sequenceNumber: n, payload },
    });
    await post({
      threadId: delivered.threadId,
      frame: { type: 'assistant_message_delta', runId: delivered.runId, rolloutId: delivered.rolloutId, sequenceNumber: 1, delta: 'Hel' },
    });
    await post(frame(1, 'assistant_message', { text: 'Hello' }));
    await post(frame(2, 'run_completed', { runId: delivered.runId, status: 'completed', usage: {}, iterations: 1, error: null }));
    const text = await streamed;
    const events = [...text.matchAll(/^event: (\S+)$/gm)].map((m) => m[1]);
    expect(events).toEqual(['run_started', 'user_message', 'assistant_message_delta', 'assistant_message', 'run_completed', 'result']);
    expect(text).toContain('"status":"completed"');
    sock.close();
  });
});

describe('a local-device run on the owner’s own model key (BYOK)', () => {
  let h: Harness;
  let fake: FakeOpenAI;
  let dir: string;

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    dir = mkdtempSync(path.join(tmpdir(), 'hangar-mesh-models-'));
    const file = path.join(dir, 'models.json');
    writeFileSync(
      file,
      JSON.stringify({ byok: [{ id: 'byok/fake', provider: 'openai', model: 'x', baseUrl: fake.url, requiresSecret: 'FAKE_KEY' }] }),
    );
    h = await createHarness({ HANGAR_MODELS_FILE: file });
    await h.app.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(async () => {
    await h.close();
    await fake.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the device’s model calls use the owner’s secret, metered at zero, never the platform’s credentials', async () => {
    const base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    const owner = await createOrgAdmin(h);
    const d = await linkDevice(h, owner, 'byok-box');
    await h.app.inject({ method: 'POST', url: '/v1/secrets', headers: owner.headers, payload: { name: 'FAKE_KEY', value: 'sk-users-own-key' } });
    await h.app.inject({
      method: 'POST',
      url: '/v1/agents',
      headers: owner.headers,
      payload: { slug: 'mine', executionMode: 'local-desktop', targetDeviceId: d.nodeId, model: 'byok/fake' },
    });
    const run = json(await h.app.inject({ method: 'POST', url: '/v1/run', headers: owner.headers, payload: { agent: 'mine', prompt: 'hi' } })).data;
    const sock = await DeviceSocket.open(base, d.token);
    const delivered = await sock.run(run.runId);
    sock.send({ type: 'accept', runId: run.runId });
    await until(
      'running',
      async () => json(await h.app.inject({ method: 'GET', url: `/v1/runs/${run.runId}`, headers: owner.headers })).data.status === 'running',
    );
    fake.script({ text: 'hello from my key', usage: { prompt: 3, completion: 4 } });
    const res = await fetch(`${base}/v1/runmesh/runs/${run.runId}/model`, {
      method: 'POST',
      headers: { authorization: `Bearer ${d.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ messages: delivered.messages }),
    });
    expect(await res.text()).toContain('hello from my key');
    expect(fake.requests.at(-1)!.headers.authorization).toBe('Bearer sk-users-own-key');
    const usage = await h.deps.db.kysely.selectFrom('model_usage').selectAll().where('run_id', '=', run.runId).execute();
    expect(usage).toEqual([expect.objectContaining({ tier: 'byok', cost_micros: 0, input_tokens: 3, output_tokens: 4 })]);
    sock.close();
  });
});
