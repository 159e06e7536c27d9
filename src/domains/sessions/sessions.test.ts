import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { countTokens as cl100k } from 'gpt-tokenizer/encoding/cl100k_base';
import { countTokens as o200k } from 'gpt-tokenizer/encoding/o200k_base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { expectError } from '../../../test/helpers.js';
import { securitySuite } from '../../../test/security.js';
import { systemCtx } from '../../platform/context.js';
import { ROLE_SCOPES } from '../../platform/scopes.js';
import { takeLease } from './lease.js';

const PLAIN = { disallowedSpecial: new Set<string>() };
const SESS = /^sess_[0-9A-Za-z]+$/;
const BLK = /^blk_[0-9A-Za-z]+$/;

const modelsFile = (() => {
  const dir = mkdtempSync(path.join(tmpdir(), 'hangar-sessions-'));
  const file = path.join(dir, 'models.json');
  writeFileSync(
    file,
    JSON.stringify({
      byok: [
        { id: 'byok/gpt4', provider: 'openai', model: 'gpt-4-0613', requiresSecret: 'OPENAI_API_KEY', contextWindow: 8192 },
        { id: 'byok/4o', provider: 'openai', model: 'gpt-4o-mini', requiresSecret: 'OPENAI_API_KEY', contextWindow: 128000 },
      ],
    }),
  );
  return file;
})();

let h: Harness;
let admin: Actor;
let member: Actor;
let stranger: Actor;

beforeAll(async () => {
  h = await createHarness({ HANGAR_MODELS_FILE: modelsFile, HANGAR_SESSIONS_MAX_BLOCK_BYTES: '4096', HANGAR_SESSIONS_LOCK_WAIT_MS: '300' });
  admin = await createOrgAdmin(h);
  member = await addOrgMember(h, admin);
  stranger = await createOrgAdmin(h);
  for (const [slug, model] of [
    ['old', 'byok/gpt4'],
    ['omni', 'byok/4o'],
  ]) {
    const res = await call(admin, 'POST', '/v1/agents', { slug, model, instructions: 'x' });
    expect(res.statusCode, res.body).toBe(201);
  }
});
afterAll(() => h?.close());

function call(actor: Actor, method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: unknown) {
  return h.app.inject({ method, url, headers: actor.headers, payload: payload as object });
}

async function create(actor: Actor, body: Record<string, unknown>) {
  const res = await call(actor, 'POST', '/v1/aip/sessions', body);
  expect(res.statusCode, res.body).toBe(201);
  return json(res).data;
}

async function add(actor: Actor, id: string, blocks: Record<string, unknown>[]) {
  const res = await call(actor, 'POST', `/v1/aip/sessions/${id}/blocks/batch`, { blocks });
  expect(res.statusCode, res.body).toBe(201);
  return json(res).data as any[];
}

async function session(actor: Actor, id: string) {
  const res = await call(actor, 'GET', `/v1/aip/sessions/${id}`);
  expect(res.statusCode, res.body).toBe(200);
  return json(res).data;
}

async function blocks(actor: Actor, id: string, query = '') {
  const res = await call(actor, 'GET', `/v1/aip/sessions/${id}/blocks?limit=1000${query}`);
  expect(res.statusCode, res.body).toBe(200);
  return json(res).data as any[];
}

const docs = (n: number, tag: (i: number) => string[]) =>
  Array.from({ length: n }, (_, i) => ({
    kind: 'document',
    content: `Document ${i}. The quarterly report for region ${i % 7} shows revenue of ${1000 + i} units. Customers asked about delivery times and pricing. The team agreed to follow up next week.`,
    tags: tag(i),
  }));

