import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DeviceApi } from './api.js';
import { WorkspaceHost } from './host.js';
import { type DeviceRun, runDeviceRun } from './loop.js';

interface Frame {
  type: string;
  runId: string;
  sequenceNumber: number;
  payload?: Record<string, unknown>;
  [k: string]: unknown;
}

/** A loopback stand-in for the server's model route and thread-events route. */
async function fakeServer(turns: Array<Array<Record<string, unknown>>>, opts: { conflictAfter?: number; failFirstEvent?: boolean } = {}) {
  const frames: Frame[] = [];
  const modelBodies: Array<Record<string, unknown>> = [];
  let failed = false;
  let durableCount = 0;
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const json = body ? JSON.parse(body) : {};
      expect(req.headers.authorization).toBe('Bearer hgd_test');
      if (req.method === 'POST' && /^\/v1\/runmesh\/runs\/[^/]+\/model$/.test(req.url!)) {
        modelBodies.push(json);
        const script = turns[modelBodies.length - 1] ?? [{ type: 'error', error: { code: 'x', message: 'no more turns scripted' } }];
        res.writeHead(200, { 'content-type': 'application/x-ndjson' });
        for (const line of [{ type: 'start', model: 'fake' }, ...script]) res.write(`${JSON.stringify(line)}\n`);
        return void res.end();
      }
      if (req.method === 'POST' && req.url === '/v1/thread-events') {
        const frame = json.frame as Frame;
        expect(json.threadId).toBe('thr_1');
        if (opts.failFirstEvent && !failed && frame.payload) {
          failed = true;
          frames.push({ ...frame, failedWith503: true });
          return void res
            .writeHead(503, { 'content-type': 'application/json' })
            .end(JSON.stringify({ error: { code: 'unavailable', message: 'try again' } }));
        }
        frames.push(frame);
        if (!frame.payload) return void res.writeHead(202).end();
        durableCount++;
        if (opts.conflictAfter !== undefined && durableCount > opts.conflictAfter)
          return void res
            .writeHead(409, { 'content-type': 'application/json' })
            .end(JSON.stringify({ error: { code: 'invalid_state', message: 'cancelled' } }));
        return void res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ data: { accepted: true, duplicate: false, sequence: durableCount } }));
      }
      res.writeHead(404).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, frames, modelBodies, close: () => new Promise((r) => server.close(r)) };
}

const run = (tools = ['exec_command']): DeviceRun => ({
  runId: 'run_1',
  threadId: 'thr_1',
  rolloutId: 'rol_1',
  agent: { slug: 'helper', instructions: 'Be brief.', tools, config: { maxTurns: 5 } },
  messages: [{ role: 'user', content: 'make out.txt' }],
});

const usage = { inputTokens: 10, outputTokens: 5, totalTokens: 15, cachedInputTokens: 0, reasoningTokens: 0 };

