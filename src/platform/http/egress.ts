import dns, { type LookupAddress, type LookupOptions } from 'node:dns';
import net from 'node:net';
import ipaddr from 'ipaddr.js';
import { Agent, buildConnector, type Dispatcher, fetch as undiciFetch } from 'undici';

/**
 * The one way out of Hangar to a tenant-chosen or third-party URL (tool requests, MCP servers). It refuses
 * non-public addresses at connect time (so DNS rebinding cannot slip past a check made earlier), follows
 * redirects itself so that every hop is re-checked, and caps the time and the size of what comes back.
 */

export interface EgressPolicy {
  /** Allow loopback, private, link-local and other non-public targets (operators' HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS; the tests' loopback fakes). */
  allowPrivateNetworks: boolean;
  /** The whole request, redirects and body included, gives up after this long. */
  timeoutMs: number;
  /** A response body larger than this fails (counted while streaming; Content-Length checked first). */
  maxResponseBytes: number;
  /** Default 5. */
  maxRedirects?: number;
}

export type EgressErrorCode =
  | 'invalid_url'
  | 'invalid_request'
  | 'blocked_address'
  | 'dns_failed'
  | 'timeout'
  | 'response_too_large'
  | 'too_many_redirects'
  | 'redirect_refused'
  | 'connection_failed';

export class EgressError extends Error {
  constructor(
    readonly code: EgressErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'EgressError';
  }
}

export interface EgressRequest {
  method: string;
  url: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array;
  /** The request carries credentials: a redirect to another origin is refused (EgressError redirect_refused), never followed. */
  credentialed?: boolean;
  signal?: AbortSignal;
}

export interface EgressResponse {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  /** The final URL after redirects. */
  url: string;
}

const DEFAULT_MAX_REDIRECTS = 5;
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
const NULL_BODY_STATUSES = new Set([101, 204, 205, 304]);
/** Headers whose presence makes a request credentialed: they must never reach another origin. */
const CREDENTIAL_HEADERS = ['authorization', 'proxy-authorization', 'cookie'];
/** Headers describing a body, dropped when a redirect turns the request into a body-less GET. */
const BODY_HEADERS = ['content-type', 'content-length', 'content-encoding', 'content-language', 'content-location'];
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const FORBIDDEN_METHODS = new Set(['CONNECT', 'TRACE', 'TRACK']);

/**
 * Whether an address (v4 or v6 literal, brackets allowed) is anything but public unicast. Anything that does
 * not parse as an address counts as blocked.
 */
export function isBlockedAddress(address: string): boolean {
  const bare = address.startsWith('[') && address.endsWith(']') ? address.slice(1, -1) : address;
  if (!ipaddr.isValid(bare)) return true;
  const parsed = ipaddr.parse(bare);
  return parsed.kind() === 'ipv4' ? ipv4Blocked(parsed as ipaddr.IPv4) : ipv6Blocked(parsed as ipaddr.IPv6);
}

function ipv4Blocked(address: ipaddr.IPv4): boolean {
  // ipaddr.js names every special-purpose range (RFC 6890 and successors); only plain unicast is public.
  return address.range() !== 'unicast';
}

function ipv4From(high: number, low: number): ipaddr.IPv4 {
  return new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]);
}

function ipv6Blocked(address: ipaddr.IPv6): boolean {
  // A scope id only means something on a local link.
  if (address.zoneId) return true;
  const p = address.parts;
  const upperZero = p[0] === 0 && p[1] === 0 && p[2] === 0 && p[3] === 0;
  // IPv4-mapped ::ffff:a.b.c.d and SIIT ::ffff:0:a.b.c.d reach the embedded IPv4 address.
  if (upperZero && p[4] === 0 && p[5] === 0xffff) return ipv4Blocked(ipv4From(p[6], p[7]));
  if (upperZero && p[4] === 0xffff && p[5] === 0) return ipv4Blocked(ipv4From(p[6], p[7]));
  // IPv4-compatible ::a.b.c.d is deprecated (and covers :: and ::1): nothing public lives there.
  if (upperZero && p[4] === 0 && p[5] === 0) return true;
  // NAT64 well-known prefix 64:ff9b::/96 translates to the embedded IPv4 address; the local-use 64:ff9b:1::/48 is not public.
  if (p[0] === 0x64 && p[1] === 0xff9b) {
    if (p[2] === 0 && p[3] === 0 && p[4] === 0 && p[5] === 0) return ipv4Blocked(ipv4From(p[6], p[7]));
    return true;
  }
  // 6to4 2002:aabb:ccdd::/48 tunnels to aa.bb.cc.dd.
  if (p[0] === 0x2002) return ipv4Blocked(ipv4From(p[1], p[2]));
  // Teredo 2001:0:server::~client: both the server and the (inverted) client address are IPv4.
  if (p[0] === 0x2001 && p[1] === 0) return ipv4Blocked(ipv4From(p[2], p[3])) || ipv4Blocked(ipv4From(~p[6] & 0xffff, ~p[7] & 0xffff));
  // Everything public is in 2000::/3; inside it, ipaddr.js names the documentation, benchmarking and other special ranges.
  if ((p[0] & 0xe000) !== 0x2000) return true;
  return address.range() !== 'unicast';
}

