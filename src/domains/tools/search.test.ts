import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError } from '../../platform/http/errors.js';
import type { BuiltRequest, RawResponse } from './http-tool.js';
import { braveSearch, SearchProviderError, WEB_SEARCH_INPUT } from './search.js';

const KEY = 'BSA-test-key-0123456789';

/** The loopback stand-in for api.search.brave.com: the key decides the behaviour, the query is echoed in results. */
let server: Server;
let url: string;
const seen: { url: string; headers: IncomingMessage['headers'] }[] = [];

function answer(req: IncomingMessage, res: ServerResponse) {
  seen.push({ url: req.url ?? '', headers: req.headers });
  const q = new URL(req.url ?? '/', 'http://x').searchParams;
  const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
    res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(typeof body === 'string' ? body : JSON.stringify(body));
  const token = req.headers['x-subscription-token'];
  const error = (status: number, code: string, detail: string) =>
    json(status, { type: 'ErrorResponse', error: { id: 'e1', status, code, detail, meta: {} }, time: 1 });
  if (token === 'wrong') return error(401, 'SUBSCRIPTION_TOKEN_INVALID', `The provided subscription token ${token} is invalid.`);
  if (token === 'forbidden') return error(403, 'OPTION_NOT_IN_PLAN', 'The option is not subscribed in the plan.');
  if (token === 'busy') return error(429, 'RATE_LIMITED', 'Request rate limit exceeded for plan.');
  if (token === 'busy-retry') return json(429, { error: { detail: 'slow down' } }, { 'retry-after': '7' });
  if (token === 'broken') return error(503, 'UNAVAILABLE', 'Search is temporarily <b>unavailable</b>.');
  if (token === 'garbage') return res.writeHead(200, { 'content-type': 'application/json' }).end('{"web": {"results": [');
  if (token === 'html') return res.writeHead(200, { 'content-type': 'text/html' }).end('<html>maintenance</html>');
  if (token === 'not-a-list') return json(200, { type: 'search', web: { results: { title: 'x' } } });
  if (token === 'no-web') return json(200, { type: 'search', query: { original: q.get('q') } });
  if (token === 'many')
    return json(200, {
      type: 'search',
      web: {
        type: 'search',
        results: Array.from({ length: 30 }, (_, i) => ({ title: `T${i}`, url: `https://example.com/${i}`, description: `D${i}` })),
      },
    });
  return json(200, {
    type: 'search',
    query: { original: q.get('q') },
    web: {
      type: 'search',
      results: [
        {
          title: 'Brave <strong>Search</strong> API &amp; more',
          url: 'https://brave.com/search/api/',
          description: 'Power your app with <strong>Brave</strong>&#x27;s index &quot;of&quot; the web&#39;s pages&nbsp;— &lt;fast&gt;',
          is_source_local: false,
          profile: { name: 'Brave' },
        },
        { title: 'No URL', description: 'skipped' },
        { title: 'Script', url: 'javascript:alert(1)', description: 'skipped' },
        { title: 'x'.repeat(1000), url: 'http://example.org/long', description: 'd'.repeat(5000) },
        { url: 'https://example.net/bare' },
        'not an object',
      ],
    },
  });
}

