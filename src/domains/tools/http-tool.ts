/**
 * An HTTP tool's request and answer (ADR 0027), without I/O: `buildRequest` fills a catalogue entry's templates
 * with a call's arguments and credentials, `mapResponse` turns the provider's answer into the tool's result and
 * `capOutput` bounds what reaches a model or an API caller. The network call itself is made by the caller (through
 * the egress guard), so these rules are testable on their own.
 *
 * Arguments are untrusted (a model writes them): whatever they hold, the request goes to the origin the definition
 * names, an argument stays inside the one path segment, query value, header value or body field its placeholder
 * stands for, and a value is never expanded again (so `{{credentials.x}}` inside an argument stays literal text).
 */
import { STATUS_CODES } from 'node:http';
import { AppError } from '../../platform/http/errors.js';
import type { HttpExecution } from './definition.js';

export interface BuiltRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: string;
}

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** A caller mistake the tool's caller should see: 400 through the API, an error result for a model. */
export class ToolArgumentError extends AppError {
  constructor(message: string) {
    super('invalid_request', message);
    this.name = 'ToolArgumentError';
  }
}

const PLACEHOLDER = /\{\{\s*(args|credentials)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}/g;
const WHOLE_ARG = /^\{\{\s*args\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$/;
/** What Node's HTTP client accepts in a header value (tab, visible ASCII, Latin-1); CR, LF and NUL are the injection. */
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
/** The WHATWG URL parser resolves these segments (`%2e` included), which would climb out of the template's path. */
const DOT_SEGMENT = /^(?:\.|%2e){1,2}$/i;

type Source = { args: Record<string, unknown>; credentials: Record<string, string> };

/** The value a placeholder names, or undefined when absent (own properties only: `{{args.constructor}}` is absent). */
function lookup(src: Source, kind: string, name: string): unknown {
  const bag: Record<string, unknown> = kind === 'args' ? src.args : src.credentials;
  return Object.hasOwn(bag, name) ? bag[name] : undefined;
}

/** Strings as they are, anything else as its JSON text. */
function asText(v: unknown): string {
  return typeof v === 'string' ? v : JSON.stringify(v);
}

interface Filled {
  text: string;
  /** Placeholders whose value was absent, as `args.x` / `credentials.y`. */
  missing: string[];
}

/** One pass over a template: substituted values are never scanned again. */
function fill(template: string, src: Source, encode: (s: string) => string): Filled {
  const missing: string[] = [];
  const text = template.replace(PLACEHOLDER, (_m, kind: string, name: string) => {
    const v = lookup(src, kind, name);
    if (v === undefined) {
      missing.push(`${kind}.${name}`);
      return '';
    }
    return encode(asText(v));
  });
  return { text, missing };
}

function usedArgs(ex: HttpExecution): Set<string> {
  const used = new Set<string>();
  const scan = (v: unknown): void => {
    if (typeof v === 'string') {
      for (const m of v.matchAll(PLACEHOLDER)) if (m[1] === 'args') used.add(m[2]!);
    } else if (Array.isArray(v)) v.forEach(scan);
    else if (v && typeof v === 'object') Object.values(v).forEach(scan);
  };
  scan(ex.url);
  scan(ex.headers);
  scan(ex.query);
  scan(ex.body ?? {});
  return used;
}

function encodeSegment(s: string, what: string): string {
  try {
    return encodeURIComponent(s);
  } catch {
    throw new ToolArgumentError(`${what} is not valid Unicode text (it has an unpaired surrogate)`);
  }
}

function argNames(missing: string[]): string {
  return missing.map((m) => `"${m.replace(/^args\./, '')}"`).join(', ');
}

/**
 * The body with its placeholders filled. A string that is exactly one `{{args.x}}` keeps x's JSON value; any other
 * string is substituted. A field (or array element) with an absent value is left out, since a partly filled
 * field is never what the definition meant.
 */
function fillBody(v: unknown, src: Source): unknown {
  if (typeof v === 'string') {
    const whole = WHOLE_ARG.exec(v);
    if (whole) return lookup(src, 'args', whole[1]!);
    const f = fill(v, src, (s) => s);
    return f.missing.length ? undefined : f.text;
  }
  if (Array.isArray(v)) return v.map((x) => fillBody(x, src)).filter((x) => x !== undefined);
  if (v && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) {
      const filled = fillBody(x, src);
      if (filled !== undefined) define(out, k, filled);
    }
    return out;
  }
  return v;
}

/** Sets a key as an own property: an assignment to `__proto__` (a key a definition or a server may use) would not. */
function define(o: Record<string, unknown>, k: string, v: unknown): void {
  Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
}

/** Percent-decoding of a definition's literal query text that tolerates a stray `%`. */
function decodeQueryPart(s: string): string {
  const plus = s.replaceAll('+', ' ');
  try {
    return decodeURIComponent(plus);
  } catch {
    return plus;
  }
}

function formBody(body: Record<string, unknown>): string {
  const form = new URLSearchParams();
  for (const [k, v] of Object.entries(body)) {
    // Arrays repeat the key (`tag=a&tag=b`), the common form convention; nested objects go as their JSON text.
    if (Array.isArray(v)) for (const x of v) form.append(k, asText(x));
    else form.append(k, asText(v));
  }
  return form.toString();
}

/**
 * Fills the templates. URL path placeholders: encodeURIComponent of the value (so an argument can never change the
 * host, add path segments or a query: "../x", "a/b", "?q", "@evil", "//evil" stay inside one segment; a value that
 * is empty or a dot segment is refused); query values: URLSearchParams-encoded; header values: plain string, CR/LF/
 * NUL (any control character, anything outside Latin-1) → ToolArgumentError; body strings: substituted, and a body
 * value that is exactly one `{{args.x}}` keeps x's JSON value. An absent argument: query params and headers whose
 * template becomes empty are omitted; in the path → ToolArgumentError naming it; in the body the field is omitted.
 * Arguments used by no template go to the query (GET/DELETE) or the body (others) when passArgs is true; the
 * definition's own query and body fields win over them. Finally the built URL's origin must equal the template's.
 */
export function buildRequest(ex: HttpExecution, args: Record<string, unknown>, credentials: Record<string, string>): BuiltRequest {
  const src: Source = { args, credentials };
  const parts = /^(https?:\/\/[^/?#{}]+)([^?#]*)(?:\?([^#]*))?(?:#.*)?$/.exec(ex.url);
  if (!parts) throw new AppError('invalid_request', "the tool definition's URL must start with a literal http:// or https:// origin");
  const literalOrigin = new URL(parts[1]!).origin;

  // The path: each placeholder becomes (part of) one segment.
  const path = fill(parts[2] ?? '', src, (s) => encodeSegment(s, 'a URL path argument'));
  if (path.missing.length) throw new ToolArgumentError(`missing argument ${argNames(path.missing)}: the request URL needs it`);
  for (const m of (parts[2] ?? '').matchAll(PLACEHOLDER)) {
    const v = lookup(src, m[1]!, m[2]!);
    if (asText(v) === '') throw new ToolArgumentError(`argument "${m[2]}" is empty: the request URL needs a value`);
  }
  const pathTemplateSegments = (parts[2] ?? '').split('/');
  path.text.split('/').forEach((seg, i) => {
    if (DOT_SEGMENT.test(seg) && !DOT_SEGMENT.test(pathTemplateSegments[i] ?? ''))
      throw new ToolArgumentError('a URL path argument may not be "." or ".."');
  });

  // The query: the template's own (`?a={{args.x}}`), then `query`, then unused arguments; the first one set wins.
  const query = new URLSearchParams();
  const setParam = (k: string, v: string) => {
    if (!query.has(k)) query.set(k, v);
  };
  for (const pair of (parts[3] ?? '').split('&')) {
    if (!pair) continue;
    const eq = pair.indexOf('=');
    const rawName = eq < 0 ? pair : pair.slice(0, eq);
    // The literal text is already URL-encoded; only the substituted values need encoding.
    const value = fill(eq < 0 ? '' : pair.slice(eq + 1), src, (s) => encodeSegment(s, 'a URL query argument'));
    if (value.missing.length && value.text.trim() === '') continue;
    setParam(decodeQueryPart(rawName), decodeQueryPart(value.text));
  }
  for (const [k, template] of Object.entries(ex.query)) {
    const value = fill(template, src, (s) => s);
    if (value.missing.length && value.text.trim() === '') continue;
    setParam(k, value.text);
  }

  const headers: Record<string, string> = {};
  for (const [k, template] of Object.entries(ex.headers)) {
    const value = fill(template, src, (s) => s);
    if (value.missing.length && value.text.trim() === '') continue;
    if (!HEADER_VALUE.test(value.text))
      throw new ToolArgumentError(`header "${k}" would contain a line break, a control character or a character outside Latin-1`);
    headers[k] = value.text;
  }

  const bodyAllowed = ex.method !== 'GET';
  if (ex.body && !bodyAllowed) throw new AppError('invalid_request', 'the tool definition gives a GET request a body');
  let body = ex.body ? (fillBody(ex.body, src) as Record<string, unknown>) : undefined;

  if (ex.passArgs) {
    const used = usedArgs(ex);
    const extra = Object.entries(args).filter(([k, v]) => !used.has(k) && v !== undefined);
    if (ex.method === 'GET' || ex.method === 'DELETE') for (const [k, v] of extra) setParam(k, asText(v));
    else if (extra.length) body = { ...Object.fromEntries(extra), ...(body ?? {}) };
  }

  let bodyText: string | undefined;
  if (body !== undefined) {
    const form = ex.bodyType === 'form';
    bodyText = form ? formBody(body) : JSON.stringify(body);
    if (!Object.keys(headers).some((k) => k.toLowerCase() === 'content-type'))
      headers['Content-Type'] = form ? 'application/x-www-form-urlencoded' : 'application/json';
  }

  const qs = query.toString();
  const url = `${parts[1]}${path.text}${qs ? `?${qs}` : ''}`;
  let built: URL;
  try {
    built = new URL(url);
  } catch {
    throw new ToolArgumentError('the arguments do not make a valid URL');
  }
  if (built.origin !== literalOrigin || built.username || built.password)
    throw new ToolArgumentError('the arguments would send the request to another host than the tool names');
  return { method: ex.method, url: built.href, headers, ...(bodyText !== undefined ? { body: bodyText } : {}) };
}

function header(res: RawResponse, name: string): string | undefined {
  for (const [k, v] of Object.entries(res.headers)) if (k.toLowerCase() === name) return v;
  return undefined;
}

/** A response body: parsed JSON when the content type says JSON or the text is a JSON object/array; text otherwise. */
export type DecodedBody = { kind: 'json'; value: unknown; text: string } | { kind: 'text'; text: string };

/**
 * Decodes a response body (UTF-8, invalid bytes replaced). Text that merely parses as a JSON scalar ("42", "true")
 * stays text unless the content type says JSON: a plain-text answer should not change type by accident.
 */
export function decodeBody(res: RawResponse): DecodedBody {
  const text = new TextDecoder('utf-8').decode(res.body);
  const type = (header(res, 'content-type') ?? '').toLowerCase();
  const declared = /^[a-z]+\/([a-z0-9.+-]*\+)?json\b/.test(type);
  const trimmed = text.trimStart();
  if (declared || trimmed.startsWith('{') || trimmed.startsWith('[')) {
    try {
      return { kind: 'json', value: JSON.parse(text), text };
    } catch {
      // Not JSON after all (a truncated or mislabelled answer): it is returned as text.
    }
  }
  return { kind: 'text', text };
}

/** `items.0.name` into a JSON value: object keys and array indexes, own properties only. */
function applyPath(value: unknown, path: string): { ok: true; value: unknown } | { ok: false; error: string } {
  let cur = value;
  const segments = path.split('.');
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i]!;
    const at = segments.slice(0, i).join('.') || 'the top level';
    if (Array.isArray(cur)) {
      if (!/^\d+$/.test(seg) || Number(seg) >= cur.length)
        return {
          ok: false,
          error: `response.path "${path}" does not exist in the answer: ${at} is a list of ${cur.length}, "${seg}" is not an index in it`,
        };
      cur = cur[Number(seg)];
    } else if (cur && typeof cur === 'object' && Object.hasOwn(cur, seg)) {
      cur = (cur as Record<string, unknown>)[seg];
    } else {
      const what = cur && typeof cur === 'object' ? 'an object without that key' : `a ${cur === null ? 'null' : typeof cur}`;
      return { ok: false, error: `response.path "${path}" does not exist in the answer: no "${seg}" at ${at} (${what})` };
    }
  }
  return { ok: true, value: cur };
}

const PROVIDER_MESSAGE_MAX = 300;

/** The provider's own words about a failure, from the usual error shapes, else the start of its answer. */
function providerMessage(body: DecodedBody): string {
  if (body.kind === 'json' && body.value && typeof body.value === 'object' && !Array.isArray(body.value)) {
    const v = body.value as Record<string, unknown>;
    const err = v.error && typeof v.error === 'object' ? (v.error as Record<string, unknown>) : undefined;
    const candidates = [v.message, v.error, err?.message, err?.detail, v.error_description, v.detail];
    const found = candidates.find((c): c is string => typeof c === 'string' && c.trim() !== '');
    if (found) return clip(found);
  }
  return clip(body.text);
}

function clip(s: string): string {
  const flat = s.replace(/\s+/g, ' ').trim();
  return flat.length > PROVIDER_MESSAGE_MAX ? `${flat.slice(0, PROVIDER_MESSAGE_MAX)}…` : flat;
}

/**
 * The tool's answer from the HTTP response: JSON (by content type, or a body that is a JSON object/array) with
 * `response.path` applied (a missing path → ok:false saying where it stopped), else text. An empty body is null.
 * Non-2xx → ok:false with "<status> <reason>: <provider message>" and the body as output. Only the response is
 * read, so nothing of the request (its headers, its credentials) can appear in the error.
 */
export function mapResponse(ex: HttpExecution, res: RawResponse): { ok: boolean; output: unknown; error?: string; httpStatus: number } {
  const httpStatus = res.status;
  const body = decodeBody(res);
  const output = body.kind === 'json' ? body.value : body.text === '' ? null : body.text;
  if (httpStatus < 200 || httpStatus > 299) {
    const reason = STATUS_CODES[httpStatus] ?? 'Unknown Status';
    const message = providerMessage(body);
    return { ok: false, output, error: `${httpStatus} ${reason}${message ? `: ${message}` : ''}`, httpStatus };
  }
  const path = ex.response.path?.trim();
  if (!path || output === null) return { ok: true, output, httpStatus };
  if (body.kind !== 'json') return { ok: false, output, error: `response.path "${path}" cannot apply: the answer is not JSON`, httpStatus };
  const picked = applyPath(body.value, path);
  return picked.ok ? { ok: true, output: picked.value, httpStatus } : { ok: false, output, error: picked.error, httpStatus };
}

const OUTPUT_MAX_CHARS = 64 * 1024;
const MAX_DEPTH = 64;
const MIN_STRING = 32;

const cutMarker = (n: number) => `… [${n} more characters cut]`;

/** The first `end` characters, one fewer when that would split a surrogate pair. */
function head(s: string, end: number): string {
  return end > 0 && /[\ud800-\udbff]/.test(s[end - 1]!) ? s.slice(0, end - 1) : s.slice(0, end);
}

function cutString(s: string, limit: number): string {
  if (s.length <= limit) return s;
  const kept = head(s, limit);
  return `${kept}${cutMarker(s.length - kept.length)}`;
}

function shrink(v: unknown, strLimit: number, listLimit: number, depth: number): unknown {
  if (typeof v === 'string') return cutString(v, strLimit);
  if (v === null || typeof v !== 'object') return v;
  if (depth >= MAX_DEPTH) return '[nested too deep: cut]';
  if (Array.isArray(v)) {
    const kept = v.slice(0, listLimit).map((x) => shrink(x, strLimit, listLimit, depth + 1));
    if (v.length > listLimit) kept.push(`… [${v.length - listLimit} more items cut, ${v.length} in all]`);
    return kept;
  }
  const entries = Object.entries(v);
  const out: Record<string, unknown> = {};
  for (const [k, x] of entries.slice(0, listLimit)) define(out, k, shrink(x, strLimit, listLimit, depth + 1));
  if (entries.length > listLimit) define(out, '…', `[${entries.length - listLimit} more keys cut, ${entries.length} in all]`);
  return out;
}

function jsonLength(v: unknown): number {
  try {
    return JSON.stringify(v)?.length ?? 0;
  } catch {
    return Number.POSITIVE_INFINITY;
  }
}

/**
 * What a model or an API caller gets back: a string capped at maxChars characters, a JSON value at maxChars of its
 * JSON text, each with a marker saying how much was cut. Structure is kept where possible (long lists and objects
 * lose their tail with a count, long strings are cut); when even that cannot fit, the JSON text itself is cut.
 */
export function capOutput(value: unknown, maxChars: number = OUTPUT_MAX_CHARS): unknown {
  const max = Math.max(1, Math.floor(maxChars));
  if (typeof value === 'string') {
    if (value.length <= max) return value;
    // The marker's length with the largest possible count bounds it, so the result never exceeds max.
    const room = max - cutMarker(value.length).length;
    if (room <= 0) return head(value, max);
    const kept = head(value, room);
    return `${kept}${cutMarker(value.length - kept.length)}`;
  }
  if (value === null || typeof value !== 'object') return value;
  const whole = jsonLength(value);
  if (whole <= max) return value;
  let strLimit = max;
  let listLimit = max;
  for (;;) {
    const shrunk = shrink(value, strLimit, listLimit, 0);
    if (jsonLength(shrunk) <= max) return shrunk;
    if (strLimit === MIN_STRING && listLimit === 1) break;
    strLimit = Math.max(MIN_STRING, Math.floor(strLimit / 2));
    listLimit = Math.max(1, Math.floor(listLimit / 2));
  }
  let text: string;
  try {
    text = JSON.stringify(value);
  } catch {
    text = JSON.stringify(shrink(value, MIN_STRING, 1, 0));
  }
  return capOutput(text, max);
}
