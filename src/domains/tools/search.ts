/**
 * The `web_search` builtin (ADR 0027) through the Brave Web Search API: `GET <url>?q=..&count=..` with the
 * operator's key in `X-Subscription-Token`, answered by `{ web: { results: [{ title, url, description }] } }`.
 * The request goes out through the injected `send` (the egress guard); this module only speaks the wire format.
 */
import { STATUS_CODES } from 'node:http';
import { AppError } from '../../platform/http/errors.js';
import { type BuiltRequest, decodeBody, type RawResponse, ToolArgumentError } from './http-tool.js';

export const SEARCH_MAX_RESULTS = 20;
const DEFAULT_COUNT = 10;
const QUERY_MAX = 400;
const TITLE_MAX = 300;
const URL_MAX = 2048;
const DESCRIPTION_MAX = 1000;

/** The arguments of `web_search`, as JSON Schema. */
export const WEB_SEARCH_INPUT: Record<string, unknown> = {
  type: 'object',
  properties: {
    query: { type: 'string', minLength: 1, maxLength: QUERY_MAX, description: 'What to search the web for.' },
    count: {
      type: 'integer',
      minimum: 1,
      maximum: SEARCH_MAX_RESULTS,
      default: DEFAULT_COUNT,
      description: `How many results to return (1 to ${SEARCH_MAX_RESULTS}).`,
    },
  },
  required: ['query'],
  additionalProperties: false,
};

/**
 * The search provider failed. `httpStatus` is the provider's status; the error is a 502 to an API caller (the
 * operator's key or the provider is at fault, not the caller), or a 429 when the provider rate-limited us.
 */
export class SearchProviderError extends AppError {
  constructor(
    readonly httpStatus: number,
    message: string,
    headers?: Record<string, string>,
  ) {
    super(httpStatus === 429 ? 'rate_limited' : 'provider_error', message, undefined, headers);
    this.name = 'SearchProviderError';
  }
}

export interface SearchResult {
  title: string;
  url: string;
  description: string;
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: ' ' };

/** Brave marks the matched words (`<strong>`) and escapes text as HTML; a model wants plain text. */
function plain(s: unknown, max: number): string {
  if (typeof s !== 'string') return '';
  const text = s
    .replace(/<[^>]*>/g, '')
    .replace(/&(#x[0-9a-f]{1,6}|#[0-9]{1,7}|[a-z]{2,6});/gi, (m, e: string) => {
      const lower = e.toLowerCase();
      if (lower.startsWith('#')) {
        const code = lower.startsWith('#x') ? Number.parseInt(lower.slice(2), 16) : Number(lower.slice(1));
        return code > 0 && code <= 0x10ffff && (code < 0xd800 || code > 0xdfff) ? String.fromCodePoint(code) : m;
      }
      return ENTITIES[lower] ?? m;
    })
    .replace(/\s+/g, ' ')
    .trim();
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function checkArgs(args: { query: unknown; count?: unknown }): { query: string; count: number } {
  if (typeof args.query !== 'string' || args.query.trim() === '') throw new ToolArgumentError('query: a non-empty string is required');
  if (args.query.length > QUERY_MAX) throw new ToolArgumentError(`query: at most ${QUERY_MAX} characters`);
  const count = args.count ?? DEFAULT_COUNT;
  if (typeof count !== 'number' || !Number.isInteger(count) || count < 1 || count > SEARCH_MAX_RESULTS)
    throw new ToolArgumentError(`count: an integer from 1 to ${SEARCH_MAX_RESULTS}`);
  return { query: args.query.trim(), count };
}

function failure(res: RawResponse): SearchProviderError {
  const reason = `${res.status} ${STATUS_CODES[res.status] ?? 'Unknown Status'}`;
  // The message never carries the key: it names the refusal, not what was sent.
  if (res.status === 401 || res.status === 403) return new SearchProviderError(res.status, `the search provider refused the API key (${reason})`);
  if (res.status === 429) {
    const retry = Object.entries(res.headers).find(([k]) => k.toLowerCase() === 'retry-after')?.[1];
    const seconds = retry && /^\d{1,6}$/.test(retry.trim()) ? retry.trim() : undefined;
    return new SearchProviderError(
      429,
      `the search provider rate-limited this request${seconds ? `; retry after ${seconds} s` : ''}`,
      seconds ? { 'retry-after': seconds } : undefined,
    );
  }
  const body = decodeBody(res);
  let detail = '';
  if (body.kind === 'json' && body.value && typeof body.value === 'object') {
    const err = (body.value as { error?: unknown }).error;
    const d = err && typeof err === 'object' ? (err as { detail?: unknown; message?: unknown }) : undefined;
    detail = plain(d?.detail ?? d?.message, 300);
  }
  return new SearchProviderError(res.status, `the search provider answered ${reason}${detail ? `: ${detail}` : ''}`);
}

/** One web search; at most 20 results, each field plain text of bounded length. */
export async function braveSearch(
  send: (req: BuiltRequest) => Promise<RawResponse>,
  cfg: { url: string; apiKey: string },
  args: { query: string; count?: number },
): Promise<{ results: SearchResult[] }> {
  const { query, count } = checkArgs(args);
  const url = new URL(cfg.url);
  url.searchParams.set('q', query);
  url.searchParams.set('count', String(count));
  const res = await send({
    method: 'GET',
    url: url.href,
    headers: { Accept: 'application/json', 'X-Subscription-Token': cfg.apiKey },
  });
  if (res.status < 200 || res.status > 299) throw failure(res);

  const body = decodeBody(res);
  if (body.kind !== 'json' || !body.value || typeof body.value !== 'object' || Array.isArray(body.value))
    throw new SearchProviderError(res.status, 'the search provider answered something that is not a JSON object');
  const web = (body.value as { web?: unknown }).web;
  // No `web` section: Brave found nothing of that kind.
  if (web === undefined || web === null) return { results: [] };
  const list = typeof web === 'object' ? (web as { results?: unknown }).results : undefined;
  if (list === undefined) return { results: [] };
  if (!Array.isArray(list)) throw new SearchProviderError(res.status, 'the search provider answered web.results that is not a list');

  const results: SearchResult[] = [];
  for (const item of list) {
    if (results.length >= Math.min(count, SEARCH_MAX_RESULTS)) break;
    if (!item || typeof item !== 'object') continue;
    const r = item as Record<string, unknown>;
    if (typeof r.url !== 'string' || !/^https?:\/\//i.test(r.url) || r.url.length > URL_MAX) continue;
    results.push({ title: plain(r.title, TITLE_MAX), url: r.url, description: plain(r.description, DESCRIPTION_MAX) });
  }
  return { results };
}
