import { describe, expect, it } from 'vitest';
import { MIN_SUMMARY_TOKENS, planCompaction } from './compact.js';
import type { BlockMeta } from './repo.js';
import { extractiveSummary } from './summarize.js';
import { encodingFor, tokenizer } from './tokens.js';

const meta = (i: number, tokens: number, pinned = false): BlockMeta => ({
  id: `b${i}`,
  position: i,
  kind: 'document',
  tags: '[]',
  pinned: pinned ? 1 : 0,
  tokens,
});

describe('planCompaction', () => {
  it('never picks pinned or recent blocks, and its summaries’ budgets bring the total within the target', () => {
    // A deterministic spread of sizes and pins.
    for (let seed = 1; seed <= 40; seed++) {
      const metas = Array.from({ length: 20 + seed * 7 }, (_, i) => meta(i, 5 + ((i * seed * 37) % 400), (i * seed) % 11 === 0));
      const total = metas.reduce((n, b) => n + b.tokens, 0);
      const preserveRecent = seed % 6;
      const target = Math.floor(total * (0.1 + (seed % 8) / 10));
      const plan = planCompaction(metas, { target, preservePinned: true, preserveRecent });
      if (target < plan.minimum) {
        expect(plan.groups).toEqual([]);
        continue;
      }
      const chosen = plan.groups.flatMap((g) => g.blocks);
      const unpinned = metas.filter((b) => !b.pinned);
      const recent = new Set(unpinned.slice(unpinned.length - preserveRecent).map((b) => b.id));
      for (const b of chosen) {
        expect(b.pinned).toBe(0);
        expect(recent.has(b.id)).toBe(false);
      }
      const removed = chosen.reduce((n, b) => n + b.tokens, 0);
      const budgets = plan.groups.reduce((n, g) => n + g.budget, 0);
      expect(total - removed + budgets, `seed ${seed}`).toBeLessThanOrEqual(target);
      // Oldest first: the chosen blocks are a prefix of the compactable ones.
      const compactable = unpinned.slice(0, unpinned.length - preserveRecent);
      expect(chosen.map((b) => b.id)).toEqual(compactable.slice(0, chosen.length).map((b) => b.id));
    }
  });

  it('never plans a summary larger than what it frees (small oldest blocks)', () => {
    const metas = [12, 30, 30, 30, 30, 30, 30, 8].map((t, i) => meta(i, t));
    const plan = planCompaction(metas, { target: 190, preservePinned: true, preserveRecent: 1 });
    const removed = plan.groups.flatMap((g) => g.blocks).reduce((n, b) => n + b.tokens, 0);
    const budgets = plan.groups.reduce((n, g) => n + g.budget, 0);
    expect(plan.groups.length).toBeGreaterThan(0);
    expect(200 - removed + budgets).toBeLessThanOrEqual(190);
    expect(budgets).toBeGreaterThanOrEqual(MIN_SUMMARY_TOKENS);
  });

  it('does nothing when the session fits, and reports the minimum it can reach', () => {
    const metas = [meta(0, 100, true), meta(1, 50), meta(2, 50), meta(3, 50)];
    expect(planCompaction(metas, { target: 250, preservePinned: true, preserveRecent: 1 }).groups).toEqual([]);
    const tight = planCompaction(metas, { target: 10, preservePinned: true, preserveRecent: 1 });
    expect(tight.groups).toEqual([]);
    expect(tight.minimum).toBe(100 + 50 + MIN_SUMMARY_TOKENS);
    expect(planCompaction(metas, { target: tight.minimum, preservePinned: true, preserveRecent: 1 }).groups.length).toBeGreaterThan(0);
  });
});

describe('tokens', () => {
  it('chooses the encoding of the model family', () => {
    expect(encodingFor({ provider: 'openai', model: 'gpt-4o-mini' })).toBe('o200k_base');
    expect(encodingFor({ provider: 'openai', model: 'gpt-4.1' })).toBe('o200k_base');
    expect(encodingFor({ provider: 'openai', model: 'gpt-5' })).toBe('o200k_base');
    expect(encodingFor({ provider: 'openai', model: 'o3-mini' })).toBe('o200k_base');
    expect(encodingFor({ provider: 'openai', model: 'gpt-4-turbo' })).toBe('cl100k_base');
    expect(encodingFor({ provider: 'openai', model: 'gpt-3.5-turbo' })).toBe('cl100k_base');
    expect(encodingFor({ provider: 'anthropic', model: 'claude-sonnet-4-5' })).toBe('o200k_base');
    expect(encodingFor(null)).toBe('o200k_base');
  });

  it('truncates to at most the tokens asked, on a character boundary', async () => {
    const tk = await tokenizer('o200k_base');
    const text = 'Ünïcödé 😀 text, repeated. '.repeat(50);
    for (const max of [0, 1, 3, 10, 77]) {
      const cut = tk.truncate(text, max);
      expect(tk.count(cut)).toBeLessThanOrEqual(max);
      expect(cut).not.toContain('\uFFFD');
      expect(text.startsWith(cut)).toBe(true);
    }
    expect(tk.truncate(text, 1_000_000)).toBe(text);
  });
});

describe('extractiveSummary', () => {
  it('is deterministic, within its budget, and names what it summarizes', async () => {
    const tk = await tokenizer('o200k_base');
    const blocks = Array.from({ length: 40 }, (_, i) => ({
      kind: i % 2 ? 'message' : 'document',
      content: `Point ${i} is important. Details follow at length here.`,
    }));
    for (const budget of [16, 50, 200, 5000]) {
      const a = extractiveSummary(blocks, budget, tk);
      expect(a).toBe(extractiveSummary(blocks, budget, tk));
      expect(tk.count(a)).toBeLessThanOrEqual(budget);
    }
    const roomy = extractiveSummary(blocks, 5000, tk);
    expect(roomy).toContain('Summary of 40 earlier blocks');
    expect(roomy).toContain('- [message] Point 39 is important.');
    const small = extractiveSummary(blocks, 80, tk);
    expect(small).toContain('Point 0');
  });
});