describe('the device agent loop', () => {
  let ws: string;
  let host: WorkspaceHost;
  let server: Awaited<ReturnType<typeof fakeServer>> | null = null;
  beforeEach(async () => {
    ws = await fs.mkdtemp(path.join(os.tmpdir(), 'hangar-loop-'));
    host = await WorkspaceHost.open(ws);
  });
  afterEach(async () => {
    await server?.close();
    server = null;
    await host.dispose();
    await fs.rm(ws, { recursive: true, force: true });
  });

  const deps = (url: string, signal = new AbortController().signal) => ({
    api: new DeviceApi({ url, token: 'hgd_test', backoffMs: 20 }),
    host,
    home: host.workspace,
    tmp: host.tmp,
    signal,
    kill: (pid: number) => host.kill(pid),
  });

  it('calls a tool, feeds its result back, answers, and numbers its durable frames 1..n', async () => {
    server = await fakeServer([
      [
        { type: 'text-delta', text: 'Writing ' },
        { type: 'text-delta', text: 'it.' },
        { type: 'tool-call', id: 'call_1', name: 'exec_command', input: { cmd: 'echo hi > out.txt && cat out.txt' } },
        { type: 'finish', finishReason: 'tool-calls', usage },
      ],
      [
        { type: 'text-delta', text: 'do' },
        { type: 'text-delta', text: 'ne' },
        { type: 'finish', finishReason: 'stop', usage },
      ],
    ]);
    const end = await runDeviceRun(run(), deps(server.url));
    expect(end).toMatchObject({ kind: 'finished', status: 'completed', iterations: 2, error: null });
    expect(await fs.readFile(path.join(ws, 'out.txt'), 'utf8')).toBe('hi\n');

    const durable = server.frames.filter((f) => f.payload);
    expect(durable.map((f) => [f.type, f.sequenceNumber])).toEqual([
      ['assistant_message', 1],
      ['tool_call', 2],
      ['tool_result', 3],
      ['assistant_message', 4],
      ['run_completed', 5],
    ]);
    expect(durable[0]!.payload).toMatchObject({ text: 'Writing it.' });
    expect(durable[1]!.payload).toEqual({ toolCallId: 'call_1', name: 'exec_command', input: { cmd: 'echo hi > out.txt && cat out.txt' } });
    expect(durable[2]!.payload).toMatchObject({ toolCallId: 'call_1', name: 'exec_command', isError: false });
    expect(durable[2]!.payload!.output).toContain('hi');
    expect(durable[3]!.payload).toMatchObject({ text: 'done' });
    expect(durable[4]!.payload).toEqual({
      runId: 'run_1',
      status: 'completed',
      usage: { ...usage, inputTokens: 20, outputTokens: 10, totalTokens: 30 },
      iterations: 2,
      error: null,
    });
    for (const f of server.frames) expect(f).toMatchObject({ runId: 'run_1', rolloutId: 'rol_1' });

    // Live frames: coalesced deltas, the tool's start, output and completion, each carrying the last durable counter.
    const live = server.frames.filter((f) => !f.payload);
    const deltas = live.filter((f) => f.type === 'assistant_message_delta').map((f) => f.delta);
    expect(deltas.join('')).toBe('Writing it.done');
    expect(live.map((f) => f.type)).toEqual(expect.arrayContaining(['tool_call_started', 'tool_output_delta', 'tool_call_completed']));
    expect(live.find((f) => f.type === 'tool_call_started')).toMatchObject({ toolCallId: 'call_1', name: 'exec_command', sequenceNumber: 2 });
    for (const f of live) expect(f.sequenceNumber).toBeGreaterThanOrEqual(1);

    // The model saw its own tool call and the result, in the AI SDK's message shape, and the tool's JSON Schema.
    expect(server.modelBodies[0]).toMatchObject({ system: 'Be brief.', tools: [{ name: 'exec_command' }] });
    expect((server.modelBodies[0]!.tools as Array<{ parameters: unknown }>)[0]!.parameters).toMatchObject({ type: 'object', required: ['cmd'] });
    const second = server.modelBodies[1]!.messages as Array<{ role: string; content: unknown }>;
    expect(second.map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
    expect(second[1]!.content).toEqual([
      { type: 'text', text: 'Writing it.' },
      { type: 'tool-call', toolCallId: 'call_1', toolName: 'exec_command', input: { cmd: 'echo hi > out.txt && cat out.txt' } },
    ]);
    expect(second[2]!.content).toEqual([
      { type: 'tool-result', toolCallId: 'call_1', toolName: 'exec_command', output: { type: 'text', value: expect.stringContaining('hi') } },
    ]);
  });

  it('retries a durable frame after a 5xx with the same counter', async () => {
    server = await fakeServer(
      [
        [
          { type: 'text-delta', text: 'hello' },
          { type: 'finish', usage },
        ],
      ],
      { failFirstEvent: true },
    );
    const end = await runDeviceRun(run(), deps(server.url));
    expect(end).toMatchObject({ kind: 'finished', status: 'completed' });
    const durable = server.frames.filter((f) => f.payload);
    expect(durable.map((f) => [f.type, f.sequenceNumber, !!f.failedWith503])).toEqual([
      ['assistant_message', 1, true],
      ['assistant_message', 1, false],
      ['run_completed', 2, false],
    ]);
  });

  it('finishes failed with the model error, and max_turns when out of turns', async () => {
    server = await fakeServer([[{ type: 'error', error: { code: 'provider_error', message: 'the provider is down' } }]]);
    expect(await runDeviceRun(run(), deps(server.url))).toMatchObject({ kind: 'finished', status: 'failed', error: 'the provider is down' });
    expect(server.frames.filter((f) => f.payload).at(-1)).toMatchObject({ type: 'run_completed', sequenceNumber: 1, payload: { status: 'failed' } });
    await server.close();

    const call = (i: number) => [
      { type: 'tool-call', id: `c${i}`, name: 'exec_command', input: { cmd: 'true' } },
      { type: 'finish', usage },
    ];
    server = await fakeServer([call(1), call(2)]);
    const r = run();
    r.agent.config.maxTurns = 2;
    expect(await runDeviceRun(r, deps(server.url))).toMatchObject({ kind: 'finished', status: 'max_turns', iterations: 2 });
    expect(server.frames.filter((f) => f.payload).at(-1)).toMatchObject({
      type: 'run_completed',
      sequenceNumber: 5,
      payload: { status: 'max_turns' },
    });
  });

  it('stops at a 409 and on cancel, killing its processes and posting nothing more', async () => {
    server = await fakeServer(
      [
        [
          { type: 'tool-call', id: 'c1', name: 'exec_command', input: { cmd: 'true' } },
          { type: 'finish', usage },
        ],
      ],
      {
        conflictAfter: 0,
      },
    );
    expect(await runDeviceRun(run(), deps(server.url))).toMatchObject({ kind: 'stopped' });
    expect(server.frames.filter((f) => f.payload).map((f) => f.type)).toEqual(['tool_call']);
    await server.close();

    server = await fakeServer([
      [
        { type: 'tool-call', id: 'c1', name: 'exec_command', input: { cmd: 'echo $$ > pid; sleep 30' } },
        { type: 'finish', usage },
      ],
    ]);
    const ac = new AbortController();
    const pending = runDeviceRun(run(), deps(server.url, ac.signal));
    let pid = 0;
    for (let i = 0; i < 100 && !pid; i++) {
      await new Promise((r) => setTimeout(r, 50));
      pid = Number(await fs.readFile(path.join(ws, 'pid'), 'utf8').catch(() => '0'));
    }
    ac.abort('cancelled by the user');
    expect(await pending).toEqual({ kind: 'stopped', reason: 'cancelled by the user' });
    const types = server.frames.filter((f) => f.payload).map((f) => f.type);
    expect(types).toEqual(['tool_call']);
    await new Promise((r) => setTimeout(r, 100));
    expect(() => process.kill(pid, 0)).toThrow();
  });
});
