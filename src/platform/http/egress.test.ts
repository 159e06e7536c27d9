import dns from 'node:dns/promises';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import os from 'node:os';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { EgressError, type EgressErrorCode, type EgressPolicy, egressFetch, egressRequest, isBlockedAddress } from './egress.js';

interface Hit {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  body: string;
}

interface Fake {
  origin: string;
  port: number;
  hits: Hit[];
  /** Resolves when a connection to this server closes (the client reset or finished it). */
  socketClosed: Promise<void>;
}

const servers: Server[] = [];

// The host's own name resolves to a loopback address on many machines (/etc/hosts): a real name to prove the connect-time check on.
const own = await dns.lookup(os.hostname(), { all: true }).catch(() => []);
const ownIsLoopback = own.length > 0 && own.every((a) => a.address.startsWith('127.'));

afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    server.close();
  }
});

/** A loopback HTTP server recording every request (with its body) before `handler` answers it. */
async function serve(handler: (req: IncomingMessage, res: ServerResponse, hit: Hit) => void, host = '127.0.0.1'): Promise<Fake> {
  const hits: Hit[] = [];
  let markClosed: () => void = () => {};
  const socketClosed = new Promise<void>((resolve) => {
    markClosed = resolve;
  });
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const hit = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString() };
      hits.push(hit);
      handler(req, res, hit);
    });
  });
  server.on('connection', (socket: Socket) => socket.on('close', () => markClosed()));
  servers.push(server);
  server.listen(0, host);
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return { origin: `http://${host}:${port}`, port, hits, socketClosed };
}

function policy(overrides: Partial<EgressPolicy> = {}): EgressPolicy {
  return { allowPrivateNetworks: true, timeoutMs: 5_000, maxResponseBytes: 1 << 20, ...overrides };
}

async function failure(promise: Promise<unknown>): Promise<EgressError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(EgressError);
  return err as EgressError;
}

async function expectCode(promise: Promise<unknown>, code: EgressErrorCode): Promise<EgressError> {
  const err = await failure(promise);
  expect(err.code).toBe(code);
  return err;
}

function ok(body = 'hello'): (req: IncomingMessage, res: ServerResponse) => void {
  return (_req, res) => {
    res.setHeader('content-type', 'text/plain');
    res.end(body);
  };
}

describe('isBlockedAddress', () => {
  it.each([
    '127.0.0.1',
    '127.255.255.254',
    '10.0.0.1',
    '172.16.0.1',
    '172.31.255.255',
    '192.168.1.1',
    '100.64.0.1',
    '169.254.169.254',
    '0.0.0.0',
    '255.255.255.255',
    '224.0.0.1',
    '240.0.0.1',
    '192.0.2.1',
    '198.51.100.7',
    '203.0.113.9',
    '198.18.0.1',
    '::',
    '::1',
    '[::1]',
    'fd00::1',
    'fc00::1',
    'fe80::1',
    'fe80::1%eth0',
    'fec0::1',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:10.0.0.1',
    '::ffff:169.254.169.254',
    '::127.0.0.1',
    '64:ff9b::7f00:1',
    '64:ff9b::a00:1',
    '64:ff9b:1::808:808',
    '2002:7f00:1::1',
    '2002:a00:1::',
    '2001:0:7f00:1::1',
    '2001:0:808:808::80ff:fefe',
    '2001:db8::1',
    '3fff::1',
    '100::1',
    'example.com',
    '',
  ])('blocks %s', (address) => {
    expect(isBlockedAddress(address)).toBe(true);
  });

  it.each([
    '8.8.8.8',
    '1.1.1.1',
    '93.184.216.34',
    '172.32.0.1',
    '100.128.0.1',
    '2606:4700::1111',
    '2001:4860:4860::8888',
    '::ffff:8.8.8.8',
    '64:ff9b::808:808',
    '2002:808:808::1',
  ])('lets the public address %s through', (address) => {
    expect(isBlockedAddress(address)).toBe(false);
  });
});

