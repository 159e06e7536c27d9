import { normalizePath } from '../storage/index.js';

/**
 * A path inside a sandbox: absolute (`/etc/hosts`) or relative to the sandbox user's home (`notes/a.txt` is
 * `/home/user/notes/a.txt`). Apart from the leading "/", the rules are those of workspace files: no "..",
 * backslashes, NUL or control characters; names at most 255 bytes.
 */
export function normalizeSandboxPath(input: string, field = 'path'): string {
  const absolute = input.startsWith('/');
  const rest = normalizePath(absolute ? input.replace(/^\/+/, '') : input, field);
  if (absolute) return `/${rest}`;
  return rest ? `/home/user/${rest}` : '/home/user';
}
