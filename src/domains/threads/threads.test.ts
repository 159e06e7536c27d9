import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addOrgMember, createHarness, createOrgAdmin, json, testDatabaseUrl, type Actor, type Harness } from '../../../test/harness.js';
import { expectActivity } from '../../../test/activity.js';
import { securitySuite } from '../../../test/security.js';
import { acquireRunLock, activeRun, appendDurable, rebuildThread, releaseRunLock, renewRunLock, type DurableInput } from './index.js';
import { repairAll } from './durable.js';

const BIN = path.resolve(import.meta.dirname, '../../../bin/hangar.js');
const PG_URL = testDatabaseUrl ?? 'postgres://postgres@127.0.0.1:5432/test';
const withSchema = (url: string, schema: string) => `${url}${url.includes('?') ? '&' : '?'}schema=${schema}`;

async function dropSchema(schema: string) {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await client.end();
}

interface Thread {
  id: string;
  orgId: string;
  ownerUserId: string | null;
  agentId: string | null;
  title: string | null;
  executionMode: string;
  archived: boolean;
  activeRolloutId: string | null;
  createdAt: string;
  updatedAt: string;
}

interface ThreadEvent {
  sequence: number;
  rolloutId: string;
  threadId: string;
  runId: string | null;
  type: string;
  payload: any;
  createdAt: string;
}

const THREAD_FIELDS = ['activeRolloutId', 'agentId', 'archived', 'createdAt', 'executionMode', 'id', 'orgId', 'ownerUserId', 'title', 'updatedAt'];

const sequences = (events: ThreadEvent[]) => events.map((e) => e.sequence);
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

const messages = (n: number, from = 1): DurableInput[] =>
  Array.from(
    { length: n },
    (_, i) => ({ type: i % 2 ? 'assistant_message' : 'user_message', runId: 'run_test', payload: { text: `message ${from + i}` } }) as DurableInput,
  );

