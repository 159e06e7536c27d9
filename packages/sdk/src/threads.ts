import { type Core, unwrap, type WebSocketConstructor, type WebSocketLike } from './core.js';
import { AuthenticationError, BadRequestError, HangarError, NotFoundError, PermissionDeniedError, RequestAbortedError } from './errors.js';
import { backoffMs, type RequestOptions, sleep } from './transport.js';
import type { CreateThreadParams, Page, SnapshotFrame, Thread, ThreadFrame } from './types.js';

/** Options of {@link Threads.subscribe}. */
export interface SubscribeOptions {
  /** Called with every frame in order: `snapshot` first (again after each reconnection), then durable and live frames. */
  onFrame: (frame: ThreadFrame) => void;
  /** Called once when the subscription ends for good on an error (refused credential, unknown thread...). */
  onError?: (error: HangarError) => void;
  /** Called when the connection dropped and is about to be reopened. */
  onReconnect?: (info: { code: number; reason: string; delayMs: number }) => void;
  /** Ends the subscription. */
  signal?: AbortSignal;
  /** Start after this durable sequence: the frames after it are replayed first (default: from now, with the snapshot's recent events). */
  lastSequence?: number;
  /** The organization to act in, for a session token of a member of several (the socket's `org_id`; an API key has its own). */
  orgId?: string;
}

/** A live subscription to a thread's frames. */
export interface ThreadSubscription {
  /** Ends it (no frame is delivered afterwards). */
  close(): void;
  /** Resolves when it has ended: closed, aborted, the thread deleted, or an error (then rejects with it). */
  readonly done: Promise<void>;
  /** The last durable sequence delivered: what a reconnection resumes from. */
  readonly lastSequence: number | null;
}

/** Close codes after which reconnecting cannot help. */
const REFUSALS: Record<number, typeof HangarError> = {
  4400: BadRequestError,
  4401: AuthenticationError,
  4403: PermissionDeniedError,
  4404: NotFoundError,
};
/** The thread was deleted: nothing more will come. */
const GONE = 4410;

/**
 * The WebSocket constructor: the one given, else the global one (browsers, Node 22), else the `ws` package's
 * (Node 20), imported only then so browsers never load it.
 */
