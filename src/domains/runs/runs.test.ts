import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { linkDevice } from '../../../test/runmesh.js';
import { securitySuite } from '../../../test/security.js';
import { acquireRunLock, activeRun, releaseRunLock } from '../threads/index.js';
import { expectError, readSse, until } from '../../../test/helpers.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const RESULT_FIELDS = [
  'agent',
  'createdAt',
  'error',
  'executionMode',
  'finishedAt',
  'iterations',
  'model',
  'result',
  'rolloutId',
  'runId',
  'sandboxId',
  'status',
  'targetDeviceId',
  'threadId',
  'usage',
];

interface ThreadEvent {
  sequence: number;
  rolloutId: string;
  threadId: string;
  runId: string | null;
  type: string;
  payload: any;
}

function client(h: () => Harness) {
  const call = (actor: Actor, method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: unknown) =>
    h().app.inject({ method, url, headers: actor.headers, payload: payload as object });
  const agent = async (actor: Actor, body: Record<string, unknown>) => {
    const res = await call(actor, 'POST', '/v1/agents', body);
    expect(res.statusCode, res.body).toBe(201);
    return json(res).data;
  };
  const run = (actor: Actor, body: Record<string, unknown>) => call(actor, 'POST', '/v1/run', body);
  /** A run that must answer 200; its result. */
  const ran = async (actor: Actor, body: Record<string, unknown>) => {
    const res = await run(actor, body);
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data;
  };
  const events = async (actor: Actor, threadId: string): Promise<ThreadEvent[]> => {
    const res = await call(actor, 'GET', `/v1/threads/${threadId}/events?limit=500`);
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data.events;
  };
  const runEvents = async (actor: Actor, threadId: string, runId: string) => (await events(actor, threadId)).filter((e) => e.runId === runId);
  const activity = async (actor: Actor, slug: string) => {
    const res = await call(actor, 'GET', `/v1/agents/${slug}/activity?limit=200`);
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data.events as { eventType: string; agentRunId?: string; status: string; summary: string }[];
  };
  const putSecret = async (actor: Actor, name: string, value: string) => {
    const res = await call(actor, 'POST', '/v1/secrets', { name, value });
    expect(res.statusCode, res.body).toBe(201);
  };
  const usageRows = (runId: string) => h().deps.db.kysely.selectFrom('model_usage').selectAll().where('run_id', '=', runId).execute();
  return { call, agent, run, ran, events, runEvents, activity, putSecret, usageRows };
}