describe('sessions', () => {
  it('a new session has the spec’s fields and empty metrics, its window from the default agent’s model', async () => {
    const s = await create(admin, { name: 'Research', defaultAgent: 'old', tags: ['research', 'q3'] });
    expect(s.id).toMatch(SESS);
    expect(s).toMatchObject({
      name: 'Research',
      defaultAgent: 'old',
      tags: ['research', 'q3'],
      tokenizer: 'cl100k_base',
      metrics: { totalTokens: 0, maxTokens: 8192, tokensRemainingPct: 100, compactionCount: 0, blockCount: 0, invocationCount: 0 },
      blocks: [],
      pinnedBlocks: [],
    });
    expect(s.forkedFrom).toBeUndefined();
    expect(Date.parse(s.createdAt)).not.toBeNaN();
    const plain = await create(admin, { name: 'No agent' });
    expect(plain.metrics.maxTokens).toBe(128000);
    expect(plain.tokenizer).toBe('o200k_base');
    await expectActivity(h, admin, { eventType: 'session.created', resourceType: 'context_session', resourceId: s.id });
  });

  it('refuses bad input with clear errors and saves nothing', async () => {
    expectError(await call(admin, 'POST', '/v1/aip/sessions', {}), 400, 'invalid_request');
    expectError(await call(admin, 'POST', '/v1/aip/sessions', { name: 'x', tags: [1, 2] }), 400, 'invalid_request');
    expectError(await call(admin, 'POST', '/v1/aip/sessions', { name: 'x', tags: ['a"b'] }), 400, 'invalid_request');
    expectError(await call(admin, 'POST', '/v1/aip/sessions', { name: 'x', defaultAgent: 'nobody' }), 404, 'not_found');
    expectError(await call(admin, 'POST', '/v1/aip/sessions', { name: 'x', fromSession: 'sess_nope' }), 404, 'not_found');
    expectError(await call(admin, 'GET', '/v1/aip/sessions?limit=0'), 400, 'invalid_request');
    expectError(await call(admin, 'GET', '/v1/aip/sessions?limit=101'), 400, 'invalid_request');
    expectError(await call(admin, 'GET', '/v1/aip/sessions?cursor=garbage'), 400, 'invalid_request');
    expectError(await call(admin, 'GET', '/v1/aip/sessions/sess_nope'), 404, 'not_found');
    const list = json(await call(admin, 'GET', '/v1/aip/sessions?limit=100')).data;
    expect(list.some((s: any) => s.name === 'x')).toBe(false);
  });

  it('lists the caller’s sessions newest first, 20 by default, paged by cursor and filtered by tag', async () => {
    const m = await addOrgMember(h, admin);
    const made: string[] = [];
    for (let i = 0; i < 23; i++) made.push((await create(m, { name: `s${i}`, tags: i % 2 ? ['odd'] : ['even'] })).id);
    const first = json(await call(m, 'GET', '/v1/aip/sessions'));
    expect(first.data).toHaveLength(20);
    expect(first.meta.hasMore).toBe(true);
    expect(first.data[0].id).toBe(made[22]);
    expect(Object.keys(first.data[0]).sort()).toEqual(['createdAt', 'defaultAgent', 'id', 'metrics', 'name', 'tags', 'tokenizer', 'updatedAt']);
    const second = json(await call(m, 'GET', `/v1/aip/sessions?cursor=${first.meta.nextCursor}`));
    expect(second.data.map((s: any) => s.id)).toEqual([made[2], made[1], made[0]]);
    expect(second.meta).toMatchObject({ hasMore: false, nextCursor: null });
    const odd = json(await call(m, 'GET', '/v1/aip/sessions?tag=odd&limit=100')).data;
    expect(odd).toHaveLength(11);
    expect(odd.every((s: any) => s.tags.includes('odd'))).toBe(true);
    // Another member of the same organization sees none of them.
    const others = json(await call(member, 'GET', '/v1/aip/sessions?limit=100')).data;
    expect(others.some((s: any) => made.includes(s.id))).toBe(false);
  });

  it('renames and retags a session', async () => {
    const s = await create(admin, { name: 'before', tags: ['a'] });
    const res = await call(admin, 'PATCH', `/v1/aip/sessions/${s.id}`, { name: 'after', tags: ['b', 'c'] });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data).toMatchObject({ name: 'after', tags: ['b', 'c'] });
    const byTag = json(await call(admin, 'GET', '/v1/aip/sessions?tag=c&limit=100')).data;
    expect(byTag.map((x: any) => x.id)).toContain(s.id);
    expect(json(await call(admin, 'GET', '/v1/aip/sessions?tag=a&limit=100')).data.map((x: any) => x.id)).not.toContain(s.id);
  });
});

