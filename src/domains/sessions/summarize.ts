/** The two ways a compaction writes a summary of older blocks: an extract (deterministic) and the model's own words. */
import type { Ctx } from '../../platform/context.js';
import { generateForCaller } from '../models/index.js';
import type { Tokenizer } from './tokens.js';

export interface SummarySource {
  kind: string;
  content: string;
}

const LEAD_WORDS = 60;

/** The first sentence or two of a block, at most LEAD_WORDS words, on one line. */
function lead(content: string): string {
  const flat = content.replace(/\s+/g, ' ').trim();
  const sentences = flat
    .split(/(?<=[.!?])\s+/)
    .slice(0, 2)
    .join(' ');
  const words = sentences.split(' ');
  return words.length > LEAD_WORDS ? `${words.slice(0, LEAD_WORDS).join(' ')} …` : sentences;
}

/** Fewer tokens than this per line say nothing: with a small budget, fewer blocks get a line each. */
const MIN_LINE_TOKENS = 16;

/**
 * A deterministic extractive summary of `blocks` in at most `budget` tokens: a header, then one line per block
 * (its kind and lead). When they do not all fit, each line is cut to an even share of the budget, and when that
 * share would be under MIN_LINE_TOKENS, evenly spaced blocks get the lines.
 */
export function extractiveSummary(blocks: readonly SummarySource[], budget: number, tk: Tokenizer): string {
  const header = `Summary of ${blocks.length} earlier block${blocks.length === 1 ? '' : 's'} (extract):`;
  const lines = blocks.map((b) => `- [${b.kind}] ${lead(b.content)}`);
  const whole = [header, ...lines].join('\n');
  if (tk.count(whole) <= budget) return whole;
  const room = Math.max(0, budget - tk.count(header) - 1);
  const fit = Math.max(1, Math.min(lines.length, Math.floor(room / MIN_LINE_TOKENS)));
  const picked = fit === lines.length ? lines : Array.from({ length: fit }, (_, i) => lines[Math.floor((i * lines.length) / fit)]!);
  const share = Math.max(1, Math.floor(room / picked.length) - 1);
  return tk.truncate([header, ...picked.map((l) => tk.truncate(l, share))].join('\n'), budget);
}

/**
 * The model's summary of `blocks` in at most `budget` tokens (its material cut to fit `inputTokens`), metered
 * as the caller's model call. Empty when the model wrote nothing.
 */
export async function modelSummary(
  ctx: Ctx,
  modelId: string,
  blocks: readonly SummarySource[],
  opts: { budget: number; inputTokens: number; tk: Tokenizer; signal?: AbortSignal; runId?: string },
): Promise<string> {
  const material = opts.tk.truncate(blocks.map((b) => `[${b.kind}]\n${b.content}`).join('\n\n'), opts.inputTokens);
  const words = Math.max(10, Math.floor(opts.budget * 0.7));
  const { text } = await generateForCaller(ctx, modelId, {
    system: [
      'You compress the working memory of an AI agent.',
      `Summarize the material below faithfully and densely in at most ${words} words.`,
      'Keep facts, names, numbers, decisions, instructions and open questions; add nothing that is not in it.',
    ].join(' '),
    prompt: material,
    maxOutputTokens: Math.max(16, opts.budget),
    timeoutMs: ctx.deps.config.sessions.summaryTimeoutMs,
    signal: opts.signal,
    source: 'session',
    runId: opts.runId,
    what: 'a context session compaction summary',
  });
  return opts.tk.truncate(text.trim(), opts.budget);
}