async function webSocketConstructor(given?: WebSocketConstructor): Promise<WebSocketConstructor> {
  if (given) return given;
  const global = (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (typeof global === 'function') return global;
  const name = 'ws'; // a variable, so bundlers for the browser leave it alone
  try {
    const mod = (await import(/* @vite-ignore */ /* webpackIgnore: true */ name)) as {
      WebSocket?: WebSocketConstructor;
      default?: WebSocketConstructor;
    };
    const ctor = mod.WebSocket ?? mod.default;
    if (ctor) return ctor;
  } catch {
    // fall through
  }
  throw new HangarError('this runtime has no WebSocket: on Node 20 install the `ws` package (npm install ws), or pass `WebSocket` to new Hangar()', {
    code: 'websocket_unavailable',
  });
}

/** Threads: conversations with their durable history and live frames. `hangar.threads`. */
export class Threads {
  constructor(private readonly core: Core) {}

  /** Opens a thread. */
  async create(params: CreateThreadParams = {}, opts?: RequestOptions): Promise<Thread> {
    return (await unwrap(this.core.api.POST('/v1/threads', { body: params, ...this.core.init(opts) }))).data;
  }

  /** A thread by id. */
  async get(threadId: string, opts?: RequestOptions): Promise<Thread> {
    return (await unwrap(this.core.api.GET('/v1/threads/{threadId}', { params: { path: { threadId } }, ...this.core.init(opts) }))).data;
  }

  /** A page of threads, newest first. */
  async list(query: { limit?: number; cursor?: string; archived?: boolean } = {}, opts?: RequestOptions): Promise<Page<Thread>> {
    const { archived, ...rest } = query;
    const params = { query: { ...rest, ...(archived === undefined ? {} : { archived: archived ? ('true' as const) : ('false' as const) }) } };
    const { data, meta } = await unwrap(this.core.api.GET('/v1/threads', { params, ...this.core.init(opts) }));
    return { data, hasMore: meta.hasMore, nextCursor: meta.nextCursor };
  }

  /**
   * Follows a thread live over its WebSocket. A dropped connection is reopened (with backoff) and resumed from
   * the last durable sequence delivered, so no durable frame is missed or delivered twice (transient frames, such
   * as deltas, sent while disconnected are not replayed). It ends on `close()`, on `signal`, when the thread is
   * deleted, or on a refusal (bad credential, missing scope, unknown thread), which goes to `onError`.
   * @example
   * ```ts
   * const sub = hangar.threads.subscribe(threadId, { onFrame: (f) => console.log(f.type) });
   * // ...
   * sub.close();
   * ```
   */
  subscribe(threadId: string, opts: SubscribeOptions): ThreadSubscription {
    const core = this.core;
    const controller = new AbortController();
    const outer = opts.signal;
    const stop = () => controller.abort(outer?.reason);
    if (outer?.aborted) stop();
    else outer?.addEventListener('abort', stop, { once: true });
    let last: number | null = opts.lastSequence ?? null;
    let socket: WebSocketLike | null = null;
    controller.signal.addEventListener('abort', () => socket?.close(1000, 'closed by the client'), { once: true });

    const deliver = (frame: ThreadFrame) => {
      if (controller.signal.aborted) return;
      if (frame.type === 'snapshot') {
        const snap = frame as SnapshotFrame;
        // The first snapshot (or a resync) sets where we are; a resumed one is followed by the replay after `last`.
        if (typeof snap.lastSequence === 'number' && (last === null || snap.resync)) last = snap.lastSequence;
      } else if (typeof frame.sequence === 'number') {
        if (last !== null && frame.sequence <= last) return; // delivered before
        last = frame.sequence;
      }
      opts.onFrame(frame);
    };

    const connectOnce = (Ctor: WebSocketConstructor, url: string) =>
      new Promise<{ code: number; reason: string; opened: boolean }>((resolve) => {
        let opened = false;
        const ws = new Ctor(url);
        socket = ws;
        ws.onopen = () => {
          opened = true;
        };
        ws.onmessage = (ev) => {
          let frame: ThreadFrame;
          try {
            frame = JSON.parse(typeof ev.data === 'string' ? ev.data : new TextDecoder().decode(ev.data as Uint8Array)) as ThreadFrame;
          } catch {
            return;
          }
          try {
            deliver(frame);
          } catch {
            // the caller's handler threw: its problem, not the connection's
          }
        };
        ws.onerror = () => undefined; // onclose follows
        ws.onclose = (ev) => {
          socket = null;
          resolve({ code: ev.code, reason: ev.reason, opened });
        };
      });

    const run = async (): Promise<void> => {
      const Ctor = await webSocketConstructor(core.WebSocket);
      const { apiKey, baseUrl } = core.transport.config;
      if (!apiKey) throw new AuthenticationError('subscribing needs an API key or session token', { code: 'unauthenticated' });
      for (let attempt = 0; ; attempt++) {
        if (controller.signal.aborted) return;
        const url = new URL(`${baseUrl.replace(/\/+$/, '')}/v1/threads/${encodeURIComponent(threadId)}/events`);
        url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
        // A browser cannot set headers on a WebSocket: the credential goes in the query, as the API asks.
        url.searchParams.set(apiKey.startsWith('hgr_') ? 'api_key' : 'token', apiKey);
        if (last !== null) url.searchParams.set('last_sequence', String(last));
        if (opts.orgId && !apiKey.startsWith('hgr_')) url.searchParams.set('org_id', opts.orgId);
        const ended = await connectOnce(Ctor, url.toString());
        if (controller.signal.aborted || ended.code === GONE) return;
        const Refusal = REFUSALS[ended.code];
        if (Refusal) throw new Refusal(ended.reason || `the thread's stream was refused (${ended.code})`, { code: `ws_${ended.code}` });
        // Dropped, the server restarting, or fallen behind (4409): reopen from the last sequence delivered.
        if (ended.opened) attempt = 0;
        const delayMs = backoffMs(attempt);
        opts.onReconnect?.({ code: ended.code, reason: ended.reason, delayMs });
        try {
          await sleep(delayMs, controller.signal);
        } catch {
          return;
        }
      }
    };

    const done = run()
      .catch((err: unknown) => {
        if (controller.signal.aborted || err instanceof RequestAbortedError) return;
        const error =
          err instanceof HangarError ? err : new HangarError(String((err as Error)?.message ?? err), { code: 'subscription_error', cause: err });
        opts.onError?.(error);
        throw error;
      })
      .finally(() => outer?.removeEventListener('abort', stop));
    // Whoever handles errors with onError must not get an unhandled rejection too.
    if (opts.onError) done.catch(() => undefined);
    return {
      close: stop,
      done,
      get lastSequence() {
        return last;
      },
    };
  }
}
