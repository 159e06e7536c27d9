import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { createHarness, createOrgAdmin, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { until } from '../../../test/helpers.js';
import { describeNeeding, isolationNeed, itNeeding } from '../../../test/needs.js';

/** Hangar's MCP endpoint with the official SDK's client, over a real loopback connection. */

// Built at load: which suites run depends on what this host's server can do (isolation, runc).
const fake = await new FakeOpenAI().start();
const h: Harness = await createHarness({ HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_OPENAI_MODELS: 'm1' });
let url: string;
let a: Actor;
let b: Actor;
const clients: Client[] = [];

beforeAll(async () => {
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  url = `http://127.0.0.1:${(h.app.server.address() as { port: number }).port}`;
  a = await createOrgAdmin(h, 'Org A');
  b = await createOrgAdmin(h, 'Org B');
});
afterAll(async () => {
  for (const c of clients) await c.close().catch(() => undefined);
  await h?.close();
  await fake?.stop();
});

async function connect(key: string): Promise<Client> {
  const client = new Client({ name: 'hangar-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL('/v1/mcp', url), { requestInit: { headers: { authorization: `Bearer ${key}` } } });
  await client.connect(transport);
  clients.push(client);
  return client;
}

const call = async (client: Client, name: string, args: Record<string, unknown> = {}) =>
  (await client.callTool({ name, arguments: args }, undefined, { timeout: 120_000 })) as CallToolResult;
const text = (r: CallToolResult) => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('');
const errorOf = (r: CallToolResult) => (r.structuredContent as { error: { code: string; message: string } }).error;

const post = (body: string, headers: Record<string, string> = {}) =>
  fetch(`${url}/v1/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${a.key}`, ...headers },
    body,
  });

describe('the MCP endpoint over streamable HTTP', () => {
  it('initializes and lists every tool with an input schema and a description', async () => {
    const client = await connect(a.key);
    expect(client.getServerVersion()?.name).toBe('hangar');
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(
      [
        'execute_code',
        'list_threads',
        'read_thread',
        'run_agent',
        'sandbox_create',
        'sandbox_destroy',
        'sandbox_list',
        'sandbox_list_files',
        'sandbox_read_file',
        'sandbox_run_command',
        'sandbox_write_file',
      ].sort(),
    );
    const exec = tools.find((t) => t.name === 'execute_code')!;
    expect(exec.description).toContain('execute:run');
    expect(exec.inputSchema.required).toEqual(expect.arrayContaining(['language', 'code']));
  });

  it('refuses a request without a credential (401) and a bad one, before any tool runs', async () => {
    const res = await post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }), { authorization: '' });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unauthenticated');
    await expect(connect('hgr_live_not_a_key')).rejects.toMatchObject({ code: 401, message: expect.stringContaining('unauthenticated') });
  });

  it('answers junk with a 4xx, never a 5xx; GET and DELETE are 405 (stateless: no sessions, no standalone stream)', async () => {
    for (const body of [
      'not json',
      '{"hello":1}',
      '[]',
      '{"jsonrpc":"2.0"}',
      '{"jsonrpc":"2.0","id":1,"method":42}',
      '7',
      `${'['.repeat(500)}${']'.repeat(500)}`,
    ]) {
      const res = await post(body);
      expect(res.status, body).toBeGreaterThanOrEqual(400);
      expect(res.status, body).toBeLessThan(500);
    }
    // The server's body limit holds here as on every route.
    const huge = await post(
      JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'x', arguments: { code: 'x'.repeat(h.deps.config.bodyLimitBytes) } },
      }),
    );
    expect(huge.status).toBe(413);
    // A client that does not accept JSON answers is told so.
    const notAcceptable = await post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }), { accept: 'text/html' });
    expect(notAcceptable.status).toBe(406);
    // An unknown method is a JSON-RPC error, in a 200.
    const unknown = await post(JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'no/such/method' }), { 'mcp-protocol-version': '2025-06-18' });
    expect(unknown.status).toBe(200);
    expect(((await unknown.json()) as { error: { code: number } }).error.code).toBe(-32601);
    for (const method of ['GET', 'DELETE']) {
      const res = await fetch(`${url}/v1/mcp`, { method, headers: { authorization: `Bearer ${a.key}`, accept: 'text/event-stream' } });
      expect(res.status, method).toBe(405);
      expect(res.headers.get('allow')).toBe('POST');
    }
  });

  it('a key without a tool’s scope gets an isError result naming it, while a tool it may use works', async () => {
    const limited = await connect(await keyFor(h, a, ['agent:read']));
    const allowed = await call(limited, 'list_threads');
    expect(allowed.isError, text(allowed)).toBeFalsy();
    const refused = await call(limited, 'sandbox_list');
    expect(refused.isError).toBe(true);
    expect(errorOf(refused).code).toBe('forbidden');
    expect(text(refused)).toContain('sandbox:read');
    const noRun = await call(limited, 'execute_code', { language: 'python', code: 'print(1)' });
    expect(noRun.isError).toBe(true);
    expect(text(noRun)).toContain('execute:run');
  });

  it('bad arguments are an isError result, not a protocol failure', async () => {
    const client = await connect(a.key);
    const r = await call(client, 'sandbox_run_command', { sandbox_id: 'sbx_x' });
    expect(r.isError).toBe(true);
    expect(text(r)).toMatch(/command/);
    const missing = await call(client, 'sandbox_run_command', { sandbox_id: 'sbx_nope', command: 'true' });
    expect(missing.isError).toBe(true);
    expect(errorOf(missing).code).toBe('not_found');
  });

  it('run_agent waits for the answer; the thread is listed and read back; another organization cannot read it', async () => {
    const agent = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: a.headers, payload: { slug: 'helper', model: 'm1' } });
    expect(agent.statusCode, agent.body).toBe(201);
    fake.script({ text: 'The answer is 42.' });
    const client = await connect(a.key);
    const run = await call(client, 'run_agent', { agent: 'helper', prompt: 'What is the answer?' });
    expect(run.isError, text(run)).toBeFalsy();
    expect(text(run)).toBe('The answer is 42.');
    const { threadId, status } = run.structuredContent as { threadId: string; status: string };
    expect(status).toBe('completed');

    const list = await call(client, 'list_threads');
    expect((list.structuredContent as { threads: { id: string }[] }).threads.map((t) => t.id)).toContain(threadId);
    // Control: the owner reads the conversation.
    const read = await call(client, 'read_thread', { thread_id: threadId });
    expect(read.isError, text(read)).toBeFalsy();
    expect(text(read)).toContain('user: What is the answer?');
    expect(text(read)).toContain('assistant: The answer is 42.');
    // Paginated: one event per page, the cursor leads on.
    const first = await call(client, 'read_thread', { thread_id: threadId, limit: 1 });
    const page = first.structuredContent as { events: { sequence: number }[]; hasMore: boolean; nextCursor: string };
    expect(page.hasMore).toBe(true);
    const second = await call(client, 'read_thread', { thread_id: threadId, limit: 1, cursor: page.nextCursor });
    expect((second.structuredContent as { events: { sequence: number }[] }).events[0]!.sequence).toBeGreaterThan(page.events[0]!.sequence);

    const other = await connect(b.key);
    const denied = await call(other, 'read_thread', { thread_id: threadId });
    expect(denied.isError).toBe(true);
    expect(errorOf(denied).code).toBe('not_found');
    const theirs = await call(other, 'list_threads');
    expect(text(theirs)).toBe('no threads');
    // A run longer than the wait: the answer says it is still going and names it; it then finishes on its own.
    fake.script({ text: 'slow answer', delayMs: 2500 });
    const slow = await call(client, 'run_agent', { agent: 'helper', prompt: 'take your time', thread_id: threadId, wait_seconds: 1 });
    expect(slow.isError, text(slow)).toBeFalsy();
    expect(slow.structuredContent).toMatchObject({ status: 'running', threadId });
    expect(text(slow)).toContain('read_thread');
    await until('the slow run ends', async () => text(await call(client, 'read_thread', { thread_id: threadId })).includes('assistant: slow answer'));
    // An agent of another organization is unknown there.
    const foreign = await call(other, 'run_agent', { agent: 'helper', prompt: 'hi' });
    expect(foreign.isError).toBe(true);
    expect(errorOf(foreign).code).toBe('not_found');
  });

  itNeeding(isolationNeed(h.deps.isolation), 'execute_code runs a program and answers its output', async () => {
    const client = await connect(a.key);
    const r = await call(client, 'execute_code', { language: 'python', code: 'import sys\nprint("hi", sys.stdin.read())', stdin: 'there' });
    expect(r.isError, text(r)).toBeFalsy();
    expect(text(r)).toContain('hi there');
    expect(text(r)).toContain('exit code 0');
    expect((r.structuredContent as { run: { stdout: string } }).run.stdout).toBe('hi there\n');
    const failing = await call(client, 'execute_code', { language: 'bash', code: 'echo oops >&2; exit 3' });
    expect(failing.isError).toBeFalsy();
    expect(text(failing)).toContain('oops');
    expect(text(failing)).toContain('exit code 3');
  });
});

