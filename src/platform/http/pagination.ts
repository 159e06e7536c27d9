import { z } from 'zod';
import { errors } from './errors.js';

/** Opaque cursor: base64url of the JSON sort key of the last row returned. */
export function encodeCursor(key: readonly (string | number)[]): string {
  return Buffer.from(JSON.stringify(key)).toString('base64url');
}

export function decodeCursor(cursor: string, arity: number): (string | number)[] {
  try {
    const value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (Array.isArray(value) && value.length === arity && value.every((v) => typeof v === 'string' || typeof v === 'number')) {
      return value;
    }
  } catch {
    // fall through to the error below
  }
  throw errors.invalidField('cursor', 'is not a cursor this endpoint issued');
}

/** `limit` query parameter with the spec's default and maximum; out-of-range is a 400, never clamped. */
export const limitParam = (def: number, max: number, min = 1) =>
  z.coerce
    .number()
    .int()
    .min(min, `must be between ${min} and ${max}`)
    .max(max, `must be between ${min} and ${max}`)
    .default(def)
    .describe(`Page size, ${min} to ${max} (default ${def}).`);

/** Query booleans arrive as strings. */
export const queryBool = z.enum(['true', 'false', '1', '0']).transform((v) => v === 'true' || v === '1');

/** Takes `limit + 1` rows and turns them into a page with the cursor of the last row shown. */
export function toPage<T>(rows: T[], limit: number, keyOf: (row: T) => (string | number)[]) {
  const hasMore = rows.length > limit;
  const items = hasMore ? rows.slice(0, limit) : rows;
  const last = items[items.length - 1];
  return { items, hasMore, nextCursor: hasMore && last ? encodeCursor(keyOf(last)) : null };
}
