/**
 * Token counts with a real BPE tokenizer (gpt-tokenizer, ADR 0031). OpenAI's current models (GPT-4o, GPT-4.1,
 * GPT-5, the o-series) use o200k_base, GPT-4 and GPT-3.5 cl100k_base. Other families (Anthropic's Claude)
 * publish no tokenizer for their current models: they are counted with o200k_base, which README states.
 * Tenant text is plain text: special-token markers such as `<|endoftext|>` are counted as the characters they are.
 */
import type { ModelEntry } from '../models/index.js';

export const ENCODINGS = ['o200k_base', 'cl100k_base'] as const;
export type Encoding = (typeof ENCODINGS)[number];

interface Codec {
  encode(text: string, opts: { disallowedSpecial: Set<string> }): number[];
  decode(tokens: number[]): string;
  countTokens(text: string, opts: { disallowedSpecial: Set<string> }): number;
}

const PLAIN = { disallowedSpecial: new Set<string>() };

// Each encoding's tables are loaded on first use (megabytes each) and never change: a cache of a pure import,
// shared by every app in the process as the module itself is.
const loaded = new Map<Encoding, Promise<Codec>>();
const load = (e: Encoding): Promise<Codec> => {
  let p = loaded.get(e);
  if (!p) {
    p = (e === 'cl100k_base' ? import('gpt-tokenizer/encoding/cl100k_base') : import('gpt-tokenizer/encoding/o200k_base')) as Promise<Codec>;
    loaded.set(e, p);
  }
  return p;
};

/** GPT-4 (not 4o, 4.1, 4.5), GPT-3.5 and the embedding models of their time. */
const CL100K = /^(gpt-4(?![o.])|gpt-3\.5|text-embedding-(ada|3))/;

/** The encoding for a model of the catalogue (null: the server's default model family). */
export function encodingFor(entry: Pick<ModelEntry, 'provider' | 'model'> | null): Encoding {
  if (entry?.provider === 'openai' && CL100K.test(entry.model.replace(/^.*\//, ''))) return 'cl100k_base';
  return 'o200k_base';
}

export function isEncoding(v: string): v is Encoding {
  return (ENCODINGS as readonly string[]).includes(v);
}

/** A tokenizer ready for synchronous use. */
export interface Tokenizer {
  encoding: Encoding;
  count(text: string): number;
  /** The longest prefix of `text` of at most `max` tokens. */
  truncate(text: string, max: number): string;
}

export async function tokenizer(encoding: string): Promise<Tokenizer> {
  const e: Encoding = isEncoding(encoding) ? encoding : 'o200k_base';
  const codec = await load(e);
  return {
    encoding: e,
    count: (text) => (text ? codec.countTokens(text, PLAIN) : 0),
    truncate: (text, max) => {
      if (max <= 0) return '';
      const tokens = codec.encode(text, PLAIN);
      if (tokens.length <= max) return text;
      // A cut inside a multi-byte character decodes to U+FFFD: drop it.
      return codec.decode(tokens.slice(0, max)).replace(/\uFFFD+$/, '');
    },
  };
}