describe('runs on a configured provider', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let admin: Actor;
  let base: string;
  const c = client(() => h);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness({ HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_OPENAI_MODELS: 'm1' });
    admin = await createOrgAdmin(h);
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    await c.agent(admin, { slug: 'plain', model: 'm1', instructions: 'You are terse.' });
    await c.agent(admin, {
      slug: 'coder',
      executionMode: 'in_sandbox',
      model: 'm1',
      instructions: 'You write code.',
      tools: ['exec_command', 'apply_patch', 'write_stdin'],
    });
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  /** POST /v1/run over the socket with `stream: true`. */
  const streamRun = (actor: Actor, body: Record<string, unknown>, signal?: AbortSignal) =>
    fetch(`${base}/v1/run`, {
      method: 'POST',
      headers: { ...actor.headers, 'content-type': 'application/json' },
      body: JSON.stringify({ ...body, stream: true }),
      signal,
    });

  describe('a plain answer with a managed agent', () => {
    let first: any;

    it('answers 200 with the whole run result, the usage as the provider reported it', async () => {
      fake.script({ text: ['Hello', ' there'], usage: { prompt: 12, completion: 7, cached: 4, reasoning: 2 } });
      const res = await c.run(admin, { agent: 'plain', prompt: 'Say hello' });
      expect(res.statusCode, res.body).toBe(200);
      const body = json(res);
      expect(Object.keys(body)).toEqual(expect.arrayContaining(['data']));
      first = body.data;
      expect(Object.keys(first).sort()).toEqual(RESULT_FIELDS);
      expect(first.runId).toMatch(UUID);
      expect(first).toMatchObject({
        agent: 'plain',
        sandboxId: null,
        targetDeviceId: null,
        executionMode: 'managed',
        model: 'm1',
        status: 'completed',
        result: 'Hello there',
        error: null,
        iterations: 1,
        usage: { promptTokens: 12, completionTokens: 7, totalTokens: 19, inputTokens: 12, outputTokens: 7, cachedInputTokens: 4, reasoningTokens: 2 },
      });
      expect(first.threadId).toMatch(/^thr_/);
      expect(first.rolloutId).toMatch(/^rol_/);
      expect(Date.parse(first.createdAt)).not.toBeNaN();
      expect(Date.parse(first.finishedAt)).toBeGreaterThanOrEqual(Date.parse(first.createdAt));
    });

    it('gives the model the agent’s instructions as the system message and the prompt as the user message', async () => {
      const req = fake.requests.at(-1)!;
      expect(req.headers.authorization).toBe('Bearer sk-platform');
      expect(req.body.model).toBe('m1');
      expect(req.body.messages).toEqual([
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Say hello' },
      ]);
    });

    it('opened a new thread whose events tell the run', async () => {
      const thread = await c.call(admin, 'GET', `/v1/threads/${first.threadId}`);
      expect(thread.statusCode, thread.body).toBe(200);
      expect(json(thread).data).toMatchObject({
        id: first.threadId,
        ownerUserId: admin.userId,
        executionMode: 'managed',
        activeRolloutId: first.rolloutId,
      });
      const events = await c.events(admin, first.threadId);
      expect(events.map((e) => e.type)).toEqual(['run_started', 'user_message', 'assistant_message', 'run_completed']);
      for (const e of events) expect(e.runId).toBe(first.runId);
      expect(events[0]!.payload).toMatchObject({ runId: first.runId, agent: 'plain', model: 'm1', executionMode: 'managed', sandboxId: null });
      expect(events[1]!.payload.text).toBe('Say hello');
      expect(events[2]!.payload.text).toBe('Hello there');
      expect(events[3]!.payload).toMatchObject({ status: 'completed', usage: first.usage, iterations: 1, error: null });
    });

    it('GET /v1/runs/{runId} returns the same result', async () => {
      const res = await c.call(admin, 'GET', `/v1/runs/${first.runId}`);
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res).data).toEqual(first);
    });

    it('records the model usage of the run, and its activity', async () => {
      const rows = await c.usageRows(first.runId);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({
        source: 'run',
        run_id: first.runId,
        org_id: admin.orgId,
        user_id: admin.userId,
        model: 'm1',
        tier: 'platform',
        input_tokens: 12,
        output_tokens: 7,
        cached_input_tokens: 4,
        reasoning_tokens: 2,
      });
      const activity = (await c.activity(admin, 'plain')).filter((e) => e.agentRunId === first.runId);
      expect(activity.map((e) => e.eventType).sort()).toEqual(['agent.run.completed', 'agent.run.started']);
    });

    it('a second run on the thread sends the conversation so far to the model', async () => {
      fake.script({ text: 'Fine, thanks' });
      const second = await c.ran(admin, { agent: 'plain', prompt: 'How are you?', threadId: first.threadId });
      expect(second).toMatchObject({ threadId: first.threadId, status: 'completed', result: 'Fine, thanks' });
      expect(second.runId).not.toBe(first.runId);
      expect(fake.requests.at(-1)!.body.messages).toEqual([
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Say hello' },
        { role: 'assistant', content: 'Hello there' },
        { role: 'user', content: 'How are you?' },
      ]);
      const types = (await c.events(admin, first.threadId)).map((e) => e.type);
      expect(types).toEqual([
        'run_started',
        'user_message',
        'assistant_message',
        'run_completed',
        'run_started',
        'user_message',
        'assistant_message',
        'run_completed',
      ]);
    });

    it('takes messages (their parts or content) and a prompt together, the prompt last', async () => {
      fake.script({ text: 'noted' });
      const r = await c.ran(admin, {
        agent: 'plain',
        messages: [
          {
            parts: [
              { type: 'text', text: 'First ' },
              { type: 'text', text: 'part' },
            ],
          },
          { content: 'Second' },
        ],
        prompt: 'Third',
      });
      const text = 'First part\n\nSecond\n\nThird';
      expect(fake.requests.at(-1)!.body.messages.at(-1)).toEqual({ role: 'user', content: text });
      const events = await c.events(admin, r.threadId);
      expect(events.find((e) => e.type === 'user_message')!.payload.text).toBe(text);
    });

    it('config.temperature and config.maxTokens reach the provider', async () => {
      fake.script({ text: 'cool' });
      await c.ran(admin, { agent: 'plain', prompt: 'Be cool', config: { temperature: 0.3, maxTokens: 77 } });
      expect(fake.requests.at(-1)!.body).toMatchObject({ temperature: 0.3, max_tokens: 77 });
    });
  });

  it('streams the run over Server-Sent Events, durable frames in sequence, then the result', async () => {
    fake.script({ reasoning: ['Let me ', 'think'], text: ['One', ' two', ' three'], usage: { prompt: 9, completion: 6, reasoning: 2 } });
    const res = await streamRun(admin, { agent: 'plain', prompt: 'Count' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = await readSse(res);
    const names = events.map((e) => e.event);
    expect(names[0]).toBe('run_started');
    expect(names[1]).toBe('user_message');
    expect(names.slice(-3)).toEqual(['assistant_message', 'run_completed', 'result']);
    const middle = names.slice(2, -3);
    expect(middle).toEqual([
      'assistant_thinking_delta',
      'assistant_thinking_delta',
      'assistant_message_delta',
      'assistant_message_delta',
      'assistant_message_delta',
    ]);
    const thinking = events
      .filter((e) => e.event === 'assistant_thinking_delta')
      .map((e) => e.data.delta)
      .join('');
    expect(thinking).toBe('Let me think');
    expect(events.filter((e) => e.event === 'assistant_message_delta').map((e) => e.data.delta)).toEqual(['One', ' two', ' three']);

    const durable = events.filter((e) => ['run_started', 'user_message', 'assistant_message', 'run_completed'].includes(e.event));
    const seqs = durable.map((e) => e.data.sequence);
    expect(seqs.every((s) => Number.isInteger(s))).toBe(true);
    expect(seqs).toEqual([seqs[0], seqs[0] + 1, seqs[0] + 2, seqs[0] + 3]);
    for (const e of events.filter((x) => x.event.endsWith('_delta'))) expect(e.data.sequence).toBeUndefined();
    expect(durable[2]!.data.payload).toMatchObject({ text: 'One two three', reasoning: 'Let me think' });

    const result = events.at(-1)!.data;
    expect(result).toMatchObject({
      status: 'completed',
      result: 'One two three',
      iterations: 1,
      usage: { inputTokens: 9, outputTokens: 6, reasoningTokens: 2 },
    });
    expect(durable[0]!.data.runId).toBe(result.runId);
    expect(durable[3]!.data.payload).toMatchObject({ status: 'completed', iterations: 1 });
    // What the stream said is what the thread kept.
    const stored = await c.events(admin, result.threadId);
    expect(stored.map((e) => [e.sequence, e.type])).toEqual(durable.map((e) => [e.data.sequence, e.event]));
  });

  describe('an in_sandbox agent’s tool loop', () => {
    let first: any;
    const program = 'print("hello from the sandbox")';
    const createPatch = ['--- /dev/null', '+++ hello.py', '@@ -0,0 +1 @@', `+${program}`, ''].join('\n');

    it('applies a patch, runs the program, answers, in three model turns', async () => {
      const before = fake.requests.length;
      fake.script(
        { toolCalls: [{ id: 'call_patch', name: 'apply_patch', arguments: JSON.stringify({ patch: createPatch }) }] },
        { toolCalls: [{ id: 'call_exec', name: 'exec_command', arguments: JSON.stringify({ cmd: 'python3 hello.py' }) }] },
        { text: 'The program printed its greeting.' },
      );
      first = await c.ran(admin, { agent: 'coder', prompt: 'Write hello.py and run it' });
      expect(first).toMatchObject({
        status: 'completed',
        executionMode: 'in_sandbox',
        iterations: 3,
        result: 'The program printed its greeting.',
        error: null,
      });
      expect(first.sandboxId).toMatch(/^sbx_/);
      expect(fake.requests.length - before).toBe(3);

      const events = await c.events(admin, first.threadId);
      expect(events.map((e) => e.type)).toEqual([
        'run_started',
        'user_message',
        'tool_call',
        'tool_result',
        'tool_call',
        'tool_result',
        'assistant_message',
        'run_completed',
      ]);
      expect(events[0]!.payload.sandboxId).toBe(first.sandboxId);
      expect(events[2]!.payload).toMatchObject({ toolCallId: 'call_patch', name: 'apply_patch', input: { patch: createPatch } });
      expect(events[3]!.payload).toMatchObject({ toolCallId: 'call_patch', name: 'apply_patch', isError: false });
      expect(events[4]!.payload).toMatchObject({ toolCallId: 'call_exec', name: 'exec_command', input: { cmd: 'python3 hello.py' } });
      expect(events[5]!.payload).toMatchObject({ toolCallId: 'call_exec', isError: false });
      expect(events[5]!.payload.output).toContain('exit code 0');
      expect(events[5]!.payload.output).toContain('hello from the sandbox');
      expect(events[7]!.payload).toMatchObject({ status: 'completed', iterations: 3 });
      // Each tool execution is counted for billing.
      const counted = await h.deps.db.kysely
        .selectFrom('tool_executions')
        .selectAll()
        .where('run_id', '=', first.runId)
        .orderBy('created_at')
        .execute();
      expect(counted.map((t) => [t.tool, t.status])).toEqual([
        ['apply_patch', 'completed'],
        ['exec_command', 'completed'],
      ]);
    });

    it('the model got each tool’s result in its next request', async () => {
      const [r1, r2, r3] = fake.requests.slice(-3).map((r) => r.body);
      expect(r1.tools.map((t: any) => t.function.name).sort()).toEqual(['apply_patch', 'exec_command', 'write_stdin']);
      expect(r1.messages.some((m: any) => m.role === 'tool')).toBe(false);
      const tool2 = r2.messages.filter((m: any) => m.role === 'tool');
      expect(tool2).toHaveLength(1);
      expect(tool2[0].tool_call_id).toBe('call_patch');
      expect(tool2[0].content).toContain('applied');
      const assistant2 = r2.messages.find((m: any) => m.role === 'assistant');
      expect(assistant2.tool_calls[0]).toMatchObject({ id: 'call_patch', function: { name: 'apply_patch' } });
      const tool3 = r3.messages.filter((m: any) => m.role === 'tool');
      expect(tool3.map((m: any) => m.tool_call_id)).toEqual(['call_patch', 'call_exec']);
      expect(tool3[1].content).toContain('hello from the sandbox');
    });

    it('the thread’s new sandbox is recorded in the activity log, on the thread', async () => {
      const res = await c.call(admin, 'GET', `/v1/activity?event_type=thread.sandbox.attached&thread_id=${first.threadId}`);
      expect(res.statusCode, res.body).toBe(200);
      const events = json(res).data.events;
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({
        resourceType: 'thread',
        resourceId: first.threadId,
        threadId: first.threadId,
        sandboxId: first.sandboxId,
        status: 'completed',
      });
    });

    it('the sandbox exists and the file is in it', async () => {
      const sbx = await c.call(admin, 'GET', `/v1/sandboxes/${first.sandboxId}`);
      expect(sbx.statusCode, sbx.body).toBe(200);
      expect(json(sbx).data.state).toBe('running');
      const cat = await c.call(admin, 'POST', `/v1/sandboxes/${first.sandboxId}/commands`, { cmd: 'cat hello.py' });
      expect(cat.statusCode, cat.body).toBe(200);
      expect(json(cat).data.stdout).toBe(`${program}\n`);
    });

    it('a second run reuses the sandbox; a patch that does not apply and a foreign pid are error results', async () => {
      const badPatch = ['--- a/hello.py', '+++ b/hello.py', '@@ -1 +1 @@', '-print("something else")', '+print("patched")', ''].join('\n');
      fake.script(
        { toolCalls: [{ id: 'call_bad', name: 'apply_patch', arguments: JSON.stringify({ patch: badPatch }) }] },
        { toolCalls: [{ id: 'call_stdin', name: 'write_stdin', arguments: JSON.stringify({ pid: 1, data: 'hi\n' }) }] },
        { text: 'Both failed.' },
      );
      const second = await c.ran(admin, { agent: 'coder', prompt: 'Patch it', threadId: first.threadId });
      expect(second).toMatchObject({ status: 'completed', iterations: 3, sandboxId: first.sandboxId, threadId: first.threadId });

      const events = await c.runEvents(admin, first.threadId, second.runId);
      const results = events.filter((e) => e.type === 'tool_result');
      expect(results.map((e) => e.payload.toolCallId)).toEqual(['call_bad', 'call_stdin']);
      expect(results[0]!.payload.isError).toBe(true);
      expect(results[0]!.payload.output).toContain('does not apply');
      expect(results[0]!.payload.output).toContain('nothing was changed');
      expect(results[1]!.payload.isError).toBe(true);
      expect(results[1]!.payload.output).toContain('pid 1 is not a process this run started');

      // The model saw the failures as such.
      const tools = fake.requests.at(-1)!.body.messages.filter((m: any) => m.role === 'tool');
      expect(tools.map((m: any) => m.tool_call_id)).toEqual(['call_bad', 'call_stdin']);
      expect(tools[0].content).toContain('does not apply');

      const cat = await c.call(admin, 'POST', `/v1/sandboxes/${first.sandboxId}/commands`, { cmd: 'cat hello.py' });
      expect(json(cat).data.stdout).toBe(`${program}\n`);
      const failed = await c.call(admin, 'GET', `/v1/activity?event_type=tool.call.failed&agent_run_id=${second.runId}`);
      expect(failed.statusCode, failed.body).toBe(200);
      expect(
        json(failed)
          .data.events.map((e: any) => e.toolSlug)
          .sort(),
      ).toEqual(['apply_patch', 'write_stdin']);
    });

    it('stops at config.maxTurns when the model keeps calling tools', async () => {
      const before = fake.requests.length;
      const call = (id: string) => ({ toolCalls: [{ id, name: 'exec_command', arguments: JSON.stringify({ cmd: 'echo again' }) }] });
      fake.script(call('call_1'), call('call_2'));
      const r = await c.ran(admin, { agent: 'coder', prompt: 'Loop', threadId: first.threadId, config: { maxTurns: 2 } });
      expect(r).toMatchObject({ status: 'max_turns', iterations: 2, result: null });
      expect(r.error).toContain('maxTurns');
      expect(fake.requests.length - before).toBe(2);
      const events = await c.runEvents(admin, first.threadId, r.runId);
      expect(events.filter((e) => e.type === 'tool_result').map((e) => e.payload.output)).toEqual([
        expect.stringContaining('again'),
        expect.stringContaining('again'),
      ]);
      expect(events.at(-1)).toMatchObject({ type: 'run_completed', payload: { status: 'max_turns', iterations: 2 } });
      const activity = (await c.activity(admin, 'coder')).filter((e) => e.agentRunId === r.runId);
      expect(activity.map((e) => e.eventType).sort()).toEqual(['agent.run.failed', 'agent.run.started']);
    });

    it('a key with only agent:run runs it: the run makes and uses the thread’s sandbox as the thread’s owner', async () => {
      const runner: Actor = { ...admin, headers: { 'x-api-key': await keyFor(h, admin, ['agent:run']) } };
      fake.script(
        { toolCalls: [{ id: 'call_scoped', name: 'exec_command', arguments: JSON.stringify({ cmd: 'echo scoped-run' }) }] },
        { text: 'Done.' },
      );
      const r = await c.ran(runner, { agent: 'coder', prompt: 'Echo something' });
      expect(r).toMatchObject({ status: 'completed', iterations: 2, result: 'Done.' });
      expect(r.sandboxId).toMatch(/^sbx_/);
      expect(r.sandboxId).not.toBe(first.sandboxId); // a new thread, so a new sandbox
      const results = (await c.runEvents(admin, r.threadId, r.runId)).filter((e) => e.type === 'tool_result');
      expect(results.map((e) => [e.payload.isError, e.payload.output])).toEqual([[false, expect.stringContaining('scoped-run')]]);
      // The key itself still holds no sandbox scope: the sandbox is the admin's to see (the control), not the key's.
      expect((await c.call(admin, 'GET', `/v1/sandboxes/${r.sandboxId}`)).statusCode).toBe(200);
      expectError(await c.call(runner, 'GET', `/v1/sandboxes/${r.sandboxId}`), 403, 'forbidden');
      expect((await c.call(admin, 'DELETE', `/v1/sandboxes/${r.sandboxId}`)).statusCode).toBe(204);
    });
  });

  describe('provider failures', () => {
    it('a provider that drops the stream mid-answer fails the run', async () => {
      // Chunks spaced out, so the first ones reach the run before the connection drops (no retry after output).
      const before = fake.requests.length;
      fake.script({ text: ['a', 'b', 'c', 'd', 'e', 'f'], dropAfterChunks: 3, chunkDelayMs: 50 });
      const res = await c.run(admin, { agent: 'plain', prompt: 'Go' });
      expect(res.statusCode, res.body).toBe(200);
      const r = json(res).data;
      expect(r.status).toBe('failed');
      expect(r.result).toBeNull();
      expect(typeof r.error).toBe('string');
      expect(r.error.length).toBeGreaterThan(0);
      expect(fake.requests.length - before).toBe(1);
      expect(r.finishedAt).toBeTruthy();
      const events = await c.events(admin, r.threadId);
      expect(events.at(-1)).toMatchObject({ type: 'run_completed', payload: { status: 'failed', error: r.error } });
      expect(events.some((e) => e.type === 'assistant_message')).toBe(false);
      const activity = (await c.activity(admin, 'plain')).filter((e) => e.agentRunId === r.runId);
      expect(activity.map((e) => e.eventType).sort()).toEqual(['agent.run.failed', 'agent.run.started']);
      expect(activity.find((e) => e.eventType === 'agent.run.failed')!.summary).toBe(r.error);
      expect(json(await c.call(admin, 'GET', `/v1/runs/${r.runId}`)).data.status).toBe('failed');
    });

    it('a provider refusing the platform’s credentials fails the run, saying so, and is not the caller’s 401', async () => {
      fake.script({ status: 401, errorMessage: 'Incorrect API key provided' });
      const res = await c.run(admin, { agent: 'plain', prompt: 'Go' });
      expect(res.statusCode, res.body).not.toBe(401);
      expect(res.statusCode, res.body).toBe(200);
      const r = json(res).data;
      expect(r.status).toBe('failed');
      expect(r.error).toContain('refused the credentials');
      expect(r.error).toContain('m1');
      const events = await c.events(admin, r.threadId);
      expect(events.at(-1)).toMatchObject({ type: 'run_completed', payload: { status: 'failed' } });
    });
  });

  describe('cancelling', () => {
    it('a streaming client that disconnects cancels the run, the provider call and frees the thread', async () => {
      const abortedBefore = fake.aborted;
      fake.script({ text: Array.from({ length: 60 }, (_, i) => `w${i} `), chunkDelayMs: 300 });
      const controller = new AbortController();
      const res = await streamRun(admin, { agent: 'plain', prompt: 'Talk slowly' }, controller.signal);
      expect(res.status).toBe(200);
      const seen = await readSse(res, (e) => e.event === 'assistant_message_delta');
      const started = seen.find((e) => e.event === 'run_started')!.data;
      controller.abort();

      const runId = started.runId as string;
      const threadId = started.threadId as string;
      const run = await until('the run to end cancelled', async () => {
        const r = json(await c.call(admin, 'GET', `/v1/runs/${runId}`)).data;
        return r.status !== 'running' && r;
      });
      expect(run.status).toBe('cancelled');
      expect(run.error).toContain('cancelled');
      await until('the provider request to be aborted', () => fake.aborted > abortedBefore);
      // The run record turns terminal just before run_completed is appended and the lock released.
      const events = await until('run_completed in the thread', async () => {
        const all = await c.events(admin, threadId);
        return all.at(-1)?.type === 'run_completed' && all;
      });
      expect(events.at(-1)).toMatchObject({ runId, payload: { status: 'cancelled', error: 'the run was cancelled' } });
      expect(events.some((e) => e.type === 'assistant_message')).toBe(false);
      await until('the thread’s run lock to be released', async () => (await activeRun(h.deps, threadId)) === null);

      fake.script({ text: 'back again' });
      const next = await c.ran(admin, { agent: 'plain', prompt: 'Still there?', threadId });
      expect(next).toMatchObject({ status: 'completed', result: 'back again', threadId });
    });

    it('deleting the thread of a running run cancels the run first, then deletes the thread', async () => {
      fake.script({ text: Array.from({ length: 60 }, (_, i) => `w${i} `), chunkDelayMs: 300 });
      const controller = new AbortController();
      const res = await streamRun(admin, { agent: 'plain', prompt: 'Talk slowly' }, controller.signal);
      const seen = await readSse(res, (e) => e.event === 'assistant_message_delta');
      const { runId, threadId } = seen.find((e) => e.event === 'run_started')!.data as { runId: string; threadId: string };
      const frames: { type: string; runId?: string; payload?: unknown }[] = [];
      const ws = new WebSocket(`${base.replace('http:', 'ws:')}/v1/threads/${threadId}/events?api_key=${encodeURIComponent(admin.key)}`);
      ws.on('message', (d) => frames.push(JSON.parse(String(d))));
      try {
        await until('the snapshot', () => frames.some((f) => f.type === 'snapshot'));
        const del = await c.call(admin, 'DELETE', `/v1/threads/${threadId}`);
        expect(del.statusCode, del.body).toBe(204);
        expect(json(await c.call(admin, 'GET', `/v1/runs/${runId}`)).data.status).toBe('cancelled');
        expect((await c.call(admin, 'GET', `/v1/threads/${threadId}`)).statusCode).toBe(404);
        await until('thread_deleted', () => frames.some((f) => f.type === 'thread_deleted'));
        const types = frames.map((f) => f.type);
        expect(frames.find((f) => f.type === 'run_completed')).toMatchObject({ runId, payload: { status: 'cancelled' } });
        expect(types.indexOf('run_completed')).toBeLessThan(types.indexOf('thread_deleted'));
        expect(await activeRun(h.deps, threadId)).toBeNull();
      } finally {
        controller.abort();
        ws.close();
      }
    });

    it('a streaming client gone before the first frame (while the sandbox is made) cancels the run too', async () => {
      const known = new Set((await c.activity(admin, 'coder')).map((e) => e.agentRunId));
      const before = fake.requests.length;
      const controller = new AbortController();
      let answered = false;
      const pending = streamRun(admin, { agent: 'coder', prompt: 'Make a new sandbox' }, controller.signal).then(
        () => (answered = true),
        () => undefined,
      );
      // agent.run.started is recorded before the thread's sandbox is made, and the first frame comes after it.
      const runId = await until(
        'the run to start',
        async () => (await c.activity(admin, 'coder')).find((e) => e.eventType === 'agent.run.started' && !known.has(e.agentRunId))?.agentRunId,
        10_000,
      );
      controller.abort();
      await pending;
      expect(answered).toBe(false);
      const run = await until('the run to end', async () => {
        const r = json(await c.call(admin, 'GET', `/v1/runs/${runId}`)).data;
        return r.status !== 'running' && r;
      });
      expect(run).toMatchObject({ status: 'cancelled', result: null, error: 'the run was cancelled' });
      expect(fake.requests.length).toBe(before);
    });

    it('POST /v1/runs/{id}/cancel stops a running run; a finished one is 409 invalid_state', async () => {
      const thread = (await c.ran(admin, { agent: 'plain', prompt: 'Open a thread' })).threadId as string;
      const abortedBefore = fake.aborted;
      fake.script({ text: Array.from({ length: 60 }, (_, i) => `w${i} `), chunkDelayMs: 200 });
      const pending = c.run(admin, { agent: 'plain', prompt: 'Talk slowly', threadId: thread });
      const runId = await until('the run to start', async () => {
        const started = (await c.events(admin, thread)).filter((e) => e.type === 'run_started');
        return started.length === 2 && (started[1]!.payload.runId as string);
      });
      await until('the model to answer', () => fake.requests.at(-1)!.body.messages.at(-1).content === 'Talk slowly');

      const cancel = await c.call(admin, 'POST', `/v1/runs/${runId}/cancel`);
      expect(cancel.statusCode, cancel.body).toBe(200);
      expect(json(cancel).data).toMatchObject({ runId, status: 'cancelled' });
      const res = await pending;
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res).data).toMatchObject({ runId, status: 'cancelled', error: 'the run was cancelled' });
      await until('the provider request to be aborted', () => fake.aborted > abortedBefore);

      const again = expectError(await c.call(admin, 'POST', `/v1/runs/${runId}/cancel`), 409, 'invalid_state');
      expect(again.state).toBe('cancelled');
      const done = (await c.ran(admin, { agent: 'plain', prompt: 'Quick', threadId: thread })).runId;
      expect(expectError(await c.call(admin, 'POST', `/v1/runs/${done}/cancel`), 409, 'invalid_state').state).toBe('completed');
    });
  });

  it('a thread with an active run is 409 THREAD_BUSY naming it', async () => {
    const thread = (await c.ran(admin, { agent: 'plain', prompt: 'Open a thread' })).threadId as string;
    const before = fake.requests.length;
    const lock = await acquireRunLock(h.deps, thread, 'run_other');
    expect(lock.acquired).toBe(true);
    try {
      const err = expectError(await c.run(admin, { agent: 'plain', prompt: 'Again', threadId: thread }), 409, 'THREAD_BUSY');
      expect(err.activeRunId).toBe('run_other');
      const streamed = await streamRun(admin, { agent: 'plain', prompt: 'Again', threadId: thread });
      expect(streamed.status).toBe(409);
      expect(streamed.headers.get('content-type')).toContain('application/json');
      expect((await streamed.json()).error).toMatchObject({ code: 'THREAD_BUSY', activeRunId: 'run_other' });
      expect(fake.requests.length).toBe(before);
      expect((await c.events(admin, thread)).filter((e) => e.type === 'run_started')).toHaveLength(1);
    } finally {
      await releaseRunLock(h.deps, thread, 'run_other');
    }
    fake.script({ text: 'free now' });
    expect((await c.ran(admin, { agent: 'plain', prompt: 'Again', threadId: thread })).result).toBe('free now');
  });

  it('a non-streaming run over a real socket waits for its answer', async () => {
    fake.script({ text: ['slow', ' but', ' sure'], chunkDelayMs: 50 });
    const res = await fetch(`${base}/v1/run`, {
      method: 'POST',
      headers: { ...admin.headers, 'content-type': 'application/json' },
      body: JSON.stringify({ agent: 'plain', prompt: 'Take your time' }),
    });
    expect(res.status).toBe(200);
    expect((await res.json()).data).toMatchObject({ status: 'completed', result: 'slow but sure' });
  });

  describe('bring-your-own-key models in the default catalogue', () => {
    it('a run needs the secret, named in a 400; once created the model is available', async () => {
      await c.agent(admin, { slug: 'byok-default', model: 'byok/openai/gpt-4o-mini' });
      const before = fake.requests.length;
      const err = expectError(await c.run(admin, { agent: 'byok-default', prompt: 'Hi' }), 400, 'invalid_request');
      expect(err.message).toContain('OPENAI_API_KEY');
      expect(err.message).toContain('/v1/secrets');
      expect(fake.requests.length).toBe(before);
      const listed = async () =>
        json(await c.call(admin, 'GET', '/v1/models/available')).data.byok.find((m: any) => m.model === 'byok/openai/gpt-4o-mini');
      expect(await listed()).toMatchObject({ requiresSecret: 'OPENAI_API_KEY', available: false });
      await c.putSecret(admin, 'OPENAI_API_KEY', 'sk-user-own');
      expect(await listed()).toMatchObject({ requiresSecret: 'OPENAI_API_KEY', available: true });
    });
  });

  describe('input a run refuses', () => {
    it('an unknown agent is 404', async () => {
      const err = expectError(await c.run(admin, { agent: 'no-such-agent', prompt: 'Hi' }), 404, 'not_found');
      expect(err.message).toContain('no-such-agent');
    });

    it('an agent without a model is 400 saying how to set one', async () => {
      await c.agent(admin, { slug: 'modelless' });
      const err = expectError(await c.run(admin, { agent: 'modelless', prompt: 'Hi' }), 400, 'invalid_request');
      expect(err.message).toContain('has no model');
      expect(err.message).toContain('PATCH /v1/agents/modelless');
    });

    it('neither a prompt nor messages with text is 400', async () => {
      for (const body of [
        { agent: 'plain' },
        { agent: 'plain', messages: [] },
        { agent: 'plain', messages: [{ content: '  ' }] },
        { agent: 'plain', prompt: '' },
      ]) {
        const err = expectError(await c.run(admin, body), 400, 'invalid_request');
        expect(err.message, JSON.stringify(body)).toContain('prompt');
      }
    });

    it('unknown fields and out-of-range config are 400', async () => {
      expectError(await c.run(admin, { agent: 'plain', prompt: 'Hi', surprise: 1 }), 400, 'invalid_request');
      expectError(await c.run(admin, { agent: 'plain', prompt: 'Hi', config: { maxTurns: 0 } }), 400, 'invalid_request');
      expectError(await c.run(admin, { agent: 'plain', prompt: 'Hi', config: { temperature: 3 } }), 400, 'invalid_request');
    });

    it('an unknown thread is 404, and so is another member’s thread', async () => {
      expect(expectError(await c.run(admin, { agent: 'plain', prompt: 'Hi', threadId: 'thr_nope' }), 404, 'not_found').message).toContain('thr_nope');
      const member = await addOrgMember(h, admin, 'member');
      const other = await addOrgMember(h, admin, 'member');
      const theirs = (await c.ran(other, { agent: 'plain', prompt: 'Mine' })).threadId;
      const before = fake.requests.length;
      expectError(await c.run(member, { agent: 'plain', prompt: 'Hijack', threadId: theirs }), 404, 'not_found');
      expect(fake.requests.length).toBe(before);
      expect((await c.events(other, theirs)).filter((e) => e.type === 'user_message').map((e) => e.payload.text)).toEqual(['Mine']);
      // and a member cannot read another's run
      const runId = (await c.ran(other, { agent: 'plain', prompt: 'Mine too' })).runId;
      expectError(await c.call(member, 'GET', `/v1/runs/${runId}`), 404, 'not_found');
      expectError(await c.call(member, 'POST', `/v1/runs/${runId}/cancel`), 404, 'not_found');
    });

    it('an unknown run is 404', async () => {
      expectError(await c.call(admin, 'GET', '/v1/runs/00000000-0000-4000-8000-000000000000'), 404, 'not_found');
      expectError(await c.call(admin, 'POST', '/v1/runs/00000000-0000-4000-8000-000000000000/cancel'), 404, 'not_found');
    });

    it('a local-desktop agent’s run is registered for its device, with its opening frames in the thread', async () => {
      const { nodeId } = await linkDevice(h, admin, 'desk');
      await c.agent(admin, { slug: 'desk', executionMode: 'local-desktop', targetDeviceId: nodeId, model: 'm1' });
      const before = fake.requests.length;
      const r = await c.ran(admin, { agent: 'desk', prompt: 'Open my editor' });
      expect(r).toMatchObject({
        status: 'registered',
        executionMode: 'local-desktop',
        targetDeviceId: nodeId,
        sandboxId: null,
        result: null,
        iterations: 0,
      });
      expect(fake.requests.length).toBe(before);
      const events = await c.events(admin, r.threadId);
      expect(events.map((e) => e.type)).toEqual(['run_started', 'user_message']);
      expect(events[0]!.payload).toMatchObject({ runId: r.runId, targetDeviceId: nodeId, executionMode: 'local-desktop' });
      expect(events[1]!.payload.text).toBe('Open my editor');
      expect(json(await c.call(admin, 'GET', `/v1/runs/${r.runId}`)).data.status).toBe('registered');
    });

    it('an agent with web_search is 400: no search provider is configured', async () => {
      await c.agent(admin, { slug: 'searcher', model: 'm1', tools: ['web_search'] });
      const err = expectError(await c.run(admin, { agent: 'searcher', prompt: 'Search' }), 400, 'invalid_request');
      expect(err.message).toContain('no search provider');
      expect(err.message).toContain('web_search');
    });
  });
});

