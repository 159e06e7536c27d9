import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { startToolApi } from '../../../test/fakes/tool-api.js';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { expectError, until } from '../../../test/helpers.js';
import { linkDevice } from '../../../test/runmesh.js';

/**
 * Runs on context sessions (POST /v1/run with `sessionId`), as a user sees them: what the model is given, the
 * answer added back, the session held while the run goes on, compaction or refusal over the window, and who may.
 * Tool results are exercised with a catalogue tool (a managed agent, no sandbox).
 */

const OWM_KEY = 'owm-session-key';
/** Windows (tokens) of the models file's models: `wide` big, `small` tiny, `nowin` declaring none. */
const SMALL_WINDOW = 300;
/** HANGAR_SESSIONS_MAX_BLOCKS of the main suite. */
const MAX_BLOCKS = 20;

type Who = Actor | { headers: Record<string, string> };

interface BlockView {
  id: string;
  kind: string;
  content: string;
  pinned: boolean;
  tokens: number;
  source: Record<string, unknown> | null;
}

function modelsFile(dir: string): string {
  const file = path.join(dir, 'models.json');
  writeFileSync(
    file,
    JSON.stringify({
      platform: [
        { id: 'wide', provider: 'openai', contextWindow: 100_000 },
        { id: 'small', provider: 'openai', contextWindow: SMALL_WINDOW },
        { id: 'nowin', provider: 'openai' },
      ],
    }),
  );
  return file;
}

/** The operator's catalogue with OpenWeatherMap pointed at the loopback tool API. */
function catalogFile(dir: string, apiUrl: string): string {
  const shipped = JSON.parse(readFileSync(new URL('../tools/catalog.json', import.meta.url), 'utf8')) as {
    tools: { slug: string; execution: { url?: string } }[];
  };
  const tools = shipped.tools
    .filter((t) => t.slug === 'openweathermap_current')
    .map((t) => ({ ...t, execution: { ...t.execution, url: t.execution.url!.replace(/^https:\/\/[^/]+/, apiUrl) } }));
  const file = path.join(dir, 'catalog.json');
  writeFileSync(file, JSON.stringify({ tools }));
  return file;
}

function client(h: () => Harness) {
  const call = (who: Who, method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: unknown) =>
    h().app.inject({ method, url, headers: who.headers, ...(payload !== undefined ? { payload: payload as object } : {}) });
  const agent = async (who: Who, body: Record<string, unknown>) => {
    const res = await call(who, 'POST', '/v1/agents', body);
    expect(res.statusCode, res.body).toBe(201);
  };
  const session = async (who: Who, body: Record<string, unknown>) => {
    const res = await call(who, 'POST', '/v1/aip/sessions', body);
    expect(res.statusCode, res.body).toBe(201);
    return json(res).data as { id: string; name: string };
  };
  const addBlocks = async (who: Who, id: string, blocks: Record<string, unknown>[]) => {
    const res = await call(who, 'POST', `/v1/aip/sessions/${id}/blocks/batch`, { blocks });
    expect(res.statusCode, res.body).toBe(201);
    return json(res).data as BlockView[];
  };
  const blocks = async (who: Who, id: string) => {
    const res = await call(who, 'GET', `/v1/aip/sessions/${id}/blocks?limit=1000`);
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data as BlockView[];
  };
  const get = async (who: Who, id: string) => {
    const res = await call(who, 'GET', `/v1/aip/sessions/${id}`);
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data as {
      metrics: { totalTokens: number; maxTokens: number; invocationCount: number; compactionCount: number; blockCount: number };
    };
  };
  const run = (who: Who, body: Record<string, unknown>) => call(who, 'POST', '/v1/run', body);
  const ran = async (who: Who, body: Record<string, unknown>) => {
    const res = await run(who, body);
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data as { runId: string; threadId: string; status: string; result: string | null };
  };
  return { call, agent, session, addBlocks, blocks, get, run, ran };
}

/** The system message the model was given in `req`. */
const systemOf = (req: { body: any }) => (req.body.messages as { role: string; content: string }[]).find((m) => m.role === 'system')?.content;

