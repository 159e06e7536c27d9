import createClient, { type Client } from 'openapi-fetch';
import { errorFromResponse } from './errors.js';
import type { paths } from './generated/openapi.js';
import { Transport, type RequestOptions, type TransportConfig } from './transport.js';

/** What every resource shares: the typed API client (openapi-fetch over the generated paths) and the transport under it. */
export class Core {
  readonly transport: Transport;
  /** The typed client of every API operation (openapi-fetch), for what the SDK has no method for. */
  readonly api: Client<paths>;

  constructor(
    config: TransportConfig,
    /** The WebSocket constructor to use, when given. */
    readonly WebSocket?: WebSocketConstructor,
  ) {
    this.transport = new Transport(config);
    this.api = createClient<paths>({ baseUrl: config.baseUrl.replace(/\/+$/, ''), fetch: (request) => this.transport.send(request) });
  }

  /** The per-call init of an openapi-fetch call: the signal, and a fetch with the call's timeout and retries. */
  init(opts: RequestOptions = {}, stream = false): { signal?: AbortSignal; fetch: (request: Request) => Promise<Response> } {
    return { ...(opts.signal ? { signal: opts.signal } : {}), fetch: this.transport.fetcher({ ...opts, stream }) };
  }
}

/** The data of an openapi-fetch answer, or the typed error of its status. */
export async function unwrap<T>(call: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok) throw errorFromResponse(response, error);
  return data as T;
}

/** The standard WebSocket constructor (browsers, Node 22, undici's, or the `ws` package's). */
export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** The part of the standard WebSocket the SDK uses. */
export interface WebSocketLike {
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  close(code?: number, reason?: string): void;
}
