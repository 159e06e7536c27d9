import { CompiledQuery } from 'kysely';
import type { Logger } from 'pino';
import type { Bus } from './bus/index.js';
import type { Principal } from './context.js';
import type { Executor } from './db/index.js';
import { base62 } from './ids.js';

/** The bus channel every replica listens on for credentials that stopped being valid. */
export const REVOCATION_CHANNEL = 'credentials.revoked';

/**
 * A credential that stopped being valid: one API key, or every credential of a user in an organization
 * (`removed`: no longer a member; otherwise their role changed, and what they may see with it).
 */
export type Revocation =
  | { kind: 'api_key'; apiKeyId: string }
  | { kind: 'membership'; userId: string; orgId: string; removed: boolean }
  /** A linked device's credential (its node was revoked). */
  | { kind: 'device'; nodeId: string };

/** The system_settings row whose value changes, to a new random one, with every revocation. */
const REVOCATION_MARK = 'credential_revocations';

/**
 * Changes the installation's revocation mark, in the caller's transaction. Every change that makes credentials
 * invalid or narrower calls it with the change (an API key revoked; a member removed or given another role): what
 * caches credentials (identity's API key cache) trusts an entry only while the mark is the one it read the entry
 * under, so the change reaches the next request on every replica with the commit itself. The bus is not enough for
 * that (it closes sockets): a replica may hear the message only after it has answered a request.
 */
export async function markRevocation(db: Executor): Promise<void> {
  const value = base62(16);
  await db
    .insertInto('system_settings')
    .values({ key: REVOCATION_MARK, value })
    .onConflict((oc) => oc.column('key').doUpdateSet({ value }))
    .execute();
}

/** Compiled once: it runs on every request an API key authenticates. The same SQL in both dialects. */
const MARK_QUERY = CompiledQuery.raw(`select "value" from "system_settings" where "key" = '${REVOCATION_MARK}'`);

/** The installation's revocation mark now; '' before the first revocation. */
export async function revocationMark(db: Executor): Promise<string> {
  const { rows } = await db.executeQuery<{ value: string }>(MARK_QUERY);
  return rows[0]?.value ?? '';
}

/** Close code of a live connection whose credential was revoked or expired (as the HTTP 401). */
export const CLOSE_UNAUTHENTICATED = 4401;

/** setTimeout's largest delay; a later expiry re-arms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

interface Entry {
  principal: Principal;
  close: (code: number, reason: string) => void;
  timer: NodeJS.Timeout | null;
}

/**
 * The long-lived connections (WebSockets) of this process by the credential that opened them. A revocation
 * published on the bus (by any replica, after its transaction committed) closes the matching ones here at
 * once; each connection also closes when its credential expires (a session token's `exp`, a key's expiry).
 */
export class LiveCredentials {
  private readonly entries = new Set<Entry>();
  private unsubscribe: (() => Promise<void>) | null = null;

  constructor(
    private readonly bus: Bus,
    private readonly log: Logger,
  ) {}

  /** Subscribes to revocations; started once per process that serves live connections (app.ts). */
  async start(): Promise<void> {
    if (this.unsubscribe) return;
    this.unsubscribe = await this.bus.subscribe(REVOCATION_CHANNEL, (m) => this.revoked(m as Revocation));
  }

  /**
   * Publishes a revocation to every replica (this one included). Call after the change committed: the change
   * stands even when the bus fails (every HTTP request already checks it), so a failure is logged, not thrown,
   * and this process's own sockets are closed regardless.
   */
  async publish(revocation: Revocation): Promise<void> {
    try {
      await this.bus.publish(REVOCATION_CHANNEL, revocation);
    } catch (err) {
      this.log.error({ err, revocation }, 'could not publish a revocation; other replicas keep its sockets open until they close');
      this.revoked(revocation);
    }
  }

  /** Tracks a connection until the returned function is called (on its close). */
  track(principal: Principal, close: (code: number, reason: string) => void): () => void {
    const entry: Entry = { principal, close, timer: null };
    this.entries.add(entry);
    this.arm(entry);
    return () => this.drop(entry);
  }

  get size(): number {
    return this.entries.size;
  }

  async stop(): Promise<void> {
    for (const e of this.entries) if (e.timer) clearTimeout(e.timer);
    this.entries.clear();
    const off = this.unsubscribe;
    this.unsubscribe = null;
    await off?.().catch(() => undefined);
  }

  private arm(entry: Entry): void {
    const expiresAt = entry.principal.expiresAt;
    if (!expiresAt) return;
    const left = Date.parse(expiresAt) - Date.now();
    if (left <= 0) {
      this.end(entry, entry.principal.kind === 'api_key' ? 'the API key expired' : 'the session token expired');
      return;
    }
    entry.timer = setTimeout(() => this.arm(entry), Math.min(left, MAX_TIMER_MS));
    entry.timer.unref();
  }

  private revoked(r: Revocation): void {
    for (const entry of [...this.entries]) {
      const p = entry.principal;
      if (r.kind === 'api_key' && p.apiKeyId === r.apiKeyId) this.end(entry, 'the API key was revoked');
      else if (r.kind === 'device' && p.deviceNodeId === r.nodeId) this.end(entry, 'the device was revoked');
      else if (r.kind === 'membership' && p.userId === r.userId && p.orgId === r.orgId) {
        this.end(entry, r.removed ? 'no longer a member of this organization' : 'your role in this organization changed; reconnect');
      }
    }
  }

  private end(entry: Entry, reason: string): void {
    this.drop(entry);
    try {
      entry.close(CLOSE_UNAUTHENTICATED, reason);
    } catch (err) {
      this.log.warn({ err }, 'could not close a connection whose credential ended');
    }
  }

  private drop(entry: Entry): void {
    if (entry.timer) clearTimeout(entry.timer);
    this.entries.delete(entry);
  }
}
