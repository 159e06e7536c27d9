import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpExecution, type HttpExecution as HttpExecutionT } from './definition.js';
import { type BuiltRequest, buildRequest, capOutput, mapResponse, type RawResponse, ToolArgumentError } from './http-tool.js';

/** A loopback server that answers with what it received, so the tests see the request as a provider would. */
interface Seen {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}
let server: Server;
let base: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const seen: Seen = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString() };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(seen));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

async function send(req: BuiltRequest): Promise<Seen> {
  const res = await fetch(req.url, { method: req.method, headers: req.headers, body: req.body });
  return (await res.json()) as Seen;
}

function ex(partial: Partial<HttpExecutionT> & { url: string }): HttpExecutionT {
  return HttpExecution.parse({ type: 'http', method: 'GET', ...partial });
}

const CREDS = { apiKey: 'sk-secret-123' };

describe('buildRequest: the URL path', () => {
  const attempts: [string, string][] = [
    ['../admin', '/v1/users/..%2Fadmin/posts'],
    ['a/b', '/v1/users/a%2Fb/posts'],
    ['x?admin=1', '/v1/users/x%3Fadmin%3D1/posts'],
    ['x#frag', '/v1/users/x%23frag/posts'],
    ['@evil.example', '/v1/users/%40evil.example/posts'],
    ['//evil.example', '/v1/users/%2F%2Fevil.example/posts'],
    ['\\\\evil.example', '/v1/users/%5C%5Cevil.example/posts'],
    ['%2e%2e', '/v1/users/%252e%252e/posts'],
    ['a b&c', '/v1/users/a%20b%26c/posts'],
    ['{{credentials.apiKey}}', '/v1/users/%7B%7Bcredentials.apiKey%7D%7D/posts'],
    ['é', '/v1/users/%C3%A9/posts'],
  ];
  it.each(attempts)('keeps %j inside one path segment', async (value, expected) => {
    const req = buildRequest(ex({ url: `${base}/v1/users/{{args.id}}/posts`, passArgs: false }), { id: value }, CREDS);
    expect(new URL(req.url).origin).toBe(base);
    expect((await send(req)).url).toBe(expected);
  });

  it.each([['.'], ['..']])('refuses the dot segment %j, which the URL parser would resolve', (value) => {
    expect(() => buildRequest(ex({ url: `${base}/v1/users/{{args.id}}` }), { id: value }, CREDS)).toThrow(/may not be "\." or "\.\."/);
  });

  it.each([
    ['%2E', '/v1/users/%252E'],
    ['.%2e', '/v1/users/.%252e'],
    ['...', '/v1/users/...'],
  ])('sends %j as a literal segment, not a dot segment', async (value, expected) => {
    expect((await send(buildRequest(ex({ url: `${base}/v1/users/{{args.id}}`, passArgs: false }), { id: value }, CREDS))).url).toBe(expected);
  });

  it('names a missing path argument, and refuses an empty one', () => {
    const def = ex({ url: `${base}/v1/users/{{args.id}}/posts/{{args.post}}` });
    expect(() => buildRequest(def, { id: 'u1' }, CREDS)).toThrow(ToolArgumentError);
    expect(() => buildRequest(def, { id: 'u1' }, CREDS)).toThrow('missing argument "post"');
    expect(() => buildRequest(def, { id: '', post: 'p' }, CREDS)).toThrow('argument "id" is empty');
  });

  it('ignores inherited properties: {{args.constructor}} is absent, not Object', () => {
    expect(() => buildRequest(ex({ url: `${base}/v1/{{args.constructor}}` }), {}, CREDS)).toThrow('missing argument "constructor"');
  });

  it('writes non-string values as JSON', async () => {
    const req = buildRequest(ex({ url: `${base}/v1/items/{{args.n}}/{{args.flag}}`, passArgs: false }), { n: 42, flag: true }, CREDS);
    expect((await send(req)).url).toBe('/v1/items/42/true');
  });

  it.each([
    ['.evil.example', 'another host'],
    ['-mirror.example', 'another host'],
    [':8081', 'valid URL'],
    ['@evil.example', 'valid URL'],
  ])('a placeholder right after the host cannot move the request (%j)', (value, message) => {
    // checkEntry refuses such a template, but a definition that slipped past it still cannot be steered.
    const def = ex({ url: 'https://api.example.com{{args.x}}' });
    expect(() => buildRequest(def, { x: value }, CREDS)).toThrow(message);
  });

  it('refuses a lone surrogate instead of crashing', () => {
    expect(() => buildRequest(ex({ url: `${base}/v1/{{args.x}}` }), { x: '\ud800' }, CREDS)).toThrow(ToolArgumentError);
  });
});

