import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeMcp, startMcpServer } from '../../../test/fakes/mcp-server.js';
import { callMcpTool, listMcpTools, McpError, type McpTarget } from './mcp.js';

const target = (url: string, headers: Record<string, string> = {}, timeoutMs = 5000): McpTarget => ({
  url,
  headers,
  fetch: globalThis.fetch,
  timeoutMs,
});

async function rejection(p: Promise<unknown>): Promise<McpError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(McpError);
  return e as McpError;
}

/** A hand-written JSON-RPC MCP endpoint, for answers the SDK's server would never send (pages, hostile schemas). */
async function rawServer(answer: (method: string, params: any) => unknown): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer(async (req, res) => {
    if (req.method !== 'POST') return void res.writeHead(405).end();
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const msg = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    if (msg.id === undefined) return void res.writeHead(202).end();
    const result =
      msg.method === 'initialize'
        ? { protocolVersion: msg.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'raw', version: '1' } }
        : answer(msg.method, msg.params);
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('MCP client against an SDK server', () => {
  let mcp: FakeMcp;
  beforeAll(async () => {
    mcp = await startMcpServer();
  });
  afterAll(() => mcp.close());

  it('lists the tools with their input schemas', async () => {
    const tools = await listMcpTools(target(mcp.url));
    expect(tools.map((t) => t.name).sort()).toEqual(['add', 'echo', 'fail', 'slow', 'whoami']);
    const echo = tools.find((t) => t.name === 'echo');
    expect(echo?.description).toBe('Echoes the text back');
    expect(echo?.inputSchema).toMatchObject({ type: 'object', properties: { text: { type: 'string' } }, required: ['text'] });
    expect(tools.find((t) => t.name === 'add')?.inputSchema).toMatchObject({
      properties: { a: { type: 'number' }, b: { type: 'number' } },
    });
  });

  it('calls tools: text output, structured content', async () => {
    expect(await callMcpTool(target(mcp.url), 'echo', { text: 'hi there' })).toEqual({ output: 'echo: hi there', isError: false });
    expect(await callMcpTool(target(mcp.url), 'add', { a: 2, b: 40 })).toEqual({ output: '42', structured: { sum: 42 }, isError: false });
  });

  it("sends the target's headers on the HTTP requests", async () => {
    const before = mcp.requests.length;
    const res = await callMcpTool(target(mcp.url, { Authorization: 'Bearer tok-123', 'X-Extra': 'yes' }), 'whoami', {});
    expect(res.output).toBe('Bearer tok-123');
    const sent = mcp.requests.slice(before);
    expect(sent.length).toBeGreaterThan(0);
    for (const r of sent) expect(r.headers['x-extra']).toBe('yes');
    expect((await callMcpTool(target(mcp.url), 'whoami', {})).output).toBe('anonymous');
  });

  it('returns a tool-level error as isError, not an exception', async () => {
    expect(await callMcpTool(target(mcp.url), 'fail', {})).toEqual({ output: 'it failed', isError: true });
  });

  it('a refresh sees the tools the server added and removed', async () => {
    mcp.setExtraTools(['extra_one', 'extra_two']);
    const names = (await listMcpTools(target(mcp.url))).map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(['extra_one', 'extra_two', 'echo']));
    mcp.setExtraTools(['extra_two']);
    const after = (await listMcpTools(target(mcp.url))).map((t) => t.name);
    expect(after).toContain('extra_two');
    expect(after).not.toContain('extra_one');
    expect((await callMcpTool(target(mcp.url), 'extra_two', {})).output).toBe('extra_two');
    mcp.setExtraTools([]);
  });

  it('a slow tool beyond timeoutMs is mcp_timeout, within a bounded time', async () => {
    const started = Date.now();
    const e = await rejection(callMcpTool(target(mcp.url, {}, 400), 'slow', { ms: 10_000 }));
    expect(e.code).toBe('mcp_timeout');
    expect(Date.now() - started).toBeLessThan(6000);
    // The server is still usable afterwards.
    expect((await callMcpTool(target(mcp.url), 'echo', { text: 'x' })).output).toBe('echo: x');
  });
});

