import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Ajv } from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HTTP_REQUEST_INPUT, httpRequestFromArgs, httpRequestOutput } from './http-request.js';
import { type RawResponse, ToolArgumentError } from './http-tool.js';
import { WEB_SEARCH_INPUT } from './search.js';

/** A loopback server: `/echo` answers with the request it received, `/png` with bytes, `/text` with text. */
let server: Server;
let base: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.url === '/png') return res.writeHead(200, { 'content-type': 'image/png' }).end(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2]));
      if (req.url === '/text') return res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('not here');
      res
        .writeHead(201, { 'content-type': 'application/json', 'x-long': 'v'.repeat(5000) })
        .end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString() }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

async function call(args: Record<string, unknown>) {
  const req = httpRequestFromArgs(args);
  const res = await fetch(req.url, { method: req.method, headers: req.headers, body: req.body });
  const raw: RawResponse = { status: res.status, headers: Object.fromEntries(res.headers), body: Buffer.from(await res.arrayBuffer()) };
  return httpRequestOutput(raw);
}

describe('httpRequestFromArgs', () => {
  it('makes the request the model asked for', async () => {
    const out = await call({
      method: 'post',
      url: `${base}/echo?a=1#frag`,
      headers: { 'Content-Type': 'application/json', Authorization: 'Bearer model-written', Cookie: 'c=1' },
      body: '{"x":1}',
    });
    expect(out.status).toBe(201);
    const body = out.body as { method: string; url: string; headers: Record<string, string>; body: string };
    expect(body).toMatchObject({ method: 'POST', url: '/echo?a=1', body: '{"x":1}' });
    expect(body.headers).toMatchObject({ 'content-type': 'application/json', authorization: 'Bearer model-written', cookie: 'c=1' });
    expect(out.headers['content-type']).toBe('application/json');
  });

  it('defaults to GET with no headers and no body', () => {
    expect(httpRequestFromArgs({ url: 'https://example.com/a b' })).toEqual({ method: 'GET', url: 'https://example.com/a%20b', headers: {} });
  });

  it.each([
    [{}, 'url: a string is required'],
    [{ url: 'example.com/x' }, 'url: not a valid absolute URL'],
    [{ url: 'ftp://example.com/x' }, 'only http:// and https://'],
    [{ url: 'file:///etc/passwd' }, 'only http:// and https://'],
    [{ url: 'javascript:alert(1)' }, 'only http:// and https://'],
    [{ url: 'https://user:pw@example.com/' }, 'user:password@'],
    [{ url: 'https://user@example.com/' }, 'user:password@'],
    [{ url: `https://example.com/${'a'.repeat(2048)}` }, 'at most 2048'],
    [{ url: 'https://example.com', method: 'TRACE' }, 'method: one of'],
    [{ url: 'https://example.com', method: 1 }, 'method: one of'],
    [{ url: 'https://example.com', body: 'x' }, 'a GET request has no body'],
    [{ url: 'https://example.com', method: 'HEAD', body: 'x' }, 'a HEAD request has no body'],
    [{ url: 'https://example.com', method: 'POST', body: { a: 1 } }, 'body: a string'],
    [{ url: 'https://example.com', method: 'POST', body: 'é'.repeat(131_073) }, 'at most 256 KiB'],
    [{ url: 'https://example.com', headers: [] }, 'headers: an object'],
    [{ url: 'https://example.com', headers: { 'X-A': 1 } }, 'must be a string'],
    [{ url: 'https://example.com', headers: { 'X-A': 'a\r\nX-Injected: 1' } }, 'line break'],
    [{ url: 'https://example.com', headers: { 'X-A': 'a\nb' } }, 'line break'],
    [{ url: 'https://example.com', headers: { 'X-A': 'a\u0000b' } }, 'line break'],
    [{ url: 'https://example.com', headers: { 'X-A\r\nX-B': 'b' } }, 'not a valid header name'],
    [{ url: 'https://example.com', headers: { 'X A': 'b' } }, 'not a valid header name'],
    [{ url: 'https://example.com', headers: { ':authority': 'evil' } }, 'not a valid header name'],
    [{ url: 'https://example.com', headers: { 'X-A': 'x'.repeat(8193) } }, 'longer than 8192'],
    [{ url: 'https://example.com', headers: { 'x-a': '1', 'X-A': '2' } }, 'given twice'],
    [{ url: 'https://example.com', headers: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`x-${i}`, 'v'])) }, 'at most 50'],
    [{ url: 'https://example.com', timeout: 5 }, 'unknown argument "timeout"'],
  ])('refuses %j', (args, message) => {
    expect(() => httpRequestFromArgs(args)).toThrow(ToolArgumentError);
    expect(() => httpRequestFromArgs(args)).toThrow(message);
  });

  it.each([
    ['Host'],
    ['content-length'],
    ['Transfer-Encoding'],
    ['Connection'],
    ['Keep-Alive'],
    ['Upgrade'],
    ['TE'],
    ['Trailer'],
    ['Expect'],
    ['Proxy-Authorization'],
    ['Proxy-Foo'],
  ])('refuses the framing or routing header %s', (name) => {
    expect(() => httpRequestFromArgs({ url: 'https://example.com', method: 'POST', headers: { [name]: 'x' } })).toThrow(
      `headers: "${name}" is set by the HTTP client`,
    );
  });

  it('accepts what its own schema accepts, and the schemas compile', () => {
    const ajv = new Ajv({ strict: false });
    const valid = ajv.compile(HTTP_REQUEST_INPUT);
    const args = { method: 'PUT', url: 'https://example.com/x', headers: { 'X-A': 'b' }, body: 'hi' };
    expect(valid(args)).toBe(true);
    expect(valid({ url: 'ftp://example.com/x' })).toBe(false);
    expect(httpRequestFromArgs(args)).toEqual({ method: 'PUT', url: 'https://example.com/x', headers: { 'X-A': 'b' }, body: 'hi' });
    const search = ajv.compile(WEB_SEARCH_INPUT);
    expect(search({ query: 'x', count: 20 })).toBe(true);
    expect(search({ query: 'x', count: 21 })).toBe(false);
  });
});

