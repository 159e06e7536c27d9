import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The Brave Web Search API on loopback (`GET /res/v1/web/search?q=&count=`), in its wire format: the key in the
 * `X-Subscription-Token` header, errors as `{"type":"ErrorResponse","error":{id,status,code,detail,meta}}`, results
 * under `web.results`. Scripted queries answer their `results`; any other query a few results made up from it, the
 * same each time. `count` (1..20, default 20) caps the results; outside that range it is a 422, as Brave answers.
 */

export interface SearchResultFixture {
  title: string;
  url: string;
  description: string;
  /** Brave's human-readable age ("2 days ago"); only some results have one. */
  age?: string;
}

export interface SearchServerOptions {
  apiKey: string;
  /** Results by exact query text. */
  results?: Record<string, SearchResultFixture[]>;
}

export interface SearchRequest {
  method: string;
  path: string;
  query: Record<string, string>;
  headers: http.IncomingHttpHeaders;
}

export interface SearchServer {
  /** Base URL, no trailing slash; the endpoint is `${url}/res/v1/web/search`. */
  url: string;
  requests: SearchRequest[];
  close(): Promise<void>;
}

const JSON_TYPE = 'application/json; charset=utf-8';
const MAX_COUNT = 20;

export async function startSearchServer(opts: SearchServerOptions): Promise<SearchServer> {
  const requests: SearchRequest[] = [];

  function handle(req: http.IncomingMessage, res: http.ServerResponse) {
    const parsed = new URL(req.url ?? '/', 'http://loopback');
    const query = Object.fromEntries(parsed.searchParams);
    requests.push({ method: req.method ?? 'GET', path: parsed.pathname, query, headers: req.headers });
    req.resume(); // a GET API: any body is ignored

    if (parsed.pathname !== '/res/v1/web/search') return error(res, 404, 'RESOURCE_NOT_FOUND', 'Resource not found.', {});
    if (req.method !== 'GET') return error(res, 405, 'METHOD_NOT_ALLOWED', 'Method not allowed.', {});
    if (req.headers['x-subscription-token'] !== opts.apiKey)
      return error(res, 401, 'SUBSCRIPTION_TOKEN_INVALID', 'The provided subscription token is invalid.', { component: 'authentication' });

    const q = query.q ?? '';
    if (!q.trim()) return validation(res, { type: 'missing', loc: ['query', 'q'], msg: 'Field required', input: null });
    const count = query.count === undefined ? MAX_COUNT : Number(query.count);
    if (!Number.isInteger(count) || count < 1 || count > MAX_COUNT) {
      return validation(res, {
        type: 'less_than_equal',
        loc: ['query', 'count'],
        msg: `Input should be a valid integer between 1 and ${MAX_COUNT}`,
        input: query.count,
      });
    }

    const found = opts.results?.[q] ?? generated(q);
    const results = found.slice(0, count).map((r) => ({
      type: 'search_result',
      title: r.title,
      url: r.url,
      is_source_local: false,
      is_source_both: false,
      description: r.description,
      ...(r.age ? { age: r.age } : {}),
      language: 'en',
      family_friendly: true,
      meta_url: metaUrl(r.url),
    }));
    send(res, 200, {
      type: 'search',
      query: { original: q, show_strict_warning: false, is_navigational: false, country: 'us', more_results_available: false },
      mixed: { type: 'mixed', main: results.map((_, index) => ({ type: 'web', index, all: false })), top: [], side: [] },
      web: { type: 'search', results, family_friendly: true },
    });
  }

  const server = http.createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    requests,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Three results made up from the query, the same for the same query. */
function generated(q: string): SearchResultFixture[] {
  const slug =
    q
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-|-$/g, '') || 'query';
  return [
    {
      title: `${q} - Wikipedia`,
      url: `https://en.wikipedia.org/wiki/${encodeURIComponent(slug)}`,
      description: `An encyclopedia article about <strong>${q}</strong>.`,
      age: '3 days ago',
    },
    {
      title: `${q}: a beginner's guide`,
      url: `https://guides.example.com/${slug}`,
      description: `Everything you need to know about <strong>${q}</strong>, explained step by step.`,
    },
    {
      title: `Latest news on ${q}`,
      url: `https://news.example.org/topics/${slug}`,
      description: `Recent stories and analysis about <strong>${q}</strong>.`,
      age: '1 week ago',
    },
  ];
}

function metaUrl(u: string): Record<string, string> {
  try {
    const p = new URL(u);
    return { scheme: p.protocol.replace(':', ''), netloc: p.host, hostname: p.hostname, path: p.pathname };
  } catch {
    return {};
  }
}

function validation(res: http.ServerResponse, detail: Record<string, unknown>): void {
  error(res, 422, 'VALIDATION', 'Unable to validate request parameter(s)', { errors: [detail] });
}

function error(res: http.ServerResponse, status: number, code: string, detail: string, meta: Record<string, unknown>): void {
  send(res, status, { type: 'ErrorResponse', error: { id: randomUUID(), status, code, detail, meta }, time: Math.floor(Date.now() / 1000) });
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': JSON_TYPE }).end(JSON.stringify(body));
}
