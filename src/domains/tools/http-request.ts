/**
 * The `http_request` builtin (ADR 0027): a plain HTTP call a model may make. It carries no credentials of Hangar's
 * or the user's (the tool declares none, `checkEntry` refuses any), only what the model itself writes; where it may
 * go is the egress guard's business, made by the caller's `send`.
 *
 * Headers the model may not set: the ones that frame or route the request rather than describe it, since a
 * model-chosen value there could smuggle a second request or reach another virtual host than the URL names (Host,
 * Content-Length, Transfer-Encoding, Connection and the other hop-by-hop headers, Expect, Upgrade, Proxy-*).
 * Authorization and Cookie are allowed: they hold only what the model wrote, which it could as well put in the URL
 * or the body, and many public APIs need them.
 */
import { type BuiltRequest, capOutput, decodeBody, type RawResponse, ToolArgumentError } from './http-tool.js';

const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD'] as const;
export const HTTP_REQUEST_URL_MAX = 2048;
export const HTTP_REQUEST_HEADERS_MAX = 50;
export const HTTP_REQUEST_BODY_MAX_BYTES = 256 * 1024;
const HEADER_VALUE_MAX = 8192;
/** What the answer's headers may take of the output (the body gets the usual 64 KiB cap). */
const RESPONSE_HEADER_VALUE_MAX = 1024;
const RESPONSE_HEADERS_MAX = 100;