describe('blocks', () => {
  let id: string;
  beforeAll(async () => {
    id = (await create(admin, { name: 'Blocks', defaultAgent: 'omni' })).id;
  });

  it('adds blocks with true token counts and keeps the metrics in step', async () => {
    const text = 'Always answer in French, and cite the document you used. <|endoftext|> is plain text here.';
    const res = await call(admin, 'POST', `/v1/aip/sessions/${id}/blocks`, { kind: 'instruction', content: text, pinned: true, tags: ['system'] });
    expect(res.statusCode, res.body).toBe(201);
    const b = json(res).data;
    expect(b.id).toMatch(BLK);
    expect(b).toMatchObject({ sessionId: id, kind: 'instruction', content: text, tags: ['system'], pinned: true, source: null });
    expect(b.tokens).toBe(o200k(text, PLAIN));
    const added = await add(
      admin,
      id,
      docs(30, (i) => [`region-${i % 3}`]),
    );
    expect(added).toHaveLength(30);
    const expected = o200k(text, PLAIN) + added.reduce((n, x) => n + o200k(x.content, PLAIN), 0);
    const s = await session(admin, id);
    expect(s.metrics).toMatchObject({ totalTokens: expected, blockCount: 31, maxTokens: 128000 });
    expect(s.metrics.tokensRemainingPct).toBeCloseTo(Math.round(((128000 - expected) / 128000) * 1000) / 10, 5);
    expect(s.blocks).toEqual([b.id, ...added.map((x) => x.id)]);
    expect(s.pinnedBlocks).toEqual([b.id]);
    await expectActivity(h, admin, { eventType: 'session.blocks.added', resourceType: 'context_session', resourceId: id, metadata: { count: 30 } });
  });

  it('counts with the tokenizer of the default agent’s model family', async () => {
    const s = await create(admin, { name: 'gpt-4', defaultAgent: 'old' });
    const text = 'Привет мир, как дела? こんにちは世界';
    const [b] = await add(admin, s.id, [{ content: text }]);
    expect(b.tokens).toBe(cl100k(text, PLAIN));
    expect(cl100k(text, PLAIN)).not.toBe(o200k(text, PLAIN));
  });

  it('lists blocks by tag, kind and pinned, in order, paged', async () => {
    const region1 = await blocks(admin, id, '&tag=region-1');
    expect(region1).toHaveLength(10);
    expect(region1.every((b) => b.tags.includes('region-1'))).toBe(true);
    expect(await blocks(admin, id, '&kind=instruction')).toHaveLength(1);
    expect((await blocks(admin, id, '&pinned=true')).map((b) => b.kind)).toEqual(['instruction']);
    expect(await blocks(admin, id, '&pinned=false')).toHaveLength(30);
    const p1 = json(await call(admin, 'GET', `/v1/aip/sessions/${id}/blocks?tag=region-1&limit=4`));
    expect(p1.data).toHaveLength(4);
    expect(p1.meta.hasMore).toBe(true);
    const p2 = json(await call(admin, 'GET', `/v1/aip/sessions/${id}/blocks?tag=region-1&limit=100&cursor=${p1.meta.nextCursor}`));
    expect([...p1.data, ...p2.data].map((b: any) => b.id)).toEqual(region1.map((b) => b.id));
    expectError(await call(admin, 'GET', `/v1/aip/sessions/${id}/blocks?kind=poem`), 400, 'invalid_request');
    // A tag differing only in case is another tag.
    expect(await blocks(admin, id, '&tag=REGION-1')).toHaveLength(0);
  });

  it('changes a block: content recounted, pinned and unpinned, tags', async () => {
    const [b] = await blocks(admin, id, '&tag=region-2');
    const before = (await session(admin, id)).metrics.totalTokens;
    const content = 'A much shorter replacement.';
    let res = await call(admin, 'PATCH', `/v1/aip/sessions/${id}/blocks/${b.id}`, { content, pinned: true, tags: ['kept'] });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data).toMatchObject({ content, pinned: true, tags: ['kept'], tokens: o200k(content, PLAIN) });
    const s = await session(admin, id);
    expect(s.metrics.totalTokens).toBe(before - b.tokens + o200k(content, PLAIN));
    expect(s.pinnedBlocks).toContain(b.id);
    await expectActivity(h, admin, {
      eventType: 'session.block.pinned',
      resourceType: 'context_session',
      resourceId: id,
      metadata: { blockId: b.id },
    });
    res = await call(admin, 'PATCH', `/v1/aip/sessions/${id}/blocks/${b.id}`, { pinned: false });
    expect(json(res).data.pinned).toBe(false);
    expect((await session(admin, id)).pinnedBlocks).not.toContain(b.id);
    await expectActivity(h, admin, { eventType: 'session.block.unpinned', resourceType: 'context_session', resourceId: id });
  });

  it('deletes a block and its tokens', async () => {
    const [b] = await blocks(admin, id, '&tag=region-0');
    const before = (await session(admin, id)).metrics;
    const res = await call(admin, 'DELETE', `/v1/aip/sessions/${id}/blocks/${b.id}`);
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data).toEqual({ deleted: true });
    const after = (await session(admin, id)).metrics;
    expect(after.blockCount).toBe(before.blockCount - 1);
    expect(after.totalTokens).toBe(before.totalTokens - b.tokens);
    expectError(await call(admin, 'GET', `/v1/aip/sessions/${id}/blocks/${b.id}`), 404, 'not_found');
    expectError(await call(admin, 'DELETE', `/v1/aip/sessions/${id}/blocks/${b.id}`), 404, 'not_found');
  });

  it('refuses content over the size limit with 413, and a batch with one such block adds none', async () => {
    const before = (await session(admin, id)).metrics;
    expectError(await call(admin, 'POST', `/v1/aip/sessions/${id}/blocks`, { content: 'é'.repeat(2049) }), 413, 'payload_too_large');
    const res = await call(admin, 'POST', `/v1/aip/sessions/${id}/blocks/batch`, { blocks: [{ content: 'fine' }, { content: 'x'.repeat(4097) }] });
    const err = expectError(res, 413, 'payload_too_large');
    expect(err.message).toContain('blocks[1].content');
    expectError(await call(admin, 'POST', `/v1/aip/sessions/${id}/blocks`, { content: '' }), 400, 'invalid_request');
    expectError(await call(admin, 'POST', `/v1/aip/sessions/${id}/blocks`, { content: 'x', tags: 'x' }), 400, 'invalid_request');
    expectError(await call(admin, 'POST', `/v1/aip/sessions/${id}/blocks`, { content: 'x', source: { deep: { er: 1 } } }), 400, 'invalid_request');
    expectError(await call(admin, 'POST', `/v1/aip/sessions/${id}/blocks/batch`, { blocks: [] }), 400, 'invalid_request');
    const [b] = await blocks(admin, id, '&kind=document');
    expectError(await call(admin, 'PATCH', `/v1/aip/sessions/${id}/blocks/${b.id}`, { content: 'y'.repeat(5000) }), 413, 'payload_too_large');
    expect((await session(admin, id)).metrics).toEqual(before);
  });

  it('a block is found only through its own session', async () => {
    const other = await create(admin, { name: 'other' });
    const [b] = await blocks(admin, id, '&kind=document');
    expect((await call(admin, 'GET', `/v1/aip/sessions/${id}/blocks/${b.id}`)).statusCode).toBe(200);
    expectError(await call(admin, 'GET', `/v1/aip/sessions/${other.id}/blocks/${b.id}`), 404, 'not_found');
    expectError(await call(admin, 'PATCH', `/v1/aip/sessions/${other.id}/blocks/${b.id}`, { pinned: true }), 404, 'not_found');
  });
});

