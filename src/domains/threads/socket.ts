import type { FastifyRequest } from 'fastify';
import type { WebSocket } from 'ws';
import type { Authenticate, Ctx, Deps } from '../../platform/context.js';
import type { AppError } from '../../platform/http/errors.js';
import { PROTOCOL_VERSION, type SnapshotFrame } from './frames.js';
import { outgoing, type ThreadHub, type OutgoingFrame, type Subscriber } from './hub.js';
import { activeRun } from './locks.js';
import { eventsAfter, findThread, toEvent, toThread } from './service.js';

/** Close codes (4000–4999 are the application's). */
export const CLOSE = {
  badRequest: 4400,
  unauthenticated: 4401,
  forbidden: 4403,
  notFound: 4404,
  /** The thread was deleted. */
  gone: 4410,
  /** The socket fell too far behind to take a durable frame: reconnect with `last_sequence` (in the reason). */
  resume: 4409,
} as const;

/** Above this many unsent bytes transient frames are dropped; above HARD a durable frame closes the socket with CLOSE.resume. */
const SOFT_BYTES = 256 * 1024;
const HARD_BYTES = 4 * 1024 * 1024;
const HEARTBEAT_MS = 25_000;
const SNAPSHOT_EVENTS = 100;
const REPLAY_PAGE = 500;
/** A client further behind than this gets a fresh snapshot (`resync: true`) instead of a replay. */
const MAX_REPLAY = 10_000;

/** A close reason is at most 123 bytes of UTF-8 (RFC 6455; `ws` throws on more): cut it to fit. */
function closeReason(reason: string): string {
  let out = reason.slice(0, 123);
  while (Buffer.byteLength(out) > 123) out = out.slice(0, -1);
  return out;
}

/**
 * One WebSocket subscriber of a thread. Query: exactly one of `api_key` or `token` (and `org_id` for a session
 * token of a user in several organizations), optional `last_sequence`. Frames: `snapshot` first; then, if
 * `last_sequence` was given, every durable frame after it; then live frames in order, never interleaved with
 * the replay. See ADR 0011.
 */