const FORBIDDEN_HEADERS = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'te',
  'trailer',
  'expect',
  'proxy-authorization',
  'proxy-authenticate',
  'proxy-connection',
]);
const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$/;
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** The arguments of `http_request`, as JSON Schema. */
export const HTTP_REQUEST_INPUT: Record<string, unknown> = {
  type: 'object',
  properties: {
    method: { type: 'string', enum: [...METHODS], default: 'GET', description: 'The HTTP method.' },
    url: {
      type: 'string',
      minLength: 8,
      maxLength: HTTP_REQUEST_URL_MAX,
      pattern: '^[Hh][Tt][Tt][Pp][Ss]?://',
      description: 'An absolute http:// or https:// URL, without user:password@.',
    },
    headers: {
      type: 'object',
      maxProperties: HTTP_REQUEST_HEADERS_MAX,
      propertyNames: { pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$" },
      additionalProperties: { type: 'string', maxLength: HEADER_VALUE_MAX },
      description: 'Request headers. Host, Content-Length, Transfer-Encoding, Connection and other hop-by-hop headers are not allowed.',
    },
    body: {
      type: 'string',
      maxLength: HTTP_REQUEST_BODY_MAX_BYTES,
      description: 'The request body as text (not with GET or HEAD). Set Content-Type in headers to say what it is.',
    },
  },
  required: ['url'],
  additionalProperties: false,
};

/** A request from `http_request`'s arguments, checked whether or not the schema was applied first. */
export function httpRequestFromArgs(args: Record<string, unknown>): BuiltRequest {
  const unknown = Object.keys(args).filter((k) => !['method', 'url', 'headers', 'body'].includes(k));
  if (unknown.length) throw new ToolArgumentError(`unknown argument ${unknown.map((k) => `"${k}"`).join(', ')}`);

  const method = args.method ?? 'GET';
  if (typeof method !== 'string' || !(METHODS as readonly string[]).includes(method.toUpperCase()))
    throw new ToolArgumentError(`method: one of ${METHODS.join(', ')}`);
  const verb = method.toUpperCase();

  if (typeof args.url !== 'string') throw new ToolArgumentError('url: a string is required');
  if (args.url.length > HTTP_REQUEST_URL_MAX) throw new ToolArgumentError(`url: at most ${HTTP_REQUEST_URL_MAX} characters`);
  let url: URL;
  try {
    url = new URL(args.url);
  } catch {
    throw new ToolArgumentError('url: not a valid absolute URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ToolArgumentError('url: only http:// and https:// URLs');
  if (url.username || url.password) throw new ToolArgumentError('url: user:password@ is not allowed (send an Authorization header)');
  // The fragment never leaves the client.
  url.hash = '';

  const headers: Record<string, string> = {};
  if (args.headers !== undefined) {
    if (!args.headers || typeof args.headers !== 'object' || Array.isArray(args.headers))
      throw new ToolArgumentError('headers: an object of header names to string values');
    const entries = Object.entries(args.headers);
    if (entries.length > HTTP_REQUEST_HEADERS_MAX) throw new ToolArgumentError(`headers: at most ${HTTP_REQUEST_HEADERS_MAX}`);
    const seen = new Set<string>();
    for (const [name, value] of entries) {
      if (!HEADER_NAME.test(name)) throw new ToolArgumentError(`headers: "${name.slice(0, 100)}" is not a valid header name`);
      const lower = name.toLowerCase();
      if (FORBIDDEN_HEADERS.has(lower) || lower.startsWith('proxy-'))
        throw new ToolArgumentError(`headers: "${name}" is set by the HTTP client and may not be given`);
      if (seen.has(lower)) throw new ToolArgumentError(`headers: "${name}" is given twice`);
      seen.add(lower);
      if (typeof value !== 'string') throw new ToolArgumentError(`headers: the value of "${name}" must be a string`);
      if (value.length > HEADER_VALUE_MAX)
        throw new ToolArgumentError(`headers: the value of "${name}" is longer than ${HEADER_VALUE_MAX} characters`);
      if (!HEADER_VALUE.test(value))
        throw new ToolArgumentError(`headers: the value of "${name}" has a line break, a control character or a character outside Latin-1`);
      headers[name] = value;
    }
  }

  let body: string | undefined;
  if (args.body !== undefined) {
    if (typeof args.body !== 'string') throw new ToolArgumentError('body: a string (JSON goes as its text, with Content-Type in headers)');
    if (verb === 'GET' || verb === 'HEAD') throw new ToolArgumentError(`body: a ${verb} request has no body`);
    if (Buffer.byteLength(args.body) > HTTP_REQUEST_BODY_MAX_BYTES)
      throw new ToolArgumentError(`body: at most ${HTTP_REQUEST_BODY_MAX_BYTES / 1024} KiB`);
    body = args.body;
  }
  return { method: verb, url: url.href, headers, ...(body !== undefined ? { body } : {}) };
}

const TEXT_TYPE =
  /^(text\/|application\/([a-z0-9.+-]*\+)?(json|xml)\b|application\/(javascript|ecmascript|x-www-form-urlencoded|x-ndjson|yaml|x-yaml|graphql)\b)/;

/** Whether a body is to be shown as text: a textual content type, or none and bytes that are valid UTF-8. */
function isText(res: RawResponse, contentType: string): boolean {
  if (TEXT_TYPE.test(contentType)) return true;
  if (contentType && !contentType.startsWith('application/octet-stream')) return false;
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(res.body);
    return !res.body.includes(0);
  } catch {
    return false;
  }
}

/**
 * What the model sees of the answer: the status, the headers (each value and their number bounded) and the body,
 * parsed when it is JSON, text when it is text, a note of its size and type when it is binary; capped by capOutput.
 */
export function httpRequestOutput(res: RawResponse): { status: number; headers: Record<string, string>; body: string | unknown } {
  const headers: Record<string, string> = {};
  let contentType = '';
  for (const [name, value] of Object.entries(res.headers).slice(0, RESPONSE_HEADERS_MAX)) {
    const lower = name.toLowerCase();
    if (lower === 'content-type') contentType = value.toLowerCase();
    headers[lower] = capOutput(value, RESPONSE_HEADER_VALUE_MAX) as string;
  }
  let body: unknown;
  if (res.body.length === 0) body = '';
  else if (!isText(res, contentType)) body = `[binary body: ${res.body.length} bytes${contentType ? `, ${contentType.split(';')[0]}` : ''}]`;
  else {
    const decoded = decodeBody(res);
    body = capOutput(decoded.kind === 'json' ? decoded.value : decoded.text);
  }
  return { status: res.status, headers, body };
}