describe('copies: fromSession and fork', () => {
  let src: any;
  let pinned: any;
  beforeAll(async () => {
    src = await create(admin, { name: 'Source', defaultAgent: 'omni', tags: ['src'] });
    const [p] = await add(admin, src.id, [{ kind: 'instruction', content: 'Be precise.', pinned: true, tags: ['system'] }]);
    pinned = p;
    await add(
      admin,
      src.id,
      docs(12, (i) => (i % 3 === 0 ? ['billing'] : i % 3 === 1 ? ['support'] : ['billing', 'secret'])),
    );
  });

  it('a new session fromSession copies the blocks with a chosen tag and, by default, the pinned ones', async () => {
    const s = await create(admin, { name: 'From', fromSession: src.id, includeByTag: ['support'] });
    const got = await blocks(admin, s.id);
    expect(got.map((b) => b.kind)).toEqual(['instruction', ...Array(4).fill('document')]);
    expect(got.slice(1).every((b) => b.tags.includes('support'))).toBe(true);
    expect(got[0].source).toMatchObject({ copiedFromSession: src.id, copiedFromBlock: pinned.id });
    expect(s.metrics.blockCount).toBe(5);
    expect(s.metrics.totalTokens).toBe(got.reduce((n, b) => n + b.tokens, 0));
    const noPin = await create(admin, { name: 'From2', fromSession: src.id, includeByTag: ['support'], includePinned: false });
    expect(noPin.metrics.blockCount).toBe(4);
    await expectActivity(h, admin, {
      eventType: 'session.created',
      resourceType: 'context_session',
      resourceId: s.id,
      metadata: { fromSession: src.id },
    });
  });

  it('recounts copied blocks when the new session’s tokenizer differs', async () => {
    const s = await create(admin, { name: 'Old family', defaultAgent: 'old', fromSession: src.id });
    const got = await blocks(admin, s.id);
    expect(got).toHaveLength(13);
    for (const b of got) expect(b.tokens).toBe(cl100k(b.content, PLAIN));
  });

  it('forks by tag, excluding tags, with or without pinned and summary blocks', async () => {
    let res = await call(admin, 'POST', `/v1/aip/sessions/${src.id}/fork`, { name: 'Billing', includeByTag: ['billing'], excludeByTag: ['secret'] });
    expect(res.statusCode, res.body).toBe(201);
    const fork = json(res).data;
    expect(Object.keys(fork).sort()).toEqual(['createdAt', 'forkedFrom', 'id', 'metrics', 'name']);
    expect(fork).toMatchObject({ name: 'Billing', forkedFrom: src.id, metrics: { blockCount: 5, compactionCount: 0, invocationCount: 0 } });
    const got = await blocks(admin, fork.id);
    expect(got[0].id).not.toBe(pinned.id);
    expect(got[0].content).toBe('Be precise.');
    expect(got.slice(1).every((b) => b.tags.includes('billing') && !b.tags.includes('secret'))).toBe(true);
    const full = await session(admin, fork.id);
    expect(full).toMatchObject({ forkedFrom: src.id, defaultAgent: 'omni', tags: ['src'] });
    await expectActivity(h, admin, {
      eventType: 'session.forked',
      resourceType: 'context_session',
      resourceId: fork.id,
      metadata: { forkedFrom: src.id },
    });

    res = await call(admin, 'POST', `/v1/aip/sessions/${src.id}/fork`, { name: 'No pins', includePinned: false });
    expect(json(res).data.metrics.blockCount).toBe(12);
    res = await call(admin, 'POST', `/v1/aip/sessions/${src.id}/fork`, { name: 'Secretless', excludeByTag: ['secret', 'system'] });
    expect(json(res).data.metrics.blockCount).toBe(8);
    expectError(await call(admin, 'POST', `/v1/aip/sessions/${src.id}/fork`, {}), 400, 'invalid_request');
    expectError(await call(admin, 'POST', '/v1/aip/sessions/sess_nope/fork', { name: 'x' }), 404, 'not_found');
  });

  it('a fork and its original never share later edits', async () => {
    const fork = json(await call(admin, 'POST', `/v1/aip/sessions/${src.id}/fork`, { name: 'Independent' })).data;
    const [forkPinned] = await blocks(admin, fork.id, '&pinned=true');
    await call(admin, 'PATCH', `/v1/aip/sessions/${fork.id}/blocks/${forkPinned.id}`, { content: 'Be vague.' });
    await add(admin, fork.id, [{ content: 'Only in the fork.' }]);
    expect(json(await call(admin, 'GET', `/v1/aip/sessions/${src.id}/blocks/${pinned.id}`)).data.content).toBe('Be precise.');
    expect((await blocks(admin, src.id)).some((b) => b.content === 'Only in the fork.')).toBe(false);
    await call(admin, 'PATCH', `/v1/aip/sessions/${src.id}/blocks/${pinned.id}`, { tags: ['system', 'edited'] });
    expect(json(await call(admin, 'GET', `/v1/aip/sessions/${fork.id}/blocks/${forkPinned.id}`)).data.tags).toEqual(['system']);
    // Deleting the original leaves the fork whole.
    const copy = json(await call(admin, 'POST', `/v1/aip/sessions/${src.id}/fork`, { name: 'Survivor' })).data;
    const tmp = await create(admin, { name: 'tmp', fromSession: src.id });
    expect((await call(admin, 'DELETE', `/v1/aip/sessions/${tmp.id}`)).statusCode).toBe(200);
    expect((await session(admin, copy.id)).metrics.blockCount).toBe(13);
  });

  it('summaries follow includeSummaries', async () => {
    const s = json(await call(admin, 'POST', `/v1/aip/sessions/${src.id}/fork`, { name: 'To compact' })).data;
    const total = s.metrics.totalTokens;
    const c = await call(admin, 'POST', `/v1/aip/sessions/${s.id}/compact`, { targetTokens: Math.floor(total / 2), summarizer: 'extractive' });
    expect(c.statusCode, c.body).toBe(200);
    const withSummaries = json(await call(admin, 'POST', `/v1/aip/sessions/${s.id}/fork`, { name: 'with' })).data;
    const without = json(await call(admin, 'POST', `/v1/aip/sessions/${s.id}/fork`, { name: 'without', includeSummaries: false })).data;
    const summaries = (await blocks(admin, s.id, '&kind=summary')).length;
    expect(summaries).toBeGreaterThan(0);
    expect(withSummaries.metrics.blockCount - without.metrics.blockCount).toBe(summaries);
  });
});

