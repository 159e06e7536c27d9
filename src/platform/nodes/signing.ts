import { randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { Deps } from '../context.js';
import { deriveKey, hmacSha256Hex, safeEqual, sha256Hex } from '../crypto/index.js';
import { errors } from '../http/errors.js';
import { stateKey } from '../state.js';

/**
 * Requests one replica forwards to another carry these headers (ADR 0024), signed with a key derived from
 * HANGAR_SECRET_KEY. The caller's own credentials travel with them and the receiving node authenticates them as
 * for any request; the signature only vouches that a peer routed the request there (so it is served on that node,
 * never forwarded again). A request that carries any of them without a valid signature is refused.
 */
export const HOP_HEADERS = {
  from: 'x-hangar-node-from',
  to: 'x-hangar-node-to',
  timestamp: 'x-hangar-node-timestamp',
  nonce: 'x-hangar-node-nonce',
  signature: 'x-hangar-node-signature',
} as const;

/** How far a forwarded request's timestamp may be from the receiver's clock; replicas keep their clocks in sync (NTP). */
export const HOP_WINDOW_MS = 30_000;
/** The body is streamed, not hashed: a nonce is accepted once, so a captured request cannot be replayed. */
const BODY_MARKER = 'body:streamed';

const HOPS = stateKey('node-hops', () => ({ key: null as Buffer | null, nonces: new Map<string, number>() }));

function keyOf(deps: Deps): Buffer {
  const state = deps.state.get(HOPS);
  state.key ??= deriveKey(deps.config.secretKey, 'node-forwarding/v1');
  return state.key;
}

/** The credential headers a forwarded request carries; their digest is signed, so a signature cannot move to another caller. */
function credentialDigest(headers: IncomingHttpHeaders): string {
  const one = (v: string | string[] | undefined) => (Array.isArray(v) ? v.join(',') : (v ?? ''));
  return sha256Hex([one(headers['x-api-key']), one(headers.authorization), one(headers['x-org-id'])].join('\n'));
}

function payload(method: string, url: string, timestamp: string, nonce: string, from: string, to: string, credentials: string): string {
  return ['hangar-node-v1', method.toUpperCase(), url, timestamp, nonce, from, to, credentials, BODY_MARKER].join('\n');
}

/** The signed hop headers for forwarding `method url` with `headers` (the caller's, as forwarded) to node `to`. */
export function signHop(deps: Deps, method: string, url: string, to: string, headers: IncomingHttpHeaders): Record<string, string> {
  const from = deps.config.sandboxes.nodeId;
  const timestamp = String(Date.now());
  const nonce = randomBytes(16).toString('hex');
  const signature = hmacSha256Hex(keyOf(deps), payload(method, url, timestamp, nonce, from, to, credentialDigest(headers)));
  return {
    [HOP_HEADERS.from]: from,
    [HOP_HEADERS.to]: to,
    [HOP_HEADERS.timestamp]: timestamp,
    [HOP_HEADERS.nonce]: nonce,
    [HOP_HEADERS.signature]: signature,
  };
}

/**
 * Checks a request's hop headers: null when it carries none (a client's request); the sending node's id when they
 * are valid (addressed to this node, fresh, signed, nonce unseen); otherwise 401, whatever else the request holds.
 */
export function verifyHop(deps: Deps, req: { method: string; url: string; headers: IncomingHttpHeaders }): { from: string } | null {
  const h = req.headers;
  const present = Object.values(HOP_HEADERS).filter((name) => h[name] !== undefined);
  if (present.length === 0) return null;
  const get = (name: string) => {
    const v = h[name];
    return typeof v === 'string' ? v : '';
  };
  const refuse = (why: string) => errors.unauthenticated(`this request carries Hangar node-forwarding headers that are not valid: ${why}`);
  const from = get(HOP_HEADERS.from);
  const to = get(HOP_HEADERS.to);
  const timestamp = get(HOP_HEADERS.timestamp);
  const nonce = get(HOP_HEADERS.nonce);
  const signature = get(HOP_HEADERS.signature);
  if (present.length !== Object.keys(HOP_HEADERS).length || !from || !/^\d{1,16}$/.test(timestamp) || !/^[0-9a-f]{32}$/.test(nonce)) {
    throw refuse('incomplete');
  }
  if (to !== deps.config.sandboxes.nodeId) throw refuse('addressed to another node');
  const now = Date.now();
  if (Math.abs(now - Number(timestamp)) > HOP_WINDOW_MS) throw refuse('expired');
  const expected = hmacSha256Hex(keyOf(deps), payload(req.method, req.url, timestamp, nonce, from, to, credentialDigest(h)));
  if (!safeEqual(expected, signature)) throw refuse('bad signature');
  const { nonces } = deps.state.get(HOPS);
  for (const [n, at] of nonces) {
    if (now - at <= 2 * HOP_WINDOW_MS) break; // insertion order: the rest are newer
    nonces.delete(n);
  }
  if (nonces.has(nonce)) throw refuse('replayed');
  nonces.set(nonce, now);
  return { from };
}
