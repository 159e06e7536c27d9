import { generateId } from 'ai';
import type { FINISH_REASONS, Usage } from './schemas.js';

/**
 * The OpenAI chat-completions wire format, read the way the AI SDK's OpenAI-compatible provider and
 * `generateText`/`streamText` read it, for the model proxy's passthrough (ADR 0036). Each rule here mirrors one of
 * theirs, so the passthrough and the AI SDK path answer the same result and the same NDJSON lines for the same bytes.
 */

export interface WireUsage {
  prompt_tokens?: number | null;
  completion_tokens?: number | null;
  prompt_tokens_details?: { cached_tokens?: number | null } | null;
  completion_tokens_details?: { reasoning_tokens?: number | null } | null;
}

/** `content`: a string, or parts (text, and the `thinking` parts some providers send). */
export type WireContent = string | { type?: unknown; text?: unknown; thinking?: unknown }[] | null | undefined;

export interface WireToolCallDelta {
  index?: number | null;
  id?: string | null;
  function?: { name?: string | null; arguments?: string | null } | null;
}

export interface WireChunk {
  choices?: {
    delta?: { content?: WireContent; reasoning_content?: unknown; reasoning?: unknown; tool_calls?: WireToolCallDelta[] | null } | null;
    finish_reason?: string | null;
  }[];
  usage?: WireUsage | null;
  error?: unknown;
}

export interface WireCompletion {
  choices: {
    message: {
      content?: WireContent;
      reasoning_content?: string | null;
      reasoning?: string | null;
      tool_calls?: { id?: string | null; function: { name: string; arguments: string } }[] | null;
    };
    finish_reason?: string | null;
  }[];
  usage?: WireUsage | null;
}

export type FinishReason = (typeof FINISH_REASONS)[number];

// The AI SDK parses provider JSON refusing own `__proto__` keys and `constructor.prototype` (secure-json-parse).
const SUSPECT_PROTO =
  /"(?:_|\\u005[Ff])(?:_|\\u005[Ff])(?:p|\\u0070)(?:r|\\u0072)(?:o|\\u006[Ff])(?:t|\\u0074)(?:o|\\u006[Ff])(?:_|\\u005[Ff])(?:_|\\u005[Ff])"\s*:/;
const SUSPECT_CONSTRUCTOR =
  /"(?:c|\\u0063)(?:o|\\u006[Ff])(?:n|\\u006[Ee])(?:s|\\u0073)(?:t|\\u0074)(?:r|\\u0072)(?:u|\\u0075)(?:c|\\u0063)(?:t|\\u0074)(?:o|\\u006[Ff])(?:r|\\u0072)"\s*:/;

/** JSON.parse, refusing what the AI SDK refuses (so a tool input it would keep raw stays raw here too). */
export function parseJson(text: string): unknown {
  const value: unknown = JSON.parse(text);
  if (value === null || typeof value !== 'object' || (!SUSPECT_PROTO.test(text) && !SUSPECT_CONSTRUCTOR.test(text))) return value;
  let next: object[] = [value];
  while (next.length) {
    const nodes = next;
    next = [];
    for (const node of nodes) {
      const ctor = Object.hasOwn(node, 'constructor') ? (node as { constructor: unknown }).constructor : null;
      if (Object.hasOwn(node, '__proto__') || (typeof ctor === 'object' && ctor !== null && Object.hasOwn(ctor, 'prototype')))
        throw new SyntaxError('Object contains forbidden prototype property');
      for (const v of Object.values(node)) if (v && typeof v === 'object') next.push(v);
    }
  }
  return value;
}

export function finishReasonOf(raw: string | null | undefined): FinishReason {
  switch (raw) {
    case 'stop':
      return 'stop';
    case 'length':
      return 'length';
    case 'content_filter':
      return 'content-filter';
    case 'function_call':
    case 'tool_calls':
      return 'tool-calls';
    default:
      return 'other';
  }
}

const count = (n: number | null | undefined) => (typeof n === 'number' ? n : 0);