describe('egressRequest: blocked targets', () => {
  it('refuses every literal spelling of a non-public address without connecting', async () => {
    const fake = await serve(ok());
    const urls = [
      `http://127.0.0.1:${fake.port}/`,
      `http://2130706433:${fake.port}/`,
      `http://0x7f000001:${fake.port}/`,
      `http://0x7f.1:${fake.port}/`,
      `http://127.1:${fake.port}/`,
      `http://[::1]:${fake.port}/`,
      `http://[::ffff:127.0.0.1]:${fake.port}/`,
      'http://169.254.169.254/latest/meta-data/',
      'http://10.0.0.1/',
      'http://192.168.1.1/',
      'http://100.64.0.1/',
      'http://[fd00::1]/',
      `http://localhost:${fake.port}/`,
      `https://127.0.0.1:${fake.port}/`,
    ];
    for (const url of urls) {
      const err = await expectCode(egressRequest(policy({ allowPrivateNetworks: false }), { method: 'GET', url }), 'blocked_address');
      expect(err.message).not.toContain('meta-data');
    }
    expect(fake.hits).toHaveLength(0);
  });

  it('reaches the same loopback server when private networks are allowed', async () => {
    const fake = await serve(ok('from loopback'));
    const res = await egressRequest(policy(), { method: 'GET', url: `http://2130706433:${fake.port}/x?y=1` });
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe('from loopback');
    expect(res.headers['content-type']).toBe('text/plain');
    expect(res.url).toBe(`http://127.0.0.1:${fake.port}/x?y=1`);
    expect(fake.hits[0].path).toBe('/x?y=1');
  });

  it.skipIf(!ownIsLoopback)('refuses a host name that resolves to loopback, at connect time', async () => {
    const fake = await serve(ok(), own[0].address);
    const url = `http://${os.hostname()}:${fake.port}/`;
    const err = await expectCode(egressRequest(policy({ allowPrivateNetworks: false }), { method: 'GET', url }), 'blocked_address');
    expect(err.message).toContain('resolves to');
    expect(fake.hits).toHaveLength(0);
    const allowed = await egressRequest(policy(), { method: 'GET', url });
    expect(allowed.body.toString()).toBe('hello');
  });

  it('reports a name that does not resolve as dns_failed', async () => {
    await expectCode(egressRequest(policy({ allowPrivateNetworks: false }), { method: 'GET', url: 'http://no-such-host.invalid/' }), 'dns_failed');
  });

  it('reports a refused connection as connection_failed', async () => {
    const fake = await serve(ok());
    servers[0].close();
    servers[0].closeAllConnections();
    await once(servers[0], 'close');
    await expectCode(egressRequest(policy(), { method: 'GET', url: `${fake.origin}/` }), 'connection_failed');
  });
});

describe('egressRequest: request validation', () => {
  it.each([
    'ftp://example.com/file',
    'file:///etc/passwd',
    'javascript:alert(1)',
    'http://user:secret@example.com/',
    'http://:secret@example.com/',
    'not a url',
    '/relative/path',
  ])('refuses %s as invalid_url', async (url) => {
    const err = await expectCode(egressRequest(policy(), { method: 'GET', url }), 'invalid_url');
    expect(err.message).not.toContain('secret');
  });

  it('refuses header names and values that could split the request, sending nothing', async () => {
    const fake = await serve(ok());
    const url = `${fake.origin}/`;
    const cases: Record<string, string>[] = [
      { 'x-note': 'a\r\nx-injected: 1' },
      { 'x-note': 'a\nb' },
      { 'x-note': 'a\0b' },
      { 'x-a\r\nx-injected': '1' },
      { 'bad name': '1' },
      { host: 'internal.example' },
    ];
    for (const headers of cases) {
      await expectCode(egressRequest(policy(), { method: 'GET', url, headers }), 'invalid_request');
    }
    await expectCode(egressRequest(policy(), { method: 'GET\r\nX: 1', url }), 'invalid_request');
    await expectCode(egressRequest(policy(), { method: 'CONNECT', url }), 'invalid_request');
    expect(fake.hits).toHaveLength(0);
  });

  it('sends the method, headers and body as given', async () => {
    const fake = await serve((_req, res, hit) => res.end(JSON.stringify(hit)));
    const res = await egressRequest(policy(), {
      method: 'PUT',
      url: `${fake.origin}/things/1`,
      headers: { 'Content-Type': 'application/json', 'X-Trace': 'abc' },
      body: '{"a":1}',
    });
    const seen = JSON.parse(res.body.toString()) as Hit;
    expect(seen.method).toBe('PUT');
    expect(seen.body).toBe('{"a":1}');
    expect(seen.headers['content-type']).toBe('application/json');
    expect(seen.headers['x-trace']).toBe('abc');
    expect(seen.headers.host).toBe(`127.0.0.1:${fake.port}`);
  });
});