describe('compaction', () => {
  it('replaces older unpinned blocks by summaries until the session fits, keeping pinned and recent blocks', async () => {
    const s = await create(admin, { name: 'Grows', defaultAgent: 'omni' });
    const [instr] = await add(admin, s.id, [{ kind: 'instruction', content: 'You are the billing assistant.', pinned: true }]);
    const added = await add(
      admin,
      s.id,
      docs(60, (i) => [`t${i % 2}`]),
    );
    const before = await session(admin, s.id);
    const target = Math.floor(before.metrics.totalTokens / 2);
    const res = await call(admin, 'POST', `/v1/aip/sessions/${s.id}/compact`, { targetTokens: target, summarizer: 'extractive' });
    expect(res.statusCode, res.body).toBe(200);
    const r = json(res).data;
    expect(r.previousTokens).toBe(before.metrics.totalTokens);
    expect(r.newTokens).toBeLessThanOrEqual(target);
    expect(r.blocksCompacted).toBeGreaterThan(0);
    expect(r.summariesCreated).toBeGreaterThan(0);
    expect(r.summarizer).toBe('extractive');
    const after = await session(admin, s.id);
    expect(after.metrics).toMatchObject({ totalTokens: r.newTokens, compactionCount: 1, blockCount: 61 - r.blocksCompacted + r.summariesCreated });
    // The pinned instruction and the 5 most recent blocks are untouched, in place.
    expect(after.pinnedBlocks).toEqual([instr.id]);
    expect(after.blocks.slice(-5)).toEqual(added.slice(-5).map((b) => b.id));
    const all = await blocks(admin, s.id);
    expect(all.reduce((n, b) => n + b.tokens, 0)).toBe(r.newTokens);
    const summaries = all.filter((b) => b.kind === 'summary');
    expect(summaries).toHaveLength(r.summariesCreated);
    expect(summaries[0].source).toMatchObject({ summarizer: 'extractive', firstBlock: added[0].id });
    expect(summaries[0].content).toContain('Document 0.');
    expect(summaries[0].tags.sort()).toEqual(['t0', 't1']);
    // Order: the pinned instruction first, then the summaries where the old blocks were, then what stayed.
    expect(all[0].id).toBe(instr.id);
    expect(all[1].kind).toBe('summary');
    await expectActivity(h, admin, {
      eventType: 'session.compacted',
      resourceType: 'context_session',
      resourceId: s.id,
      metadata: { reason: 'request' },
    });
  });

  it('answers 400 with the minimum when the target is below what pinned and recent blocks need', async () => {
    const s = await create(admin, { name: 'Tight' });
    await add(admin, s.id, [{ kind: 'instruction', content: 'Pinned instruction that must stay.', pinned: true }, ...docs(10, () => [])]);
    const before = await session(admin, s.id);
    const err = expectError<{ message: string; minimumTokens: number; issues: { path: string }[] }>(
      await call(admin, 'POST', `/v1/aip/sessions/${s.id}/compact`, { targetTokens: 5 }),
      400,
      'invalid_request',
    );
    expect(err.minimumTokens).toBeGreaterThan(5);
    expect(err.message).toContain(String(err.minimumTokens));
    expect(err.issues[0]!.path).toBe('targetTokens');
    expect(await session(admin, s.id)).toEqual(before);
    // The minimum itself is reachable.
    const ok = await call(admin, 'POST', `/v1/aip/sessions/${s.id}/compact`, { targetTokens: err.minimumTokens, summarizer: 'extractive' });
    expect(ok.statusCode, ok.body).toBe(200);
    expect(json(ok).data.newTokens).toBeLessThanOrEqual(err.minimumTokens);
    // Without preserving pinned blocks and with no recent ones kept, less is possible.
    const s2 = await create(admin, { name: 'Loose', fromSession: s.id });
    const loose = await call(admin, 'POST', `/v1/aip/sessions/${s2.id}/compact`, {
      targetTokens: 40,
      preservePinned: false,
      preserveRecent: 0,
      summarizer: 'extractive',
    });
    expect(loose.statusCode, loose.body).toBe(200);
    expect((await session(admin, s2.id)).pinnedBlocks).toEqual([]);
  });

  it('leaves a session that already fits as it is', async () => {
    const s = await create(admin, { name: 'Small' });
    await add(
      admin,
      s.id,
      docs(3, () => []),
    );
    const before = await session(admin, s.id);
    const res = await call(admin, 'POST', `/v1/aip/sessions/${s.id}/compact`, {});
    expect(json(res).data).toEqual({
      previousTokens: before.metrics.totalTokens,
      newTokens: before.metrics.totalTokens,
      blocksCompacted: 0,
      summariesCreated: 0,
      summarizer: 'none',
    });
    expect((await session(admin, s.id)).metrics.compactionCount).toBe(0);
  });

  it('refuses the model summarizer for a session without a default agent, and bad options', async () => {
    const s = await create(admin, { name: 'No model' });
    await add(
      admin,
      s.id,
      docs(20, () => []),
    );
    expectError(await call(admin, 'POST', `/v1/aip/sessions/${s.id}/compact`, { targetTokens: 100, summarizer: 'model' }), 400, 'invalid_request');
    expectError(await call(admin, 'POST', `/v1/aip/sessions/${s.id}/compact`, { targetTokens: -1 }), 400, 'invalid_request');
    expectError(await call(admin, 'POST', `/v1/aip/sessions/${s.id}/compact`, { preserveRecent: 'five' }), 400, 'invalid_request');
    // auto with a BYOK model whose key is missing falls back to the extract.
    const b = await create(admin, { name: 'Keyless', defaultAgent: 'omni', fromSession: s.id });
    const res = await call(admin, 'POST', `/v1/aip/sessions/${b.id}/compact`, { targetTokens: 300 });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data.summarizer).toBe('extractive');
  });
});

