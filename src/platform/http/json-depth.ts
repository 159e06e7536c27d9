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
    if (v === null || typeof v !== 'object') continue;
    if (d > max) max = d;
    if (max > limit) return max;
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, d + 1]);
  }
  return max;
}
