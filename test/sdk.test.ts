import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  AuthenticationError,
  ConflictError,
  ConnectionError,
  Hangar,
  HangarError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
  type ThreadFrame,
} from '@hangar/sdk';
import { WebSocket as UndiciWebSocket } from 'undici';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type WebSocket from 'ws';
import { appendDurable, type DurableInput } from '../src/domains/threads/index.js';
import { createIsolation } from '../src/platform/isolation/index.js';
import { FakeOpenAI } from './fakes/openai.js';
import { createHarness, createOrgAdmin, keyFor, type Actor, type Harness } from './harness.js';
import { isolationNeed, itNeeding } from './needs.js';

const isolation = await createIsolation();

/** A loopback server answering each request with the next scripted handler (the last one repeats). */
async function scriptedServer(...handlers: Array<(req: IncomingMessage, res: ServerResponse) => void>) {
  const seen: Array<{ method: string; url: string; at: number; authorization?: string }> = [];
  const server: Server = createServer((req, res) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', at: Date.now(), authorization: req.headers.authorization });
    req.resume();
    handlers[Math.min(seen.length - 1, handlers.length - 1)]!(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
const json =
  (status: number, body: unknown, headers: Record<string, string> = {}) =>
  (_req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  };
const rateLimited = (retryAfter: string) =>
  json(429, { error: { code: 'rate_limited', message: 'slow down', requestId: 'req_429' } }, { 'retry-after': retryAfter });

describe('@hangar/sdk against a running server', () => {
  let h: Harness;
  let fake: FakeOpenAI;
  let url: string;
  let a: Actor;
  let b: Actor;
  let hangar: Hangar;

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness({ HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_OPENAI_MODELS: 'm1' });
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    url = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    a = await createOrgAdmin(h, 'SDK Org A');
    b = await createOrgAdmin(h, 'SDK Org B');
    hangar = new Hangar({ apiKey: a.key, baseUrl: url });
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('takes its key from HANGAR_API_KEY, and refuses to start without one', async () => {
    vi.stubEnv('HANGAR_API_KEY', a.key);
    vi.stubEnv('HANGAR_BASE_URL', url);
    try {
      expect((await new Hangar().agents.list()).map((x) => x.slug)).toEqual([]);
      vi.stubEnv('HANGAR_API_KEY', '');
      expect(() => new Hangar({ baseUrl: url })).toThrow(/no API key/);
    } finally {
      vi.unstubAllEnvs();
    }
  });

  itNeeding(isolationNeed(isolation), 'execute runs a program and answers its output and exit code', async () => {
    const r = await hangar.execute({ language: 'python', code: 'import sys\nprint(input().upper())\nsys.exit(3)', stdin: 'hello' });
    expect(r.language).toBe('python');
    expect(r.run).toMatchObject({ stdout: 'HELLO\n', code: 3 });
  });

  it('sandboxes: create, commands streaming output as it comes, files as bytes and text, pause, resume, connect, list, destroy', async () => {
    const sbx = await hangar.sandboxes.create({ template: 'base-ubuntu', name: 'sdk-box', network: false });
    try {
      expect(sbx.id).toMatch(/^sbx_/);
      expect(sbx.state).toBe('running');

      // Output reaches the callbacks while the command still runs: "one" arrives before "two" is written.
      const seen: Array<{ stream: string; data: string; at: number }> = [];
      const started = Date.now();
      const r = await sbx.commands.run('echo one; echo oops >&2; sleep 1.5; echo two; exit 4', {
        onStdout: (data) => seen.push({ stream: 'out', data, at: Date.now() }),
        onStderr: (data) => seen.push({ stream: 'err', data, at: Date.now() }),
      });
      expect(r).toMatchObject({ exitCode: 3 + 1, stdout: 'one\ntwo\n', stderr: 'oops\n', timedOut: false });
      expect(r.pid).toBeGreaterThan(0);
      const one = seen.find((s) => s.data.includes('one'))!;
      const two = seen.find((s) => s.data.includes('two'))!;
      expect(one.at - started).toBeLessThan(two.at - started - 1000);
      expect(seen.some((s) => s.stream === 'err' && s.data === 'oops\n')).toBe(true);

      // cwd, env and a timeout the sandbox enforces.
      const env = await sbx.commands.run('pwd; echo $GREETING', { cwd: '/tmp', env: { GREETING: 'hi' } });
      expect(env.stdout).toBe('/tmp\nhi\n');
      const slow = await sbx.commands.run('sleep 10', { timeoutMs: 300 });
      expect(slow.timedOut).toBe(true);

      // Files: bytes intact (not UTF-8), text, listing.
      const bytes = new Uint8Array([0, 1, 2, 250, 251, 255, 10, 13]);
      const entry = await sbx.files.write('data/blob.bin', bytes);
      expect(entry).toMatchObject({ path: '/home/user/data/blob.bin', size: 8, type: 'file' });
      expect(await sbx.files.read('data/blob.bin', { format: 'bytes' })).toEqual(bytes);
      await sbx.files.write('data/note.txt', 'héllo\n');
      expect(await sbx.files.read('data/note.txt')).toBe('héllo\n');
      expect((await sbx.commands.run('wc -c < data/blob.bin')).stdout.trim()).toBe('8');
      expect((await sbx.files.list('data')).map((e) => e.name)).toEqual(['blob.bin', 'note.txt']);
      await expect(sbx.files.read('data/missing.txt')).rejects.toBeInstanceOf(NotFoundError);

      // Another organization's key: the sandbox does not exist for it (the owner's calls above are the control).
      const other = new Hangar({ apiKey: b.key, baseUrl: url });
      await expect(other.sandboxes.get(sbx.id)).rejects.toBeInstanceOf(NotFoundError);
      expect((await other.sandboxes.list()).data).toEqual([]);

      await sbx.pause();
      expect(sbx.state).toBe('paused');
      const refused = await sbx.commands.run('true').catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(ConflictError);
      expect((refused as ConflictError).code).toBe('invalid_state');
      // connect resumes a paused sandbox and the files are still there.
      const again = await hangar.sandboxes.connect(sbx.id);
      expect(again.state).toBe('running');
      expect(await again.files.read('data/note.txt')).toBe('héllo\n');
      await again.pause();
      expect((await sbx.resume()).state).toBe('running');

      const listed = await hangar.sandboxes.list({ limit: 10 });
      expect(listed.data.map((s) => s.id)).toContain(sbx.id);
      expect(listed.hasMore).toBe(false);
    } finally {
      await sbx.destroy();
    }
    expect((await hangar.sandboxes.get(sbx.id)).state).toBe('destroyed');
  });

  it('agents: create, get, list, update, delete', async () => {
    const created = await hangar.agents.create({ slug: 'sdk-agent', model: 'm1', instructions: 'Be brief.' });
    expect(created).toMatchObject({ slug: 'sdk-agent', model: 'm1', executionMode: 'managed' });
    expect((await hangar.agents.get('sdk-agent')).id).toBe(created.id);
    expect((await hangar.agents.list()).map((x) => x.slug)).toContain('sdk-agent');
    const updated = await hangar.agents.update('sdk-agent', { instructions: 'Be very brief.', name: 'SDK agent' });
    expect(updated).toMatchObject({ instructions: 'Be very brief.', name: 'SDK agent' });
    await hangar.agents.delete('sdk-agent');
    const gone = await hangar.agents.get('sdk-agent').catch((e: unknown) => e);
    expect(gone).toBeInstanceOf(NotFoundError);
    expect(gone).toMatchObject({ status: 404, code: 'not_found' });
    expect((gone as NotFoundError).requestId).toMatch(/\S/);
  });

  it('runs: stream yields the frames as they come then the result; create waits for the end; get reads it back', async () => {
    await hangar.agents.create({ slug: 'sdk-runner', model: 'm1', instructions: 'You are terse.' });
    fake.script({ text: ['Hello', ', ', 'world.'], usage: { prompt: 5, completion: 3 } });
    const stream = hangar.runs.stream({ agent: 'sdk-runner', prompt: 'Say hello' });
    const types: string[] = [];
    let text = '';
    for await (const frame of stream) {
      types.push(frame.type);
      if (frame.type === 'assistant_message_delta') text += (frame as ThreadFrame).delta;
    }
    expect(text).toBe('Hello, world.');
    expect(types[0]).toBe('run_started');
    expect(types.at(-1)).toBe('result');
    expect(types).toEqual(expect.arrayContaining(['user_message', 'assistant_message', 'run_completed']));
    const result = await stream.finalResult();
    expect(result).toMatchObject({ status: 'completed', result: 'Hello, world.', agent: 'sdk-runner' });
    expect(JSON.stringify(fake.requests.at(-1)!.body)).toContain('Say hello');

    fake.script({ text: ['Again.'] });
    const run = await hangar.runs.create({ agent: 'sdk-runner', prompt: 'once more', threadId: result.threadId });
    expect(run).toMatchObject({ status: 'completed', result: 'Again.', threadId: result.threadId });
    expect(await hangar.runs.get(run.runId)).toMatchObject({ runId: run.runId, status: 'completed' });

    // An unknown agent is a typed error before any frame.
    await expect(async () => {
      for await (const _ of hangar.runs.stream({ agent: 'nobody', prompt: 'hi' })) void _;
    }).rejects.toBeInstanceOf(NotFoundError);
  });

  it('threads.subscribe delivers live frames and resumes after a dropped connection with nothing missed or repeated', async () => {
    await hangar.agents.create({ slug: 'sdk-live', model: 'm1' });
    const thread = await hangar.threads.create({ title: 'live' });
    expect((await hangar.threads.get(thread.id)).title).toBe('live');
    const frames: ThreadFrame[] = [];
    const reconnects: number[] = [];
    const sub = hangar.threads.subscribe(thread.id, {
      onFrame: (f) => frames.push(f),
      onReconnect: (info) => reconnects.push(info.code),
    });
    try {
      await vi.waitFor(() => expect(frames[0]?.type).toBe('snapshot'), { timeout: 10_000 });

      // A run on the thread: its frames arrive live.
      fake.script({ text: ['Live ', 'answer.'] });
      await hangar.runs.create({ agent: 'sdk-live', prompt: 'hello', threadId: thread.id });
      await vi.waitFor(() => expect(frames.map((f) => f.type)).toContain('run_completed'), { timeout: 10_000 });
      expect(frames.filter((f) => f.type === 'assistant_message_delta').map((f) => f.delta)).toEqual(['Live ', 'answer.']);

      // The server drops every socket; durable frames appended while the client is away come on the resumed connection.
      const messages = (n: number, tag: string): DurableInput[] =>
        Array.from({ length: n }, (_, i) => ({ type: 'user_message', runId: 'run_sdk', payload: { text: `${tag} ${i}` } }) as DurableInput);
      await appendDurable(h.deps, thread.id, messages(3, 'before'));
      await vi.waitFor(() => expect(frames.filter((f) => (f.payload as { text?: string })?.text?.startsWith('before')).length).toBe(3));
      const wss = (h.app as unknown as { websocketServer: { clients: Set<WebSocket> } }).websocketServer;
      for (const client of wss.clients) client.terminate();
      await appendDurable(h.deps, thread.id, messages(5, 'away'));
      await vi.waitFor(() => expect(reconnects.length).toBeGreaterThan(0));
      await appendDurable(h.deps, thread.id, messages(2, 'after'));
      await vi.waitFor(() => expect(frames.filter((f) => (f.payload as { text?: string })?.text?.startsWith('after')).length).toBe(2), {
        timeout: 10_000,
      });
      const sequences = frames.filter((f) => typeof f.sequence === 'number').map((f) => f.sequence!);
      expect(sequences).toEqual([...new Set(sequences)].sort((x, y) => x - y)); // in order, once each
      expect(sequences.at(-1)! - sequences[0]! + 1).toBe(sequences.length); // no gap
      const texts = frames.map((f) => (f.payload as { text?: string } | undefined)?.text).filter((t) => t && /^(before|away|after)/.test(t));
      expect(texts).toEqual(['before 0', 'before 1', 'before 2', 'away 0', 'away 1', 'away 2', 'away 3', 'away 4', 'after 0', 'after 1']);
      expect(sub.lastSequence).toBe(sequences.at(-1));
    } finally {
      sub.close();
      await sub.done;
    }
  });

  it('threads.subscribe works with the standard (browser) WebSocket too, resumes from lastSequence, and reports refusals to onError', async () => {
    const thread = await hangar.threads.create({});
    await appendDurable(h.deps, thread.id, [
      { type: 'user_message', runId: 'run_x', payload: { text: 'first' } },
      { type: 'user_message', runId: 'run_x', payload: { text: 'second' } },
    ] as DurableInput[]);
    const standard = new Hangar({ apiKey: a.key, baseUrl: url, WebSocket: UndiciWebSocket as never });
    const frames: ThreadFrame[] = [];
    const controller = new AbortController();
    const sub = standard.threads.subscribe(thread.id, { onFrame: (f) => frames.push(f), lastSequence: 1, signal: controller.signal });
    await vi.waitFor(() => expect(frames.map((f) => f.type)).toEqual(['snapshot', 'user_message']));
    expect((frames[1]!.payload as { text: string }).text).toBe('second');
    controller.abort();
    await sub.done;

    // Another organization's key: the thread does not exist for it.
    const errors: HangarError[] = [];
    const other = new Hangar({ apiKey: b.key, baseUrl: url }).threads.subscribe(thread.id, {
      onFrame: () => undefined,
      onError: (e) => errors.push(e),
    });
    await expect(other.done).rejects.toBeInstanceOf(NotFoundError);
    expect(errors).toHaveLength(1);
    const bad = new Hangar({ apiKey: 'hgr_live_not_a_key', baseUrl: url }).threads.subscribe(thread.id, { onFrame: () => undefined });
    await expect(bad.done).rejects.toBeInstanceOf(AuthenticationError);
  });

  it('errors are typed by status and carry code, status, requestId and message', async () => {
    const missing = await hangar.sandboxes.get('sbx_nope').catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(NotFoundError);
    expect(missing).toBeInstanceOf(HangarError);
    expect(missing).toMatchObject({ status: 404, code: 'not_found', name: 'NotFoundError' });
    expect((missing as NotFoundError).requestId).toMatch(/\S/);
    expect((missing as NotFoundError).message).toMatch(/sbx_nope|not found/i);

    const unauthenticated = await new Hangar({ apiKey: 'hgr_live_not_a_real_key', baseUrl: url }).agents.list().catch((e: unknown) => e);
    expect(unauthenticated).toBeInstanceOf(AuthenticationError);
    expect(unauthenticated).toMatchObject({ status: 401 });

    const readOnly = new Hangar({ apiKey: await keyFor(h, a, ['agent:read']), baseUrl: url });
    await expect(readOnly.agents.list()).resolves.toBeInstanceOf(Array); // control: the key works
    const denied = await readOnly.agents.create({ slug: 'nope' }).catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(PermissionDeniedError);
    expect(denied).toMatchObject({ status: 403 });

    const invalid = await hangar.agents.create({ slug: 'Not A Slug!' }).catch((e: unknown) => e);
    expect(invalid).toMatchObject({ status: 400, name: 'BadRequestError' });

    // The typed client reaches what the layer has no method for, with the same credential.
    const { data } = await hangar.api.GET('/v1/me');
    expect(JSON.stringify(data)).toContain(a.orgId);
  });

  it('aborting a signal stops a command (and the sandbox kills it)', async () => {
    const sbx = await hangar.sandboxes.create({ network: false });
    try {
      const controller = new AbortController();
      const started = Date.now();
      const pending = sbx.commands.run('sleep 30', { signal: controller.signal });
      setTimeout(() => controller.abort(), 500);
      const err = await pending.catch((e: unknown) => e);
      expect(err).toMatchObject({ name: 'AbortError', code: 'aborted' });
      expect(Date.now() - started).toBeLessThan(10_000);
      await vi.waitFor(async () => expect((await sbx.commands.run('pgrep -x sleep || true')).stdout).toBe(''), { timeout: 10_000 });
      // An already-aborted signal makes no request.
      await expect(hangar.agents.list({ signal: AbortSignal.abort() })).rejects.toMatchObject({ name: 'AbortError' });
    } finally {
      await sbx.destroy();
    }
  });
});

describe('@hangar/sdk retries', () => {
  it('retries a 429 after the Retry-After seconds and answers the next success', async () => {
    const server = await scriptedServer(rateLimited('1'), json(200, { data: [], meta: { requestId: 'req_ok' } }));
    try {
      const hangar = new Hangar({ apiKey: 'hgr_live_k', baseUrl: server.url });
      expect(await hangar.agents.list()).toEqual([]);
      expect(server.seen).toHaveLength(2);
      expect(server.seen[1]!.at - server.seen[0]!.at).toBeGreaterThanOrEqual(950);
      expect(server.seen[1]!.authorization).toBe('Bearer hgr_live_k');
    } finally {
      await server.close();
    }
  });

  it('honours Retry-After as an HTTP date, also for a POST, and 503 like 429', async () => {
    const at = new Date(Date.now() + 2000).toUTCString(); // second precision: 1 to 2 s from now
    const server = await scriptedServer(
      rateLimited(at),
      json(503, { error: { code: 'service_unavailable', message: 'busy' } }),
      json(201, { data: { slug: 'x' }, meta: { requestId: 'r' } }),
    );
    try {
      const hangar = new Hangar({ apiKey: 'hgr_live_k', baseUrl: server.url });
      expect(await hangar.agents.create({ slug: 'x' })).toEqual({ slug: 'x' });
      expect(server.seen.map((s) => s.method)).toEqual(['POST', 'POST', 'POST']);
      expect(server.seen[1]!.at - server.seen[0]!.at).toBeGreaterThanOrEqual(900);
    } finally {
      await server.close();
    }
  });

  it('gives up after maxRetries with the typed error and its Retry-After; an abort ends the wait between tries', async () => {
    const server = await scriptedServer(rateLimited('1'));
    try {
      const err = await new Hangar({ apiKey: 'hgr_live_k', baseUrl: server.url, maxRetries: 1 }).agents.list().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RateLimitError);
      expect(err).toMatchObject({ status: 429, code: 'rate_limited', requestId: 'req_429', retryAfterMs: 1000 });
      expect(server.seen).toHaveLength(2);

      const controller = new AbortController();
      const started = Date.now();
      setTimeout(() => controller.abort(), 200);
      const aborted = await new Hangar({ apiKey: 'hgr_live_k', baseUrl: server.url, maxRetries: 5 }).agents
        .list({ signal: controller.signal })
        .catch((e: unknown) => e);
      expect(aborted).toMatchObject({ name: 'AbortError', code: 'aborted' });
      expect(Date.now() - started).toBeLessThan(900);
    } finally {
      await server.close();
    }
  });

  it('retries a network error for a GET but not for a POST; a timeout is a TimeoutError', async () => {
    const drop = (req: IncomingMessage) => req.socket.destroy();
    const server = await scriptedServer(drop, json(200, { data: [], meta: { requestId: 'r' } }));
    try {
      const hangar = new Hangar({ apiKey: 'hgr_live_k', baseUrl: server.url });
      expect(await hangar.agents.list()).toEqual([]);
      expect(server.seen).toHaveLength(2);
    } finally {
      await server.close();
    }
    const posts = await scriptedServer(drop);
    try {
      const err = await new Hangar({ apiKey: 'hgr_live_k', baseUrl: posts.url }).agents.create({ slug: 'x' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectionError);
      expect(posts.seen).toHaveLength(1);
    } finally {
      await posts.close();
    }
    const silent = await scriptedServer(() => undefined);
    try {
      const err = await new Hangar({ apiKey: 'hgr_live_k', baseUrl: silent.url, timeout: 200, maxRetries: 1 }).agents.list().catch((e: unknown) => e);
      expect(err).toMatchObject({ name: 'TimeoutError', code: 'timeout' });
      expect(silent.seen).toHaveLength(2);
    } finally {
      await silent.close();
    }
  });
});
