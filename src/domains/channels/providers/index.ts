/**
 * The channel adapters (ADR 0030): `adapterFor(config, provider)` answers the provider's adapter, built once per
 * configuration object. A new provider is one module implementing `ChannelAdapter` and one line in `FACTORIES`.
 */
import type { ChannelsConfig } from '../../../config.js';
import { businessAdapter } from './business.js';
import { chatbotAdapter } from './chatbot.js';
import { type AdapterFactory, type ChannelAdapter, PROVIDERS, type ProviderSlug } from './types.js';

export { type BusinessConnectionCheck, MAX_BUSINESS_MESSAGES, validateBusinessConnection, verifyChallenge } from './business.js';
export { InboundParseError, MAX_INBOUND_BYTES } from './errors.js';
export * from './types.js';

const FACTORIES: Readonly<Record<ProviderSlug, AdapterFactory>> = Object.freeze({
  chatbot_provider: chatbotAdapter,
  business_messaging_provider: businessAdapter,
});

/** Adapters built for a configuration object; they hold nothing but the configuration. */
const built = new WeakMap<ChannelsConfig, Map<ProviderSlug, ChannelAdapter>>();

export function isProvider(s: unknown): s is ProviderSlug {
  return typeof s === 'string' && (PROVIDERS as readonly string[]).includes(s);
}

export function adapterFor(config: ChannelsConfig, provider: ProviderSlug): ChannelAdapter {
  if (!isProvider(provider)) throw new Error(`no channel adapter for provider ${String(provider).slice(0, 60)}`);
  let adapters = built.get(config);
  if (!adapters) {
    adapters = new Map();
    built.set(config, adapters);
  }
  let adapter = adapters.get(provider);
  if (!adapter) {
    adapter = FACTORIES[provider](config);
    adapters.set(provider, adapter);
  }
  return adapter;
}

const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff;

/** Where to cut `text` (which starts with a non-blank character; at most `max` long a part): after a paragraph, a line, a sentence, a space, else anywhere safe. */
function cutAt(text: string, max: number): number {
  const window = text.slice(0, max + 1);
  // A boundary too early would leave a tiny part; prefer one in the later part of the window.
  const floor = Math.floor(max * 0.3);
  const last = (re: RegExp, minimum: number): number => {
    let found = -1;
    for (const m of window.matchAll(re)) {
      const end = m.index + m[0].length;
      // `text` starts with a non-blank character, so a boundary past 0 leaves a non-empty part; it must fit.
      if (m.index <= max && m.index >= minimum && m.index > 0) found = Math.min(end, max);
    }
    return found;
  };
  for (const re of [/\n[ \t]*\n\s*/g, /\n\s*/g, /(?<=[.!?…。！？])[ \t]+/g]) {
    const p = last(re, floor);
    if (p > 0) return p;
  }
  const space = last(/\s+/g, 1);
  if (space > 0) return space;
  let p = max;
  if (isHighSurrogate(text.charCodeAt(p - 1))) p -= 1;
  // max 1 and a surrogate pair first: the pair goes whole (a part cannot hold half a character).
  return p > 0 ? p : Math.min(2, text.length);
}

/**
 * Splits a reply into parts of at most `max` characters (UTF-16 units, as the providers count), cutting at a
 * paragraph break, else a line break, else after a sentence, else at a space, else anywhere but inside a surrogate
 * pair. Whitespace at the cuts is dropped; no part is empty (an empty or blank text gives no parts).
 */
export function splitMessage(text: string, max: number): string[] {
  if (!Number.isInteger(max) || max < 1) throw new RangeError('splitMessage needs a positive integer maximum');
  if (!text.trim()) return [];
  if (text.length <= max) return [text];
  const parts: string[] = [];
  let rest = text.trim();
  while (rest.length > max) {
    const p = cutAt(rest, max);
    const part = rest.slice(0, p).trimEnd();
    if (part) parts.push(part);
    rest = rest.slice(p).trimStart();
  }
  if (rest) parts.push(rest);
  return parts;
}