describe('runs on models from a models file', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let admin: Actor;
  let dir: string;
  const c = client(() => h);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    dir = mkdtempSync(path.join(tmpdir(), 'hangar-runs-models-'));
    const file = path.join(dir, 'models.json');
    writeFileSync(
      file,
      JSON.stringify({
        platform: [{ id: 'plat-a', provider: 'openai', pricing: { inputPerMTok: 1, outputPerMTok: 2 } }],
        byok: [{ id: 'byok/fake', provider: 'openai', model: 'x', baseUrl: fake.url, requiresSecret: 'FAKE_KEY' }],
      }),
    );
    h = await createHarness({ HANGAR_MODELS_FILE: file });
    admin = await createOrgAdmin(h);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a BYOK model runs on the caller’s key once the secret exists, and costs nothing', async () => {
    await c.agent(admin, { slug: 'mine', model: 'byok/fake', instructions: 'Use my key.' });
    const err = expectError(await c.run(admin, { agent: 'mine', prompt: 'Hi' }), 400, 'invalid_request');
    expect(err.message).toContain('FAKE_KEY');
    expect(fake.requests).toHaveLength(0);

    await c.putSecret(admin, 'FAKE_KEY', 'sk-users-own-key');
    const listed = json(await c.call(admin, 'GET', '/v1/models/available')).data.byok;
    expect(listed).toEqual([expect.objectContaining({ model: 'byok/fake', requiresSecret: 'FAKE_KEY', available: true })]);

    fake.script({ text: 'on your dime', usage: { prompt: 20, completion: 4 } });
    const r = await c.ran(admin, { agent: 'mine', prompt: 'Hi' });
    expect(r).toMatchObject({
      status: 'completed',
      result: 'on your dime',
      model: 'byok/fake',
      usage: { inputTokens: 20, outputTokens: 4, totalTokens: 24 },
    });
    expect(fake.requests).toHaveLength(1);
    expect(fake.requests[0]!.headers.authorization).toBe('Bearer sk-users-own-key');
    expect(fake.requests[0]!.body.model).toBe('x');
    expect(fake.requests[0]!.body.messages[0]).toEqual({ role: 'system', content: 'Use my key.' });
    const rows = await c.usageRows(r.runId);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      source: 'run',
      run_id: r.runId,
      tier: 'byok',
      model: 'byok/fake',
      cost_micros: 0,
      input_tokens: 20,
      output_tokens: 4,
    });
  });

  it('a platform model whose provider is not configured is 503 naming what to configure', async () => {
    await c.agent(admin, { slug: 'platformer', model: 'plat-a' });
    const err = expectError(await c.run(admin, { agent: 'platformer', prompt: 'Hi' }), 503, 'service_unavailable');
    expect(err.message).toContain('plat-a');
    expect(err.message).toContain('HANGAR_OPENAI_BASE_URL');
    expect(fake.requests).toHaveLength(1);
  });
});

