import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, fetch, type Response } from 'undici';

/** An error answer from the Hangar server (`{ error: { code, message } }`), or a network failure (status 0). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** The server's request id, to quote when reporting a problem. */
    readonly requestId?: string,
  ) {
    super(message);
  }
}

export interface ApiOptions {
  /** The server's base URL, e.g. http://127.0.0.1:8080 */
  url: string;
  /** The bearer credential: a device token (`hgd_…`), an API key or a session token; routes that need none ignore it. */
  token?: string;
  /** Tries per call on a network error or a 5xx (default 4). */
  attempts?: number;
  /** The first backoff (doubles each retry; default 500 ms). */
  backoffMs?: number;
}

/** Retryable: no answer at all, or a server error. 4xx answers are final. */
const retryable = (err: unknown) => err instanceof ApiError && (err.status === 0 || err.status >= 500);

/** A small client of the device routes: JSON envelopes, retries with backoff on network errors and 5xx. */
export class DeviceApi {
  /** Its own connection pool, closed by close(): a finished command does not wait for idle keep-alive sockets. */
  private readonly agent = new Agent({ keepAliveTimeout: 1000 });

  constructor(readonly opts: ApiOptions) {}

  /** Closes idle connections (call when done with the client). */
  async close(): Promise<void> {
    await this.agent.close();
  }

  private headers(json: boolean, extra: Record<string, string> = {}): Record<string, string> {
    return {
      ...(json ? { 'content-type': 'application/json' } : {}),
      ...(this.opts.token ? { authorization: `Bearer ${this.opts.token}` } : {}),
      ...extra,
    };
  }

  /** One request, with retries; answers the response (status < 400) or throws ApiError. */
  async fetch(method: string, path: string, body: unknown, signal?: AbortSignal, headers?: Record<string, string>): Promise<Response> {
    const attempts = this.opts.attempts ?? 4;
    let delay = this.opts.backoffMs ?? 500;
    for (let i = 1; ; i++) {
      try {
        let res: Response;
        try {
          res = await fetch(new URL(path, this.opts.url), {
            method,
            // Bytes go as they are (a file's content); anything else as JSON.
            headers: this.headers(body !== undefined && !(body instanceof Uint8Array), {
              ...(body instanceof Uint8Array ? { 'content-type': 'application/octet-stream' } : {}),
              ...headers,
            }),
            body: body === undefined ? undefined : body instanceof Uint8Array ? body : JSON.stringify(body),
            signal,
            dispatcher: this.agent,
          });
        } catch (err) {
          if (signal?.aborted) throw err;
          throw new ApiError(0, 'network_error', `cannot reach ${this.opts.url}: ${(err as Error).cause ?? (err as Error).message}`);
        }
        if (res.status >= 400) throw await errorOf(res);
        return res;
      } catch (err) {
        if (!retryable(err) || i >= attempts || signal?.aborted) throw err;
        await sleep(delay, undefined, { signal });
        delay = Math.min(delay * 2, 8000);
      }
    }
  }

  /** A JSON call: answers the envelope's `data`. */
  async call<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    const res = await this.fetch(method, path, body, signal);
    const text = await res.text();
    if (!text) return undefined as T;
    return (JSON.parse(text) as { data: T }).data;
  }

  /** An NDJSON stream: one parsed object per line. */
  async *ndjson<T>(path: string, body: unknown, signal?: AbortSignal): AsyncGenerator<T> {
    const res = await this.fetch('POST', path, body, signal);
    if (!res.body) return;
    const decoder = new TextDecoder();
    let buffered = '';
    for await (const chunk of res.body) {
      buffered += decoder.decode(chunk, { stream: true });
      let nl = buffered.indexOf('\n');
      while (nl >= 0) {
        const line = buffered.slice(0, nl).trim();
        buffered = buffered.slice(nl + 1);
        if (line) yield JSON.parse(line) as T;
        nl = buffered.indexOf('\n');
      }
    }
    const last = (buffered + decoder.decode()).trim();
    if (last) yield JSON.parse(last) as T;
  }
}

async function errorOf(res: Response): Promise<ApiError> {
  const text = await res.text().catch(() => '');
  try {
    const e = (JSON.parse(text) as { error?: { code?: string; message?: string; requestId?: string } }).error;
    if (e) return new ApiError(res.status, e.code ?? 'error', e.message ?? `HTTP ${res.status}`, e.requestId);
  } catch {}
  return new ApiError(res.status, 'http_error', `HTTP ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}`);
}