function isLocalhostName(host: string): boolean {
  const name = host.toLowerCase().replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost');
}

function isAddressLiteral(host: string): boolean {
  return net.isIP(host) !== 0 || ipaddr.isValid(host);
}

/** Why a host (as the URL parser or undici hands it over) may not be contacted under `policy`, or undefined. */
function hostRefusal(policy: EgressPolicy, hostname: string): EgressError | undefined {
  if (policy.allowPrivateNetworks) return undefined;
  const host = hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname;
  if (isAddressLiteral(host)) {
    return isBlockedAddress(host) ? new EgressError('blocked_address', `${host} is not a public address`) : undefined;
  }
  if (isLocalhostName(host)) return new EgressError('blocked_address', `${host} is not a public host`);
  return undefined;
}

/** Why `url` is not an acceptable target, or undefined. Messages never repeat the URL: it may hold secrets. */
function urlProblem(url: URL): string | undefined {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return `only http: and https: URLs are allowed, not ${url.protocol}`;
  if (url.username !== '' || url.password !== '') return 'a URL may not carry a user name or password';
  if (url.hostname === '') return 'the URL has no host';
  return undefined;
}

function targetUrl(policy: EgressPolicy, raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new EgressError('invalid_url', 'the URL is not valid');
  }
  const problem = urlProblem(url);
  if (problem) throw new EgressError('invalid_url', problem);
  const refusal = hostRefusal(policy, url.hostname);
  if (refusal) throw refusal;
  return url;
}