describe('one writer at a time', () => {
  it('a fork or compaction waits for whoever holds the session, and answers session_busy when it waits too long', async () => {
    const s = await create(admin, { name: 'Busy' });
    await add(
      admin,
      s.id,
      docs(5, () => []),
    );
    const ctx = systemCtx(h.deps, { userId: admin.userId, orgId: admin.orgId, role: 'admin', scopes: ROLE_SCOPES.admin, apiKeyId: null });
    const lease = await takeLease(ctx, s.id, 'run');
    const err = expectError<{ heldBy: string }>(await call(admin, 'POST', `/v1/aip/sessions/${s.id}/fork`, { name: 'f' }), 409, 'session_busy');
    expect(err.heldBy).toBe('run');
    expectError(await call(admin, 'POST', `/v1/aip/sessions/${s.id}/blocks`, { content: 'late' }), 409, 'session_busy');
    // Reads never wait.
    expect((await call(admin, 'GET', `/v1/aip/sessions/${s.id}`)).statusCode).toBe(200);
    // A writer that starts waiting gets the session once it is released.
    const waiting = call(admin, 'POST', `/v1/aip/sessions/${s.id}/blocks`, { content: 'after the holder' });
    await new Promise((r) => setTimeout(r, 100));
    await lease.release();
    expect((await waiting).statusCode).toBe(201);
    expect((await session(admin, s.id)).metrics.blockCount).toBe(6);
  });

  it('concurrent writers never interleave: counters match the blocks', async () => {
    const s = await create(admin, { name: 'Race' });
    const results = await Promise.all([
      ...Array.from({ length: 4 }, (_, i) => call(admin, 'POST', `/v1/aip/sessions/${s.id}/blocks/batch`, { blocks: docs(5, () => [`w${i}`]) })),
      call(admin, 'POST', `/v1/aip/sessions/${s.id}/fork`, { name: 'mid' }),
    ]);
    for (const r of results) expect(r.statusCode, r.body).toBe(201);
    const after = await session(admin, s.id);
    const all = await blocks(admin, s.id);
    expect(after.metrics.blockCount).toBe(20);
    expect(after.metrics.totalTokens).toBe(all.reduce((n, b) => n + b.tokens, 0));
    const fork = json(results[4]!).data;
    expect(fork.metrics.blockCount % 5).toBe(0);
  });
});