describe('threads', () => {
  let h: Harness;
  let owner: Actor;

  beforeAll(async () => {
    h = await createHarness();
    owner = await createOrgAdmin(h);
  });
  afterAll(() => h?.close());

  const inject = (actor: { headers: Record<string, string> }, method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: unknown) =>
    h.app.inject({ method, url, headers: actor.headers, ...(payload === undefined ? {} : { payload: payload as object }) });

  async function createThread(actor: Actor, body: Record<string, unknown> = {}): Promise<Thread> {
    const res = await inject(actor, 'POST', '/v1/threads', body);
    expect(res.statusCode, res.body).toBe(201);
    return json(res).data;
  }

  async function getThread(actor: Actor, id: string, query = ''): Promise<Thread & { rollouts?: any[] }> {
    const res = await inject(actor, 'GET', `/v1/threads/${id}${query}`);
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data;
  }

  async function listEvents(
    actor: Actor,
    id: string,
    query = '',
  ): Promise<{ data: { thread: Thread; events: ThreadEvent[] }; hasMore: boolean; nextCursor: string | null }> {
    const res = await inject(actor, 'GET', `/v1/threads/${id}/events${query}`);
    expect(res.statusCode, res.body).toBe(200);
    return json(res);
  }

  const jsonlPath = (t: Thread) => path.join(h.dataDir, 'blobs', 'threads', t.orgId, `${t.id}.jsonl`);

  async function activityTypes(actor: Actor, threadId: string): Promise<string[]> {
    const res = await inject(actor, 'GET', `/v1/threads/${threadId}/activity`);
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data.events.map((e: { eventType: string }) => e.eventType);
  }

  describe('create and read', () => {
    it('POST /v1/threads answers 201 with exactly the spec’s Thread, owned by the caller, with a first rollout', async () => {
      const before = Date.now();
      const t = await createThread(owner, { title: 'Plan the trip' });
      expect(Object.keys(t).sort()).toEqual(THREAD_FIELDS);
      expect(t.id).toMatch(/^thr_/);
      expect(t).toMatchObject({
        orgId: owner.orgId,
        ownerUserId: owner.userId,
        agentId: null,
        title: 'Plan the trip',
        executionMode: 'managed',
        archived: false,
      });
      expect(t.activeRolloutId).toMatch(/^rol_/);
      expect(Date.parse(t.createdAt)).toBeGreaterThanOrEqual(before - 1000);
      expect(t.updatedAt).toBe(t.createdAt);

      const other = await createThread(owner, { executionMode: 'in_sandbox', agentId: 'agt_123' });
      expect(other).toMatchObject({ title: null, executionMode: 'in_sandbox', agentId: 'agt_123' });

      expect(await getThread(owner, t.id)).toEqual(t);
    });

    it('refuses an unknown execution mode or field with 400', async () => {
      for (const body of [{ executionMode: 'on_the_moon' }, { colour: 'red' }, { title: '' }]) {
        const res = await inject(owner, 'POST', '/v1/threads', body);
        expect(res.statusCode, JSON.stringify(body)).toBe(400);
        expect(json(res).error.code).toBe('invalid_request');
      }
    });

    it('include=all_rollouts adds the rollouts to the thread', async () => {
      const t = await createThread(owner);
      const got = await getThread(owner, t.id, '?include=all_rollouts');
      expect(got.rollouts).toHaveLength(1);
      expect(got.rollouts![0]).toMatchObject({
        id: t.activeRolloutId,
        threadId: t.id,
        position: 0,
        kind: 'initial',
        status: 'active',
        fromRolloutId: null,
        summary: null,
        eventCount: 0,
        firstSequence: null,
        lastSequence: null,
      });
      expect((await getThread(owner, t.id)).rollouts).toBeUndefined();
      expect((await inject(owner, 'GET', `/v1/threads/${t.id}?include=everything`)).statusCode).toBe(400);
    });

    it('an unknown thread is 404', async () => {
      for (const url of ['/v1/threads/thr_nope', '/v1/threads/thr_nope/events', '/v1/threads/thr_nope/rollouts', '/v1/threads/thr_nope/activity']) {
        const res = await inject(owner, 'GET', url);
        expect(res.statusCode, url).toBe(404);
        expect(json(res).error.code).toBe('not_found');
      }
    });
  });

  describe('listing', () => {
    it('lists only the caller’s own threads, most recently updated first', async () => {
      const admin = await createOrgAdmin(h);
      const member = await addOrgMember(h, admin);
      const mine: Thread[] = [];
      for (let i = 0; i < 3; i++) {
        mine.push(await createThread(member, { title: `mine ${i}` }));
        await sleep(3);
      }
      await createThread(admin, { title: 'the admin’s' });
      await sleep(3);
      // Touching the oldest moves it to the top.
      expect((await inject(member, 'PATCH', `/v1/threads/${mine[0]!.id}`, { title: 'renamed' })).statusCode).toBe(200);

      const res = await inject(member, 'GET', '/v1/threads');
      expect(res.statusCode).toBe(200);
      const body = json(res);
      expect(body.data.map((t: Thread) => t.id)).toEqual([mine[0]!.id, mine[2]!.id, mine[1]!.id]);
      expect(body.meta).toMatchObject({ hasMore: false, nextCursor: null });
      // An org admin lists their own threads too, not the members'.
      const adminList = json(await inject(admin, 'GET', '/v1/threads')).data;
      expect(adminList.map((t: Thread) => t.title)).toEqual(['the admin’s']);
    });

    it('pages: 50 by default, at most 100 (101 is 400), the cursor walks every thread once', async () => {
      const actor = await createOrgAdmin(h);
      const created = new Set<string>();
      for (let i = 0; i < 55; i++) created.add((await createThread(actor, { title: `t${i}` })).id);

      const first = json(await inject(actor, 'GET', '/v1/threads'));
      expect(first.data).toHaveLength(50);
      expect(first.meta.hasMore).toBe(true);
      expect(json(await inject(actor, 'GET', '/v1/threads?limit=100')).data).toHaveLength(55);
      for (const bad of ['101', '0', 'x']) {
        const res = await inject(actor, 'GET', `/v1/threads?limit=${bad}`);
        expect(res.statusCode, bad).toBe(400);
        expect(json(res).error.code).toBe('invalid_request');
      }

      const seen: Thread[] = [];
      let cursor: string | null = null;
      do {
        const page: any = json(await inject(actor, 'GET', `/v1/threads?limit=20${cursor ? `&cursor=${cursor}` : ''}`));
        seen.push(...page.data);
        cursor = page.meta.nextCursor;
        expect(page.meta.hasMore).toBe(cursor !== null);
      } while (cursor);
      expect(seen).toHaveLength(55);
      expect(new Set(seen.map((t) => t.id))).toEqual(created);
      const times = seen.map((t) => t.updatedAt);
      expect([...times].sort().reverse()).toEqual(times);
    });

    it('leaves archived threads out unless archived=true', async () => {
      const actor = await createOrgAdmin(h);
      const kept = await createThread(actor, { title: 'kept' });
      const archived = await createThread(actor, { title: 'archived' });
      expect((await inject(actor, 'PATCH', `/v1/threads/${archived.id}`, { archived: true })).statusCode).toBe(200);

      const ids = async (q: string) => json(await inject(actor, 'GET', `/v1/threads${q}`)).data.map((t: Thread) => t.id);
      expect(await ids('')).toEqual([kept.id]);
      expect(await ids('?archived=false')).toEqual([kept.id]);
      expect((await ids('?archived=true')).sort()).toEqual([kept.id, archived.id].sort());
      expect((await inject(actor, 'GET', '/v1/threads?archived=maybe')).statusCode).toBe(400);
    });
  });

  describe('who sees a thread', () => {
    let admin: Actor;
    let member: Actor;
    let otherMember: Actor;
    let thread: Thread;

    beforeAll(async () => {
      admin = await createOrgAdmin(h);
      member = await addOrgMember(h, admin);
      otherMember = await addOrgMember(h, admin);
      thread = await createThread(member, { title: 'private notes' });
      await appendDurable(h.deps, thread.id, messages(2));
    });

    it('another member gets 404 everywhere', async () => {
      for (const [method, url, body] of [
        ['GET', `/v1/threads/${thread.id}`],
        ['GET', `/v1/threads/${thread.id}/events`],
        ['GET', `/v1/threads/${thread.id}/rollouts`],
        ['GET', `/v1/threads/${thread.id}/activity`],
        ['PATCH', `/v1/threads/${thread.id}`, { title: 'mine now' }],
        ['POST', `/v1/threads/${thread.id}/compact`, {}],
        ['DELETE', `/v1/threads/${thread.id}`],
      ] as const) {
        const res = await inject(otherMember, method, url, body);
        expect(res.statusCode, `${method} ${url}`).toBe(404);
        expect(json(res).error.code).toBe('not_found');
      }
      expect(json(await inject(otherMember, 'GET', '/v1/threads')).data).toEqual([]);
    });

    it('an organization admin reads the metadata but not the events (403), and cannot change it', async () => {
      const seen = await getThread(admin, thread.id, '?include=all_rollouts');
      expect(seen.id).toBe(thread.id);
      expect(seen.title).toBe('private notes');
      expect(seen.rollouts).toBeUndefined();

      for (const [method, url, body] of [
        ['GET', `/v1/threads/${thread.id}/events`],
        ['GET', `/v1/threads/${thread.id}/rollouts`],
        ['PATCH', `/v1/threads/${thread.id}`, { title: 'admin was here' }],
        ['POST', `/v1/threads/${thread.id}/compact`, {}],
      ] as const) {
        const res = await inject(admin, method, url, body);
        expect(res.statusCode, `${method} ${url}`).toBe(403);
        expect(json(res).error.code).toBe('forbidden');
      }
      // The owner still sees everything, unchanged.
      expect(sequences((await listEvents(member, thread.id)).data.events)).toEqual([1, 2]);
      expect((await getThread(member, thread.id)).title).toBe('private notes');
    });

    it('an organization admin may delete a member’s thread', async () => {
      const t = await createThread(member, { title: 'to remove' });
      expect((await inject(admin, 'DELETE', `/v1/threads/${t.id}`)).statusCode).toBe(204);
      expect((await inject(member, 'GET', `/v1/threads/${t.id}`)).statusCode).toBe(404);
    });
  });

  describe('rename, archive, unarchive', () => {
    it('PATCH changes the title and archived flag, each change on the thread’s activity', async () => {
      const t = await createThread(owner, { title: 'draft' });
      await sleep(3);
      const renamed = json(await inject(owner, 'PATCH', `/v1/threads/${t.id}`, { title: 'final' })).data;
      expect(renamed).toMatchObject({ id: t.id, title: 'final', archived: false });
      expect(renamed.updatedAt > t.updatedAt).toBe(true);

      expect(json(await inject(owner, 'PATCH', `/v1/threads/${t.id}`, { archived: true })).data.archived).toBe(true);
      expect((await getThread(owner, t.id)).archived).toBe(true);
      expect(json(await inject(owner, 'PATCH', `/v1/threads/${t.id}`, { archived: false })).data.archived).toBe(false);
      const cleared = json(await inject(owner, 'PATCH', `/v1/threads/${t.id}`, { title: null })).data;
      expect(cleared.title).toBeNull();

      expect(await activityTypes(owner, t.id)).toEqual(['thread.renamed', 'thread.unarchived', 'thread.archived', 'thread.renamed']);
      const res = await inject(owner, 'GET', `/v1/threads/${t.id}/activity?event_type=thread.renamed`);
      const renames = json(res).data.events;
      expect(renames.map((e: any) => e.metadata)).toEqual([
        { from: 'final', to: null },
        { from: 'draft', to: 'final' },
      ]);
      expect(renames.every((e: any) => e.threadId === t.id && e.actorUserId === owner.userId)).toBe(true);
    });

    it('a PATCH with neither field is 400; one that changes nothing records nothing', async () => {
      const t = await createThread(owner, { title: 'same' });
      for (const body of [{}, { colour: 'red' }, { archived: 'yes' }]) {
        const res = await inject(owner, 'PATCH', `/v1/threads/${t.id}`, body);
        expect(res.statusCode, JSON.stringify(body)).toBe(400);
        expect(json(res).error.code).toBe('invalid_request');
      }
      expect(json(await inject(owner, 'PATCH', `/v1/threads/${t.id}`, { title: 'same', archived: false })).data).toEqual(t);
      expect(await activityTypes(owner, t.id)).toEqual([]);
    });
  });

  describe('durable events', () => {
    it('appended events are listed with top-level paging, sequences 1..n, and touch updatedAt', async () => {
      const t = await createThread(owner);
      await sleep(3);
      const appended = await appendDurable(h.deps, t.id, messages(5));
      expect(sequences(appended)).toEqual([1, 2, 3, 4, 5]);

      const body = await listEvents(owner, t.id);
      expect(Object.keys(body).sort()).toEqual(['data', 'hasMore', 'nextCursor']);
      expect(body).toMatchObject({ hasMore: false, nextCursor: null });
      expect(body.data.thread.id).toBe(t.id);
      expect(body.data.thread.updatedAt > t.updatedAt).toBe(true);
      expect(body.data.events).toEqual(appended);
      expect(body.data.events[0]).toEqual({
        sequence: 1,
        rolloutId: t.activeRolloutId,
        threadId: t.id,
        runId: 'run_test',
        type: 'user_message',
        payload: { text: 'message 1' },
        createdAt: expect.any(String),
      });
      // The thread moved to the top of the owner's list.
      expect(json(await inject(owner, 'GET', '/v1/threads?limit=1')).data[0].id).toBe(t.id);
    });

    it('pages events with limit 1..500 and an opaque cursor; out-of-range limits and bad cursors are 400', async () => {
      const t = await createThread(owner);
      await appendDurable(h.deps, t.id, messages(7));
      const seen: number[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const page = await listEvents(owner, t.id, `?limit=3${cursor ? `&cursor=${cursor}` : ''}`);
        seen.push(...sequences(page.data.events));
        expect(page.hasMore).toBe(page.nextCursor !== null);
        cursor = page.nextCursor;
        pages++;
      } while (cursor);
      expect(seen).toEqual(range(1, 7));
      expect(pages).toBe(3);

      expect(sequences((await listEvents(owner, t.id, '?limit=1')).data.events)).toEqual([1]);
      expect((await listEvents(owner, t.id, '?limit=500')).data.events).toHaveLength(7);
      const bad = [
        'limit=0',
        'limit=501',
        'cursor=not-a-cursor',
        `cursor=${Buffer.from('["x"]').toString('base64url')}`,
        `cursor=${Buffer.from('[1,2]').toString('base64url')}`,
      ];
      for (const q of bad) {
        const res = await inject(owner, 'GET', `/v1/threads/${t.id}/events?${q}`);
        expect(res.statusCode, q).toBe(400);
        expect(json(res).error.code).toBe('invalid_request');
      }
    });

    it('an Upgrade header on a plain HTTP request does not skip authentication', async () => {
      const t = await createThread(owner);
      await appendDurable(h.deps, t.id, messages(1));
      for (const headers of [{ upgrade: 'websocket' }, { upgrade: 'websocket', connection: 'keep-alive' }]) {
        const res = await h.app.inject({ method: 'GET', url: `/v1/threads/${t.id}/events?api_key=${owner.key}`, headers });
        expect(res.statusCode, JSON.stringify(headers)).toBe(401);
        expect(json(res).error.code).toBe('unauthenticated');
      }
      const res = await h.app.inject({ method: 'GET', url: `/v1/threads/${t.id}/events`, headers: { ...owner.headers, upgrade: 'websocket' } });
      expect(res.statusCode).toBe(200);
      expect(sequences(json(res).data.events)).toEqual([1]);
    });

    it('filters by rollout_id (unknown rollout 404) and include=all_rollouts spans every rollout', async () => {
      const t = await createThread(owner);
      await appendDurable(h.deps, t.id, messages(3));
      const compacted = json(await inject(owner, 'POST', `/v1/threads/${t.id}/compact`, {})).data;
      await appendDurable(h.deps, t.id, messages(2, 4));

      expect(sequences((await listEvents(owner, t.id)).data.events)).toEqual([5, 6, 7]);
      expect(sequences((await listEvents(owner, t.id, `?rollout_id=${t.activeRolloutId}`)).data.events)).toEqual([1, 2, 3, 4]);
      expect(sequences((await listEvents(owner, t.id, `?rollout_id=${compacted.rollout.id}`)).data.events)).toEqual([5, 6, 7]);
      expect(sequences((await listEvents(owner, t.id, '?include=all_rollouts')).data.events)).toEqual(range(1, 7));

      const other = await createThread(owner);
      for (const rollout of ['rol_unknown', other.activeRolloutId]) {
        const res = await inject(owner, 'GET', `/v1/threads/${t.id}/events?rollout_id=${rollout}`);
        expect(res.statusCode, String(rollout)).toBe(404);
        expect(json(res).error.code).toBe('not_found');
      }
    });

    it('keeps the JSONL in the blob store, one JSON line per event, equal to what the API lists', async () => {
      const t = await createThread(owner);
      await appendDurable(h.deps, t.id, messages(2));
      await appendDurable(h.deps, t.id, [
        { type: 'tool_call', runId: 'run_x', payload: { toolCallId: 'call_1', name: 'search', input: { q: 'line\nbreak' } } },
      ]);
      const text = readFileSync(jsonlPath(t), 'utf8');
      expect(text.endsWith('\n')).toBe(true);
      const lines = text.trimEnd().split('\n');
      expect(lines).toHaveLength(3);
      expect(lines.map((l) => JSON.parse(l))).toEqual((await listEvents(owner, t.id)).data.events);
    });

    it('refuses a frame type that is not durable', async () => {
      const t = await createThread(owner);
      await expect(appendDurable(h.deps, t.id, [{ type: 'assistant_message_delta', payload: {} } as never])).rejects.toThrow(
        /not a durable frame type/,
      );
      expect((await listEvents(owner, t.id)).data.events).toEqual([]);
    });
  });

  describe('compaction', () => {
    it('needs no body', async () => {
      const t = await createThread(owner);
      const res = await h.app.inject({ method: 'POST', url: `/v1/threads/${t.id}/compact`, headers: owner.headers });
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res).data.rollout).toMatchObject({ position: 1, kind: 'compaction', summaryMethod: 'extractive' });
    });

    it('closes the active rollout and opens a new one with an extractive summary', async () => {
      const t = await createThread(owner);
      await appendDurable(h.deps, t.id, [
        { type: 'user_message', payload: { text: 'Book a flight to Lisbon' } },
        { type: 'assistant_message', payload: { text: 'Which dates?' } },
        { type: 'tool_call', payload: { toolCallId: 'call_1', name: 'search', input: {} } },
        { type: 'user_message', payload: { text: 'The first week of May' } },
      ]);
      const res = await inject(owner, 'POST', `/v1/threads/${t.id}/compact`, { reason: 'long thread' });
      expect(res.statusCode, res.body).toBe(200);
      const { thread, rollout, events } = json(res).data;

      expect(events.map((e: ThreadEvent) => [e.sequence, e.type, e.rolloutId])).toEqual([
        [5, 'compaction_started', t.activeRolloutId],
        [6, 'compaction_completed', rollout.id],
      ]);
      expect(events[0].payload).toMatchObject({ fromRolloutId: t.activeRolloutId, reason: 'long thread' });
      expect(events[1].payload).toMatchObject({
        rolloutId: rollout.id,
        fromRolloutId: t.activeRolloutId,
        position: 1,
        summaryMethod: 'extractive',
        summary: rollout.summary,
      });
      expect(rollout.summary).toContain('Book a flight to Lisbon');
      expect(rollout.summary).toContain('The first week of May');
      expect(thread.activeRolloutId).toBe(rollout.id);
      expect(thread.activeRolloutId).not.toBe(t.activeRolloutId);
      expect((await getThread(owner, t.id)).activeRolloutId).toBe(rollout.id);

      const rollouts = json(await inject(owner, 'GET', `/v1/threads/${t.id}/rollouts`)).data;
      expect(rollouts).toMatchObject([
        {
          id: t.activeRolloutId,
          position: 0,
          kind: 'initial',
          status: 'closed',
          eventCount: 5,
          firstSequence: 1,
          lastSequence: 5,
          closedAt: expect.any(String),
        },
        {
          id: rollout.id,
          position: 1,
          kind: 'compaction',
          status: 'active',
          fromRolloutId: t.activeRolloutId,
          summaryMethod: 'extractive',
          summaryModel: null,
          eventCount: 1,
          firstSequence: 6,
          lastSequence: 6,
          closedAt: null,
        },
      ]);
      expect(rollouts[1].summary).toBe(rollout.summary);

      // Events default to the new rollout; new events continue the sequence there.
      expect((await listEvents(owner, t.id)).data.events.map((e) => e.type)).toEqual(['compaction_completed']);
      const [next] = await appendDurable(h.deps, t.id, messages(1));
      expect(next).toMatchObject({ sequence: 7, rolloutId: rollout.id });
      expect(await activityTypes(owner, t.id)).toEqual(['thread.compacted']);

      // A second compaction summarizes the new rollout, carrying the earlier summary forward.
      const again = json(await inject(owner, 'POST', `/v1/threads/${t.id}/compact`, {})).data;
      expect(again.rollout).toMatchObject({ position: 2, fromRolloutId: rollout.id });
      expect(again.rollout.summary).toContain('Lisbon');
      expect(json(await inject(owner, 'GET', `/v1/threads/${t.id}/rollouts`)).data.map((r: any) => r.status)).toEqual(['closed', 'closed', 'active']);
    });

    it('compactions requested at once run one at a time: each is done or THREAD_BUSY, and the rollouts form one chain', async () => {
      const t = await createThread(owner);
      await appendDurable(h.deps, t.id, messages(3));
      const responses = await Promise.all(
        Array.from({ length: 10 }, async (_, i) => {
          await sleep(i * 3);
          return inject(owner, 'POST', `/v1/threads/${t.id}/compact`, {});
        }),
      );
      const done = responses.filter((r) => r.statusCode === 200);
      for (const r of responses) if (r.statusCode !== 200) expect(json(r).error.code, r.body).toBe('THREAD_BUSY');
      expect(done.length).toBeGreaterThanOrEqual(1);

      const rollouts = json(await inject(owner, 'GET', `/v1/threads/${t.id}/rollouts`)).data;
      expect(rollouts).toHaveLength(done.length + 1);
      rollouts.forEach((r: any, i: number) => {
        expect(r.position).toBe(i);
        expect(r.status).toBe(i === done.length ? 'active' : 'closed');
        if (i > 0) expect(r.fromRolloutId).toBe(rollouts[i - 1].id);
      });
      expect((await getThread(owner, t.id)).activeRolloutId).toBe(rollouts.at(-1).id);
      const all = (await listEvents(owner, t.id, '?include=all_rollouts')).data.events;
      expect(sequences(all)).toEqual(range(1, 3 + 2 * done.length));
      expect(all.filter((e) => e.type === 'compaction_started')).toHaveLength(done.length);
    });

    it('is refused with 409 THREAD_BUSY naming the active run while a run holds the lock', async () => {
      const t = await createThread(owner);
      await appendDurable(h.deps, t.id, messages(2));
      expect(await acquireRunLock(h.deps, t.id, 'run_busy')).toEqual({ acquired: true });

      const res = await inject(owner, 'POST', `/v1/threads/${t.id}/compact`, {});
      expect(res.statusCode).toBe(409);
      expect(json(res).error).toMatchObject({ code: 'THREAD_BUSY', activeRunId: 'run_busy' });
      expect(json(res).error.message).toContain('run_busy');
      expect((await listEvents(owner, t.id, '?include=all_rollouts')).data.events).toHaveLength(2);
      expect((await getThread(owner, t.id)).activeRolloutId).toBe(t.activeRolloutId);

      await releaseRunLock(h.deps, t.id, 'run_busy');
      expect((await inject(owner, 'POST', `/v1/threads/${t.id}/compact`, {})).statusCode).toBe(200);
      // Compaction released its own lock.
      expect(await acquireRunLock(h.deps, t.id, 'run_after')).toEqual({ acquired: true });
    });
  });

  describe('delete', () => {
    it('answers 204; afterwards the thread is 404, its JSONL is gone and thread.deleted stays in the activity log', async () => {
      const t = await createThread(owner, { title: 'doomed' });
      await appendDurable(h.deps, t.id, messages(3));
      expect(existsSync(jsonlPath(t))).toBe(true);

      const res = await inject(owner, 'DELETE', `/v1/threads/${t.id}`);
      expect(res.statusCode).toBe(204);
      expect(res.body).toBe('');
      for (const url of [`/v1/threads/${t.id}`, `/v1/threads/${t.id}/events`, `/v1/threads/${t.id}/rollouts`]) {
        expect((await inject(owner, 'GET', url)).statusCode, url).toBe(404);
      }
      expect((await inject(owner, 'DELETE', `/v1/threads/${t.id}`)).statusCode).toBe(404);
      expect(existsSync(jsonlPath(t))).toBe(false);
      const activity = json(await inject(owner, 'GET', `/v1/activity?thread_id=${t.id}`)).data.events;
      expect(activity.map((e: any) => e.eventType)).toEqual(['thread.deleted']);
      expect(activity[0]).toMatchObject({ resourceType: 'thread', resourceId: t.id, actorUserId: owner.userId });
      await expectActivity(h, owner, { eventType: 'thread.deleted', resourceType: 'thread' });
      expect(json(await inject(owner, 'GET', '/v1/threads?archived=true')).data.map((x: Thread) => x.id)).not.toContain(t.id);
    });

    it('is refused with 409 THREAD_BUSY while a compaction holds the thread (a run is cancelled instead: runs.test.ts)', async () => {
      const t = await createThread(owner);
      await appendDurable(h.deps, t.id, messages(1));
      await acquireRunLock(h.deps, t.id, 'cmp_delete_busy');
      const res = await inject(owner, 'DELETE', `/v1/threads/${t.id}`);
      expect(res.statusCode).toBe(409);
      expect(json(res).error).toMatchObject({ code: 'THREAD_BUSY', activeRunId: 'cmp_delete_busy' });
      expect(existsSync(jsonlPath(t))).toBe(true);
      expect((await listEvents(owner, t.id)).data.events).toHaveLength(1);
      await releaseRunLock(h.deps, t.id, 'cmp_delete_busy');
      expect((await inject(owner, 'DELETE', `/v1/threads/${t.id}`)).statusCode).toBe(204);
    });
  });

  describe('run lock', () => {
    it('one run at a time: a second run is told the active one; release frees it; the same run may re-acquire', async () => {
      const t = await createThread(owner);
      expect(await acquireRunLock(h.deps, t.id, 'run_a')).toEqual({ acquired: true });
      expect(await acquireRunLock(h.deps, t.id, 'run_b')).toEqual({ acquired: false, activeRunId: 'run_a' });
      expect(await acquireRunLock(h.deps, t.id, 'run_a')).toEqual({ acquired: true });
      // Only the holder's release counts.
      await releaseRunLock(h.deps, t.id, 'run_b');
      expect(await acquireRunLock(h.deps, t.id, 'run_b')).toEqual({ acquired: false, activeRunId: 'run_a' });
      await releaseRunLock(h.deps, t.id, 'run_a');
      expect(await acquireRunLock(h.deps, t.id, 'run_b')).toEqual({ acquired: true });
    });

    it('an expired lock is taken over; renewing keeps it', async () => {
      const t = await createThread(owner);
      expect(await acquireRunLock(h.deps, t.id, 'run_crashed', 5)).toEqual({ acquired: true });
      await sleep(20);
      expect(await acquireRunLock(h.deps, t.id, 'run_next', 200)).toEqual({ acquired: true });
      expect(await renewRunLock(h.deps, t.id, 'run_crashed')).toBe(false);
      expect(await renewRunLock(h.deps, t.id, 'run_next', 60_000)).toBe(true);
      await sleep(300);
      expect(await acquireRunLock(h.deps, t.id, 'run_late')).toEqual({ acquired: false, activeRunId: 'run_next' });
      const res = await inject(owner, 'POST', `/v1/threads/${t.id}/compact`, {});
      expect(json(res).error.activeRunId).toBe('run_next');
    });
  });

  describe('crash recovery', () => {
    async function crashAfterJsonl(t: Thread, sequence: number) {
      const line = JSON.stringify({
        sequence,
        rolloutId: t.activeRolloutId,
        threadId: t.id,
        runId: 'run_crash',
        type: 'assistant_message',
        payload: { text: 'written before the crash' },
        createdAt: new Date().toISOString(),
      });
      const torn = JSON.stringify({
        sequence: sequence + 1,
        rolloutId: t.activeRolloutId,
        threadId: t.id,
        runId: 'run_crash',
        type: 'assistant_message',
        payload: { text: 'torn' },
      });
      await h.deps.blobs.append(`threads/${t.orgId}/${t.id}.jsonl`, `${line}\n${torn.slice(0, torn.length / 2)}`);
    }

    it('the next append projects the lines a crashed writer left and continues the sequence after them', async () => {
      const t = await createThread(owner);
      await appendDurable(h.deps, t.id, messages(3));
      await crashAfterJsonl(t, 4);
      // The projection does not know the line yet.
      expect(sequences((await listEvents(owner, t.id)).data.events)).toEqual([1, 2, 3]);

      const [next] = await appendDurable(h.deps, t.id, messages(1, 5));
      expect(next!.sequence).toBe(5);
      const events = (await listEvents(owner, t.id)).data.events;
      expect(sequences(events)).toEqual([1, 2, 3, 4, 5]);
      expect(events[3]).toMatchObject({ runId: 'run_crash', payload: { text: 'written before the crash' } });
      expect(events[4]!.payload).toEqual({ text: 'message 5' });

      // The torn line stays as one unparsable line; every sequence is in the JSONL exactly once.
      const lines = readFileSync(jsonlPath(t), 'utf8').trimEnd().split('\n');
      const parsed = lines.flatMap((l) => {
        try {
          return [JSON.parse(l).sequence as number];
        } catch {
          return [];
        }
      });
      expect(parsed).toEqual([1, 2, 3, 4, 5]);
      expect(lines).toHaveLength(6);
      // A rebuild from this JSONL skips the torn line in the middle and yields the same projection.
      expect(await rebuildThread(h.deps, t.id)).toEqual({ events: 5, lastSequence: 5 });
      expect((await listEvents(owner, t.id)).data.events).toEqual(events);
    });

    it('repairAll (start-up) catches the projection up without a write', async () => {
      const t = await createThread(owner);
      await appendDurable(h.deps, t.id, messages(2));
      await crashAfterJsonl(t, 3);
      expect(await repairAll(h.deps)).toBeGreaterThanOrEqual(1);
      expect(sequences((await listEvents(owner, t.id)).data.events)).toEqual([1, 2, 3]);
      expect(await repairAll(h.deps)).toBe(0);
      expect(sequences(await appendDurable(h.deps, t.id, messages(1)))).toEqual([4]);
      expect(sequences((await listEvents(owner, t.id)).data.events)).toEqual([1, 2, 3, 4]);
    });

    it('a writer stopped after its JSONL append, before the projection committed, loses nothing', async () => {
      const t = await createThread(owner);
      await appendDurable(h.deps, t.id, messages(3));
      const stopped = appendDurable(h.deps, t.id, messages(1, 4), {
        extra: async () => {
          throw new Error('stopped before commit');
        },
      });
      await expect(stopped).rejects.toThrow('stopped before commit');
      expect(sequences((await listEvents(owner, t.id)).data.events)).toEqual([1, 2, 3]);
      expect(sequences(await appendDurable(h.deps, t.id, messages(1, 5)))).toEqual([5]);
      const events = (await listEvents(owner, t.id)).data.events;
      expect(sequences(events)).toEqual([1, 2, 3, 4, 5]);
      expect(events.map((e) => (e.payload as { text: string }).text)).toEqual(['message 1', 'message 2', 'message 3', 'message 4', 'message 5']);
    });

    it('appends to many threads at once each keep their thread’s order, in the JSONL and the projection', async () => {
      const threads = await Promise.all(Array.from({ length: 40 }, () => createThread(owner)));
      await Promise.all(threads.flatMap((t) => [1, 2, 3, 4, 5].map((i) => appendDurable(h.deps, t.id, messages(1, i)))));
      for (const t of threads) {
        const events = (await listEvents(owner, t.id)).data.events;
        expect(sequences(events)).toEqual([1, 2, 3, 4, 5]);
        const lines = readFileSync(jsonlPath(t), 'utf8').trimEnd().split('\n');
        expect(lines.map((l) => JSON.parse(l).sequence)).toEqual([1, 2, 3, 4, 5]);
        const row = await h.deps.db.kysely
          .selectFrom('threads')
          .select(['last_sequence', 'jsonl_bytes'])
          .where('id', '=', t.id)
          .executeTakeFirstOrThrow();
        expect(row).toEqual({ last_sequence: 5, jsonl_bytes: readFileSync(jsonlPath(t)).length });
      }
    });

    it.runIf(!testDatabaseUrl)(
      'SQLite: a rebuild by another process between the append and the projection makes the writer project from the JSONL',
      async () => {
        const t = await createThread(owner);
        await appendDurable(h.deps, t.id, messages(3));
        const file = jsonlPath(t);
        const blobs = h.deps.blobs;
        const append = blobs.append.bind(blobs);
        // Between this writer's read of the row and its append, another process closes a torn tail and records
        // the JSONL's new size, as `hangar threads rebuild` does.
        blobs.append = async (key, data) => {
          blobs.append = append;
          await append(key, '{"torn":\n');
          await h.deps.db.kysely
            .updateTable('threads')
            .set({ jsonl_bytes: readFileSync(file).length })
            .where('id', '=', t.id)
            .execute();
          return append(key, data);
        };
        try {
          expect(sequences(await appendDurable(h.deps, t.id, messages(1, 4)))).toEqual([4]);
        } finally {
          blobs.append = append;
        }
        expect(sequences((await listEvents(owner, t.id)).data.events)).toEqual([1, 2, 3, 4]);
        const row = await h.deps.db.kysely
          .selectFrom('threads')
          .select(['last_sequence', 'jsonl_bytes'])
          .where('id', '=', t.id)
          .executeTakeFirstOrThrow();
        expect(row).toEqual({ last_sequence: 4, jsonl_bytes: readFileSync(file).length });
        expect(sequences(await appendDurable(h.deps, t.id, messages(1, 5)))).toEqual([5]);
      },
    );

    it('rebuildThread rebuilds a projection whose rows were deleted, rollouts included', async () => {
      const t = await createThread(owner);
      await appendDurable(h.deps, t.id, messages(3));
      const compacted = json(await inject(owner, 'POST', `/v1/threads/${t.id}/compact`, {})).data;
      await appendDurable(h.deps, t.id, messages(2, 4));
      const before = (await listEvents(owner, t.id, '?include=all_rollouts')).data.events;
      const rolloutsBefore = json(await inject(owner, 'GET', `/v1/threads/${t.id}/rollouts`)).data;
      expect(before).toHaveLength(7);

      await h.deps.db.kysely.deleteFrom('thread_events').where('thread_id', '=', t.id).execute();
      await h.deps.db.kysely.deleteFrom('thread_rollouts').where('id', '=', compacted.rollout.id).execute();
      expect((await listEvents(owner, t.id, '?include=all_rollouts')).data.events).toEqual([]);

      expect(await rebuildThread(h.deps, t.id)).toEqual({ events: 7, lastSequence: 7 });
      expect((await listEvents(owner, t.id, '?include=all_rollouts')).data.events).toEqual(before);
      expect(sequences((await listEvents(owner, t.id)).data.events)).toEqual([5, 6, 7]);
      const rolloutsAfter = json(await inject(owner, 'GET', `/v1/threads/${t.id}/rollouts`)).data;
      expect(rolloutsAfter.map((r: any) => [r.id, r.status, r.summary, r.eventCount])).toEqual(
        rolloutsBefore.map((r: any) => [r.id, r.status, r.summary, r.eventCount]),
      );
      expect(sequences(await appendDurable(h.deps, t.id, messages(1)))).toEqual([8]);
    });
  });

  describe('POST /v1/thread-events', () => {
    let t: Thread;
    const frame = (extra: Record<string, unknown> = {}) => ({
      type: 'assistant_message_delta',
      runId: 'run_live',
      rolloutId: t.activeRolloutId,
      messageId: 'msg_1',
      sequenceNumber: 1,
      delta: 'Hel',
      ...extra,
    });
    const post = (body: unknown, headers: Record<string, string> = {}) =>
      h.app.inject({ method: 'POST', url: '/v1/thread-events', headers: { ...owner.headers, ...headers }, payload: body as object });

    beforeAll(async () => {
      t = await createThread(owner);
      await appendDurable(h.deps, t.id, messages(1));
      t = await getThread(owner, t.id);
    });

    it('accepts a transient frame with 202 and stores nothing: no event, no timestamp change', async () => {
      for (const type of [
        'assistant_message_delta',
        'assistant_thinking_delta',
        'assistant_message_source',
        'tool_call_started',
        'tool_output_delta',
        'tool_call_completed',
      ]) {
        const res = await post({ threadId: t.id, frame: frame({ type }) });
        expect(res.statusCode, `${type}: ${res.body}`).toBe(202);
        expect(json(res).data).toEqual({ accepted: true });
      }
      expect(await getThread(owner, t.id)).toEqual(t);
      expect(sequences((await listEvents(owner, t.id, '?include=all_rollouts')).data.events)).toEqual([1]);
      expect(readFileSync(jsonlPath(t), 'utf8').trimEnd().split('\n')).toHaveLength(1);
    });

    it('a durable frame type from a person’s credential is 400 naming frame.type (only a local-device run’s device publishes those)', async () => {
      const res = await post({ threadId: t.id, frame: frame({ type: 'assistant_message', payload: { text: 'forged' } }) });
      expect(res.statusCode).toBe(400);
      const error = json(res).error;
      expect(error.code).toBe('invalid_request');
      expect(JSON.stringify(error)).toContain('frame.type');
    });

    it('a frame without runId, rolloutId or sequenceNumber, or with sequenceNumber 0, is 400 naming the field', async () => {
      for (const field of ['runId', 'rolloutId', 'sequenceNumber']) {
        const f: Record<string, unknown> = frame();
        delete f[field];
        const res = await post({ threadId: t.id, frame: f });
        expect(res.statusCode, field).toBe(400);
        expect(JSON.stringify(json(res).error), field).toContain(`frame.${field}`);
      }
      for (const sequenceNumber of [0, -1, 1.5, '1']) {
        const res = await post({ threadId: t.id, frame: frame({ sequenceNumber }) });
        expect(res.statusCode, String(sequenceNumber)).toBe(400);
        expect(JSON.stringify(json(res).error)).toContain('frame.sequenceNumber');
      }
    });

    it('a rolloutId of another thread is 400', async () => {
      const other = await createThread(owner);
      const res = await post({ threadId: t.id, frame: frame({ rolloutId: other.activeRolloutId }) });
      expect(res.statusCode).toBe(400);
      expect(json(res).error.message).toContain('frame.rolloutId');
    });

    it('a frame nested 10,000 levels deep (or deeper than 64) is 400 naming frame, and the thread keeps streaming', async () => {
      // Built as text: the client's own JSON.stringify cannot serialise it either.
      const deep = `${'{"a":'.repeat(10_000)}"x"${'}'.repeat(10_000)}`;
      const body = JSON.stringify({ threadId: t.id, frame: frame({ extra: '@DEEP@' }) }).replace('"@DEEP@"', deep);
      const res = await h.app.inject({
        method: 'POST',
        url: '/v1/thread-events',
        headers: { ...owner.headers, 'content-type': 'application/json' },
        payload: body,
      });
      expect(res.statusCode, res.body.slice(0, 300)).toBe(400);
      expect(json(res).error.code).toBe('invalid_request');
      expect(json(res).error.issues?.map((i: { path: string }) => i.path.replace(/^body\./, ''))).toContain('frame');
      let array: unknown = [];
      for (let i = 0; i < 70; i++) array = [array];
      const over = await post({ threadId: t.id, frame: frame({ extra: array }) });
      expect(over.statusCode).toBe(400);
      expect(json(over).error.message).toMatch(/frame.*deep/);
      // A frame with ordinary nesting still goes through.
      expect(
        (await post({ threadId: t.id, frame: frame({ extra: { source: { url: 'https://example.test', meta: [1, { a: 2 }] } } }) })).statusCode,
      ).toBe(202);
    });

    it('a body over 64 KiB is 413', async () => {
      const res = await post({ threadId: t.id, frame: frame({ delta: 'x'.repeat(64 * 1024) }) });
      expect(res.statusCode).toBe(413);
      expect(json(res).error.code).toBe('payload_too_large');
      expect((await post({ threadId: t.id, frame: frame({ delta: 'x'.repeat(60 * 1024) }) })).statusCode).toBe(202);
    });

    it('a request carrying an internal replica header is 403', async () => {
      for (const header of ['X-Hangar-Internal-Replica', 'x-hangar-internal-signature']) {
        const res = await post({ threadId: t.id, frame: frame() }, { [header]: 'x' });
        expect(res.statusCode, header).toBe(403);
        expect(json(res).error.code).toBe('forbidden');
        expect(json(res).error.message).toContain(header.toLowerCase());
      }
      // Refused before the body is even looked at.
      const bad = await post({ threadId: t.id, frame: { type: 'user_message' } }, { 'X-Hangar-Internal-Replica': 'x' });
      expect(bad.statusCode).toBe(403);
    });

    it('an unknown thread, or another organization’s or member’s, is 404', async () => {
      expect((await post({ threadId: 'thr_nope', frame: frame() })).statusCode).toBe(404);
      const stranger = await createOrgAdmin(h);
      const member = await addOrgMember(h, owner);
      for (const actor of [stranger, member]) {
        const res = await post({ threadId: t.id, frame: frame() }, actor.headers);
        expect(res.statusCode).toBe(404);
        expect(json(res).error.code).toBe('not_found');
      }
    });
  });
});

