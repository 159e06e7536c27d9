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

/** A prefixed id such as `act_...`: time-ordered prefix then randomness, so ids sort by creation. */
export function prefixedId(prefix: string): string {
  return `${prefix}_${Date.now().toString(36).padStart(9, '0')}${base62(14)}`;
}

export const nowIso = (): string => new Date().toISOString();