/** The provider's usage as the proxy reports and meters it (the total is input + output, as the AI SDK counts it). */
export function usageOf(u: WireUsage | null | undefined): Usage {
  const inputTokens = count(u?.prompt_tokens);
  const outputTokens = count(u?.completion_tokens);
  return {
    inputTokens,
    outputTokens,
    totalTokens: inputTokens + outputTokens,
    cachedInputTokens: count(u?.prompt_tokens_details?.cached_tokens),
    reasoningTokens: count(u?.completion_tokens_details?.reasoning_tokens),
  };
}

/** The text and reasoning pieces of a `content`, in order; empty pieces are skipped. */
export function contentParts(content: WireContent): { reasoning: boolean; text: string }[] {
  if (content == null) return [];
  if (typeof content === 'string') return content.length > 0 ? [{ reasoning: false, text: content }] : [];
  if (!Array.isArray(content)) return [];
  const parts: { reasoning: boolean; text: string }[] = [];
  for (const part of content) {
    if (part.type === 'text' && typeof part.text === 'string') {
      if (part.text.length > 0) parts.push({ reasoning: false, text: part.text });
    } else if (part.type === 'thinking' && Array.isArray(part.thinking)) {
      const text = part.thinking
        .filter((c): c is { type: 'text'; text: string } => c != null && typeof c === 'object' && c.type === 'text' && typeof c.text === 'string')
        .map((c) => c.text)
        .join('');
      if (text.length > 0) parts.push({ reasoning: true, text });
    }
  }
  return parts;
}

/**
 * A tool call's input as the AI SDK returns it: the parsed JSON arguments; `{}` for empty arguments of an offered
 * tool; the raw string when they do not parse. `tools` is keyed like the AI SDK's tool set (a plain object).
 */
export function toolInput(tools: Record<string, unknown> | undefined, name: string, args: string): unknown {
  if (tools?.[name] != null && args.trim() === '') return {};
  try {
    return parseJson(args);
  } catch {
    return args;
  }
}

export interface AssembledToolCall {
  id: string;
  name: string;
  args: string;
}

interface PartialCall extends AssembledToolCall {
  index: number | undefined;
  sequence: number;
}

const NEW = Symbol('new');
const AMBIGUOUS = Symbol('ambiguous');
type Resolution = PartialCall | typeof NEW | typeof AMBIGUOUS;

const nonBlank = (s: string | null | undefined) => (s != null && s.trim().length > 0 ? s : undefined);
const startsStructured = (s: string | null | undefined) => {
  const c = typeof s === 'string' ? s.trimStart()[0] : undefined;
  return c === '{' || c === '[';
};