describe('two Hangar instances on one PostgreSQL schema', () => {
  const schema = `t_${randomBytes(6).toString('hex')}`;
  let dir: string;
  let a: Harness;
  let b: Harness;
  let owner: Actor;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'hangar-replicas-'));
    const env = { DATABASE_URL: withSchema(PG_URL, schema), REDIS_URL: 'redis://127.0.0.1:6379', HANGAR_DATA_DIR: dir };
    a = await createHarness({ ...env, HANGAR_NODE_ID: 'replica-a' });
    b = await createHarness({ ...env, HANGAR_NODE_ID: 'replica-b' });
    owner = await createOrgAdmin(a);
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await dropSchema(schema);
    rmSync(dir, { recursive: true, force: true });
  });

  const newThread = async () => json(await a.app.inject({ method: 'POST', url: '/v1/threads', headers: owner.headers, payload: {} })).data as Thread;

  it('of 20 concurrent acquires of a run lock, split over both, exactly one wins and the others name it', async () => {
    for (let round = 0; round < 3; round++) {
      const t = await newThread();
      const results = await Promise.all(Array.from({ length: 20 }, (_, i) => acquireRunLock(i % 2 ? a.deps : b.deps, t.id, `run_${round}_${i}`)));
      const winners = results.map((r, i) => (r.acquired ? `run_${round}_${i}` : null)).filter((x) => x !== null);
      expect(winners).toHaveLength(1);
      for (const r of results) if (!r.acquired) expect(r.activeRunId).toBe(winners[0]);
      // Either instance sees the same holder.
      const res = await b.app.inject({ method: 'POST', url: `/v1/threads/${t.id}/compact`, headers: owner.headers, payload: {} });
      expect(res.statusCode).toBe(409);
      expect(json(res).error.activeRunId).toBe(winners[0]);
    }
  });

  it('a thread delete holds the run lock until it commits: a run starting meanwhile waits, and its lock is not removed', async () => {
    const t = await newThread();
    await appendDurable(a.deps, t.id, messages(1));
    // Another session holds the thread's event rows, so the delete stops part-way through its transaction.
    const blocker = new pg.Client({ connectionString: PG_URL });
    await blocker.connect();
    try {
      await blocker.query(`SET search_path = "${schema}"`);
      await blocker.query('BEGIN');
      await blocker.query('SELECT 1 FROM thread_events WHERE thread_id = $1 FOR UPDATE', [t.id]);
      const deleted = a.app.inject({ method: 'DELETE', url: `/v1/threads/${t.id}`, headers: owner.headers });
      await sleep(500);
      let settled = false;
      const lock = acquireRunLock(b.deps, t.id, 'run_during_delete').finally(() => {
        settled = true;
      });
      await sleep(500);
      // The run is still waiting: the delete has the lock (a check-then-delete would have let it through).
      expect(settled).toBe(false);
      await blocker.query('ROLLBACK');
      expect((await deleted).statusCode).toBe(204);
      expect(await lock).toEqual({ acquired: true });
      expect(await activeRun(a.deps, t.id)).toBe('run_during_delete');
      expect((await a.app.inject({ method: 'GET', url: `/v1/threads/${t.id}`, headers: owner.headers })).statusCode).toBe(404);
      await releaseRunLock(a.deps, t.id, 'run_during_delete');
    } finally {
      await blocker.end();
    }
  });

  it('appends through both instances at once share one gap-free sequence, in the projection and the JSONL', async () => {
    const t = await newThread();
    await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        appendDurable(i % 2 ? a.deps : b.deps, t.id, [
          { type: 'user_message', payload: { text: `m${i}` } },
          { type: 'assistant_message', payload: { text: `r${i}` } },
        ]),
      ),
    );
    const events = json(await b.app.inject({ method: 'GET', url: `/v1/threads/${t.id}/events?limit=500`, headers: owner.headers })).data
      .events as ThreadEvent[];
    expect(events.map((e) => e.sequence)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
    // Each call's two frames are adjacent: one writer at a time.
    for (let i = 0; i < 60; i += 2) expect(events[i]!.payload.text.slice(1)).toBe(events[i + 1]!.payload.text.slice(1));
    const lines = readFileSync(path.join(dir, 'blobs', 'threads', t.orgId, `${t.id}.jsonl`), 'utf8')
      .trimEnd()
      .split('\n');
    expect(lines.map((l) => JSON.parse(l))).toEqual(events);
  });
});

