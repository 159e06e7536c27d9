/**
 * Text templates over data (agent trigger messages, workflow step inputs): `{{root}}` is a whole value and
 * `{{root.a.b.0}}` one value by path, for the roots the caller names (`payload` for a trigger's message; `input`,
 * `payload` and `steps` for a workflow step). A string renders as is, anything else as JSON. A path that is not
 * there, and any other `{{…}}`, render empty. Only own properties are followed and `__proto__`, `constructor` and
 * `prototype` are never, so nothing but data is reached: no expression is evaluated. Results are capped at `maxBytes`.
 */
const PLACEHOLDER = /\{\{\s*([^{}]*?)\s*\}\}/g;
/** A string that is one placeholder and nothing else. */
const WHOLE = /^\{\{\s*([^{}]*?)\s*\}\}$/;
const FORBIDDEN = new Set(['__proto__', 'constructor', 'prototype']);
const MISSING = Symbol('missing');

export type TemplateRoots = Readonly<Record<string, unknown>>;

function lookup(roots: TemplateRoots, path: string): unknown {
  const [root, ...segs] = path.split('.');
  if (!root || FORBIDDEN.has(root) || !Object.hasOwn(roots, root)) return MISSING;
  let cur: unknown = roots[root];
  for (const seg of segs) {
    if (!seg || FORBIDDEN.has(seg) || cur === null || typeof cur !== 'object') return MISSING;
    if (Array.isArray(cur)) {
      if (!/^\d+$/.test(seg) || Number(seg) >= cur.length) return MISSING;
      cur = cur[Number(seg)];
    } else {
      if (!Object.hasOwn(cur, seg)) return MISSING;
      cur = (cur as Record<string, unknown>)[seg];
    }
  }
  return cur;
}

const show = (v: unknown): string => {
  if (v === MISSING || v === undefined) return '';
  if (typeof v === 'string') return v;
  return JSON.stringify(v) ?? '';
};

/** Cuts a string to at most `maxBytes` of UTF-8 without splitting a character. */
export function capBytes(s: string, maxBytes: number): string {
  const buf = Buffer.from(s, 'utf8');
  if (buf.length <= maxBytes) return s;
  let end = maxBytes;
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
  return buf.subarray(0, end).toString('utf8');
}

/** Renders `template` over `roots`, capped at `maxBytes`. */
export function renderTemplate(template: string, roots: TemplateRoots, maxBytes: number): string {
  let out = '';
  let last = 0;
  for (const m of template.matchAll(PLACEHOLDER)) {
    out += template.slice(last, m.index) + show(lookup(roots, m[1]!));
    last = m.index! + m[0].length;
    if (out.length > maxBytes * 2) break;
  }
  if (last < template.length && out.length <= maxBytes * 2) out += template.slice(last);
  return capBytes(out, maxBytes);
}

/** An agent trigger's message: the one root is `payload`. */
export function renderMessage(template: string, payload: unknown, maxBytes: number): string {
  return renderTemplate(template, { payload }, maxBytes);
}

/**
 * Renders every string inside a JSON value (object keys stay as written). A string that is exactly one
 * placeholder becomes the value itself, not its text (`"{{steps.fetch.output.items}}"` is the array; a missing
 * one is null), so structured data passes between steps unchanged. The result, as JSON, is at most `maxBytes`:
 * over that, `TemplateTooLargeError`.
 */
export function renderJson(value: unknown, roots: TemplateRoots, maxBytes: number): unknown {
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') {
      const whole = WHOLE.exec(v);
      if (whole) {
        const found = lookup(roots, whole[1]!);
        return found === MISSING || found === undefined ? null : found;
      }
      return renderTemplate(v, roots, maxBytes);
    }
    if (Array.isArray(v)) return v.map(walk);
    if (v && typeof v === 'object') {
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) if (!FORBIDDEN.has(k)) out[k] = walk(x);
      return out;
    }
    return v;
  };
  const out = walk(value);
  const bytes = Buffer.byteLength(JSON.stringify(out) ?? 'null');
  if (bytes > maxBytes) throw new TemplateTooLargeError(bytes, maxBytes);
  return out;
}

export class TemplateTooLargeError extends Error {
  constructor(
    readonly bytes: number,
    readonly maxBytes: number,
  ) {
    super(`the rendered input is ${bytes} bytes, over the limit of ${maxBytes}`);
  }
}
