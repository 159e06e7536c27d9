import { errors } from '../../platform/http/errors.js';
import { hasControlChar } from '../../platform/text.js';

const MAX_PATH_BYTES = 1024;
const MAX_SEGMENT_BYTES = 255;

/**
 * Normalizes a workspace path to `a/b/c` (NFC, no empty or `.` segments). Rejects NUL and control
 * characters, backslashes, absolute paths and `..` with a 400 naming the field. '' is the root.
 */
export function normalizePath(input: string, field = 'path'): string {
  if (input.includes('\u0000')) throw errors.invalidField(field, 'must not contain NUL');
  if (hasControlChar(input)) throw errors.invalidField(field, 'must not contain control characters');
  if (input.includes('\\')) throw errors.invalidField(field, 'must use "/" as separator, not "\\"');
  if (input.startsWith('/')) throw errors.invalidField(field, 'must be relative to the workspace root (no leading "/")');
  const segments = input
    .normalize('NFC')
    .split('/')
    .filter((s) => s !== '' && s !== '.');
  if (segments.some((s) => s === '..')) throw errors.invalidField(field, 'must not contain ".."');
  if (segments.some((s) => Buffer.byteLength(s) > MAX_SEGMENT_BYTES)) {
    throw errors.invalidField(field, `each name must be at most ${MAX_SEGMENT_BYTES} bytes`);
  }
  const path = segments.join('/');
  if (Buffer.byteLength(path) > MAX_PATH_BYTES) throw errors.invalidField(field, `must be at most ${MAX_PATH_BYTES} bytes`);
  return path;
}

/** Like normalizePath but the root is not allowed (a file or folder needs a name). */
export function normalizeEntryPath(input: string, field = 'path'): string {
  const path = normalizePath(input, field);
  if (path === '') throw errors.invalidField(field, 'must name a file or folder, not the workspace root');
  return path;
}

export const parentOf = (path: string): string => (path.includes('/') ? path.slice(0, path.lastIndexOf('/')) : '');
export const nameOf = (path: string): string => path.slice(path.lastIndexOf('/') + 1);

/** `a/b/c` -> ['a', 'a/b'] */
export function ancestorsOf(path: string): string[] {
  const parts = path.split('/');
  return parts.slice(0, -1).map((_, i) => parts.slice(0, i + 1).join('/'));
}
