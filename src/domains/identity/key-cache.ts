import type { Role, Scope } from '../../platform/scopes.js';

/**
 * How long a looked-up key is used without reading it again. Revocations do not wait for it (see `KeyCache`); it
 * bounds only what no verb marks, such as an operator's direct edit of the tables.
 */
export const KEY_CACHE_TTL_MS = 5000;
/** Most keys kept; past it the oldest is dropped. Only valid keys get in, so this bounds honest use, not an attack. */
const MAX_KEYS = 10_000;

/** What authenticating an API key found in the database: all a request needs, bar the checks made on each use. */
export interface KnownKey {
  id: string;
  orgId: string;
  userId: string;
  role: Role;
  scopes: ReadonlySet<Scope>;
  expiresAt: string | null;
  /** `expiresAt` as epoch ms; Infinity when the key never expires. */
  expiresMs: number;
  /** When its use was last recorded (epoch ms, 0 when never): `last_used_at` is written at most once a minute. */
  lastUsedMs: number;
}

interface Entry {
  key: KnownKey;
  /** The revocation mark read before the key was. */
  mark: string;
  loadedMs: number;
}

/**
 * API keys looked up recently, by the SHA-256 of the secret (never the secret itself). An entry is used only while
 * the installation's revocation mark (platform/revocations.ts) is the one read before the key was: every change that
 * makes a key invalid or narrower (the key revoked; its owner removed from the organization or given another role)
 * changes the mark in its own transaction, and each request reads the mark, so the request after a revocation
 * committed reads the key again on whichever replica it lands. Reading the mark before the key means a revocation
 * that commits during a lookup leaves its result stale at once. Expiry needs no mark: it is checked on every use.
 */
export class KeyCache {
  private readonly entries = new Map<string, Entry>();

  /** The key for this hash if cached under this mark and fresh; a stale entry is dropped. */
  get(hash: string, mark: string, nowMs: number): KnownKey | undefined {
    const entry = this.entries.get(hash);
    if (!entry) return undefined;
    if (entry.mark !== mark || nowMs - entry.loadedMs >= KEY_CACHE_TTL_MS) {
      this.entries.delete(hash);
      return undefined;
    }
    return entry.key;
  }

  /** Keeps a key read after `mark` was. */
  put(hash: string, key: KnownKey, mark: string, nowMs: number): void {
    if (!this.entries.has(hash) && this.entries.size >= MAX_KEYS) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(hash, { key, mark, loadedMs: nowMs });
  }
}