describe('MCP client errors', () => {
  it('a bearer-protected server: mcp_unauthorized without or with a wrong token, tools with the right one', async () => {
    const mcp = await startMcpServer({ bearer: 's3cret-token' });
    try {
      expect((await rejection(listMcpTools(target(mcp.url)))).code).toBe('mcp_unauthorized');
      const wrong = await rejection(callMcpTool(target(mcp.url, { Authorization: 'Bearer wrong-value-xyz' }), 'echo', { text: 'a' }));
      expect(wrong.code).toBe('mcp_unauthorized');
      expect(wrong.message).toMatch(/refused the credentials/);
      expect(wrong.message).not.toContain('wrong-value-xyz');
      const ok = target(mcp.url, { Authorization: 'Bearer s3cret-token' });
      expect((await listMcpTools(ok)).map((t) => t.name)).toContain('echo');
      expect((await callMcpTool(ok, 'whoami', {})).output).toBe('Bearer s3cret-token');
    } finally {
      await mcp.close();
    }
  });

  it('a closed port is mcp_unreachable', async () => {
    const server = http.createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const e = await rejection(listMcpTools(target(`http://127.0.0.1:${port}/mcp`)));
    expect(e.code).toBe('mcp_unreachable');
    expect(e.message).toContain('ECONNREFUSED');
  });

  it('an endpoint that is not MCP is mcp_protocol', async () => {
    const mcp = await startMcpServer();
    try {
      expect((await rejection(listMcpTools(target(mcp.url.replace(/\/mcp$/, '/other'))))).code).toBe('mcp_protocol');
    } finally {
      await mcp.close();
    }
    const raw = await rawServer(() => ({ tools: 'not a list' }));
    try {
      expect((await rejection(listMcpTools(target(raw.url)))).code).toBe('mcp_protocol');
    } finally {
      await raw.close();
    }
  });
});

describe('MCP client limits', () => {
  it('follows tools/list pages and drops tools whose schema is too large or too deep', async () => {
    let deep: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 40; i++) deep = { type: 'object', properties: { x: deep } };
    const tool = (name: string, inputSchema: Record<string, unknown> = { type: 'object' }) => ({ name, inputSchema });
    const raw = await rawServer((method, params) => {
      if (method !== 'tools/list') return {};
      if (!params?.cursor) return { tools: [tool('a'), tool('deep', deep)], nextCursor: 'p2' };
      return { tools: [tool('huge', { type: 'object', description: 'x'.repeat(70 * 1024) }), tool('b')] };
    });
    try {
      const tools = await listMcpTools(target(raw.url));
      expect(tools.map((t) => t.name)).toEqual(['a', 'b']);
      expect(tools[0]).toEqual({ name: 'a', description: '', inputSchema: { type: 'object' } });
    } finally {
      await raw.close();
    }
  });

  it('keeps at most 500 tools and caps the output at 256 KiB', async () => {
    const raw = await rawServer((method) => {
      if (method === 'tools/list') return { tools: Array.from({ length: 600 }, (_, i) => ({ name: `t${i}`, inputSchema: { type: 'object' } })) };
      return {
        content: [
          { type: 'text', text: 'é'.repeat(200 * 1024) },
          { type: 'image', data: 'AAAA', mimeType: 'image/png' },
        ],
      };
    });
    try {
      expect(await listMcpTools(target(raw.url))).toHaveLength(500);
      const res = await callMcpTool(target(raw.url), 'big', {});
      expect(Buffer.byteLength(res.output)).toBeLessThanOrEqual(256 * 1024);
      expect(res.output.endsWith('[output truncated]')).toBe(true);
      const small = await rawServer(() => ({
        content: [
          { type: 'image', data: 'AAAA', mimeType: 'image/png' },
          { type: 'text', text: 'hi' },
        ],
      }));
      try {
        expect((await callMcpTool(target(small.url), 'img', {})).output).toBe('[image image/png]\nhi');
      } finally {
        await small.close();
      }
    } finally {
      await raw.close();
    }
  });

  it('an answer larger than 8 MiB is mcp_protocol, not buffered', async () => {
    const raw = await rawServer(() => ({ content: [{ type: 'text', text: 'x'.repeat(9 * 1024 * 1024) }] }));
    try {
      const e = await rejection(callMcpTool(target(raw.url), 'big', {}));
      expect(e.code).toBe('mcp_protocol');
      expect(e.message).toMatch(/larger than 8 MiB/);
    } finally {
      await raw.close();
    }
  });
});