function redirectUrl(policy: EgressPolicy, from: URL, location: string, credentialed: boolean): URL {
  let next: URL;
  try {
    next = new URL(location, from);
  } catch {
    throw new EgressError('redirect_refused', 'the redirect location is not a valid URL');
  }
  const problem = urlProblem(next);
  if (problem) throw new EgressError('redirect_refused', `redirect refused: ${problem}`);
  if (credentialed && next.origin !== from.origin) {
    throw new EgressError('redirect_refused', `a request carrying credentials is not redirected to another origin (${next.origin})`);
  }
  const refusal = hostRefusal(policy, next.hostname);
  if (refusal) throw refusal;
  return next;
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * Resolves like dns.lookup, but (unless private networks are allowed) fails if any address of the name is not
 * public: the socket then connects to a checked address only, whatever the name resolves to next time.
 */
function checkedLookup(policy: EgressPolicy) {
  return (hostname: string, options: LookupOptions, callback: LookupCallback): void => {
    if (!policy.allowPrivateNetworks && isLocalhostName(hostname)) {
      callback(new EgressError('blocked_address', `${hostname} is not a public host`), '');
      return;
    }
    // Resolve every family, whatever the socket asked for, so that no blocked address hides behind the other family.
    dns.lookup(hostname, { all: true, family: 0 }, (err, addresses) => {
      if (err || addresses.length === 0) {
        callback(new EgressError('dns_failed', `could not resolve ${hostname}`), '');
        return;
      }
      const blocked = policy.allowPrivateNetworks ? undefined : addresses.find((a) => isBlockedAddress(a.address));
      if (blocked) {
        callback(new EgressError('blocked_address', `${hostname} resolves to ${blocked.address}, which is not a public address`), '');
        return;
      }
      const family = options.family === 'IPv4' ? 4 : options.family === 'IPv6' ? 6 : (options.family ?? 0);
      const usable = family === 0 ? addresses : addresses.filter((a) => a.family === family);
      if (usable.length === 0) {
        callback(new EgressError('dns_failed', `${hostname} has no IPv${family} address`), '');
        return;
      }
      if (options.all) callback(null, usable);
      else callback(null, usable[0].address, usable[0].family);
    });
  };
}

/** Opens sockets only to permitted addresses: literal hosts are checked here, names in `checkedLookup`. */
function guardedConnector(policy: EgressPolicy): buildConnector.connector {
  const connect = buildConnector({ timeout: policy.timeoutMs, lookup: checkedLookup(policy) });
  return (options, callback) => {
    const refusal = hostRefusal(policy, options.hostname);
    if (refusal) {
      callback(refusal, null);
      return;
    }
    connect(options, callback);
  };
}

// The one module-level cache in the platform (an exception to "no module globals"): an Agent per policy
// object keeps its keep-alive connections across requests, and the WeakMap lets both go with the policy.
const AGENTS = new WeakMap<EgressPolicy, Agent>();

function agentFor(policy: EgressPolicy): Agent {
  let agent = AGENTS.get(policy);
  if (!agent) {
    agent = new Agent({
      connect: guardedConnector(policy),
      keepAliveTimeout: 4_000,
      // The request's own deadline covers headers and body; undici's per-phase timers would only race it.
      headersTimeout: 0,
      bodyTimeout: 0,
    });
    AGENTS.set(policy, agent);
  }
  return agent;
}

/** One deadline for a whole request (redirects and body included), joined with the caller's signal. */
class Deadline {
  private readonly controller = new AbortController();
  private readonly timer: NodeJS.Timeout;

  constructor(
    timeoutMs: number,
    private readonly callerSignal: AbortSignal | undefined,
  ) {
    this.timer = setTimeout(() => this.abort(new EgressError('timeout', `the request did not complete within ${timeoutMs} ms`)), timeoutMs);
    if (callerSignal?.aborted) this.abort(callerSignal.reason);
    else callerSignal?.addEventListener('abort', this.onCallerAbort, { once: true });
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  private readonly onCallerAbort = (): void => {
    this.abort(this.callerSignal?.reason);
  };

  /** Aborts the request and tears its socket down; `reason` is what the caller sees. */
  abort(reason: unknown): void {
    this.clear();
    if (!this.controller.signal.aborted) this.controller.abort(reason);
  }

  clear(): void {
    clearTimeout(this.timer);
    this.callerSignal?.removeEventListener('abort', this.onCallerAbort);
  }

  /** The error the caller sees for `err`: the abort reason once aborted, else an EgressError. */
  translate(err: unknown, host: string): unknown {
    if (this.controller.signal.aborted) return this.controller.signal.reason;
    return egressErrorOf(err, host);
  }
}

function egressErrorOf(err: unknown, host: string): unknown {
  if (err instanceof EgressError) return err;
  if (!(err instanceof Error)) return err;
  if (err.cause instanceof EgressError) return err.cause;
  const code = (err as NodeJS.ErrnoException).code ?? '';
  if (code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new EgressError('timeout', `${host} did not answer in time`);
  }
  if (code === 'UND_ERR_INVALID_ARG' || code === 'UND_ERR_REQ_CONTENT_LENGTH_MISMATCH' || code === 'UND_ERR_NOT_SUPPORTED') {
    return new EgressError('invalid_request', err.message);
  }
  const detail = err.cause instanceof Error ? err.cause.message : err.message;
  return new EgressError('connection_failed', `could not reach ${host}: ${detail}`);
}

function checkedMethod(method: string): string {
  if (!TOKEN.test(method)) throw new EgressError('invalid_request', 'the method is not a valid HTTP token');
  if (FORBIDDEN_METHODS.has(method.toUpperCase())) throw new EgressError('invalid_request', `the ${method.toUpperCase()} method is not allowed`);
  return method;
}

/** Validated, lower-cased headers; a name or value that could split the request is refused, never sent. */
function checkedHeaders(entries: Iterable<[string, string]>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of entries) {
    if (!TOKEN.test(name)) throw new EgressError('invalid_request', `the header name ${JSON.stringify(name)} is not valid`);
    if (/[\r\n\0]/.test(value)) throw new EgressError('invalid_request', `the ${name} header contains CR, LF or NUL`);
    const key = name.toLowerCase();
    // The Host header comes from the URL, so it always names the host whose address was checked.
    if (key === 'host') throw new EgressError('invalid_request', 'the Host header is set from the URL');
    out[key] = key in out ? `${out[key]}, ${value}` : value;
  }
  return out;
}

function isCredentialed(headers: Record<string, string>, flagged: boolean | undefined): boolean {
  return flagged === true || CREDENTIAL_HEADERS.some((h) => h in headers);
}

/** The method, body and headers of the next hop (RFC 9110 15.4: 303, and 301/302 after POST, become a GET without body). */
function afterRedirect<B>(status: number, method: string, body: B | undefined, headers: Record<string, string>) {
  const upper = method.toUpperCase();
  if ((status === 303 && upper !== 'GET' && upper !== 'HEAD') || ((status === 301 || status === 302) && upper === 'POST')) {
    const rest = Object.fromEntries(Object.entries(headers).filter(([k]) => !BODY_HEADERS.includes(k)));
    return { method: 'GET', body: undefined, headers: rest };
  }
  return { method, body, headers };
}

function tooLarge(max: number): EgressError {
  return new EgressError('response_too_large', `the response body is larger than the limit of ${max} bytes`);
}

function declaredLength(value: string | null | undefined): number | undefined {
  if (value == null || !/^\d+$/.test(value.trim())) return undefined;
  return Number(value.trim());
}

function flatHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) out[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}