describe('egressRequest: redirects', () => {
  function redirector(status: number, to: (path: string) => string) {
    return (req: IncomingMessage, res: ServerResponse) => {
      res.statusCode = status;
      res.setHeader('location', to(req.url ?? '/'));
      res.end('moved');
    };
  }

  it('follows a chain of exactly maxRedirects hops and reports the final URL', async () => {
    const fake = await serve((req, res) => {
      const n = Number((req.url ?? '').split('/')[2]);
      if (n < 3) {
        res.statusCode = 302;
        res.setHeader('location', `/hop/${n + 1}`);
        res.end();
      } else res.end(`arrived at ${n}`);
    });
    const res = await egressRequest(policy({ maxRedirects: 3 }), { method: 'GET', url: `${fake.origin}/hop/0` });
    expect(res.body.toString()).toBe('arrived at 3');
    expect(res.url).toBe(`${fake.origin}/hop/3`);
  });

  it('gives up with too_many_redirects one hop past maxRedirects', async () => {
    const fake = await serve(redirector(302, (path) => `${path}x`));
    await expectCode(egressRequest(policy({ maxRedirects: 3 }), { method: 'GET', url: `${fake.origin}/r` }), 'too_many_redirects');
    expect(fake.hits).toHaveLength(4);
  });

  it('follows five redirects by default', async () => {
    const fake = await serve(redirector(301, (path) => `${path}x`));
    await expectCode(egressRequest(policy(), { method: 'GET', url: `${fake.origin}/r` }), 'too_many_redirects');
    expect(fake.hits).toHaveLength(6);
  });

  it('refuses to carry a credentialed request to another origin, and never contacts it', async () => {
    const other = await serve(ok('other origin'));
    const first = await serve(redirector(302, () => `${other.origin}/landing`));
    const err = await expectCode(egressRequest(policy(), { method: 'GET', url: `${first.origin}/start`, credentialed: true }), 'redirect_refused');
    expect(err.message).toContain(other.origin);
    // An Authorization header makes the request credentialed even without the flag.
    await expectCode(
      egressRequest(policy(), { method: 'GET', url: `${first.origin}/start`, headers: { Authorization: 'Bearer t' } }),
      'redirect_refused',
    );
    expect(other.hits).toHaveLength(0);
  });

  it('follows a cross-origin redirect for a request without credentials', async () => {
    const other = await serve(ok('other origin'));
    const first = await serve(redirector(307, () => `${other.origin}/landing`));
    const res = await egressRequest(policy(), { method: 'GET', url: `${first.origin}/start` });
    expect(res.body.toString()).toBe('other origin');
    expect(res.url).toBe(`${other.origin}/landing`);
  });

  it('follows a same-origin redirect for a credentialed request, keeping its credentials', async () => {
    const fake = await serve((req, res) => {
      if (req.url === '/start') redirector(302, () => '/next')(req, res);
      else res.end(req.headers.authorization);
    });
    const res = await egressRequest(policy(), {
      method: 'GET',
      url: `${fake.origin}/start`,
      headers: { authorization: 'Bearer secret' },
      credentialed: true,
    });
    expect(res.body.toString()).toBe('Bearer secret');
  });

  it('turns a POST into a body-less GET on 303 (and on 301/302), but keeps it on 307/308', async () => {
    for (const [status, method] of [
      [303, 'GET'],
      [302, 'GET'],
      [301, 'GET'],
      [307, 'POST'],
      [308, 'POST'],
    ] as const) {
      const fake = await serve((req, res, hit) => {
        if (req.url === '/form') redirector(status, () => '/result')(req, res);
        else res.end(JSON.stringify(hit));
      });
      const res = await egressRequest(policy(), {
        method: 'POST',
        url: `${fake.origin}/form`,
        headers: { 'content-type': 'application/json' },
        body: '{"x":1}',
      });
      const seen = JSON.parse(res.body.toString()) as Hit;
      expect(seen.method, `after ${status}`).toBe(method);
      expect(seen.body, `after ${status}`).toBe(method === 'GET' ? '' : '{"x":1}');
      expect(seen.headers['content-type'], `after ${status}`).toBe(method === 'GET' ? undefined : 'application/json');
    }
  });

  it('refuses a redirect to a non-HTTP scheme', async () => {
    const fake = await serve(redirector(302, () => 'file:///etc/passwd'));
    await expectCode(egressRequest(policy(), { method: 'GET', url: `${fake.origin}/` }), 'redirect_refused');
  });

  it('returns a redirect without a Location as it is', async () => {
    const fake = await serve((_req, res) => {
      res.statusCode = 302;
      res.end('no location');
    });
    const res = await egressRequest(policy(), { method: 'GET', url: `${fake.origin}/` });
    expect(res.status).toBe(302);
    expect(res.body.toString()).toBe('no location');
  });
});