describe('httpRequestOutput', () => {
  it('answers JSON parsed, headers lower-cased and bounded', async () => {
    const out = await call({ url: `${base}/echo` });
    expect((out.body as { method: string }).method).toBe('GET');
    expect(out.headers['x-long']).toMatch(/^v+… \[\d+ more characters cut\]$/);
    expect(out.headers['x-long']!.length).toBeLessThanOrEqual(1024);
  });

  it('answers text as text, whatever the status', async () => {
    expect(await call({ url: `${base}/text` })).toMatchObject({ status: 404, body: 'not here' });
  });

  it('describes a binary body instead of returning its bytes', async () => {
    expect((await call({ url: `${base}/png` })).body).toBe('[binary body: 7 bytes, image/png]');
    const unlabelled: RawResponse = { status: 200, headers: {}, body: Buffer.from([0xff, 0xfe, 0x00]) };
    expect(httpRequestOutput(unlabelled).body).toBe('[binary body: 3 bytes]');
  });

  it('caps a large body at 64 KiB of JSON, keeping its structure', () => {
    const big = { rows: Array.from({ length: 20_000 }, (_, i) => ({ i, s: 'row' })) };
    const out = httpRequestOutput({ status: 200, headers: { 'Content-Type': 'application/json' }, body: Buffer.from(JSON.stringify(big)) });
    const rows = (out.body as { rows: unknown[] }).rows;
    expect(JSON.stringify(out.body).length).toBeLessThanOrEqual(64 * 1024);
    expect(rows[0]).toEqual({ i: 0, s: 'row' });
    expect(rows.at(-1)).toMatch(/more items cut, 20000 in all/);
  });

  it('caps a large text body at 64 KiB', () => {
    const out = httpRequestOutput({ status: 200, headers: { 'content-type': 'text/plain' }, body: Buffer.alloc(200_000, 'a') });
    expect((out.body as string).length).toBeLessThanOrEqual(64 * 1024);
    expect(out.body).toMatch(/more characters cut\]$/);
  });

  it('answers an empty body as an empty string', () => {
    expect(httpRequestOutput({ status: 204, headers: {}, body: Buffer.alloc(0) })).toEqual({ status: 204, headers: {}, body: '' });
  });
});
