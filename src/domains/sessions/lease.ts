/**
 * The session lease: work that must not interleave on one session (a run using it, a compaction, a fork or a
 * copy reading it, block writes) holds it, across replicas (a conditional UPDATE on the session row, renewed
 * while held, lapsing if its process dies). A second writer waits up to HANGAR_SESSIONS_LOCK_WAIT_MS, then gets
 * 409 `session_busy` naming what holds it. Reads never wait.
 */
import type { Ctx } from '../../platform/context.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { uuid } from '../../platform/ids.js';
import { leaseHolder, releaseLease, renewLease, tryLease } from './repo.js';

const LEASE_TTL_MS = 60_000;

export type LeaseKind = 'run' | 'compaction' | 'fork' | 'write' | 'delete';

const later = (ms: number) => new Date(Date.now() + ms).toISOString();

export interface Lease {
  holder: string;
  release(): Promise<void>;
}

/** Takes the lease of a session the caller may write (checked before); waits for a holder to finish. */
export async function takeLease(ctx: Ctx, sessionId: string, kind: LeaseKind, label = kind): Promise<Lease> {
  const base: Ctx = { ...ctx, trx: undefined };
  const holder = `${label}:${uuid()}`;
  const deadline = Date.now() + ctx.deps.config.sessions.lockWaitMs;
  for (let i = 0; ; i++) {
    if (await tryLease(base, sessionId, holder, new Date().toISOString(), later(LEASE_TTL_MS))) break;
    const held = await leaseHolder(base, sessionId);
    if (!held) throw errors.notFound('session', sessionId);
    if (Date.now() >= deadline) {
      const by = held.lease_holder?.replace(/:[0-9a-f-]{36}$/, '') ?? 'another request';
      throw new AppError('session_busy', `session ${sessionId} is in use (${by}); try again when it is done`, { heldBy: by });
    }
    await new Promise((r) => setTimeout(r, Math.min(100, 5 * 2 ** i)));
  }
  const timer = setInterval(() => void renewLease(base, sessionId, holder, later(LEASE_TTL_MS)).catch(() => undefined), LEASE_TTL_MS / 3);
  timer.unref();
  let released = false;
  return {
    holder,
    release: async () => {
      if (released) return;
      released = true;
      clearInterval(timer);
      await releaseLease(base, sessionId, holder);
    },
  };
}

/** `fn` while holding the session's lease. */
export async function withLease<T>(ctx: Ctx, sessionId: string, kind: LeaseKind, fn: () => Promise<T>): Promise<T> {
  const lease = await takeLease(ctx, sessionId, kind);
  try {
    return await fn();
  } finally {
    await lease.release();
  }
}
