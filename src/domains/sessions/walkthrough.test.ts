import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';

// The "done when", as a user would do it over the API: a session built from documents, its instructions
// pinned, forked by tag for a sub-task, an agent run on the fork, the original compacted (by the model) once it
// grows, and true metrics read at every step.

const PLAIN = { disallowedSpecial: new Set<string>() };
const tokens = (s: string) => countTokens(s, PLAIN);

describe('a context session from documents to compaction', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let me: Actor;
  const call = (method: 'GET' | 'POST' | 'PATCH', url: string, payload?: unknown) =>
    h.app.inject({ method, url, headers: me.headers, payload: payload as object });
  const ok = async (method: 'GET' | 'POST' | 'PATCH', url: string, payload?: unknown) => {
    const res = await call(method, url, payload);
    expect(res.statusCode, res.body).toBeLessThan(300);
    return json(res).data;
  };
  /** The metrics a user reads, checked against the blocks the user can list. */
  const trueMetrics = async (id: string) => {
    const s = await ok('GET', `/v1/aip/sessions/${id}`);
    const blocks = await ok('GET', `/v1/aip/sessions/${id}/blocks?limit=1000`);
    expect(s.metrics.blockCount).toBe(blocks.length);
    expect(s.metrics.totalTokens).toBe(blocks.reduce((n: number, b: any) => n + tokens(b.content), 0));
    expect(s.metrics.tokensRemainingPct).toBe(Math.round(((s.metrics.maxTokens - s.metrics.totalTokens) / s.metrics.maxTokens) * 1000) / 10);
    return { session: s, blocks };
  };

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    const dir = mkdtempSync(path.join(tmpdir(), 'hangar-walkthrough-'));
    const models = path.join(dir, 'models.json');
    writeFileSync(models, JSON.stringify({ platform: [{ id: 'analyst-model', provider: 'openai', model: 'gpt-4o-mini', contextWindow: 20000 }] }));
    h = await createHarness({ HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_MODELS_FILE: models });
    me = await createOrgAdmin(h);
    await ok('POST', '/v1/agents', { slug: 'analyst', model: 'analyst-model', instructions: 'You analyse business documents.' });
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('works end to end with true metrics throughout', async () => {
    // 1. A session from documents.
    const s = await ok('POST', '/v1/aip/sessions', { name: 'Q3 research', defaultAgent: 'analyst', tags: ['q3'] });
    expect(s.metrics).toEqual({ totalTokens: 0, maxTokens: 20000, tokensRemainingPct: 100, compactionCount: 0, blockCount: 0, invocationCount: 0 });
    const memo = (topic: string, i: number) =>
      `${topic} memo ${i}. Our ${topic} numbers for segment ${i} moved by ${i * 3}% this quarter. The committee noted the risk and asked for a follow-up.`;
    await ok('POST', `/v1/aip/sessions/${s.id}/blocks/batch`, {
      blocks: [
        ...Array.from({ length: 10 }, (_, i) => ({ kind: 'document', content: memo('Pricing', i), tags: ['pricing'] })),
        ...Array.from({ length: 10 }, (_, i) => ({ kind: 'document', content: memo('Churn', i), tags: ['churn'] })),
      ],
    });
    // 2. Its instructions, pinned.
    const instruction = await ok('POST', `/v1/aip/sessions/${s.id}/blocks`, {
      kind: 'instruction',
      content: 'Answer in bullet points; cite the memo you used.',
      pinned: true,
    });
    let { session } = await trueMetrics(s.id);
    expect(session.pinnedBlocks).toEqual([instruction.id]);
    expect(session.metrics.blockCount).toBe(21);

    // 3. A fork with the pricing material for a sub-task.
    const fork = await ok('POST', `/v1/aip/sessions/${s.id}/fork`, { name: 'Pricing only', includeByTag: ['pricing'] });
    expect(fork.forkedFrom).toBe(s.id);
    const forked = await trueMetrics(fork.id);
    expect(forked.blocks.map((b: any) => b.kind)).toEqual(['document', ...Array(9).fill('document'), 'instruction']);
    expect(forked.blocks.filter((b: any) => b.kind === 'document').every((b: any) => b.tags.includes('pricing'))).toBe(true);

    // 4. The agent runs on the fork: it reads the instruction first and the pricing memos, and its answer is kept.
    fake.script({ text: '- Raise Pro by 5% (Pricing memo 3).' });
    const run = await ok('POST', '/v1/run', { agent: 'analyst', prompt: 'Should we raise the Pro price?', sessionId: fork.id });
    expect(run.status).toBe('completed');
    const system = fake.requests.at(-1)!.body.messages[0];
    expect(system.role).toBe('system');
    expect(system.content).toContain('[instruction, pinned]\nAnswer in bullet points');
    expect(system.content.indexOf('Answer in bullet points')).toBeLessThan(system.content.indexOf('Pricing memo 0.'));
    expect(system.content).not.toContain('Churn memo');
    const afterRun = await trueMetrics(fork.id);
    expect(afterRun.session.metrics.invocationCount).toBe(1);
    expect(afterRun.blocks.at(-1)).toMatchObject({ kind: 'message', content: '- Raise Pro by 5% (Pricing memo 3).', source: { runId: run.runId } });
    // The original is untouched by the fork's run.
    expect((await trueMetrics(s.id)).session.metrics).toMatchObject({ blockCount: 21, invocationCount: 0 });

    // 5. The original grows, then is compacted by its default agent's model.
    await ok('POST', `/v1/aip/sessions/${s.id}/blocks/batch`, {
      blocks: Array.from({ length: 40 }, (_, i) => ({ kind: 'note', content: memo('Support', i), tags: ['support'] })),
    });
    ({ session } = await trueMetrics(s.id));
    const grown = session.metrics.totalTokens;
    fake.script({ text: 'Pricing and churn moved this quarter; the committee wants follow-ups.' });
    const compaction = await ok('POST', `/v1/aip/sessions/${s.id}/compact`, { targetTokens: Math.floor(grown / 2) });
    expect(compaction).toMatchObject({ previousTokens: grown, summarizer: 'model' });
    expect(compaction.newTokens).toBeLessThanOrEqual(Math.floor(grown / 2));
    const compacted = await trueMetrics(s.id);
    expect(compacted.session.metrics).toMatchObject({ totalTokens: compaction.newTokens, compactionCount: 1 });
    expect(compacted.session.pinnedBlocks).toEqual([instruction.id]);
    expect(compacted.blocks.find((b: any) => b.kind === 'summary').content).toBe(
      'Pricing and churn moved this quarter; the committee wants follow-ups.',
    );
    // The summary call was a metered model call.
    const usage = await h.deps.db.kysely.selectFrom('model_usage').selectAll().where('source', '=', 'session').execute();
    expect(usage).toHaveLength(1);
    expect(usage[0]!.model).toBe('analyst-model');
  });
});