describe('hangar threads rebuild', () => {
  const schema = `cli_${randomBytes(5).toString('hex')}`;
  let dir: string;
  let h: Harness;
  let owner: Actor;
  const cliEnv = () => {
    const env: Record<string, string> = { ...(process.env as Record<string, string>), HANGAR_DATA_DIR: dir, LOG_LEVEL: 'silent' };
    for (const k of ['DATABASE_URL', 'REDIS_URL', 'HANGAR_SECRET_KEY']) delete env[k];
    if (testDatabaseUrl) env.DATABASE_URL = withSchema(testDatabaseUrl, schema);
    return env;
  };
  const cli = (args: string[]) => promisify(execFile)(process.execPath, [BIN, ...args], { env: cliEnv(), timeout: 30_000 });

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'hangar-rebuild-'));
    h = await createHarness({ HANGAR_DATA_DIR: dir, DATABASE_URL: testDatabaseUrl ? withSchema(testDatabaseUrl, schema) : undefined });
    owner = await createOrgAdmin(h);
  });
  afterAll(async () => {
    await h?.close();
    if (testDatabaseUrl) await dropSchema(schema);
    rmSync(dir, { recursive: true, force: true });
  });

  const events = async (id: string) =>
    json(await h.app.inject({ method: 'GET', url: `/v1/threads/${id}/events?include=all_rollouts`, headers: owner.headers })).data
      .events as ThreadEvent[];

  it('rebuilds every thread’s projection from its JSONL and prints the counts as JSON', async () => {
    const create = async () => json(await h.app.inject({ method: 'POST', url: '/v1/threads', headers: owner.headers, payload: {} })).data as Thread;
    const lost = await create();
    const intact = await create();
    const empty = await create();
    await appendDurable(h.deps, lost.id, messages(4));
    await appendDurable(h.deps, intact.id, messages(2));
    const before = await events(lost.id);
    await h.deps.db.kysely.deleteFrom('thread_events').where('thread_id', '=', lost.id).execute();
    expect(await events(lost.id)).toEqual([]);

    const { stdout } = await cli(['threads', 'rebuild', '--json']);
    const results = JSON.parse(stdout) as Array<{ threadId: string }>;
    const byId = (a: { threadId: string }, b: { threadId: string }) => a.threadId.localeCompare(b.threadId);
    expect(results.sort(byId)).toEqual(
      [
        { threadId: lost.id, events: 4, lastSequence: 4 },
        { threadId: intact.id, events: 2, lastSequence: 2 },
        { threadId: empty.id, events: 0, lastSequence: 0 },
      ].sort(byId),
    );
    expect(await events(lost.id)).toEqual(before);
    expect(sequences(await events(intact.id))).toEqual([1, 2]);
    expect(sequences(await appendDurable(h.deps, lost.id, messages(1)))).toEqual([5]);

    const one = JSON.parse((await cli(['threads', 'rebuild', '--thread', intact.id, '--json'])).stdout);
    expect(one).toEqual([{ threadId: intact.id, events: 2, lastSequence: 2 }]);
    const missing = await cli(['threads', 'rebuild', '--thread', 'thr_nope']).catch((err) => err);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/thread thr_nope was not found/);
  });
});

