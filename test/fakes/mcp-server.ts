import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

/**
 * A real MCP server (the official SDK's `McpServer` over streamable HTTP, stateless: a fresh server and transport
 * per POST) on loopback at `/mcp`, so the product's MCP client runs against the real wire format.
 */
export interface FakeMcp {
  /** The endpoint's full URL (`http://127.0.0.1:<port>/mcp`). */
  url: string;
  /** Every HTTP request that reached the server (including refused ones), in order. */
  requests: { method: string; headers: http.IncomingHttpHeaders }[];
  /** Replaces the set of trivial extra tools (each answers "<name>"), so a refresh can see a changed list. */
  setExtraTools(names: string[]): void;
  close(): Promise<void>;
}

export async function startMcpServer(opts: { bearer?: string } = {}): Promise<FakeMcp> {
  const requests: FakeMcp['requests'] = [];
  let extraTools: string[] = [];

  const build = (authorization: string | undefined): McpServer => {
    const server = new McpServer({ name: 'fake-mcp', version: '1.0.0' });
    server.registerTool('echo', { description: 'Echoes the text back', inputSchema: { text: z.string() } }, ({ text }) => ({
      content: [{ type: 'text', text: `echo: ${text}` }],
    }));
    server.registerTool(
      'add',
      { description: 'Adds two numbers', inputSchema: { a: z.number(), b: z.number() }, outputSchema: { sum: z.number() } },
      ({ a, b }) => ({ content: [{ type: 'text', text: String(a + b) }], structuredContent: { sum: a + b } }),
    );
    server.registerTool('whoami', { description: 'The Authorization header the request carried' }, () => ({
      content: [{ type: 'text', text: authorization ?? 'anonymous' }],
    }));
    server.registerTool('fail', { description: 'Always fails' }, () => ({
      content: [{ type: 'text', text: 'it failed' }],
      isError: true,
    }));
    server.registerTool('slow', { description: 'Waits ms milliseconds', inputSchema: { ms: z.number().int().min(0) } }, async ({ ms }, extra) => {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, ms);
        extra.signal.addEventListener('abort', () => {
          clearTimeout(timer);
          resolve();
        });
      });
      return { content: [{ type: 'text', text: `waited ${ms} ms` }] };
    });
    for (const name of extraTools) {
      server.registerTool(name, { description: `extra tool ${name}` }, () => ({ content: [{ type: 'text', text: name }] }));
    }
    return server;
  };

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    requests.push({ method: req.method ?? '', headers: req.headers });
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    if (path !== '/mcp') {
      res.writeHead(404).end();
      return;
    }
    if (opts.bearer !== undefined && req.headers.authorization !== `Bearer ${opts.bearer}`) {
      res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer' });
      res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'unauthorized' }, id: null }));
      return;
    }
    // Stateless: no standalone SSE stream (GET) and no session to delete.
    if (req.method !== 'POST') {
      res.writeHead(405, { allow: 'POST' }).end();
      return;
    }
    const server = build(req.headers.authorization);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  };

  const httpServer = http.createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
    });
  });
  await new Promise<void>((resolve) => httpServer.listen(0, '127.0.0.1', resolve));
  const { port } = httpServer.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/mcp`,
    requests,
    setExtraTools(names) {
      extraTools = [...names];
    },
    async close() {
      httpServer.closeAllConnections();
      await new Promise<void>((resolve) => httpServer.close(() => resolve()));
    },
  };
}