let desks = 0;
/** A run of `owner`'s that calls no model on the server: a local-desktop agent's (on the owner's own key), registered. */
async function registeredRun(owner: Actor, h: Harness): Promise<string> {
  const slug = `desk-${++desks}`;
  const { nodeId } = await linkDevice(h, owner, slug);
  await h.app.inject({ method: 'POST', url: '/v1/secrets', headers: owner.headers, payload: { name: 'OPENAI_API_KEY', value: 'sk-test' } });
  const agent = await h.app.inject({
    method: 'POST',
    url: '/v1/agents',
    headers: owner.headers,
    payload: { slug, executionMode: 'local-desktop', targetDeviceId: nodeId, model: 'byok/openai/gpt-4o-mini' },
  });
  expect(agent.statusCode, agent.body).toBe(201);
  const res = await h.app.inject({ method: 'POST', url: '/v1/run', headers: owner.headers, payload: { agent: slug, prompt: 'hi' } });
  expect(res.statusCode, res.body).toBe(200);
  return json(res).data.runId;
}

securitySuite('runs', [
  { method: 'POST', url: () => '/v1/run', scope: 'agent:run', body: { agent: 'any', prompt: 'hi' } },
  { method: 'GET', url: async (o, h) => `/v1/runs/${await registeredRun(o, h)}`, scope: 'agent:read', crossOrg: true },
  { method: 'POST', url: async (o, h) => `/v1/runs/${await registeredRun(o, h)}/cancel`, scope: 'agent:run', crossOrg: true },
]);