describe('egressRequest: size and time limits', () => {
  it('refuses a declared Content-Length over the limit', async () => {
    const fake = await serve((_req, res) => {
      res.setHeader('content-length', '1000');
      res.end(Buffer.alloc(1000, 1));
    });
    await expectCode(egressRequest(policy({ maxResponseBytes: 100 }), { method: 'GET', url: `${fake.origin}/` }), 'response_too_large');
  });

  it('accepts a body of exactly the limit', async () => {
    const fake = await serve(ok('x'.repeat(100)));
    const res = await egressRequest(policy({ maxResponseBytes: 100 }), { method: 'GET', url: `${fake.origin}/` });
    expect(res.body.length).toBe(100);
  });

  it('counts a chunked body while it streams and hangs up once it passes the limit', async () => {
    let written = 0;
    const fake = await serve((_req, res) => {
      const timer = setInterval(() => {
        written += 100;
        res.write(Buffer.alloc(100, 1));
      }, 10);
      res.on('close', () => clearInterval(timer));
    });
    await expectCode(egressRequest(policy({ maxResponseBytes: 250 }), { method: 'GET', url: `${fake.origin}/` }), 'response_too_large');
    await fake.socketClosed;
    expect(written).toBeLessThan(20_000);
  });

  it('gives up on a server that never answers within the timeout, closing the connection', async () => {
    const fake = await serve(() => {});
    const started = Date.now();
    await expectCode(egressRequest(policy({ timeoutMs: 300 }), { method: 'GET', url: `${fake.origin}/` }), 'timeout');
    expect(Date.now() - started).toBeLessThan(300 + 4_000);
    await fake.socketClosed;
  });

  it('counts the body against the timeout too', async () => {
    const fake = await serve((_req, res) => {
      res.flushHeaders();
      const timer = setInterval(() => res.write('.'), 50);
      res.on('close', () => clearInterval(timer));
    });
    const started = Date.now();
    await expectCode(egressRequest(policy({ timeoutMs: 400 }), { method: 'GET', url: `${fake.origin}/` }), 'timeout');
    expect(Date.now() - started).toBeLessThan(400 + 4_000);
  });

  it('stops when the caller aborts, with the caller’s reason', async () => {
    const fake = await serve(() => {});
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('caller gave up')), 50);
    const err = await egressRequest(policy(), { method: 'GET', url: `${fake.origin}/`, signal: controller.signal }).catch((e: unknown) => e);
    expect((err as Error).message).toBe('caller gave up');
    await fake.socketClosed;
  });
});