describe('buildRequest: the query', () => {
  const attempts: [string, string][] = [
    ['a&admin=1', 'a&admin=1'],
    ['x#y', 'x#y'],
    ['100%', '100%'],
    ['a=b', 'a=b'],
    ['line\r\nbreak', 'line\r\nbreak'],
    ['{{credentials.apiKey}}', '{{credentials.apiKey}}'],
  ];
  it.each(attempts)('keeps %j as one query value (query map and URL template)', async (value, expected) => {
    const def = ex({ url: `${base}/search?lang=en&q={{args.q}}`, query: { extra: '{{args.q}}' }, passArgs: false });
    const seen = await send(buildRequest(def, { q: value }, CREDS));
    const params = new URL(seen.url, base).searchParams;
    expect(params.get('q')).toBe(expected);
    expect(params.get('extra')).toBe(expected);
    expect(params.get('lang')).toBe('en');
    expect(params.get('admin')).toBeNull();
    expect([...params.keys()].sort()).toEqual(['extra', 'lang', 'q']);
  });

  it('omits a parameter whose template is empty for want of an argument, keeps a partly filled one', async () => {
    const def = ex({
      url: `${base}/search?page={{args.page}}&fixed=`,
      query: { q: '{{args.q}}', sort: 'by-{{args.sort}}', key: '{{credentials.apiKey}}' },
      passArgs: false,
    });
    const params = new URL((await send(buildRequest(def, { q: 'cats' }, CREDS))).url, base).searchParams;
    expect(Object.fromEntries(params)).toEqual({ fixed: '', q: 'cats', sort: 'by-', key: 'sk-secret-123' });
  });

  it('passes unused arguments to the query of a GET, JSON for non-strings, the definition winning', async () => {
    const def = ex({ url: `${base}/v1/{{args.id}}`, query: { limit: '10' } });
    const seen = await send(buildRequest(def, { id: 'a', limit: 99, tags: ['x', 'y'], deep: { n: 1 }, on: false }, CREDS));
    const params = new URL(seen.url, base).searchParams;
    expect(Object.fromEntries(params)).toEqual({ limit: '10', tags: '["x","y"]', deep: '{"n":1}', on: 'false' });
    expect(seen.body).toBe('');
  });

  it('passes unused arguments to the query of a DELETE, and nowhere when passArgs is false', async () => {
    const del = await send(buildRequest(ex({ url: `${base}/v1/x`, method: 'DELETE' }), { force: true }, CREDS));
    expect(del.url).toBe('/v1/x?force=true');
    const off = await send(buildRequest(ex({ url: `${base}/v1/x`, passArgs: false }), { force: true }, CREDS));
    expect(off.url).toBe('/v1/x');
  });
});

describe('buildRequest: headers', () => {
  it.each([['a\r\nX-Injected: 1'], ['a\nX-Injected: 1'], ['a\rb'], ['a\u0000b'], ['a\u007fb'], ['日本']])('refuses %j in a header value', (value) => {
    const def = ex({ url: `${base}/v1`, headers: { 'X-Title': 'T {{args.title}}' } });
    expect(() => buildRequest(def, { title: value }, CREDS)).toThrow(ToolArgumentError);
    expect(() => buildRequest(def, { title: value }, CREDS)).toThrow('header "X-Title"');
  });

  it('refuses a credential with a line break without showing it', () => {
    const def = ex({ url: `${base}/v1`, headers: { Authorization: 'Bearer {{credentials.apiKey}}' } });
    const err = (() => {
      try {
        buildRequest(def, {}, { apiKey: 'k\r\nX: y' });
      } catch (e) {
        return e as Error;
      }
    })();
    expect(err).toBeInstanceOf(ToolArgumentError);
    expect(err?.message).not.toContain('k\r\n');
  });

  it('fills headers, omits one left empty for want of a value, and sends them as written', async () => {
    const def = ex({
      url: `${base}/v1`,
      headers: {
        Authorization: 'Bearer {{credentials.apiKey}}',
        'X-Trace': '{{args.trace}}',
        'X-Opt': '{{credentials.optional}}',
        'X-Count': '{{args.n}}',
      },
      passArgs: false,
    });
    const seen = await send(buildRequest(def, { n: 3, trace: 'Café {{credentials.apiKey}}' }, CREDS));
    expect(seen.headers.authorization).toBe('Bearer sk-secret-123');
    expect(seen.headers['x-count']).toBe('3');
    expect(seen.headers['x-opt']).toBeUndefined();
    expect(buildRequest(def, { trace: 'Café {{credentials.apiKey}}' }, CREDS).headers['X-Trace']).toBe('Café {{credentials.apiKey}}');
    expect(buildRequest(def, {}, CREDS).headers).toEqual({ Authorization: 'Bearer sk-secret-123' });
  });
});

