/**
 * How each source signs its requests, checked over the raw body bytes before anything parses them. Digests are
 * compared in constant time on fixed-length values (both sides hashed first), so a signature of the wrong length
 * is just a mismatch.
 *
 * - webhook (generic): `X-Webhook-Signature: [sha256=]<hex HMAC-SHA256(secret, body)>`, or the Standard Webhooks
 *   scheme: `webhook-id`, `webhook-timestamp` (Unix seconds), `webhook-signature: v1,<base64 HMAC-SHA256 of
 *   "id.timestamp.body">` (several, space-separated; a `whsec_` secret is base64-decoded to the key).
 * - code_host: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`; event `X-GitHub-Event`, delivery
 *   `X-GitHub-Delivery`.
 * - payment_provider: `Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "t.body")>` (several v1 allowed).
 * - chat_workspace: `X-Slack-Signature: v0=<hex HMAC-SHA256(secret, "v0:ts:body")>`, `X-Slack-Request-Timestamp`.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { TriggerSource } from './schemas.js';

export type Headers = Record<string, string | string[] | undefined>;

export type Verdict =
  | { ok: true /** the delivery id a header carries (payload ids are read after parsing) */; deliveryId?: string; event?: string }
  | { ok: false; reason: 'bad_signature' | 'stale_timestamp' };

export const header = (headers: Headers, name: string): string | undefined => {
  const v = headers[name.toLowerCase()];
  return Array.isArray(v) ? v[0] : v;
};

const digest = (v: string | Buffer) => createHash('sha256').update(v).digest();

/** Constant time whatever the lengths: both sides are hashed to 32 bytes first. */
export function sameSecret(a: string | Buffer, b: string | Buffer): boolean {
  return timingSafeEqual(digest(a), digest(b));
}

const hmac = (key: string | Buffer, ...parts: (string | Buffer)[]) => {
  const h = createHmac('sha256', key);
  for (const p of parts) h.update(p);
  return h;
};

const BAD = { ok: false, reason: 'bad_signature' } as const;
const STALE = { ok: false, reason: 'stale_timestamp' } as const;

/** True when `ts` (Unix seconds, digits only) is within `tolerance` seconds of `now` (ms). */
const fresh = (ts: string, now: number, tolerance: number) => /^\d{1,12}$/.test(ts) && Math.abs(now / 1000 - Number(ts)) <= tolerance;

/** The Standard Webhooks key: a `whsec_` secret is the base64 of the key; any other secret is its own bytes. */
const standardKey = (secret: string) => (secret.startsWith('whsec_') ? Buffer.from(secret.slice(6), 'base64') : Buffer.from(secret, 'utf8'));

function verifyGeneric(secret: string, headers: Headers, body: Buffer, now: number, tolerance: number): Verdict {
  const std = header(headers, 'webhook-signature');
  if (std !== undefined) {
    const id = header(headers, 'webhook-id');
    const ts = header(headers, 'webhook-timestamp');
    if (!id || !ts || id.length > 256) return BAD;
    const expected = hmac(standardKey(secret), `${id}.${ts}.`, body).digest('base64');
    const matched = std
      .split(' ')
      .filter(Boolean)
      .some((entry) => {
        const comma = entry.indexOf(',');
        return comma > 0 && entry.slice(0, comma) === 'v1' && sameSecret(entry.slice(comma + 1), expected);
      });
    if (!matched) return BAD;
    if (!fresh(ts, now, tolerance)) return STALE;
    return { ok: true, deliveryId: id, event: header(headers, 'webhook-event') };
  }
  const plain = header(headers, 'x-webhook-signature');
  if (plain === undefined) return BAD;
  const given = plain
    .trim()
    .replace(/^sha256=/i, '')
    .toLowerCase();
  if (!sameSecret(given, hmac(secret, body).digest('hex'))) return BAD;
  const id = header(headers, 'webhook-id');
  return { ok: true, deliveryId: id && id.length <= 256 ? id : undefined, event: header(headers, 'x-webhook-event') };
}

function verifyCodeHost(secret: string, headers: Headers, body: Buffer): Verdict {
  const sig = header(headers, 'x-hub-signature-256');
  if (!sig?.startsWith('sha256=')) return BAD;
  if (!sameSecret(sig.slice(7).toLowerCase(), hmac(secret, body).digest('hex'))) return BAD;
  const id = header(headers, 'x-github-delivery');
  return { ok: true, deliveryId: id && id.length <= 256 ? id : undefined, event: header(headers, 'x-github-event') };
}

function verifyPayment(secret: string, headers: Headers, body: Buffer, now: number, tolerance: number): Verdict {
  const sig = header(headers, 'stripe-signature');
  if (!sig) return BAD;
  let t: string | undefined;
  const v1: string[] = [];
  for (const part of sig.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const k = part.slice(0, eq).trim();
    const v = part.slice(eq + 1).trim();
    if (k === 't') t = v;
    else if (k === 'v1') v1.push(v.toLowerCase());
  }
  if (!t || !v1.length) return BAD;
  const expected = hmac(secret, `${t}.`, body).digest('hex');
  if (!v1.slice(0, 16).some((s) => sameSecret(s, expected))) return BAD;
  if (!fresh(t, now, tolerance)) return STALE;
  return { ok: true };
}

function verifyChat(secret: string, headers: Headers, body: Buffer, now: number, tolerance: number): Verdict {
  const sig = header(headers, 'x-slack-signature');
  const ts = header(headers, 'x-slack-request-timestamp');
  if (!sig || !ts) return BAD;
  const expected = `v0=${hmac(secret, `v0:${ts}:`, body).digest('hex')}`;
  if (!sameSecret(sig.toLowerCase(), expected)) return BAD;
  if (!fresh(ts, now, tolerance)) return STALE;
  return { ok: true };
}

/** Whether the request is signed with the trigger's secret the way its source signs. */
export function verifySignature(
  source: TriggerSource,
  secret: string,
  headers: Headers,
  body: Buffer,
  opts: { now: number; toleranceSeconds: number },
): Verdict {
  switch (source) {
    case 'webhook':
      return verifyGeneric(secret, headers, body, opts.now, opts.toleranceSeconds);
    case 'code_host':
      return verifyCodeHost(secret, headers, body);
    case 'payment_provider':
      return verifyPayment(secret, headers, body, opts.now, opts.toleranceSeconds);
    case 'chat_workspace':
      return verifyChat(secret, headers, body, opts.now, opts.toleranceSeconds);
  }
}