describe('runs on a context session', () => {
  let fake: FakeOpenAI;
  let api: Awaited<ReturnType<typeof startToolApi>>;
  let h: Harness;
  let admin: Actor;
  let dir: string;
  const c = client(() => h);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    api = await startToolApi({ apiKeys: [OWM_KEY] });
    dir = mkdtempSync(path.join(tmpdir(), 'hangar-session-runs-'));
    h = await createHarness({
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_MODELS_FILE: modelsFile(dir),
      HANGAR_TOOLS_CATALOG_FILE: catalogFile(dir, api.url),
      HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS: 'true',
      // Short, so a write a run holds off answers session_busy within the test.
      HANGAR_SESSIONS_LOCK_WAIT_MS: '150',
      HANGAR_SESSIONS_MAX_BLOCKS: String(MAX_BLOCKS),
    });
    admin = await createOrgAdmin(h);
    await c.agent(admin, { slug: 'plain', model: 'wide', instructions: 'You are terse.' });
    await c.agent(admin, { slug: 'tiny', model: 'small', instructions: 'You are tiny.' });
    await c.agent(admin, { slug: 'unbounded', model: 'nowin', instructions: 'You know no window.' });
  });
  afterAll(async () => {
    await h?.close();
    await api?.close();
    await fake?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  describe('a completed run', () => {
    let sessionId: string;
    let first: { runId: string; threadId: string };
    let added: BlockView[];

    it('gives the model the agent’s instructions, then the session’s blocks pinned first, then the thread', async () => {
      const s = await c.session(admin, { name: 'notes', defaultAgent: 'plain' });
      sessionId = s.id;
      added = await c.addBlocks(admin, sessionId, [
        { kind: 'document', content: 'The launch is on Tuesday.' },
        { kind: 'instruction', content: 'Answer in French.', pinned: true },
        { kind: 'note', content: 'Budget: 40k.' },
        { kind: 'note', content: 'Owner: Ada.', pinned: true },
      ]);
      fake.script({ text: 'Mardi.', usage: { prompt: 40, completion: 2 } });
      const before = fake.requests.length;
      const r = await c.ran(admin, { agent: 'plain', prompt: 'When is the launch?', sessionId });
      first = r;
      expect(r).toMatchObject({ status: 'completed', result: 'Mardi.' });
      expect(fake.requests).toHaveLength(before + 1);
      expect(fake.requests.at(-1)!.body.messages).toEqual([
        {
          role: 'system',
          content: [
            'You are terse.',
            'Context session "notes" (4 blocks, pinned first):',
            '[instruction, pinned]\nAnswer in French.',
            '[note, pinned]\nOwner: Ada.',
            '[document]\nThe launch is on Tuesday.',
            '[note]\nBudget: 40k.',
          ].join('\n\n'),
        },
        { role: 'user', content: 'When is the launch?' },
      ]);
    });

    it('adds the answer back as a message block naming the run and thread, and counts the invocation', async () => {
      const now = await c.blocks(admin, sessionId);
      expect(now.map((b) => b.id).slice(0, 4)).toEqual(added.map((b) => b.id));
      expect(now).toHaveLength(5);
      expect(now[4]).toMatchObject({
        kind: 'message',
        content: 'Mardi.',
        pinned: false,
        source: { runId: first.runId, threadId: first.threadId, role: 'assistant' },
      });
      expect(now[4]!.tokens).toBeGreaterThan(0);
      const s = await c.get(admin, sessionId);
      expect(s.metrics).toMatchObject({ invocationCount: 1, blockCount: 5, totalTokens: now.reduce((n, b) => n + b.tokens, 0) });
      const ev = await expectActivity(h, admin, {
        eventType: 'session.invoked',
        resourceType: 'context_session',
        resourceId: sessionId,
        metadata: { runStatus: 'completed', blocksAdded: 1, blockIds: [now[4]!.id], compacted: false },
      });
      expect(ev.agentRunId).toBe(first.runId);
    });

    it('a next run on the same thread reads the session as it now is, then the thread’s messages', async () => {
      fake.script({ text: 'Ada.' });
      const r = await c.ran(admin, { agent: 'plain', prompt: 'Who owns it?', sessionId, threadId: first.threadId });
      expect(r.threadId).toBe(first.threadId);
      const messages = fake.requests.at(-1)!.body.messages as { role: string; content: string }[];
      expect(messages[0]!.content).toContain('Context session "notes" (5 blocks, pinned first):');
      expect(messages[0]!.content.endsWith('[note]\nBudget: 40k.\n\n[message]\nMardi.')).toBe(true);
      expect(messages.slice(1)).toEqual([
        { role: 'user', content: 'When is the launch?' },
        { role: 'assistant', content: 'Mardi.' },
        { role: 'user', content: 'Who owns it?' },
      ]);
      expect((await c.get(admin, sessionId)).metrics.invocationCount).toBe(2);
    });

    it('an empty session adds nothing to the system prompt, and gets the answer', async () => {
      const s = await c.session(admin, { name: 'empty' });
      fake.script({ text: 'First words.' });
      await c.ran(admin, { agent: 'plain', prompt: 'Begin', sessionId: s.id });
      expect(systemOf(fake.requests.at(-1)!)).toBe('You are terse.');
      expect((await c.blocks(admin, s.id)).map((b) => [b.kind, b.content])).toEqual([['message', 'First words.']]);
    });
  });

  describe('a run that does not complete, or cannot add its answer', () => {
    it('counts the invocation, adds no block and lets go of the session', async () => {
      const s = await c.session(admin, { name: 'doomed' });
      await c.addBlocks(admin, s.id, [{ content: 'Some context.' }]);
      fake.script({ status: 500, errorMessage: 'provider down' }, { status: 500, errorMessage: 'provider down' });
      const r = await c.ran(admin, { agent: 'plain', prompt: 'Try', sessionId: s.id });
      expect(r).toMatchObject({ status: 'failed', result: null });
      const blocks = await c.blocks(admin, s.id);
      expect(blocks.map((b) => b.content)).toEqual(['Some context.']);
      expect((await c.get(admin, s.id)).metrics.invocationCount).toBe(1);
      await expectActivity(h, admin, {
        eventType: 'session.invoked',
        resourceType: 'context_session',
        resourceId: s.id,
        metadata: { runStatus: 'failed', blocksAdded: 0 },
      });
      // Released: a write goes through at once (the lock wait here is short).
      expect((await c.call(admin, 'POST', `/v1/aip/sessions/${s.id}/blocks`, { content: 'after' })).statusCode).toBe(201);
    });
    it('a cancelled run counts too, adds nothing and lets go of the session', async () => {
      const s = await c.session(admin, { name: 'cancelled' });
      const thread = (await c.ran(admin, { agent: 'plain', prompt: 'Open a thread' })).threadId;
      fake.script({ text: Array.from({ length: 60 }, (_, i) => `w${i} `), chunkDelayMs: 200 });
      const pending = c.run(admin, { agent: 'plain', prompt: 'Talk slowly', threadId: thread, sessionId: s.id });
      await until('the model to be asked', () => fake.requests.at(-1)!.body.messages.at(-1).content === 'Talk slowly', 10_000);
      // While it runs, the session is held.
      expect(
        expectError<{ heldBy: string }>(await c.call(admin, 'POST', `/v1/aip/sessions/${s.id}/blocks`, { content: 'x' }), 409, 'session_busy').heldBy,
      ).toBe('run');
      const events = json(await c.call(admin, 'GET', `/v1/threads/${thread}/events?limit=500`)).data.events as { type: string; payload: any }[];
      const runId = events.filter((e) => e.type === 'run_started').at(-1)!.payload.runId as string;
      expect((await c.call(admin, 'POST', `/v1/runs/${runId}/cancel`)).statusCode).toBe(200);
      const res = await pending;
      expect(json(res).data).toMatchObject({ runId, status: 'cancelled' });
      expect(await c.blocks(admin, s.id)).toEqual([]);
      expect((await c.get(admin, s.id)).metrics.invocationCount).toBe(1);
      await expectActivity(h, admin, {
        eventType: 'session.invoked',
        resourceType: 'context_session',
        resourceId: s.id,
        metadata: { runStatus: 'cancelled', blocksAdded: 0 },
      });
      expect((await c.call(admin, 'POST', `/v1/aip/sessions/${s.id}/blocks`, { content: 'after' })).statusCode).toBe(201);
    });

    it('a run whose session is full (HANGAR_SESSIONS_MAX_BLOCKS) completes, and its invocation is counted with a warning', async () => {
      const s = await c.session(admin, { name: 'full' });
      await c.addBlocks(
        admin,
        s.id,
        Array.from({ length: MAX_BLOCKS }, (_, i) => ({ content: `Block ${i}.` })),
      );
      fake.script({ text: 'No room for me.' });
      const r = await c.ran(admin, { agent: 'plain', prompt: 'Hi', sessionId: s.id });
      expect(r).toMatchObject({ status: 'completed', result: 'No room for me.' });
      expect((await c.get(admin, s.id)).metrics).toMatchObject({ blockCount: MAX_BLOCKS, invocationCount: 1 });
      const ev = await expectActivity(h, admin, {
        eventType: 'session.invoked',
        resourceType: 'context_session',
        resourceId: s.id,
        metadata: { notKept: 1 },
      });
      expect(ev.severity).toBe('warning');
      expect(ev.summary).toContain('HANGAR_SESSIONS_MAX_BLOCKS');
    });
  });

  describe('tool results (a catalogue tool on a managed agent; no sandbox)', () => {
    beforeAll(async () => {
      await c.call(admin, 'POST', '/v1/tools/openweathermap_current/install', {});
      await c.call(admin, 'POST', '/v1/tools/openweathermap_current/credentials', { apiKey: OWM_KEY });
      await c.agent(admin, { slug: 'weather', model: 'wide', tools: ['openweathermap_current'] });
    });

    const weatherRun = async (sessionId: string, sessionOptions?: Record<string, unknown>) => {
      fake.script(
        { toolCalls: [{ id: 'call_w', name: 'openweathermap_current', arguments: JSON.stringify({ city: 'Paris' }) }] },
        { text: 'It is mild in Paris.' },
      );
      return c.ran(admin, { agent: 'weather', prompt: 'Weather in Paris?', sessionId, ...(sessionOptions ? { sessionOptions } : {}) });
    };

    it('by default only the answer is added', async () => {
      const s = await c.session(admin, { name: 'weather-default' });
      const r = await weatherRun(s.id);
      expect(r.result).toBe('It is mild in Paris.');
      expect((await c.blocks(admin, s.id)).map((b) => b.kind)).toEqual(['message']);
    });

    it('with includeToolResults each tool result comes first as a tool_result block, then the answer', async () => {
      const s = await c.session(admin, { name: 'weather-tools' });
      const r = await weatherRun(s.id, { includeToolResults: true });
      const blocks = await c.blocks(admin, s.id);
      expect(blocks.map((b) => b.kind)).toEqual(['tool_result', 'message']);
      expect(blocks[0]!.content.startsWith('openweathermap_current:\n')).toBe(true);
      expect(blocks[0]!.content).toContain('Paris');
      expect(blocks[0]!.content).not.toContain(OWM_KEY);
      expect(blocks[0]!.source).toMatchObject({ runId: r.runId, threadId: r.threadId, toolCallId: 'call_w', tool: 'openweathermap_current' });
      expect(blocks[1]).toMatchObject({ content: 'It is mild in Paris.', source: { runId: r.runId, threadId: r.threadId, role: 'assistant' } });
      await expectActivity(h, admin, {
        eventType: 'session.invoked',
        resourceType: 'context_session',
        resourceId: s.id,
        metadata: { blocksAdded: 2, blockIds: blocks.map((b) => b.id) },
      });
    });
  });

  describe('over the window', () => {
    /** Old blocks worth compacting, and five short recent ones (kept by a run's compaction). */
    const fill = async (sessionId: string) => {
      const old = Array.from({ length: 6 }, (_, i) => ({
        kind: 'document',
        content: `Old report ${i}. ${'The quarterly figures were reviewed line by line and filed. '.repeat(5)}`,
      }));
      const recent = Array.from({ length: 5 }, (_, i) => ({ kind: 'note', content: `Recent note ${i}.` }));
      const pinned = { kind: 'instruction', content: 'Always cite the report number.', pinned: true };
      return c.addBlocks(admin, sessionId, [pinned, ...old, ...recent]);
    };

    it('onOverflow "fail" is 409 invalid_state over_window, and the session is as it was and free', async () => {
      const s = await c.session(admin, { name: 'too-big-fail' });
      await fill(s.id);
      const before = await c.get(admin, s.id);
      expect(before.metrics.totalTokens).toBeGreaterThan(SMALL_WINDOW);
      const calls = fake.requests.length;
      const err = expectError(
        await c.run(admin, { agent: 'tiny', prompt: 'Hi', sessionId: s.id, sessionOptions: { onOverflow: 'fail' } }),
        409,
        'invalid_state',
      );
      expect(err.state).toBe('over_window');
      expect(err.message).toContain(`/v1/aip/sessions/${s.id}/compact`);
      expect(fake.requests).toHaveLength(calls);
      const after = await c.get(admin, s.id);
      expect(after.metrics).toEqual(before.metrics);
      expect((await c.call(admin, 'POST', `/v1/aip/sessions/${s.id}/blocks`, { content: 'still writable' })).statusCode).toBe(201);
    });

    it('by default the run compacts the session to half the model’s window first, then reads it', async () => {
      const s = await c.session(admin, { name: 'too-big' });
      const filled = await fill(s.id);
      fake.script({ text: 'Compact answer.' });
      const calls = fake.requests.length;
      const r = await c.ran(admin, { agent: 'tiny', prompt: 'Summarize', sessionId: s.id });
      expect(r.status).toBe('completed');
      // The session has no default agent: an extract, no model call before the run's own.
      expect(fake.requests).toHaveLength(calls + 1);

      const ev = await expectActivity(h, admin, {
        eventType: 'session.compacted',
        resourceType: 'context_session',
        resourceId: s.id,
        metadata: { reason: 'run', targetTokens: SMALL_WINDOW / 2, summarizer: 'extractive' },
      });
      expect(ev.agentRunId).toBe(r.runId);
      expect(ev.metadata.newTokens).toBeLessThanOrEqual(SMALL_WINDOW / 2);

      const blocks = await c.blocks(admin, s.id);
      // Pinned and the five recent blocks kept as they were; the old ones now a summary; the answer at the end.
      const kept = [filled[0]!, ...filled.slice(-5)].map((b) => b.id);
      expect(kept.every((id) => blocks.some((b) => b.id === id))).toBe(true);
      // The oldest ones (just enough of them) are now a summary, in their place.
      const oldIds = filled.slice(1, 7).map((b) => b.id);
      const left = oldIds.filter((id) => blocks.some((b) => b.id === id));
      expect(left.length).toBeLessThan(oldIds.length);
      expect(left).toEqual(oldIds.slice(oldIds.length - left.length));
      const summaryAt = blocks.findIndex((b) => b.kind === 'summary');
      expect(summaryAt).toBeGreaterThanOrEqual(0);
      expect(blocks[summaryAt]!.source).toMatchObject({ summarizer: 'extractive', firstBlock: oldIds[0] });
      expect(left.every((id) => blocks.findIndex((b) => b.id === id) > summaryAt)).toBe(true);
      expect(blocks.at(-1)).toMatchObject({ kind: 'message', content: 'Compact answer.' });

      const system = systemOf(fake.requests.at(-1)!)!;
      expect(system).toContain('[instruction, pinned]\nAlways cite the report number.');
      expect(system).toContain('[summary]\n');
      expect(system).not.toContain('Old report 0. The quarterly figures were reviewed line by line and filed. The quarterly');

      const after = await c.get(admin, s.id);
      expect(after.metrics.compactionCount).toBe(1);
      expect(after.metrics.invocationCount).toBe(1);
      await expectActivity(h, admin, {
        eventType: 'session.invoked',
        resourceType: 'context_session',
        resourceId: s.id,
        metadata: { compacted: true },
      });
    });

    it('a model that declares no window is held to the session’s window (its default agent’s model)', async () => {
      const s = await c.session(admin, { name: 'session-window', defaultAgent: 'tiny' });
      await fill(s.id);
      expect((await c.get(admin, s.id)).metrics.maxTokens).toBe(SMALL_WINDOW);
      const err = expectError(
        await c.run(admin, { agent: 'unbounded', prompt: 'Hi', sessionId: s.id, sessionOptions: { onOverflow: 'fail' } }),
        409,
        'invalid_state',
      );
      expect(err.state).toBe('over_window');
      // Under a model with a wide window the same session is fine.
      fake.script({ text: 'Fits.' });
      expect((await c.ran(admin, { agent: 'plain', prompt: 'Hi', sessionId: s.id, sessionOptions: { onOverflow: 'fail' } })).result).toBe('Fits.');
    });

    it('when the pinned and recent blocks alone are over, compacting cannot help: 409 over_window naming why', async () => {
      const s = await c.session(admin, { name: 'pinned-too-big' });
      await c.addBlocks(admin, s.id, [{ kind: 'instruction', content: 'Rule. '.repeat(400), pinned: true }]);
      const calls = fake.requests.length;
      const err = expectError(await c.run(admin, { agent: 'tiny', prompt: 'Hi', sessionId: s.id }), 409, 'invalid_state');
      expect(err.state).toBe('over_window');
      expect(err.message).toContain('pinned and recent blocks');
      expect(fake.requests).toHaveLength(calls);
      expect((await c.get(admin, s.id)).metrics).toMatchObject({ compactionCount: 0, invocationCount: 0 });
    });
  });

  describe('compaction written by the model', () => {
    it('calls the default agent’s model through the platform and meters it as a session call', async () => {
      const s = await c.session(admin, { name: 'model-compact', defaultAgent: 'plain' });
      await c.addBlocks(
        admin,
        s.id,
        Array.from({ length: 8 }, (_, i) => ({ content: `Meeting ${i}: ${'we agreed to ship the beta after the audit. '.repeat(10)}` })),
      );
      const total = (await c.get(admin, s.id)).metrics.totalTokens;
      fake.script({ text: 'Beta ships after the audit.', usage: { prompt: 321, completion: 6 } });
      const calls = fake.requests.length;
      const res = await c.call(admin, 'POST', `/v1/aip/sessions/${s.id}/compact`, {
        summarizer: 'model',
        preserveRecent: 2,
        targetTokens: Math.floor(total / 2),
      });
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res).data).toMatchObject({ summarizer: 'model', summariesCreated: 1, previousTokens: total });
      expect(fake.requests).toHaveLength(calls + 1);
      const req = fake.requests.at(-1)!;
      expect(req.body.model).toBe('wide');
      expect(req.headers.authorization).toBe('Bearer sk-platform');
      expect(systemOf(req)).toContain('You compress the working memory of an AI agent.');
      expect(JSON.stringify(req.body.messages)).toContain('Meeting 0:');

      const summary = (await c.blocks(admin, s.id)).find((b) => b.kind === 'summary');
      expect(summary).toMatchObject({
        content: 'Beta ships after the audit.',
        source: expect.objectContaining({ summarizer: 'model', model: 'wide' }),
      });

      const rows = await h.deps.db.kysely
        .selectFrom('model_usage')
        .selectAll()
        .where('org_id', '=', admin.orgId)
        .where('source', '=', 'session')
        .execute();
      expect(rows).toEqual([
        expect.objectContaining({
          user_id: admin.userId,
          model: 'wide',
          tier: 'platform',
          source: 'session',
          run_id: null,
          input_tokens: 321,
          output_tokens: 6,
        }),
      ]);
    });
  });

  describe('while a run holds the session', () => {
    it('writers answer 409 session_busy held by the run, reads answer, and all goes through once it ends', async () => {
      const s = await c.session(admin, { name: 'held' });
      const [first] = await c.addBlocks(admin, s.id, [{ content: 'Held block.' }]);
      fake.script({ text: 'Slow answer.', delayMs: 4000 });
      const calls = fake.requests.length;
      const running = c.run(admin, { agent: 'plain', prompt: 'Take your time', sessionId: s.id });
      await until('the run calls the model', () => fake.requests.length > calls, 10_000);

      const url = `/v1/aip/sessions/${s.id}`;
      const writes = await Promise.all([
        c.call(admin, 'POST', `${url}/blocks`, { content: 'Interloper.' }),
        c.call(admin, 'PATCH', `${url}/blocks/${first!.id}`, { content: 'Changed.' }),
        c.call(admin, 'DELETE', `${url}/blocks/${first!.id}`),
        c.call(admin, 'POST', `${url}/fork`, { name: 'fork-during' }),
        c.call(admin, 'POST', `${url}/compact`, { summarizer: 'extractive', targetTokens: 0, preserveRecent: 0 }),
        c.call(admin, 'DELETE', url),
        c.call(admin, 'POST', '/v1/aip/sessions', { name: 'copy-during', fromSession: s.id }),
      ]);
      for (const w of writes) {
        const err = expectError<{ heldBy: string; message: string }>(w, 409, 'session_busy');
        expect(err.heldBy).toBe('run');
      }
      // Reads never wait.
      expect((await c.call(admin, 'GET', url)).statusCode).toBe(200);
      expect((await c.call(admin, 'GET', `${url}/blocks`)).statusCode).toBe(200);

      const res = await running;
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res).data.result).toBe('Slow answer.');
      // Nothing the refused writers asked for happened.
      expect((await c.blocks(admin, s.id)).map((b) => b.content)).toEqual(['Held block.', 'Slow answer.']);
      const names = (json(await c.call(admin, 'GET', '/v1/aip/sessions?limit=100')).data as { name: string }[]).map((x) => x.name);
      expect(names).not.toContain('fork-during');
      expect(names).not.toContain('copy-during');

      const fork = await c.call(admin, 'POST', `${url}/fork`, { name: 'fork-after' });
      expect(fork.statusCode, fork.body).toBe(201);
      expect((await c.blocks(admin, json(fork).data.id)).map((b) => b.content)).toEqual(['Held block.', 'Slow answer.']);
      expect((await c.call(admin, 'POST', `${url}/blocks`, { content: 'Now.' })).statusCode).toBe(201);
    });
  });

  describe('who may', () => {
    it('a local-desktop agent cannot use a session: 400 on sessionId, and the session is untouched', async () => {
      const s = await c.session(admin, { name: 'desk-session' });
      const { nodeId } = await linkDevice(h, admin, 'desk');
      await c.agent(admin, { slug: 'desk', executionMode: 'local-desktop', targetDeviceId: nodeId, model: 'wide' });
      const err = expectError(await c.run(admin, { agent: 'desk', prompt: 'Hi', sessionId: s.id }), 400, 'invalid_request');
      expect(err.issues?.map((i) => i.path)).toContain('sessionId');
      expect((await c.get(admin, s.id)).metrics.invocationCount).toBe(0);
      expect((await c.call(admin, 'POST', `/v1/aip/sessions/${s.id}/blocks`, { content: 'free' })).statusCode).toBe(201);
    });

    it('another member’s session and another organization’s are 404, and nothing reaches the model', async () => {
      const s = await c.session(admin, { name: 'private' });
      // Control: the owner may.
      fake.script({ text: 'Owner ok.' });
      expect((await c.ran(admin, { agent: 'plain', prompt: 'Hi', sessionId: s.id })).result).toBe('Owner ok.');

      const member = await addOrgMember(h, admin);
      const other = await createOrgAdmin(h);
      await c.agent(other, { slug: 'plain', model: 'wide' });
      const calls = fake.requests.length;
      for (const who of [member, other]) {
        const err = expectError(await c.run(who, { agent: 'plain', prompt: 'Peek', sessionId: s.id }), 404, 'not_found');
        expect(err.message).toContain(s.id);
      }
      expect(fake.requests).toHaveLength(calls);
      expect((await c.get(admin, s.id)).metrics.invocationCount).toBe(1);
      expect((await c.blocks(admin, s.id)).map((b) => b.content)).toEqual(['Owner ok.']);
    });

    it('a credential without sessions:write is 403; with it the run goes through', async () => {
      const s = await c.session(admin, { name: 'scoped' });
      const calls = fake.requests.length;
      const readOnly = { headers: { 'x-api-key': await keyFor(h, admin, ['agent:run', 'agent:read', 'sessions:read']) } };
      const err = expectError(await c.run(readOnly, { agent: 'plain', prompt: 'Hi', sessionId: s.id }), 403, 'forbidden');
      expect(err.message).toContain('sessions:write');
      expect(fake.requests).toHaveLength(calls);
      expect((await c.get(admin, s.id)).metrics.invocationCount).toBe(0);

      const writer = { headers: { 'x-api-key': await keyFor(h, admin, ['agent:run', 'agent:read', 'sessions:write']) } };
      fake.script({ text: 'Scoped ok.' });
      expect((await c.ran(writer, { agent: 'plain', prompt: 'Hi', sessionId: s.id })).result).toBe('Scoped ok.');
    });

    it('an unknown session is 404 and a malformed sessionOptions is 400', async () => {
      expectError(await c.run(admin, { agent: 'plain', prompt: 'Hi', sessionId: 'sess_nope' }), 404, 'not_found');
      const s = await c.session(admin, { name: 'opts' });
      expectError(
        await c.run(admin, { agent: 'plain', prompt: 'Hi', sessionId: s.id, sessionOptions: { onOverflow: 'explode' } }),
        400,
        'invalid_request',
      );
    });
  });
});