describe('ownership', () => {
  it('another member (even an admin) and another organization get 404; the owner is the control', async () => {
    const mine = await create(member, { name: 'Private' });
    await add(member, mine.id, [{ content: 'secret plans' }]);
    const [b] = await blocks(member, mine.id);
    expect((await call(member, 'GET', `/v1/aip/sessions/${mine.id}`)).statusCode).toBe(200);
    for (const other of [admin, stranger]) {
      expectError(await call(other, 'GET', `/v1/aip/sessions/${mine.id}`), 404, 'not_found');
      expectError(await call(other, 'GET', `/v1/aip/sessions/${mine.id}/blocks/${b.id}`), 404, 'not_found');
      expectError(await call(other, 'POST', `/v1/aip/sessions/${mine.id}/fork`, { name: 'stolen' }), 404, 'not_found');
      expectError(await call(other, 'POST', '/v1/aip/sessions', { name: 'copy', fromSession: mine.id }), 404, 'not_found');
      expectError(await call(other, 'DELETE', `/v1/aip/sessions/${mine.id}`), 404, 'not_found');
    }
    expect((await session(member, mine.id)).metrics.blockCount).toBe(1);
  });

  it('deleting a session takes every block with it', async () => {
    const s = await create(admin, { name: 'Doomed' });
    const [b] = await add(
      admin,
      s.id,
      docs(3, () => []),
    );
    const res = await call(admin, 'DELETE', `/v1/aip/sessions/${s.id}`);
    expect(json(res).data).toEqual({ deleted: true });
    expectError(await call(admin, 'GET', `/v1/aip/sessions/${s.id}`), 404, 'not_found');
    const left = await h.deps.db.kysely.selectFrom('context_blocks').select('id').where('session_id', '=', s.id).execute();
    expect(left).toEqual([]);
    expect(b.id).toMatch(BLK);
    // The session is gone, so a resource_id filter names nothing; the owner still reads the event in the log.
    const ev = await expectActivity(h, admin, { eventType: 'session.deleted', resourceType: 'context_session' });
    expect(ev.resourceId).toBe(s.id);
    expect(ev.metadata).toMatchObject({ blocks: 3 });
    expectError(await call(admin, 'DELETE', `/v1/aip/sessions/${s.id}`), 404, 'not_found');
  });

  it('a key without sessions:write can read but not write', async () => {
    const key = await keyFor(h, admin, ['sessions:read']);
    const s = await create(admin, { name: 'Read only' });
    expect((await h.app.inject({ method: 'GET', url: `/v1/aip/sessions/${s.id}`, headers: { 'x-api-key': key } })).statusCode).toBe(200);
    const res = await h.app.inject({ method: 'POST', url: `/v1/aip/sessions/${s.id}/fork`, headers: { 'x-api-key': key }, payload: { name: 'x' } });
    expectError(res, 403, 'forbidden');
  });
});