securitySuite('threads', [
  { method: 'POST', url: () => '/v1/threads', scope: 'agent:run', body: {} },
  { method: 'GET', url: () => '/v1/threads', scope: 'agent:read' },
  { method: 'GET', url: async (o, h) => `/v1/threads/${await ownedThread(o, h)}`, scope: 'agent:read', crossOrg: true },
  { method: 'PATCH', url: async (o, h) => `/v1/threads/${await ownedThread(o, h)}`, scope: 'agent:run', body: { title: 'x' }, crossOrg: true },
  { method: 'DELETE', url: async (o, h) => `/v1/threads/${await ownedThread(o, h)}`, scope: 'agent:run', crossOrg: true },
  { method: 'GET', url: async (o, h) => `/v1/threads/${await ownedThread(o, h)}/events`, scope: 'agent:read', crossOrg: true },
  { method: 'GET', url: async (o, h) => `/v1/threads/${await ownedThread(o, h)}/rollouts`, scope: 'agent:read', crossOrg: true },
  { method: 'POST', url: async (o, h) => `/v1/threads/${await ownedThread(o, h)}/compact`, scope: 'agent:run', body: {}, crossOrg: true },
  { method: 'GET', url: async (o, h) => `/v1/threads/${await ownedThread(o, h)}/activity`, scope: 'activity:read', crossOrg: true },
  {
    method: 'POST',
    url: () => '/v1/thread-events',
    scope: 'agent:run',
    body: { threadId: 'thr_x', frame: { type: 'assistant_message_delta', runId: 'run_x', rolloutId: 'rol_x', sequenceNumber: 1 } },
  },
]);

/** A fresh thread of `owner` (a new one each call, so a DELETE case always has one to delete). */
async function ownedThread(owner: Actor, h: Harness): Promise<string> {
  const res = await h.app.inject({ method: 'POST', url: '/v1/threads', headers: owner.headers, payload: {} });
  return json(res).data.id;
}