describeNeeding(
  { what: 'persistent sandboxes (runc, root)', present: h.deps.sandboxes.available, reason: h.deps.sandboxes.unavailableReason },
  'sandbox tools over MCP',
  () => {
    it('create, write, read, list, run, destroy; another organization cannot reach the sandbox', async () => {
      const client = await connect(a.key);
      const created = await call(client, 'sandbox_create', { network: false });
      expect(created.isError, text(created)).toBeFalsy();
      const sandbox = created.structuredContent as { id: string; state: string };
      expect(sandbox.state).toBe('running');

      const listed = await call(client, 'sandbox_list');
      expect(text(listed)).toContain(sandbox.id);

      const wrote = await call(client, 'sandbox_write_file', { sandbox_id: sandbox.id, path: 'notes/hello.txt', content: 'hello from MCP\n' });
      expect(wrote.isError, text(wrote)).toBeFalsy();
      expect(text(wrote)).toContain('/home/user/notes/hello.txt');
      const binary = await call(client, 'sandbox_write_file', {
        sandbox_id: sandbox.id,
        path: '/home/user/bytes.bin',
        content: Buffer.from([0, 255, 1, 254]).toString('base64'),
        encoding: 'base64',
      });
      expect(binary.isError, text(binary)).toBeFalsy();

      const read = await call(client, 'sandbox_read_file', { sandbox_id: sandbox.id, path: '/home/user/notes/hello.txt' });
      expect(text(read)).toBe('hello from MCP\n');
      const readBytes = await call(client, 'sandbox_read_file', { sandbox_id: sandbox.id, path: 'bytes.bin' });
      const blob = readBytes.content[0] as { type: string; resource: { blob: string } };
      expect(blob.type).toBe('resource');
      expect([...Buffer.from(blob.resource.blob, 'base64')]).toEqual([0, 255, 1, 254]);

      const files = await call(client, 'sandbox_list_files', { sandbox_id: sandbox.id, path: 'notes' });
      expect(text(files)).toContain('/home/user/notes/hello.txt');

      const ran = await call(client, 'sandbox_run_command', { sandbox_id: sandbox.id, command: 'cat hello.txt; echo err >&2; exit 4', cwd: 'notes' });
      expect(ran.isError, text(ran)).toBeFalsy();
      expect(ran.structuredContent).toMatchObject({ exitCode: 4, stdout: 'hello from MCP\n', stderr: 'err\n' });
      expect(text(ran)).toContain('exit code 4');

      // Another organization: the owner's requests above are the control.
      const other = await connect(b.key);
      for (const [name, args] of [
        ['sandbox_run_command', { command: 'id' }],
        ['sandbox_read_file', { path: 'notes/hello.txt' }],
        ['sandbox_write_file', { path: 'evil.txt', content: 'x' }],
        ['sandbox_list_files', {}],
        ['sandbox_destroy', {}],
      ] as const) {
        const r = await call(other, name, { sandbox_id: sandbox.id, ...args });
        expect(r.isError, name).toBe(true);
        expect(errorOf(r).code, name).toBe('not_found');
      }
      expect(text(await call(other, 'sandbox_list'))).toBe('no sandboxes');
      expect(text(await call(client, 'sandbox_read_file', { sandbox_id: sandbox.id, path: 'notes/hello.txt' }))).toBe('hello from MCP\n');

      const destroyed = await call(client, 'sandbox_destroy', { sandbox_id: sandbox.id });
      expect(destroyed.isError, text(destroyed)).toBeFalsy();
      const after = await call(client, 'sandbox_run_command', { sandbox_id: sandbox.id, command: 'true' });
      expect(after.isError).toBe(true);
      expect(errorOf(after).code).toBe('invalid_state');
    }, 180_000);
  },
);