const withSession = async (owner: Actor, hh: Harness) => {
  const res = await hh.app.inject({ method: 'POST', url: '/v1/aip/sessions', headers: owner.headers, payload: { name: 'sec' } });
  return json(res).data.id as string;
};
const withBlock = async (owner: Actor, hh: Harness) => {
  const id = await withSession(owner, hh);
  const res = await hh.app.inject({ method: 'POST', url: `/v1/aip/sessions/${id}/blocks`, headers: owner.headers, payload: { content: 'c' } });
  return `/v1/aip/sessions/${id}/blocks/${json(res).data.id}`;
};

securitySuite('context sessions', [
  { method: 'POST', url: () => '/v1/aip/sessions', scope: 'sessions:write', body: { name: 'x' } },
  { method: 'GET', url: () => '/v1/aip/sessions', scope: 'sessions:read' },
  { method: 'GET', url: async (o, hh) => `/v1/aip/sessions/${await withSession(o, hh)}`, scope: 'sessions:read', crossOrg: true },
  {
    method: 'PATCH',
    url: async (o, hh) => `/v1/aip/sessions/${await withSession(o, hh)}`,
    scope: 'sessions:write',
    body: { name: 'y' },
    crossOrg: true,
  },
  { method: 'DELETE', url: async (o, hh) => `/v1/aip/sessions/${await withSession(o, hh)}`, scope: 'sessions:write', crossOrg: true },
  {
    method: 'POST',
    url: async (o, hh) => `/v1/aip/sessions/${await withSession(o, hh)}/fork`,
    scope: 'sessions:write',
    body: { name: 'f' },
    crossOrg: true,
  },
  { method: 'POST', url: async (o, hh) => `/v1/aip/sessions/${await withSession(o, hh)}/compact`, scope: 'sessions:write', body: {}, crossOrg: true },
  {
    method: 'POST',
    url: async (o, hh) => `/v1/aip/sessions/${await withSession(o, hh)}/blocks`,
    scope: 'sessions:write',
    body: { content: 'c' },
    crossOrg: true,
  },
  {
    method: 'POST',
    url: async (o, hh) => `/v1/aip/sessions/${await withSession(o, hh)}/blocks/batch`,
    scope: 'sessions:write',
    body: { blocks: [{ content: 'c' }] },
    crossOrg: true,
  },
  { method: 'GET', url: async (o, hh) => `/v1/aip/sessions/${await withSession(o, hh)}/blocks`, scope: 'sessions:read', crossOrg: true },
  { method: 'GET', url: withBlock, scope: 'sessions:read', crossOrg: true },
  { method: 'PATCH', url: withBlock, scope: 'sessions:write', body: { pinned: true }, crossOrg: true },
  { method: 'DELETE', url: withBlock, scope: 'sessions:write', crossOrg: true },
]);
