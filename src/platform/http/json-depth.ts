/** The deepest nesting of objects and arrays any JSON request body may have (frames have their own, smaller limit). */
export const MAX_BODY_DEPTH = 128;

/**
 * The nesting depth of a parsed JSON value (a scalar is 0, `{}` or `[]` is 1), counted without recursion so that
 * any input can be measured; stops as soon as it passes `limit`.
 */
export function jsonDepth(value: unknown, limit: number): number {
  let max = 0;
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length) {
    const [v, d] = stack.pop()!;
    if (v === null || typeof v !== 'object' || ArrayBuffer.isView(v)) continue;
    if (d > max) max = d;
    if (max > limit) return max;
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, d + 1]);
  }
  return max;
}

/**
 * The top-level field of a request body nested deeper than MAX_BODY_DEPTH, or null. A raw body (a Buffer or other
 * byte view, as webhook routes that verify signatures take it) is bytes, not parsed JSON: it is not walked (walking
 * it visited every byte, seconds of CPU for a few unauthenticated megabytes).
 */
export function bodyDepthProblem(body: unknown): { path: string; message: string } | null {
  if (body === null || typeof body !== 'object' || ArrayBuffer.isView(body) || body instanceof ArrayBuffer) return null;
  const entries: Array<[string, unknown]> = Array.isArray(body) ? body.map((v, i) => [String(i), v]) : Object.entries(body);
  for (const [key, value] of entries) {
    if (jsonDepth(value, MAX_BODY_DEPTH - 1) > MAX_BODY_DEPTH - 1)
      return { path: `body.${key}`, message: `is nested more than ${MAX_BODY_DEPTH} levels deep` };
  }
  return null;
}