export async function serveSocket(deps: Deps, hub: ThreadHub, authenticate: Authenticate, socket: WebSocket, req: FastifyRequest): Promise<void> {
  // The raw query: the route's schema (for its HTTP side) strips what it does not know, credentials included.
  const q = Object.fromEntries(new URL(req.url, 'http://localhost').searchParams) as Record<string, string | undefined>;
  const threadId = (req.params as { threadId: string }).threadId;
  const close = (code: number, reason: string) => socket.close(code, closeReason(reason));
  if ((q.api_key ? 1 : 0) + (q.token ? 1 : 0) !== 1) return close(CLOSE.badRequest, 'give exactly one of the query parameters api_key or token');
  let lastSequence: number | null = null;
  if (q.last_sequence !== undefined) {
    lastSequence = Number(q.last_sequence);
    if (!Number.isInteger(lastSequence) || lastSequence < 0) return close(CLOSE.badRequest, 'last_sequence must be a whole number, 0 or more');
  }

  let ctx: Ctx;
  let closed = false;
  /** Ends the socket for good: no frame is sent after this. */
  const end = (code: number, reason: string) => {
    closed = true;
    close(code, reason);
  };
  try {
    if (q.api_key && !q.api_key.startsWith('hgr_')) return close(CLOSE.unauthenticated, 'api_key is not an API key; send a session token as token');
    const credential = q.api_key ? { apiKey: q.api_key } : { bearer: q.token };
    const principal = await authenticate(credential, q.org_id || undefined);
    if (!principal.orgId) return close(CLOSE.forbidden, 'this credential has no organization');
    if (!principal.scopes.has('agent:read')) return close(CLOSE.forbidden, 'this credential lacks the "agent:read" scope');
    ctx = { deps, requestId: req.id, principal };
    // Revocation (from any replica) or expiry of the credential closes the socket with 4401.
    const untrack = deps.live.track(principal, end);
    socket.on('close', untrack);
    // A revocation committed between the first check and the tracking would be missed: check once more.
    await authenticate(credential, q.org_id || undefined);
    if (closed) return;
  } catch (err) {
    const e = err as AppError;
    return end(e.status === 403 ? CLOSE.forbidden : CLOSE.unauthenticated, e.message ?? 'not authenticated');
  }

  let found: Awaited<ReturnType<typeof findThread>>;
  try {
    found = await findThread(ctx, threadId);
  } catch {
    return close(CLOSE.notFound, `thread ${threadId} was not found`);
  }
  const { view } = found;

  let buffering = true;
  const buffer: OutgoingFrame[] = [];
  let lastSent = 0;
  let dropped = 0;
  const send = (frame: OutgoingFrame) => {
    if (closed || socket.readyState !== socket.OPEN) return;
    if (frame.kind === 'transient' && socket.bufferedAmount > SOFT_BYTES) {
      dropped++;
      return;
    }
    if (socket.bufferedAmount > HARD_BYTES) {
      closed = true;
      close(CLOSE.resume, `send queue full; reconnect with last_sequence=${lastSent}`);
      return;
    }
    socket.send(frame.json);
    if (frame.sequence !== undefined) lastSent = frame.sequence;
  };
  const subscriber: Subscriber = {
    view,
    deliver(frame) {
      if (!buffering) return send(frame);
      buffer.push(frame);
      if (buffer.length > MAX_REPLAY) {
        closed = true;
        close(CLOSE.resume, `too many frames during replay; reconnect with last_sequence=${lastSent}`);
      }
    },
    end,
  };

  let alive = true;
  const heartbeat = setInterval(() => {
    if (!alive) return socket.terminate();
    alive = false;
    socket.ping();
  }, HEARTBEAT_MS);
  socket.on('pong', () => (alive = true));
  socket.on('close', () => {
    closed = true;
    clearInterval(heartbeat);
    hub.leave(threadId, subscriber);
  });
  socket.on('message', () => undefined); // the protocol is server to client; client messages are ignored

  if (closed) return;
  const mark = await hub.join(threadId, subscriber, async () => {
    const row = await deps.db.kysely.selectFrom('threads').select('last_sequence').where('id', '=', threadId).executeTakeFirst();
    return Number(row?.last_sequence ?? 0);
  });
  const fresh = await deps.db.kysely.selectFrom('threads').selectAll().where('id', '=', threadId).executeTakeFirst();
  if (!fresh) return end(CLOSE.gone, 'thread deleted');
  const thread = toThread(fresh);

  if (view === 'metadata') {
    send(outgoing({ type: 'snapshot', protocol_version: PROTOCOL_VERSION, view, thread }));
  } else {
    const resync = lastSequence !== null && mark - lastSequence > MAX_REPLAY;
    const snapshot: SnapshotFrame = {
      type: 'snapshot',
      protocol_version: PROTOCOL_VERSION,
      view,
      thread,
      lastSequence: mark,
      activeRunId: await activeRun(deps, threadId),
    };
    if (lastSequence === null || resync) {
      const recent = await deps.db.kysely
        .selectFrom('thread_events')
        .selectAll()
        .where('thread_id', '=', threadId)
        .where('rollout_id', '=', fresh.active_rollout_id ?? '')
        .where('sequence', '<=', mark)
        .orderBy('sequence', 'desc')
        .limit(SNAPSHOT_EVENTS)
        .execute();
      snapshot.events = recent.reverse().map(toEvent);
      if (resync) snapshot.resync = true;
    }
    send(outgoing(snapshot));
    lastSent = mark;
    if (lastSequence !== null && !resync && lastSequence < mark) {
      for (let after = lastSequence; after < mark && !closed; ) {
        const page = await eventsAfter(deps, threadId, after, mark, REPLAY_PAGE);
        if (!page.length) break;
        for (const e of page) send(outgoing(e));
        after = page[page.length - 1]!.sequence;
      }
    }
  }
  // Live from here: what arrived during the snapshot and replay first, in order.
  for (const frame of buffer.splice(0)) if (frame.sequence === undefined || frame.sequence > mark) send(frame);
  buffering = false;
  if (dropped) deps.log.debug({ threadId, dropped }, 'transient frames dropped for a slow subscriber');
}