describe('buildRequest: the body', () => {
  it('keeps the JSON type of a whole-placeholder value and substitutes inside strings', async () => {
    const def = ex({
      url: `${base}/v1/items`,
      method: 'POST',
      body: {
        n: '{{args.n}}',
        on: '{{ args.on }}',
        obj: '{{args.obj}}',
        list: ['{{args.n}}', 'x-{{args.s}}'],
        label: 'n={{args.n}}',
        fixed: 7,
        nul: null,
      },
      passArgs: false,
    });
    const seen = await send(buildRequest(def, { n: 5, on: false, obj: { a: [1] }, s: 'y' }, CREDS));
    expect(seen.method).toBe('POST');
    expect(seen.headers['content-type']).toBe('application/json');
    expect(JSON.parse(seen.body)).toEqual({ n: 5, on: false, obj: { a: [1] }, list: [5, 'x-y'], label: 'n=5', fixed: 7, nul: null });
  });

  it('omits fields and list elements whose argument is absent', () => {
    const def = ex({
      url: `${base}/v1`,
      method: 'POST',
      body: { a: '{{args.a}}', b: 'pre-{{args.b}}', c: ['{{args.c}}', 1], d: { e: '{{args.e}}' } },
      passArgs: false,
    });
    expect(JSON.parse(buildRequest(def, {}, CREDS).body!)).toEqual({ c: [1], d: {} });
  });

  it.each([['"}, "admin": true, "x": {"'], ['{{credentials.apiKey}}'], ['\u0000\r\n']])('keeps %j a string value inside its field', (value) => {
    const def = ex({ url: `${base}/v1`, method: 'POST', body: { name: 'Dr {{args.name}}', raw: '{{args.name}}' }, passArgs: false });
    const body = JSON.parse(buildRequest(def, { name: value }, CREDS).body!);
    expect(body).toEqual({ name: `Dr ${value}`, raw: value });
  });

  it('adds unused arguments to the body of a POST, the definition winning, and keeps a definition __proto__ key as data', () => {
    // Built by hand: zod's record parsing drops a __proto__ key, a hand-made definition object may not.
    const def: HttpExecutionT = {
      ...ex({ url: `${base}/v1/{{args.id}}`, method: 'PATCH' }),
      body: JSON.parse('{"model":"fixed","__proto__":{"polluted":true}}'),
    };
    const body = JSON.parse(buildRequest(def, { id: 'i', model: 'other', temperature: 0.5 }, CREDS).body!);
    expect(body).toEqual({ model: 'fixed', temperature: 0.5, ['__proto__']: { polluted: true } });
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('sends no body when there is nothing to send', () => {
    const req = buildRequest(ex({ url: `${base}/v1`, method: 'POST' }), {}, CREDS);
    expect(req.body).toBeUndefined();
    expect(req.headers['Content-Type']).toBeUndefined();
  });

  it('sends a form, repeating the key of a list, when bodyType is form', async () => {
    const def = ex({ url: `${base}/v1`, method: 'POST', bodyType: 'form', body: { amount: '{{args.amount}}', note: 'a&b={{args.note}}' } });
    const seen = await send(buildRequest(def, { amount: 100, note: 'c&d=e', tags: ['x', 'y'], meta: { k: 1 } }, CREDS));
    expect(seen.headers['content-type']).toBe('application/x-www-form-urlencoded');
    const form = new URLSearchParams(seen.body);
    expect(form.get('amount')).toBe('100');
    expect(form.get('note')).toBe('a&b=c&d=e');
    expect(form.getAll('tags')).toEqual(['x', 'y']);
    expect(form.get('meta')).toBe('{"k":1}');
  });

  it("keeps the definition's Content-Type", () => {
    const def = ex({ url: `${base}/v1`, method: 'POST', headers: { 'content-type': 'application/vnd.api+json' }, body: { a: 1 } });
    expect(buildRequest(def, {}, CREDS).headers).toEqual({ 'content-type': 'application/vnd.api+json' });
  });
});

function res(status: number, body: string | Buffer, contentType?: string): RawResponse {
  return { status, headers: contentType ? { 'Content-Type': contentType } : {}, body: Buffer.isBuffer(body) ? body : Buffer.from(body) };
}

describe('mapResponse', () => {
  const plain = ex({ url: 'https://api.example.com/v1' });
  const withPath = (path: string) => ex({ url: 'https://api.example.com/v1', response: { path } });
  const items = JSON.stringify({ data: { items: [{ name: 'a' }, { name: 'b', tags: ['t'] }] } });

  it.each([
    ['data.items.1.name', 'b'],
    ['data.items.1.tags.0', 't'],
    ['data.items.0', { name: 'a' }],
    ['data', { items: [{ name: 'a' }, { name: 'b', tags: ['t'] }] }],
  ])('applies the path %s', (path, expected) => {
    expect(mapResponse(withPath(path), res(200, items, 'application/json'))).toEqual({ ok: true, output: expected, httpStatus: 200 });
  });

  it.each([
    ['data.items.2.name', 'is a list of 2, "2" is not an index'],
    ['data.items.x', '"x" is not an index'],
    ['data.nope', 'no "nope" at data'],
    ['data.items.0.name.first', 'no "first" at data.items.0.name (a string)'],
    ['data.constructor', 'no "constructor" at data'],
  ])('says where the path %s stops', (path, message) => {
    const out = mapResponse(withPath(path), res(200, items, 'application/json'));
    expect(out.ok).toBe(false);
    expect(out.error).toContain(`response.path "${path}" does not exist`);
    expect(out.error).toContain(message);
  });

  it('reads JSON by content type or by shape, and text otherwise', () => {
    expect(mapResponse(plain, res(200, '{"a":1}', 'application/problem+json')).output).toEqual({ a: 1 });
    expect(mapResponse(plain, res(200, ' [1,2]', 'text/plain')).output).toEqual([1, 2]);
    expect(mapResponse(plain, res(200, '42', 'text/plain')).output).toBe('42');
    expect(mapResponse(plain, res(200, '42', 'application/json; charset=utf-8')).output).toBe(42);
    expect(mapResponse(plain, res(200, '{not json', 'application/json')).output).toBe('{not json');
    expect(mapResponse(plain, res(200, Buffer.from([0x68, 0x69, 0xff]), 'text/plain')).output).toBe('hi\ufffd');
    expect(mapResponse(plain, res(204, ''))).toEqual({ ok: true, output: null, httpStatus: 204 });
  });

  it('cannot apply a path to text', () => {
    const out = mapResponse(withPath('a'), res(200, 'hello', 'text/plain'));
    expect(out).toMatchObject({ ok: false, output: 'hello', error: 'response.path "a" cannot apply: the answer is not JSON' });
  });

  it.each([
    [400, '{"message":"name is required"}', 'application/json', '400 Bad Request: name is required'],
    [401, '{"error":"invalid_token","error_description":"expired"}', 'application/json', '401 Unauthorized: invalid_token'],
    [400, '{"error_description":"bad grant"}', 'application/json', '400 Bad Request: bad grant'],
    [404, '{"error":{"message":"No such customer"}}', 'application/json', '404 Not Found: No such customer'],
    [422, '{"error":{"code":"VALIDATION","detail":"count too large"}}', 'application/json', '422 Unprocessable Entity: count too large'],
    [403, '{"detail":"Not allowed"}', 'application/problem+json', '403 Forbidden: Not allowed'],
    [500, '<h1>Oops</h1>\n  crashed', 'text/html', '500 Internal Server Error: <h1>Oops</h1> crashed'],
    [502, '', undefined, '502 Bad Gateway'],
    [599, 'x', 'text/plain', '599 Unknown Status: x'],
  ])('a %i answer becomes an error with the provider message', (status, body, type, error) => {
    const out = mapResponse(withPath('data'), res(status, body, type));
    expect(out.ok).toBe(false);
    expect(out.httpStatus).toBe(status);
    expect(out.error).toBe(error);
  });

  it('quotes at most 300 characters of a provider text', () => {
    const out = mapResponse(plain, res(503, 'x'.repeat(5000), 'text/plain'));
    expect(out.error).toBe(`503 Service Unavailable: ${'x'.repeat(300)}…`);
  });
});

describe('capOutput', () => {
  it('leaves what fits alone', () => {
    const v = { a: [1, 2, 3], s: 'short' };
    expect(capOutput(v)).toBe(v);
    expect(capOutput('x'.repeat(65536))).toBe('x'.repeat(65536));
    expect(capOutput(null)).toBeNull();
    expect(capOutput(7)).toBe(7);
  });

  it.each([[100], [1000], [65536]])('cuts a long string to %i characters with a marker', (max) => {
    const out = capOutput('y'.repeat(200_000), max) as string;
    expect(out.length).toBeLessThanOrEqual(max);
    expect(out).toMatch(/… \[\d+ more characters cut\]$/);
    const kept = out.indexOf('…');
    expect(out).toContain(`[${200_000 - kept} more characters cut]`);
  });

  it('never splits a surrogate pair', () => {
    const out = capOutput('😀'.repeat(100), 101) as string;
    expect(out.length).toBeLessThanOrEqual(101);
    expect(out.replace(/😀/g, '')).toMatch(/^… \[/);
  });

  it('keeps the structure of a long list, with a count of what was cut', () => {
    const list = Array.from({ length: 10_000 }, (_, i) => ({ id: i, name: `item ${i}` }));
    const out = capOutput({ total: 10_000, items: list }, 4096) as { total: number; items: unknown[] };
    expect(JSON.stringify(out).length).toBeLessThanOrEqual(4096);
    expect(out.total).toBe(10_000);
    expect(out.items[0]).toEqual({ id: 0, name: 'item 0' });
    expect(out.items.at(-1)).toMatch(/^… \[\d+ more items cut, 10000 in all\]$/);
  });

  it('cuts a long string inside an object and keeps the other fields', () => {
    const out = capOutput({ title: 'T', content: 'z'.repeat(100_000) }, 2000) as { title: string; content: string };
    expect(JSON.stringify(out).length).toBeLessThanOrEqual(2000);
    expect(out.title).toBe('T');
    expect(out.content).toMatch(/^z+… \[\d+ more characters cut\]$/);
  });

  it('cuts an object with many keys, keeping a __proto__ key as data', () => {
    const obj: Record<string, number> = JSON.parse('{"__proto__":1}');
    for (let i = 0; i < 5000; i++) obj[`key${i}`] = i;
    const out = capOutput(obj, 1000) as Record<string, unknown>;
    expect(JSON.stringify(out).length).toBeLessThanOrEqual(1000);
    expect(Object.hasOwn(out, '__proto__')).toBe(true);
    expect(out['…']).toMatch(/more keys cut, 5001 in all/);
  });

  it('survives nesting too deep to serialise', () => {
    let deep: unknown = 'bottom';
    for (let i = 0; i < 100_000; i++) deep = [deep];
    const out = capOutput(deep, 5000);
    expect(JSON.stringify(out).length).toBeLessThanOrEqual(5000);
    expect(JSON.stringify(out)).toContain('nested too deep');
  });

  it('falls back to cut JSON text when no structure fits', () => {
    const out = capOutput({ a: 'x'.repeat(1000), b: 'y'.repeat(1000) }, 40);
    expect(typeof out).toBe('string');
    expect((out as string).length).toBeLessThanOrEqual(40);
    expect(out).toMatch(/^\{"a":"x*… \[\d+ more characters cut\]$/);
  });
});