/** Resets the connection without reading on (undici then reports the abort as an error event, which is expected here). */
function hangUp(body: Dispatcher.ResponseData['body']): void {
  body.on('error', () => {});
  body.destroy();
}

async function readCapped(body: Dispatcher.ResponseData['body'], max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of body as AsyncIterable<Buffer>) {
    total += chunk.length;
    // Leaving the loop destroys the body, which resets the connection: nothing more is read.
    if (total > max) throw tooLarge(max);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/**
 * One outbound request under `policy`: non-public targets refused (at connect time too), redirects followed
 * and re-checked up to `maxRedirects`, and the whole exchange bounded by `timeoutMs` and `maxResponseBytes`.
 */
export async function egressRequest(policy: EgressPolicy, req: EgressRequest): Promise<EgressResponse> {
  let url = targetUrl(policy, req.url);
  let method = checkedMethod(req.method);
  let headers = checkedHeaders(Object.entries(req.headers ?? {}));
  let body = req.body;
  const credentialed = isCredentialed(headers, req.credentialed);
  const maxRedirects = policy.maxRedirects ?? DEFAULT_MAX_REDIRECTS;
  const agent = agentFor(policy);
  const deadline = new Deadline(policy.timeoutMs, req.signal);
  try {
    for (let redirects = 0; ; redirects++) {
      deadline.signal.throwIfAborted();
      const res = await agent.request({
        origin: url.origin,
        path: `${url.pathname}${url.search}`,
        method: method as Dispatcher.HttpMethod,
        headers,
        body,
        signal: deadline.signal,
      });
      const location = res.headers.location;
      if (REDIRECT_STATUSES.has(res.statusCode) && typeof location === 'string') {
        hangUp(res.body);
        if (redirects >= maxRedirects) throw new EgressError('too_many_redirects', `more than ${maxRedirects} redirects`);
        const next = redirectUrl(policy, url, location, credentialed);
        ({ method, body, headers } = afterRedirect(res.statusCode, method, body, headers));
        url = next;
        continue;
      }
      const declared = declaredLength(typeof res.headers['content-length'] === 'string' ? res.headers['content-length'] : undefined);
      if (declared !== undefined && declared > policy.maxResponseBytes) {
        hangUp(res.body);
        throw tooLarge(policy.maxResponseBytes);
      }
      const buffer = await readCapped(res.body, policy.maxResponseBytes);
      return { status: res.statusCode, headers: flatHeaders(res.headers), body: buffer, url: url.href };
    }
  } catch (err) {
    throw deadline.translate(err, url.host);
  } finally {
    deadline.clear();
  }
}

function headerEntries(init: HeadersInit | undefined): [string, string][] {
  if (init === undefined) return [];
  if (Array.isArray(init)) return init.map(([name, value]) => [String(name), String(value)]);
  if (typeof (init as Headers).forEach === 'function' && typeof (init as Headers).get === 'function') {
    const entries: [string, string][] = [];
    (init as Headers).forEach((value, name) => {
      entries.push([name, value]);
    });
    return entries;
  }
  return Object.entries(init as Record<string, string>).map(([name, value]) => [name, String(value)]);
}

/** A body that can be sent again on a 307/308 hop: strings and bytes as they are, anything else read once into bytes. */
async function replayableBody(body: BodyInit | null | undefined, headers: Record<string, string>): Promise<string | Uint8Array | undefined> {
  if (body === null || body === undefined) return undefined;
  if (typeof body === 'string' || body instanceof Uint8Array) return body;
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  // Blob, FormData, URLSearchParams, streams: let the platform serialise it, content type included.
  const serialised = new Response(body);
  const type = serialised.headers.get('content-type');
  if (type && !('content-type' in headers)) headers['content-type'] = type;
  return new Uint8Array(await serialised.arrayBuffer());
}

/**
 * A fetch-compatible function applying the same checks as `egressRequest`: address checks at connect time,
 * redirects followed manually with re-checks (cross-origin ones refused for credentialed requests), one
 * deadline for the whole exchange, and a byte cap on the body, which streams (the stream errors past the cap).
 */
export function egressFetch(policy: EgressPolicy): typeof fetch {
  const agent = agentFor(policy);
  const maxRedirects = policy.maxRedirects ?? DEFAULT_MAX_REDIRECTS;

  async function guardedFetch(input: string | URL | Request, init?: RequestInit): Promise<Response> {
    const request = typeof input === 'string' || input instanceof URL ? undefined : input;
    let url = targetUrl(policy, request ? request.url : String(input));
    let method = checkedMethod(init?.method ?? request?.method ?? 'GET');
    let headers = checkedHeaders(headerEntries(init?.headers ?? request?.headers));
    let body = await replayableBody(init?.body ?? (request?.body ? await request.arrayBuffer() : undefined), headers);
    const credentialed = isCredentialed(headers, false);
    const redirectMode = init?.redirect ?? request?.redirect ?? 'follow';
    const deadline = new Deadline(policy.timeoutMs, init?.signal ?? request?.signal ?? undefined);
    let res: Awaited<ReturnType<typeof undiciFetch>>;
    try {
      for (let redirects = 0; ; redirects++) {
        res = await undiciFetch(url.href, { method, headers, body, redirect: 'manual', signal: deadline.signal, dispatcher: agent });
        const location = res.headers.get('location');
        if (!REDIRECT_STATUSES.has(res.status) || location === null || redirectMode === 'manual') break;
        await res.body?.cancel();
        if (redirectMode === 'error') throw new EgressError('redirect_refused', 'the request does not follow redirects');
        if (redirects >= maxRedirects) throw new EgressError('too_many_redirects', `more than ${maxRedirects} redirects`);
        const next = redirectUrl(policy, url, location, credentialed);
        ({ method, body, headers } = afterRedirect(res.status, method, body, headers));
        url = next;
      }
      const declared = declaredLength(res.headers.get('content-length'));
      if (declared !== undefined && declared > policy.maxResponseBytes) {
        await res.body?.cancel();
        throw tooLarge(policy.maxResponseBytes);
      }
    } catch (err) {
      const translated = deadline.translate(err, url.host);
      deadline.clear();
      throw translated;
    }

    const init2 = { status: res.status, statusText: res.statusText, headers: res.headers as unknown as HeadersInit };
    let response: Response;
    if (res.body === null || NULL_BODY_STATUSES.has(res.status)) {
      await res.body?.cancel();
      deadline.clear();
      response = new Response(null, init2);
    } else {
      response = new Response(cappedStream(res.body as ReadableStream<Uint8Array>, policy.maxResponseBytes, deadline, url.host), init2);
    }
    Object.defineProperty(response, 'url', { value: url.href });
    return response;
  }

  return guardedFetch as typeof fetch;
}

/** Passes the body through chunk by chunk (no buffering, so SSE works), failing it past `max` bytes or at the deadline. */
function cappedStream(source: ReadableStream<Uint8Array>, max: number, deadline: Deadline, host: string): ReadableStream<Uint8Array> {
  const reader = source.getReader();
  let total = 0;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (err) {
          const translated = deadline.translate(err, host);
          deadline.clear();
          controller.error(translated);
          return;
        }
        if (chunk.done) {
          deadline.clear();
          controller.close();
          return;
        }
        total += chunk.value.byteLength;
        if (total > max) {
          const err = tooLarge(max);
          // Aborting the fetch resets the connection: nothing more is read from the peer.
          deadline.abort(err);
          controller.error(err);
          return;
        }
        controller.enqueue(chunk.value);
      },
      cancel(reason) {
        deadline.clear();
        return reader.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}