beforeAll(async () => {
  server = createServer(answer);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/res/v1/web/search`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

/** The injected network call, made for real against the loopback server. */
async function send(req: BuiltRequest): Promise<RawResponse> {
  const res = await fetch(req.url, { method: req.method, headers: req.headers, body: req.body });
  return { status: res.status, headers: Object.fromEntries(res.headers), body: Buffer.from(await res.arrayBuffer()) };
}

async function failure(apiKey: string): Promise<SearchProviderError> {
  try {
    await braveSearch(send, { url, apiKey }, { query: 'q' });
  } catch (err) {
    return err as SearchProviderError;
  }
  throw new Error('the search did not fail');
}

describe('braveSearch', () => {
  it('asks Brave with q, count and the key header, and answers plain-text results', async () => {
    const out = await braveSearch(send, { url, apiKey: KEY }, { query: '  hangar & agents?  ', count: 5 });
    const req = seen.at(-1)!;
    const params = new URL(req.url, 'http://x').searchParams;
    expect(params.get('q')).toBe('hangar & agents?');
    expect(params.get('count')).toBe('5');
    expect(req.headers['x-subscription-token']).toBe(KEY);
    expect(req.headers.accept).toBe('application/json');
    expect(out.results).toHaveLength(3);
    expect(out.results[0]).toEqual({
      title: 'Brave Search API & more',
      url: 'https://brave.com/search/api/',
      description: 'Power your app with Brave\'s index "of" the web\'s pages — <fast>',
    });
    expect(out.results[1]!.title).toHaveLength(300);
    expect(out.results[1]!.description).toHaveLength(1000);
    expect(out.results[2]).toEqual({ title: '', url: 'https://example.net/bare', description: '' });
  });

  it('defaults count to 10 and never returns more than asked, nor more than 20', async () => {
    expect((await braveSearch(send, { url, apiKey: 'many' }, { query: 'x' })).results).toHaveLength(10);
    expect(new URL(seen.at(-1)!.url, 'http://x').searchParams.get('count')).toBe('10');
    expect((await braveSearch(send, { url, apiKey: 'many' }, { query: 'x', count: 20 })).results).toHaveLength(20);
    expect((await braveSearch(send, { url, apiKey: 'many' }, { query: 'x', count: 3 })).results.map((r) => r.title)).toEqual(['T0', 'T1', 'T2']);
  });

  it('answers no results when Brave has no web section', async () => {
    expect(await braveSearch(send, { url, apiKey: 'no-web' }, { query: 'x' })).toEqual({ results: [] });
  });

  it.each([
    ['wrong', 401],
    ['forbidden', 403],
  ])('a refused key (%s) is a provider error that never shows the key', async (apiKey, status) => {
    const err = await failure(apiKey);
    expect(err).toBeInstanceOf(SearchProviderError);
    expect(err).toBeInstanceOf(AppError);
    expect(err.httpStatus).toBe(status);
    expect(err.status).toBe(502);
    expect(err.message).toContain('the search provider refused the API key');
    expect(err.message).not.toContain(apiKey);
  });

  it('a rate limit is a 429, with the provider retry-after when given', async () => {
    const plain = await failure('busy');
    expect(plain).toMatchObject({ httpStatus: 429, status: 429, code: 'rate_limited' });
    expect(plain.message).toBe('the search provider rate-limited this request');
    const retry = await failure('busy-retry');
    expect(retry.message).toBe('the search provider rate-limited this request; retry after 7 s');
    expect(retry.headers).toEqual({ 'retry-after': '7' });
  });

  it('another failure names the status and the provider detail', async () => {
    const err = await failure('broken');
    expect(err).toMatchObject({ httpStatus: 503, status: 502 });
    expect(err.message).toBe('the search provider answered 503 Service Unavailable: Search is temporarily unavailable.');
  });

  it.each([
    ['garbage', 'not a JSON object'],
    ['html', 'not a JSON object'],
    ['not-a-list', 'web.results that is not a list'],
  ])('a malformed answer (%s) is a clear provider error', async (apiKey, message) => {
    const err = await failure(apiKey);
    expect(err).toBeInstanceOf(SearchProviderError);
    expect(err.httpStatus).toBe(200);
    expect(err.message).toContain(message);
  });

  it.each([
    [{ query: '' }, 'query'],
    [{ query: '   ' }, 'query'],
    [{ query: 'x'.repeat(401) }, 'query'],
    [{ query: 'x', count: 0 }, 'count'],
    [{ query: 'x', count: 21 }, 'count'],
    [{ query: 'x', count: 2.5 }, 'count'],
    [{ query: 42 as unknown as string }, 'query'],
  ])('refuses the arguments %j before any request', async (args, field) => {
    const before = seen.length;
    await expect(braveSearch(send, { url, apiKey: KEY }, args)).rejects.toMatchObject({ status: 400, message: expect.stringContaining(field) });
    expect(seen.length).toBe(before);
  });

  it('publishes its input schema', () => {
    expect(WEB_SEARCH_INPUT).toMatchObject({
      type: 'object',
      required: ['query'],
      properties: { query: { type: 'string', minLength: 1, maxLength: 400 }, count: { type: 'integer', minimum: 1, maximum: 20 } },
    });
  });
});