describe('a fork asked for while a run holds the session (the default lock wait)', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let admin: Actor;
  const c = client(() => h);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness({ HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_OPENAI_MODELS: 'm1' });
    admin = await createOrgAdmin(h);
    await c.agent(admin, { slug: 'plain', model: 'm1' });
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('waits for the run and then holds its answer (or answers session_busy), never half of it', async () => {
    const s = await c.session(admin, { name: 'forked-mid-run' });
    await c.addBlocks(admin, s.id, [{ content: 'Before.' }, { content: 'Pinned.', pinned: true }]);
    fake.script({ text: 'During.', delayMs: 1000 });
    const calls = fake.requests.length;
    const running = c.run(admin, { agent: 'plain', prompt: 'Go', sessionId: s.id });
    await until('the run calls the model', () => fake.requests.length > calls, 10_000);
    const forking = c.call(admin, 'POST', `/v1/aip/sessions/${s.id}/fork`, { name: 'mid' });
    const [run, fork] = await Promise.all([running, forking]);
    expect(run.statusCode, run.body).toBe(200);
    const after = (await c.blocks(admin, s.id)).map((b) => b.content);
    expect(after).toEqual(['Before.', 'Pinned.', 'During.']);
    if (fork.statusCode === 409) {
      expect(expectError<{ heldBy: string }>(fork, 409, 'session_busy').heldBy).toBe('run');
    } else {
      expect(fork.statusCode, fork.body).toBe(201);
      const forked = json(fork).data as { id: string; metrics: { blockCount: number; invocationCount: number } };
      expect((await c.blocks(admin, forked.id)).map((b) => b.content)).toEqual(after);
      expect(forked.metrics).toMatchObject({ blockCount: 3, invocationCount: 0 });
    }
  });
});