/** Whether `args` opens with a JSON object or array that is already closed (what follows does not count). */
function hasCompleteStructuredValue(args: string): boolean {
  let stack: string[] | null = null;
  let inString = false;
  let escaped = false;
  for (const c of args) {
    if (stack === null) {
      if (/\s/.test(c)) continue;
      if (c !== '{' && c !== '[') return false;
      stack = [c];
    } else if (inString) {
      if (escaped) escaped = false;
      else if (c === '\\') escaped = true;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{' || c === '[') stack.push(c);
    else if (c === '}' || c === ']') {
      if (stack.at(-1) !== (c === '}' ? '{' : '[')) return false;
      stack.pop();
      if (stack.length === 0) return true;
    }
  }
  return false;
}

/**
 * Streamed tool calls, assembled from their deltas as the AI SDK's OpenAI-compatible provider does: arguments are
 * buffered per `index` until the call's name arrives, then calls are matched by index, by id, or (without either)
 * to the one call in progress; a named delta that opens a new JSON value on a finished call's index starts a new
 * call. Calls come out when the stream ends, ordered by index.
 */
export class ToolCallDeltas {
  private readonly calls: PartialCall[] = [];
  private readonly byId = new Map<string, Set<PartialCall>>();
  private readonly byIndex = new Map<number, Set<PartialCall>>();
  private readonly usedIds = new Set<string>();
  private readonly pending = new Map<number, { id: string | null; args: string }>();
  private readonly forwarded = new Set<number>();

  add(d: WireToolCallDelta): void {
    const index = d.index;
    if (index == null || this.forwarded.has(index)) {
      this.track(d);
      return;
    }
    let p = this.pending.get(index);
    if (!p) {
      p = { id: d.id ?? null, args: '' };
      this.pending.set(index, p);
    } else if (p.id == null && d.id != null) p.id = d.id;
    if (d.function?.arguments != null) p.args += d.function.arguments;
    const name = d.function?.name;
    if (name != null) {
      this.track({ index, id: p.id, function: { name, arguments: p.args } });
      this.pending.delete(index);
      this.forwarded.add(index);
    }
  }

  /** The calls, once the stream has ended. Throws when a call never got a name (the AI SDK fails the stream then). */
  finish(): AssembledToolCall[] {
    for (const [index, p] of this.pending) this.track({ index, id: p.id, function: { arguments: p.args } });
    this.pending.clear();
    const calls = this.calls.every((c) => c.index !== undefined)
      ? [...this.calls].sort((a, b) => a.index! - b.index! || a.sequence - b.sequence)
      : this.calls;
    return calls.map((c) => ({ id: c.id, name: c.name, args: c.args }));
  }

  private track(d: WireToolCallDelta): void {
    const wireName = d.function?.name;
    const wireId = nonBlank(d.id);
    const name = nonBlank(wireName);
    const index = d.index ?? undefined;
    const args = d.function?.arguments;
    const found = this.resolve(wireId, index, name, name !== undefined && startsStructured(args));
    if (found === AMBIGUOUS) return;
    let call: PartialCall;
    if (found === NEW) {
      if (typeof wireName === 'string' && name === undefined) return; // a blank name starts nothing
      if (name === undefined) throw new Error("Expected 'function.name' to be a string.");
      call = { id: this.newId(wireId), index, sequence: this.calls.length, name, args: args ?? '' };
      this.calls.push(call);
    } else {
      call = found;
      if (args != null) call.args += args;
    }
    if (wireId !== undefined) link(this.byId, wireId, call);
    if (index !== undefined) link(this.byIndex, index, call);
  }

  private resolve(wireId: string | undefined, index: number | undefined, name: string | undefined, opensValue: boolean): Resolution {
    const indexed = index !== undefined ? this.byIndex.get(index) : undefined;
    const matching = indexed ? [...indexed].filter((c) => name === undefined || c.name === name) : [];
    if (wireId !== undefined) {
      const withId = this.byId.get(wireId);
      if (!withId) return matching.length === 0 ? NEW : opensValue ? NEW : pick(matching, false);
      if (index !== undefined) {
        const found = pick(
          matching.filter((c) => withId.has(c)),
          opensValue,
        );
        if (found !== NEW) return found;
        if (name !== undefined) return NEW;
        if (indexed) return AMBIGUOUS;
        return pick([...withId], false);
      }
      if (name !== undefined)
        return pick(
          [...withId].filter((c) => c.name === name),
          opensValue,
        );
      return pick([...withId], false);
    }
    if (indexed) return pick(matching, opensValue);
    if (name !== undefined) return NEW;
    // No call finishes before the stream ends, so every call is still in progress.
    return this.calls.length === 1 ? this.calls[0]! : this.calls.length > 1 ? AMBIGUOUS : NEW;
  }

  private newId(wireId: string | undefined): string {
    let id = wireId !== undefined && !this.usedIds.has(wireId) ? wireId : generateId();
    while (this.usedIds.has(id)) id = generateId();
    this.usedIds.add(id);
    return id;
  }
}

function pick(calls: PartialCall[], opensValue: boolean): Resolution {
  if (calls.length === 0) return NEW;
  if (!opensValue) return calls.length === 1 ? calls[0]! : AMBIGUOUS;
  const open = calls.filter((c) => !hasCompleteStructuredValue(c.args));
  return open.length === 1 ? open[0]! : open.length > 1 ? AMBIGUOUS : NEW;
}

function link<K>(map: Map<K, Set<PartialCall>>, key: K, call: PartialCall): void {
  const set = map.get(key);
  if (set) set.add(call);
  else map.set(key, new Set([call]));
}
