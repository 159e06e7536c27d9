/**
 * The trigger message template: `{{payload}}` is the whole payload (JSON; a payload that is a string is itself),
 * `{{payload.a.b.0}}` one value by path (a string as is, anything else as JSON). A path that is not there, and any
 * other `{{…}}`, render empty. Only own properties are followed and `__proto__`, `constructor` and `prototype` are
 * never, so nothing but data is reached: no expression is evaluated. The result is capped at `maxBytes`.
 */
const PLACEHOLDER = /\{\{\s*([^{}]*?)\s*\}\}/g;
const FORBIDDEN = new Set(['__proto__', 'constructor', 'prototype']);
const MISSING = Symbol('missing');

function lookup(payload: unknown, path: string): unknown {
  if (path === 'payload') return payload;
  if (!path.startsWith('payload.')) return MISSING;
  let cur: unknown = payload;
  for (const seg of path.slice('payload.'.length).split('.')) {
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

export function renderMessage(template: string, payload: unknown, maxBytes: number): string {
  let out = '';
  let last = 0;
  for (const m of template.matchAll(PLACEHOLDER)) {
    out += template.slice(last, m.index) + show(lookup(payload, m[1]!));
    last = m.index! + m[0].length;
    if (out.length > maxBytes * 2) break;
  }
  if (last < template.length && out.length <= maxBytes * 2) out += template.slice(last);
  return capBytes(out, maxBytes);
}
