/** True when `s` holds a C0 control character (U+0000–U+001F) or DEL: never valid in a name or a path. */
export function hasControlChar(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}
