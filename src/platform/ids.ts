import { randomBytes, randomUUID } from 'node:crypto';

export const uuid = (): string => randomUUID();

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** Random base62 string of `length` characters (unbiased). */
export function base62(length: number): string {
  let out = '';
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248 && out.length < length) out += ALPHABET[byte % 62];
    }
  }
  return out;
}

let lastMs = 0;
let seq = 0;

/**
 * A prefixed id such as `act_...`: time, then a per-millisecond sequence, then randomness, so ids sort by
 * creation, also among several made in the same millisecond by this process (the activity log's newest-first
 * order relies on it).
 */
export function prefixedId(prefix: string): string {
  const now = Date.now();
  if (now > lastMs) {
    lastMs = now;
    seq = 0;
  } else seq++;
  return `${prefix}_${lastMs.toString(36).padStart(9, '0')}${(seq % 36 ** 4).toString(36).padStart(4, '0')}${base62(10)}`;
}

export const nowIso = (): string => new Date().toISOString();