describe('egressFetch', () => {
  it('streams an SSE body chunk by chunk, without waiting for the end', async () => {
    let send: (text: string) => void = () => {};
    let finish: () => void = () => {};
    const fake = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write('data: one\n\n');
      send = (text) => res.write(text);
      finish = () => res.end();
    });
    const res = await egressFetch(policy())(`${fake.origin}/events`, { headers: { accept: 'text/event-stream' } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    expect(res.url).toBe(`${fake.origin}/events`);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    expect(decoder.decode((await reader.read()).value)).toBe('data: one\n\n');
    // The second event is only written after the first was read: a buffering client would hang here.
    send('data: two\n\n');
    expect(decoder.decode((await reader.read()).value)).toBe('data: two\n\n');
    finish();
    expect((await reader.read()).done).toBe(true);
  });

  it('refuses loopback when private networks are not allowed', async () => {
    const fake = await serve(ok());
    const guarded = egressFetch(policy({ allowPrivateNetworks: false }));
    await expectCode(guarded(`${fake.origin}/`), 'blocked_address');
    await expectCode(guarded(new URL(`http://localhost:${fake.port}/`)), 'blocked_address');
    await expectCode(guarded(`http://[::ffff:127.0.0.1]:${fake.port}/`), 'blocked_address');
    expect(fake.hits).toHaveLength(0);
  });

  it('posts a JSON body with a Headers object, as the MCP client does', async () => {
    const fake = await serve((_req, res, hit) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ method: hit.method, body: hit.body, type: hit.headers['content-type'], auth: hit.headers.authorization }));
    });
    const headers = new Headers({ 'content-type': 'application/json', authorization: 'Bearer t' });
    const res = await egressFetch(policy())(`${fake.origin}/mcp`, { method: 'POST', headers, body: '{"jsonrpc":"2.0"}' });
    expect(await res.json()).toEqual({ method: 'POST', body: '{"jsonrpc":"2.0"}', type: 'application/json', auth: 'Bearer t' });
  });

  it('errors the body stream once it passes the byte cap, and hangs up', async () => {
    const fake = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const timer = setInterval(() => res.write(`data: ${'x'.repeat(100)}\n\n`), 10);
      res.on('close', () => clearInterval(timer));
    });
    const res = await egressFetch(policy({ maxResponseBytes: 500 }))(`${fake.origin}/`);
    const err = await failure(res.text());
    expect(err.code).toBe('response_too_large');
    await fake.socketClosed;
  });

  it('refuses a declared Content-Length over the cap before reading', async () => {
    const fake = await serve((_req, res) => {
      res.setHeader('content-length', '1000');
      res.end(Buffer.alloc(1000));
    });
    await expectCode(egressFetch(policy({ maxResponseBytes: 10 }))(`${fake.origin}/`), 'response_too_large');
  });

  it('refuses a cross-origin redirect when the request has an Authorization header, but follows it otherwise', async () => {
    const other = await serve(ok('other origin'));
    const first = await serve((_req, res) => {
      res.statusCode = 307;
      res.setHeader('location', `${other.origin}/landing`);
      res.end();
    });
    const guarded = egressFetch(policy());
    await expectCode(guarded(`${first.origin}/`, { headers: { Authorization: 'Bearer t' } }), 'redirect_refused');
    expect(other.hits).toHaveLength(0);
    const res = await guarded(`${first.origin}/`);
    expect(await res.text()).toBe('other origin');
    expect(res.url).toBe(`${other.origin}/landing`);
  });

  it('gives up with too_many_redirects and turns a 303 into a GET', async () => {
    const loop = await serve((req, res) => {
      res.statusCode = 302;
      res.setHeader('location', `${req.url}x`);
      res.end();
    });
    await expectCode(egressFetch(policy({ maxRedirects: 2 }))(`${loop.origin}/`), 'too_many_redirects');
    expect(loop.hits).toHaveLength(3);

    const seeOther = await serve((req, res, hit) => {
      if (req.url === '/form') {
        res.statusCode = 303;
        res.setHeader('location', '/done');
        res.end();
      } else res.end(`${hit.method} ${hit.body.length}`);
    });
    const res = await egressFetch(policy())(`${seeOther.origin}/form`, { method: 'POST', body: 'a=1' });
    expect(await res.text()).toBe('GET 0');
  });

  it('refuses header injection and times out a silent server', async () => {
    const fake = await serve(() => {});
    const guarded = egressFetch(policy({ timeoutMs: 300 }));
    await expectCode(guarded(`${fake.origin}/`, { headers: { 'x-a': 'b\r\nx-injected: 1' } }), 'invalid_request');
    expect(fake.hits).toHaveLength(0);
    const started = Date.now();
    await expectCode(guarded(`${fake.origin}/`), 'timeout');
    expect(Date.now() - started).toBeLessThan(300 + 4_000);
  });

  it('returns a 204 with no body', async () => {
    const fake = await serve((_req, res) => {
      res.statusCode = 204;
      res.end();
    });
    const res = await egressFetch(policy())(`${fake.origin}/`, { method: 'DELETE' });
    expect(res.status).toBe(204);
    expect(res.body).toBeNull();
  });

  it('carries an MCP client session (initialize, list and call a tool) over the streamable HTTP transport', async () => {
    const fake = await serve((req, res, hit) => {
      const mcp = new McpServer({ name: 'fake', version: '1.0.0' });
      mcp.registerTool('echo', { inputSchema: { text: z.string() } }, ({ text }) => ({ content: [{ type: 'text', text: `echo: ${text}` }] }));
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      res.on('close', () => {
        void transport.close();
        void mcp.close();
      });
      void mcp.connect(transport).then(() => transport.handleRequest(req, res, hit.body ? JSON.parse(hit.body) : undefined));
    });
    const client = new Client({ name: 'hangar-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${fake.origin}/mcp`), { fetch: egressFetch(policy()) }));
    const tools = await client.listTools();
    expect(tools.tools.map((t) => t.name)).toEqual(['echo']);
    const result = await client.callTool({ name: 'echo', arguments: { text: 'hi' } });
    expect(result.content).toEqual([{ type: 'text', text: 'echo: hi' }]);
    await client.close();
  });
});
