import { ConnectionError, errorFromResponse, HangarError, parseRetryAfter, RequestAbortedError, TimeoutError } from './errors.js';

/** Options every SDK method accepts as its last argument. */
export interface RequestOptions {
  /** Aborts the operation (the request, a wait between retries, a stream); it then rejects with {@link RequestAbortedError}. */
  signal?: AbortSignal;
  /** Milliseconds an attempt may take (for a stream: until the answer starts) before it fails with {@link TimeoutError}. */
  timeout?: number;
  /** Retries of this request (overrides the client's `maxRetries`). */
  maxRetries?: number;
}

/** How the transport is set up (the client's options, resolved). */
export interface TransportConfig {
  baseUrl: string;
  apiKey: string | undefined;
  fetch: (input: Request) => Promise<Response>;
  maxRetries: number;
  timeout: number;
}

/** Statuses retried for any method: the API did not act on the request. */
const RETRY_STATUSES = new Set([429, 503]);
/** Methods retried after a network error or timeout too: repeating them has the same effect. */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE']);
const INITIAL_BACKOFF_MS = 500;
const MAX_BACKOFF_MS = 8_000;
/** A `Retry-After` longer than this is not waited for: the error is thrown with it (RateLimitError.retryAfterMs). */
const MAX_RETRY_AFTER_MS = 60_000;

/** Exponential backoff with jitter: 0.5 s, 1 s, 2 s... up to 8 s, each less up to a quarter at random. */
export function backoffMs(attempt: number, random = Math.random()): number {
  const base = Math.min(MAX_BACKOFF_MS, INITIAL_BACKOFF_MS * 2 ** attempt);
  return Math.round(base * (1 - 0.25 * random));
}

/** Rejects with RequestAbortedError when `signal` is aborted. */
export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new RequestAbortedError(signal.reason);
}

/** Waits `ms`, or rejects with RequestAbortedError as soon as `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new RequestAbortedError(signal.reason));
    const onAbort = () => {
      clearTimeout(timer);
      reject(new RequestAbortedError(signal?.reason));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A signal that aborts when any of `signals` does (AbortSignal.any where it exists). */
function anySignal(signals: AbortSignal[]): AbortSignal {
  if (signals.length === 1) return signals[0]!;
  const any = (AbortSignal as unknown as { any?: (s: AbortSignal[]) => AbortSignal }).any;
  if (any) return any(signals);
  const controller = new AbortController();
  for (const s of signals) {
    if (s.aborted) {
      controller.abort(s.reason);
      break;
    }
    s.addEventListener('abort', () => controller.abort(s.reason), { once: true });
  }
  return controller.signal;
}

/** Statuses whose response has no body. */
const NULL_BODY = new Set([101, 204, 205, 304]);

/**
 * Sends requests: adds the credential, bounds each attempt by the timeout, retries 429 and 503 (any method) and
 * network errors and timeouts (idempotent methods) with exponential backoff and jitter, waiting what `Retry-After`
 * says when the API says it. A non-streaming answer is read whole inside the attempt, so the timeout and the
 * retries cover its body too.
 */
export class Transport {
  constructor(readonly config: TransportConfig) {}

  /** A fetch function for one call (openapi-fetch's `fetch` option), with the call's options. */
  fetcher(opts: RequestOptions & { stream?: boolean } = {}): (request: Request) => Promise<Response> {
    return (request) => this.send(request, opts);
  }

  /** Sends `request` with retries; answers the last response (error statuses included: see {@link Transport.json}). */
  async send(request: Request, opts: RequestOptions & { stream?: boolean } = {}): Promise<Response> {
    const maxRetries = Math.max(0, opts.maxRetries ?? this.config.maxRetries);
    const timeout = opts.timeout ?? this.config.timeout;
    const signal = opts.signal;
    const idempotent = IDEMPOTENT.has(request.method.toUpperCase());
    for (let attempt = 0; ; attempt++) {
      throwIfAborted(signal);
      const canRetry = attempt < maxRetries;
      const source = canRetry ? request.clone() : request;
      const headers = new Headers(source.headers);
      if (this.config.apiKey && !headers.has('authorization')) headers.set('authorization', `Bearer ${this.config.apiKey}`);
      const timer = new AbortController();
      const timeoutId = setTimeout(() => timer.abort(new TimeoutError(`no answer within ${timeout} ms`, { code: 'timeout' })), timeout);
      const attemptSignal = anySignal(signal ? [signal, timer.signal] : [timer.signal]);
      let response: Response;
      try {
        response = await this.config.fetch(new Request(source, { headers, signal: attemptSignal }));
        if (!opts.stream) {
          // Read the body within the attempt (its timeout and retries cover it).
          const body = NULL_BODY.has(response.status) ? null : await response.arrayBuffer();
          response = new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
        }
      } catch (err) {
        if (signal?.aborted) throw new RequestAbortedError(signal.reason);
        const failure = timer.signal.aborted
          ? new TimeoutError(`no answer from ${request.method} ${new URL(request.url).pathname} within ${timeout} ms`, { code: 'timeout' })
          : err instanceof HangarError
            ? err
            : new ConnectionError(`could not reach ${new URL(request.url).origin}: ${(err as Error)?.message ?? String(err)}`, {
                code: 'connection_error',
                cause: err,
              });
        if (!canRetry || !idempotent) throw failure;
        await sleep(backoffMs(attempt), signal);
        continue;
      } finally {
        clearTimeout(timeoutId);
      }
      if (canRetry && RETRY_STATUSES.has(response.status)) {
        const retryAfter = parseRetryAfter(response.headers.get('retry-after'));
        if (retryAfter === undefined || retryAfter <= MAX_RETRY_AFTER_MS) {
          await response.body?.cancel().catch(() => undefined);
          await sleep(retryAfter ?? backoffMs(attempt), signal);
          continue;
        }
      }
      return response;
    }
  }

  /** The URL of an API path with its query (undefined values left out). */
  url(path: string, query: Record<string, string | number | boolean | undefined> = {}): string {
    const url = new URL(this.config.baseUrl.replace(/\/+$/, '') + path);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
    return url.toString();
  }

  /** Sends a request built by hand (raw bodies, event streams) and throws the typed error for an error status. */
  async request(
    method: string,
    path: string,
    init: RequestInit & RequestOptions & { query?: Record<string, string | number | boolean | undefined>; stream?: boolean } = {},
  ): Promise<Response> {
    const { query, stream, timeout, maxRetries, signal, ...rest } = init;
    const request = new Request(this.url(path, query), { ...rest, method, signal });
    const response = await this.send(request, { stream, timeout, maxRetries, signal });
    if (!response.ok) throw errorFromResponse(response, await readPayload(response));
    return response;
  }
}

/** An error response's body: JSON when it is, else its text. */
export async function readPayload(response: Response): Promise<unknown> {
  const text = await response.text().catch(() => '');
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
