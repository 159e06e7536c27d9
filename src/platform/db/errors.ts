import { type AppError, errors } from '../http/errors.js';

/**
 * The one place that knows driver error codes (better-sqlite3's `SQLITE_*`, PostgreSQL's SQLSTATE). Domains
 * translate the violations they expect into their own AppErrors with these predicates (or `uniqueAs`), and
 * the HTTP layer maps whatever is left through `driverErrorToAppError`; no other file names a driver code.
 */
const UNIQUE = new Set(['23505', 'SQLITE_CONSTRAINT_UNIQUE', 'SQLITE_CONSTRAINT_PRIMARYKEY']);
const FOREIGN_KEY = new Set(['23503', 'SQLITE_CONSTRAINT_FOREIGNKEY']);
/** PostgreSQL refuses NUL characters in text (SQLite stores them). */
const NUL_IN_TEXT = '22021';

const codeOf = (err: unknown): string | undefined => {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
};

/** True when a driver error is a unique-constraint (or primary-key) violation, on either dialect. */
export function isUniqueViolation(err: unknown): boolean {
  const code = codeOf(err);
  return code !== undefined && UNIQUE.has(code);
}

/** True when a driver error is a foreign-key violation, on either dialect. */
export function isForeignKeyViolation(err: unknown): boolean {
  const code = codeOf(err);
  return code !== undefined && FOREIGN_KEY.has(code);
}

/** Runs a write; a unique violation becomes the domain's own error (usually a 409 naming the duplicate). */
export async function uniqueAs<T>(write: () => Promise<T>, toError: () => AppError): Promise<T> {
  try {
    return await write();
  } catch (err) {
    if (isUniqueViolation(err)) throw toError();
    throw err;
  }
}

/**
 * What a driver error that no verb translated means to a client, or null when it is not one this layer knows
 * (the caller then answers `internal`). A unique violation here is a race a verb did not expect: 409, retry.
 */
export function driverErrorToAppError(err: unknown): AppError | null {
  const code = codeOf(err);
  if (code === undefined) return null;
  if (code === NUL_IN_TEXT) return errors.invalid('text values must not contain NUL characters');
  if (UNIQUE.has(code)) return errors.conflict('the request conflicted with a concurrent change; retry');
  return null;
}
