import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, testDatabaseUrl, type Actor, type Harness } from '../../../test/harness.js';
import { ALL_SCOPES } from '../../platform/scopes.js';
import { issueSessionToken } from '../identity/index.js';
import { threadChannel } from './frames.js';
import { acquireRunLock, appendDurable, releaseRunLock, type DurableInput } from './index.js';
import { until } from '../../../test/helpers.js';

/** Conditions here are cheap and the writers fast: ask often, so clients connect where the test means them to. */
const POLL = 5;

const PG_URL = testDatabaseUrl ?? 'postgres://postgres@127.0.0.1:5432/test';

interface Frame {
  type: string;
  sequence?: number;
  [k: string]: any;
}

/** A real WebSocket client that records every frame (or what `keep` keeps of it) and how it closed. */
class Client {
  readonly frames: Frame[] = [];
  close: { code: number; reason: string } | null = null;
  private changed: () => void = () => undefined;

  constructor(
    readonly ws: WebSocket,
    keep: (f: Frame) => Frame = (f) => f,
  ) {
    ws.on('message', (data) => {
      this.frames.push(keep(JSON.parse(data.toString())));
      this.changed();
    });
    ws.on('close', (code, reason) => {
      this.close = { code, reason: reason.toString() };
      this.changed();
    });
    ws.on('error', () => undefined);
  }

  get snapshot(): Frame {
    expect(this.frames[0]?.type).toBe('snapshot');
    return this.frames[0]!;
  }

  /** Durable frames: those carrying `sequence` (snapshots carry `lastSequence`, transient frames `sequenceNumber`). */
  durable(): Frame[] {
    return this.frames.filter((f) => typeof f.sequence === 'number');
  }

  lastSequence(): number {
    return this.durable().at(-1)?.sequence ?? 0;
  }

  /** Resolves as soon as a frame or the close makes `cond` true (no polling). */
  async waitFor(cond: () => boolean, label: string, ms = 20_000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!cond()) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for ${label} (${this.frames.length} frames, close ${JSON.stringify(this.close)})`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.changed = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  }
}

const range = (from: number, to: number) => Array.from({ length: Math.max(0, to - from + 1) }, (_, i) => from + i);
const messages = (n: number, tag = 'm'): DurableInput[] =>
  Array.from(
    { length: n },
    (_, i) => ({ type: i % 2 ? 'assistant_message' : 'user_message', runId: 'run_live', payload: { text: `${tag} ${i}` } }) as DurableInput,
  );

/** A running app with real sockets; every client it opens is closed in `closeAll`. */
function liveServer(h: () => Harness) {
  const clients: Client[] = [];
  let base = '';
  return {
    async listen() {
      await h().app.listen({ port: 0, host: '127.0.0.1' });
      const address = h().app.server.address();
      base = `ws://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
    },
    /** Connects and waits for the first frame or the close. */
    async connect(threadId: string, query: Record<string, string | number>, keep?: (f: Frame) => Frame): Promise<Client> {
      const qs = new URLSearchParams(Object.entries(query).map(([k, v]) => [k, String(v)]));
      const client = new Client(new WebSocket(`${base}/v1/threads/${threadId}/events?${qs}`), keep);
      clients.push(client);
      await until(`the first frame on ${threadId}`, () => client.frames.length > 0 || client.close !== null, { timeoutMs: 20_000, intervalMs: POLL });
      return client;
    },
    closeAll() {
      for (const c of clients) c.ws.terminate();
    },
  };
}

async function createThread(h: Harness, actor: Actor, body: Record<string, unknown> = {}) {
  const res = await h.app.inject({ method: 'POST', url: '/v1/threads', headers: actor.headers, payload: body });
  expect(res.statusCode, res.body).toBe(201);
  return json(res).data as { id: string; orgId: string; activeRolloutId: string; title: string | null; updatedAt: string };
}

const postFrame = (h: Harness, actor: Actor, threadId: string, frame: Record<string, unknown>) =>
  h.app.inject({ method: 'POST', url: '/v1/thread-events', headers: actor.headers, payload: { threadId, frame } });

describe('thread WebSocket', () => {
  let h: Harness;
  let owner: Actor;
  const server = liveServer(() => h);

  beforeAll(async () => {
    h = await createHarness();
    owner = await createOrgAdmin(h);
    await server.listen();
  });
  afterAll(async () => {
    server.closeAll();
    await h?.close();
  });

  const transient = (rolloutId: string, extra: Record<string, unknown> = {}) => ({
    type: 'assistant_message_delta',
    runId: 'run_live',
    rolloutId,
    messageId: 'msg_1',
    sequenceNumber: 1,
    delta: 'Hel',
    ...extra,
  });

  describe('snapshot', () => {
    it('the first frame is a protocol_version 1 snapshot with the thread, lastSequence and the active rollout’s latest events', async () => {
      const t = await createThread(h, owner, { title: 'live' });
      await appendDurable(h.deps, t.id, messages(105));
      const thread = json(await h.app.inject({ method: 'GET', url: `/v1/threads/${t.id}`, headers: owner.headers })).data;

      const c = await server.connect(t.id, { api_key: owner.key });
      expect(c.snapshot).toMatchObject({ type: 'snapshot', protocol_version: 1, view: 'owner', thread, lastSequence: 105, activeRunId: null });
      expect(c.snapshot.events.map((e: Frame) => e.sequence)).toEqual(range(6, 105));
      const stored = json(await h.app.inject({ method: 'GET', url: `/v1/threads/${t.id}/events?limit=500`, headers: owner.headers })).data.events;
      expect(c.snapshot.events).toEqual(stored.slice(5));
      expect(c.frames).toHaveLength(1);

      // After a compaction only the new rollout's events are in a snapshot; an active run is named.
      expect((await h.app.inject({ method: 'POST', url: `/v1/threads/${t.id}/compact`, headers: owner.headers, payload: {} })).statusCode).toBe(200);
      await acquireRunLock(h.deps, t.id, 'run_active');
      const after = await server.connect(t.id, { api_key: owner.key });
      expect(after.snapshot.lastSequence).toBe(107);
      expect(after.snapshot.activeRunId).toBe('run_active');
      expect(after.snapshot.events.map((e: Frame) => [e.sequence, e.type])).toEqual([[107, 'compaction_completed']]);
      await releaseRunLock(h.deps, t.id, 'run_active');
    });

    it('a session token works as well as an API key', async () => {
      const t = await createThread(h, owner);
      await appendDurable(h.deps, t.id, messages(2));
      const c = await server.connect(t.id, { token: owner.token });
      expect(c.snapshot).toMatchObject({ protocol_version: 1, view: 'owner', lastSequence: 2 });
      await appendDurable(h.deps, t.id, messages(1));
      await until('the live frame', () => c.lastSequence() === 3, { timeoutMs: 20_000, intervalMs: POLL });
      expect(c.close).toBeNull();
    });
  });

  describe('reconnect', () => {
    it('replays exactly the durable frames after last_sequence, then live ones, while 200 frames are being appended', async () => {
      const t = await createThread(h, owner);
      let appended = 0;
      const writer = (async () => {
        while (appended < 200) {
          const n = Math.min(1 + (appended % 3), 200 - appended);
          await appendDurable(h.deps, t.id, messages(n, `w${appended}`));
          appended += n;
        }
      })();
      const resumed: Array<{ client: Client; from: number }> = [];
      // Every 10 frames, one more client resumes: a little behind, exactly at the head (nothing to replay),
      // from the very start, or a few behind; each while the writer keeps appending.
      const choices = [(n: number) => Math.max(0, n - 25), (n: number) => n, () => 0, (n: number) => Math.max(0, n - 3)];
      for (let at = 10, k = 0; at < 200; at += 10, k++) {
        await until(`${at} frames appended`, () => appended >= at, { timeoutMs: 20_000, intervalMs: POLL });
        const last = choices[k % choices.length]!(appended);
        resumed.push({ client: await server.connect(t.id, { api_key: owner.key, last_sequence: last }), from: last });
      }
      await writer;
      // A client that resumed exactly at the head after the writer had finished has nothing to receive: its
      // snapshot's lastSequence is where it stands.
      const seen = (client: Client, from: number) => client.lastSequence() || (client.snapshot.lastSequence === from ? from : 0);
      for (const { client, from } of resumed)
        await until(`the last frame (resumed from ${from})`, () => seen(client, from) === 200, {
          timeoutMs: 20_000,
          intervalMs: POLL,
          detail: () => seen(client, from),
        });

      const stored = json(await h.app.inject({ method: 'GET', url: `/v1/threads/${t.id}/events?limit=500`, headers: owner.headers })).data.events;
      for (const { client, from } of resumed) {
        expect(client.frames[0]!.type).toBe('snapshot');
        expect(client.snapshot.events).toBeUndefined();
        expect(client.snapshot.lastSequence).toBeGreaterThanOrEqual(from);
        // Nothing but durable frames after the snapshot, each exactly once, strictly by one, ending at 200.
        expect(client.frames.slice(1).every((f) => typeof f.sequence === 'number')).toBe(true);
        expect(client.durable().map((f) => f.sequence)).toEqual(range(from + 1, 200));
        expect(client.durable()).toEqual(stored.slice(from));
      }
    });

    it('a malformed frame on the bus (another replica’s older format, a wrong field, not JSON) is dropped with a log line; the hub keeps going', async () => {
      const t = await createThread(h, owner);
      const c = await server.connect(t.id, { api_key: owner.key });
      const warn = vi.spyOn(h.deps.log, 'warn');
      try {
        const valid = { ...transient(t.activeRolloutId, { delta: 'ok' }), threadId: t.id };
        const malformed: unknown[] = [
          { kind: 'transient', frame: valid }, // the envelope replicas published before the catalogue
          { ...valid, runId: 7 },
          { ...valid, type: 'assistant_message_typo' },
          { type: 'user_message', threadId: t.id, rolloutId: t.activeRolloutId, runId: null, payload: { text: 'no sequence' }, createdAt: 'x' },
          'not json at all',
        ];
        for (const m of malformed) await h.deps.bus.publish(threadChannel(t.id), m);
        await h.deps.bus.publish(threadChannel(t.id), valid);
        await appendDurable(h.deps, t.id, messages(1));
        await until('the durable frame after the malformed ones', () => c.lastSequence() === 1, { intervalMs: POLL });

        expect(c.frames.map((f) => f.type)).toEqual(['snapshot', 'assistant_message_delta', 'user_message']);
        expect(c.frames[1]).toEqual(valid);
        const dropped = warn.mock.calls.filter(([, msg]) => msg === 'dropped a malformed thread frame from the bus');
        expect(dropped).toHaveLength(malformed.length);
        expect(dropped[0]![0]).toMatchObject({ threadId: t.id });
      } finally {
        warn.mockRestore();
      }
    });

    it('transient frames arrive live in order with durable ones and are never replayed', async () => {
      const t = await createThread(h, owner);
      const c = await server.connect(t.id, { api_key: owner.key });
      await appendDurable(h.deps, t.id, messages(1));
      const posted = await postFrame(h, owner, t.id, transient(t.activeRolloutId, { delta: 'Hello', sequenceNumber: 1, extra: { kept: true } }));
      expect(posted.statusCode, posted.body).toBe(202);
      await appendDurable(h.deps, t.id, messages(1));
      await until('the second durable frame', () => c.lastSequence() === 2, { timeoutMs: 20_000, intervalMs: POLL });

      expect(c.frames.slice(1).map((f) => f.type)).toEqual(['user_message', 'assistant_message_delta', 'user_message']);
      expect(c.frames[2]).toEqual({
        type: 'assistant_message_delta',
        threadId: t.id,
        runId: 'run_live',
        rolloutId: t.activeRolloutId,
        messageId: 'msg_1',
        sequenceNumber: 1,
        delta: 'Hello',
        extra: { kept: true },
      });

      c.ws.close();
      const again = await server.connect(t.id, { api_key: owner.key, last_sequence: 0 });
      await appendDurable(h.deps, t.id, messages(1, 'after'));
      await until('the live frame after the replay', () => again.lastSequence() === 3, { timeoutMs: 20_000, intervalMs: POLL });
      expect(again.frames.map((f) => f.type)).toEqual(['snapshot', 'user_message', 'user_message', 'user_message']);
      expect(again.durable().map((f) => f.sequence)).toEqual([1, 2, 3]);
    });

    it('a client too far behind to replay gets a fresh snapshot with resync: true, then live frames', async () => {
      const t = await createThread(h, owner);
      for (let i = 0; i < 11; i++) await appendDurable(h.deps, t.id, messages(1000));
      const c = await server.connect(t.id, { api_key: owner.key, last_sequence: 5 });
      expect(c.snapshot).toMatchObject({ lastSequence: 11_000, resync: true });
      expect(c.snapshot.events.map((e: Frame) => e.sequence)).toEqual(range(10_901, 11_000));
      await appendDurable(h.deps, t.id, messages(1));
      await until('the live frame', () => c.lastSequence() === 11_001, { timeoutMs: 20_000, intervalMs: POLL });
      expect(c.frames.map((f) => f.sequence ?? f.type)).toEqual(['snapshot', 11_001]);
    });

    it('a bad last_sequence closes with 4400', async () => {
      const t = await createThread(h, owner);
      for (const bad of ['-1', 'abc', '1.5']) {
        const c = await server.connect(t.id, { api_key: owner.key, last_sequence: bad });
        await until('the close', () => c.close !== null, { timeoutMs: 20_000, intervalMs: POLL });
        expect(c.close!.code, bad).toBe(4400);
        expect(c.close!.reason).toMatch(/last_sequence/);
        expect(c.frames).toEqual([]);
      }
    });
  });

  describe('metadata frames', () => {
    it('PATCH emits thread_renamed and thread_archived', async () => {
      const t = await createThread(h, owner, { title: 'before' });
      const c = await server.connect(t.id, { api_key: owner.key });
      const renamed = json(
        await h.app.inject({ method: 'PATCH', url: `/v1/threads/${t.id}`, headers: owner.headers, payload: { title: 'after' } }),
      ).data;
      const archived = json(
        await h.app.inject({ method: 'PATCH', url: `/v1/threads/${t.id}`, headers: owner.headers, payload: { archived: true } }),
      ).data;
      await until('two metadata frames', () => c.frames.length === 3, { timeoutMs: 10_000, intervalMs: POLL, detail: () => c.frames });
      expect(c.frames.slice(1)).toEqual([
        { type: 'thread_renamed', threadId: t.id, title: 'after', updatedAt: renamed.updatedAt },
        { type: 'thread_archived', threadId: t.id, archived: true, updatedAt: archived.updatedAt },
      ]);
    });

    it('DELETE emits thread_deleted and closes every subscriber with 4410; the thread is then 4404', async () => {
      const t = await createThread(h, owner);
      await appendDurable(h.deps, t.id, messages(2));
      const a = await server.connect(t.id, { api_key: owner.key });
      const b = await server.connect(t.id, { token: owner.token, last_sequence: 1 });
      expect((await h.app.inject({ method: 'DELETE', url: `/v1/threads/${t.id}`, headers: owner.headers })).statusCode).toBe(204);
      for (const c of [a, b]) {
        await until('the close', () => c.close !== null, { timeoutMs: 20_000, intervalMs: POLL });
        expect(c.close!.code).toBe(4410);
        expect(c.frames.at(-1)).toMatchObject({ type: 'thread_deleted', threadId: t.id, deletedAt: expect.any(String) });
      }
      const late = await server.connect(t.id, { api_key: owner.key });
      await until('the close', () => late.close !== null, { timeoutMs: 20_000, intervalMs: POLL });
      expect(late.close!.code).toBe(4404);
    });
  });

  describe('authentication and access', () => {
    let t: { id: string };
    beforeAll(async () => {
      t = await createThread(h, owner);
    });

    async function closed(threadId: string, query: Record<string, string | number>) {
      const c = await server.connect(threadId, query);
      await until('the close', () => c.close !== null, { timeoutMs: 20_000, intervalMs: POLL });
      expect(c.frames).toEqual([]);
      return c.close!;
    }

    it('neither or both of api_key and token close with 4400 and say so', async () => {
      for (const query of [{}, { api_key: owner.key, token: owner.token }, { api_key: '' }] as Record<string, string>[]) {
        const close = await closed(t.id, query);
        expect(close.code, JSON.stringify(Object.keys(query))).toBe(4400);
        expect(close.reason).toMatch(/exactly one of .*api_key.*token/);
      }
    });

    it('a bad key or token closes with 4401', async () => {
      for (const query of [{ api_key: 'hgr_live_notarealkey' }, { api_key: 'sometoken' }, { token: 'not.a.jwt' }] as Record<string, string>[]) {
        const close = await closed(t.id, query);
        expect(close.code, JSON.stringify(query)).toBe(4401);
        expect(close.reason.length).toBeGreaterThan(0);
      }
    });

    it('a key without agent:read closes with 4403 naming the scope', async () => {
      const key = await keyFor(
        h,
        owner,
        ALL_SCOPES.filter((s) => s !== 'agent:read'),
      );
      const close = await closed(t.id, { api_key: key });
      expect(close.code).toBe(4403);
      expect(close.reason).toContain('agent:read');
    });

    it('another organization’s thread, another member’s and an unknown one close with 4404', async () => {
      const stranger = await createOrgAdmin(h);
      const member = await addOrgMember(h, owner);
      for (const [id, key] of [
        [t.id, stranger.key],
        [t.id, member.key],
        ['thr_unknown', owner.key],
      ] as const) {
        const close = await closed(id, { api_key: key });
        expect(close.code).toBe(4404);
        expect(close.reason).toContain(id);
      }
    });

    it('a close reason naming long non-ASCII input still fits a close frame, so the code says what went wrong', async () => {
      const longId = `thr_${'é'.repeat(90)}`;
      const notFound = await closed(encodeURIComponent(longId), { api_key: owner.key });
      expect(notFound.code).toBe(4404);
      expect(Buffer.byteLength(notFound.reason)).toBeLessThanOrEqual(123);
      expect(notFound.reason).toMatch(/^thread thr_é+/);

      const badOrg = await closed(t.id, { token: owner.token, org_id: 'ü'.repeat(80) });
      expect(badOrg.code).toBe(4401);
      expect(badOrg.reason).toMatch(/^organization ü+/);
    });

    it('an organization admin who does not own the thread gets a metadata snapshot and then only thread_* frames', async () => {
      const member = await addOrgMember(h, owner);
      const mt = await createThread(h, member, { title: 'member’s' });
      await appendDurable(h.deps, mt.id, messages(3));
      const own = await server.connect(mt.id, { api_key: member.key });
      const admin = await server.connect(mt.id, { api_key: owner.key, last_sequence: 0 });

      expect(admin.snapshot).toMatchObject({ type: 'snapshot', protocol_version: 1, view: 'metadata', thread: { id: mt.id, title: 'member’s' } });
      expect(admin.snapshot.events).toBeUndefined();
      expect(admin.snapshot.lastSequence).toBeUndefined();

      await appendDurable(h.deps, mt.id, messages(2));
      expect((await postFrame(h, member, mt.id, transient(mt.activeRolloutId))).statusCode).toBe(202);
      expect(
        (await h.app.inject({ method: 'PATCH', url: `/v1/threads/${mt.id}`, headers: member.headers, payload: { title: 'renamed' } })).statusCode,
      ).toBe(200);
      await until(
        'the rename on both',
        () => own.frames.some((f) => f.type === 'thread_renamed') && admin.frames.some((f) => f.type === 'thread_renamed'),
        { timeoutMs: 20_000, intervalMs: POLL },
      );

      expect(own.frames.slice(1).map((f) => f.type)).toEqual(['user_message', 'assistant_message', 'assistant_message_delta', 'thread_renamed']);
      expect(admin.frames.map((f) => f.type)).toEqual(['snapshot', 'thread_renamed']);
    });
  });

  describe('credentials that stop being valid', () => {
    /** The key's id from its secret, as an admin lists it. */
    async function keyId(key: string): Promise<string> {
      const keys = json(await h.app.inject({ method: 'GET', url: '/v1/api-keys?limit=200', headers: owner.headers })).data as {
        id: string;
        prefix: string;
      }[];
      return keys.find((k) => key.startsWith(k.prefix))!.id;
    }

    it('revoking the socket’s API key closes it with 4401 within a second, and no frame follows', async () => {
      const t = await createThread(h, owner);
      const key = await keyFor(h, owner, ['*']);
      const c = await server.connect(t.id, { api_key: key });
      await appendDurable(h.deps, t.id, messages(1));
      await c.waitFor(() => c.lastSequence() === 1, 'the control frame');

      const revoked = await h.app.inject({ method: 'DELETE', url: `/v1/api-keys/${await keyId(key)}`, headers: owner.headers });
      expect(revoked.statusCode, revoked.body).toBe(200);
      const at = Date.now();
      await c.waitFor(() => c.close !== null, 'the close', 1_000);
      expect(Date.now() - at).toBeLessThan(1_000);
      expect(c.close!.code).toBe(4401);
      expect(c.close!.reason).toContain('revoked');
      const frames = c.frames.length;
      await appendDurable(h.deps, t.id, messages(2));
      await sleep(200);
      expect(c.frames).toHaveLength(frames);
      // Another key's socket on the same thread is untouched.
      const other = await server.connect(t.id, { api_key: owner.key });
      expect(other.close).toBeNull();
    });

    it('a session token’s socket closes with 4401 when the token expires', async () => {
      const t = await createThread(h, owner);
      const token = await issueSessionToken(h.deps.config, owner.userId, 2);
      const c = await server.connect(t.id, { token });
      expect(c.snapshot.view).toBe('owner');
      const exp = (JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { exp: number }).exp * 1000;
      await c.waitFor(() => c.close !== null, 'the close at expiry', 5_000);
      expect(c.close!.code).toBe(4401);
      expect(c.close!.reason).toContain('expired');
      expect(Date.now()).toBeGreaterThanOrEqual(exp);
      expect(Date.now() - exp).toBeLessThan(1_000);
    });

    it('demoting an admin closes their sockets, so that the admin’s metadata view of others’ threads ends', async () => {
      const second = await addOrgMember(h, owner, 'admin');
      const author = await addOrgMember(h, owner, 'member');
      const t = await createThread(h, author);
      const watching = await server.connect(t.id, { token: second.token });
      expect(watching.snapshot.view).toBe('metadata');
      const res = await h.app.inject({
        method: 'PATCH',
        url: `/v1/organizations/${owner.orgId}/members/${second.userId}`,
        headers: owner.headers,
        payload: { role: 'member' },
      });
      expect(res.statusCode, res.body).toBe(200);
      await watching.waitFor(() => watching.close !== null, 'the close', 1_000);
      expect(watching.close!.code).toBe(4401);
      expect(watching.close!.reason).toContain('role');
      const again = await server.connect(t.id, { token: second.token });
      await again.waitFor(() => again.close !== null, 'the close of the reconnect');
      expect(again.close!.code).toBe(4404);
    });

    it('removing a member closes their sockets (key and session) with 4401 and revokes their keys', async () => {
      const member = await addOrgMember(h, owner);
      const t = await createThread(h, member);
      const byKey = await server.connect(t.id, { api_key: member.key });
      const byToken = await server.connect(t.id, { token: member.token });
      expect(byKey.snapshot.view).toBe('owner');
      expect(byToken.snapshot.view).toBe('owner');
      const removed = await h.app.inject({
        method: 'DELETE',
        url: `/v1/organizations/${owner.orgId}/members/${member.userId}`,
        headers: owner.headers,
      });
      expect(removed.statusCode, removed.body).toBe(204);
      await byKey.waitFor(() => byKey.close !== null, 'the key socket to close', 1_000);
      await byToken.waitFor(() => byToken.close !== null, 'the session socket to close', 1_000);
      expect([byKey.close!.code, byToken.close!.code]).toEqual([4401, 4401]);
      const keys = json(await h.app.inject({ method: 'GET', url: '/v1/api-keys?include_revoked=true&limit=200', headers: owner.headers })).data as {
        userId: string;
        revokedAt: string | null;
      }[];
      const theirs = keys.filter((k) => k.userId === member.userId);
      expect(theirs.length).toBeGreaterThan(0);
      expect(theirs.every((k) => k.revokedAt !== null)).toBe(true);
    });
  });

  describe('backpressure', () => {
    it('a paused subscriber does not hold up others or grow memory without bound; it loses transient frames or is told to resume', async () => {
      const t = await createThread(h, owner);
      const TRANSIENT = 5000;
      const DURABLE = 5;
      const delta = 'x'.repeat(16 * 1024);
      // Keep only what the assertions need, so the test itself does not hold the frames' bytes.
      let fastDeltas = 0;
      const keep = (f: Frame): Frame => ({ type: f.type, sequence: f.sequence, index: f.index, reason: f.reason });
      const fast = await server.connect(t.id, { api_key: owner.key }, (f) => {
        if (f.type === 'assistant_message_delta') fastDeltas++;
        return keep(f);
      });
      const slow = await server.connect(t.id, { api_key: owner.key }, keep);
      (slow.ws as unknown as { _socket: { pause(): void; resume(): void } })._socket.pause();

      setFlagsFromString('--expose-gc');
      const gc = runInNewContext('gc') as () => void;
      const memory = () => {
        gc();
        const m = process.memoryUsage();
        return m.heapUsed + m.external;
      };
      const before = memory();
      const wss = (h.app as unknown as { websocketServer: { clients: Set<WebSocket> } }).websocketServer;
      let maxUnsent = 0;

      for (let i = 0; i < TRANSIENT; i++) {
        if (i % (TRANSIENT / DURABLE) === 0) await appendDurable(h.deps, t.id, messages(1, `d${i}`));
        await h.deps.bus.publish(threadChannel(t.id), { ...transient(t.activeRolloutId, { index: i, delta }), threadId: t.id });
        for (const s of wss.clients) maxUnsent = Math.max(maxUnsent, s.bufferedAmount);
        // The fast reader is in this process too: let it read as a reader on another machine would.
        await fast.waitFor(() => fastDeltas > i - 4, 'the fast reader to keep up');
      }
      await fast.waitFor(() => fastDeltas === TRANSIENT, 'every frame on the fast reader');
      const grown = memory() - before;

      // The fast subscriber got everything, in order.
      expect(fast.frames.filter((f) => f.type === 'assistant_message_delta').map((f) => f.index)).toEqual(range(0, TRANSIENT - 1));
      expect(fast.durable().map((f) => f.sequence)).toEqual(range(1, DURABLE));
      // What waits for the paused one is bounded (4 MiB and a frame), far below the 80 MB published.
      expect(maxUnsent).toBeLessThan(4 * 1024 * 1024 + 64 * 1024);
      expect(grown).toBeLessThan(40 * 1024 * 1024);

      (slow.ws as unknown as { _socket: { resume(): void } })._socket.resume();
      await until('the slow reader to drain', () => slow.close !== null || slow.lastSequence() === DURABLE, {
        timeoutMs: 30_000,
        intervalMs: POLL,
        detail: () => [slow.frames.length, slow.close],
      });
      const slowTransient = slow.frames.filter((f) => f.type === 'assistant_message_delta');
      if (slow.close) {
        expect(slow.close.code).toBe(4409);
        const resumeFrom = Number(/last_sequence=(\d+)/.exec(slow.close.reason)?.[1]);
        // The reason names exactly the last durable frame it was sent, so resuming loses nothing.
        expect(resumeFrom).toBe(slow.lastSequence());
        const resumed = await server.connect(t.id, { api_key: owner.key, last_sequence: resumeFrom }, keep);
        await until('the resumed replay', () => resumed.lastSequence() === DURABLE, { timeoutMs: 20_000, intervalMs: POLL });
        expect(resumed.durable().map((f) => f.sequence)).toEqual(range(resumeFrom + 1, DURABLE));
      } else {
        expect(slowTransient.length).toBeLessThan(TRANSIENT);
        // Durable frames are never dropped.
        expect(slow.durable().map((f) => f.sequence)).toEqual(range(1, DURABLE));
      }
      // What it did get of the transient frames came in order.
      const indexes = slowTransient.map((f) => f.index as number);
      expect([...indexes].sort((x, y) => x - y)).toEqual(indexes);
    });

    it('a paused subscriber that falls more than 4 MiB behind on durable frames is closed with 4409 naming where to resume, and resumes without loss', async () => {
      const t = await createThread(h, owner);
      const keep = (f: Frame): Frame => ({ type: f.type, sequence: f.sequence });
      const wss = (h.app as unknown as { websocketServer: { clients: Set<WebSocket> } }).websocketServer;
      const others = new Set(wss.clients);
      const slow = await server.connect(t.id, { api_key: owner.key }, keep);
      const serverSide = [...wss.clients].find((s) => !others.has(s))!;
      (slow.ws as unknown as { _socket: { pause(): void } })._socket.pause();
      // 640 KiB a batch until the server gives up on the paused socket (how much the kernel buffers varies by host).
      const big = (n: number): DurableInput[] =>
        Array.from({ length: n }, () => ({
          type: 'tool_result',
          payload: { toolCallId: 'call_big', name: 'exec_command', output: 'y'.repeat(32 * 1024), isError: false },
        }));
      let total = 0;
      while (serverSide.readyState === WebSocket.OPEN && total < 4000) total += (await appendDurable(h.deps, t.id, big(20))).length;
      expect(serverSide.readyState).not.toBe(WebSocket.OPEN);

      (slow.ws as unknown as { _socket: { resume(): void } })._socket.resume();
      await slow.waitFor(() => slow.close !== null, 'the close');
      expect(slow.close!.code).toBe(4409);
      const match = /last_sequence=(\d+)/.exec(slow.close!.reason);
      expect(match, slow.close!.reason).not.toBeNull();
      const resumeFrom = Number(match![1]);
      // Everything up to the named sequence was delivered, in order, before the close.
      expect(slow.durable().map((f) => f.sequence)).toEqual(range(1, resumeFrom));
      expect(resumeFrom).toBeLessThan(total);

      const resumed = await server.connect(t.id, { api_key: owner.key, last_sequence: resumeFrom }, keep);
      await resumed.waitFor(() => resumed.lastSequence() === total, 'the replay');
      expect(resumed.durable().map((f) => f.sequence)).toEqual(range(resumeFrom + 1, total));
    });
  });
});

describe('server shutdown', () => {
  it('closes subscribers with 1001 and asks them to reconnect with last_sequence', async () => {
    let h: Harness | null = await createHarness();
    const server = liveServer(() => h!);
    try {
      const owner = await createOrgAdmin(h);
      const t = await createThread(h, owner);
      await server.listen();
      const c = await server.connect(t.id, { api_key: owner.key });
      expect(c.snapshot.type).toBe('snapshot');
      await h.close();
      h = null;
      await c.waitFor(() => c.close !== null, 'the close');
      expect(c.close).toEqual({ code: 1001, reason: expect.stringContaining('reconnect with last_sequence') });
    } finally {
      server.closeAll();
      await h?.close();
    }
  });
});

const SRC = path.resolve(import.meta.dirname, '../..');

/**
 * Another Hangar replica as a process of its own, appending `calls` batches (1 to 5 frames, runId `run_third`)
 * to a thread through `appendDurable`. `ready` once its dependencies are open; `done` with the frames appended.
 */
function startReplicaWriter(env: Record<string, string>, threadId: string, calls: number) {
  const code = `
    const { createDeps, closeDeps } = await import(${JSON.stringify(path.join(SRC, 'app.ts'))});
    const { parseConfig } = await import(${JSON.stringify(path.join(SRC, 'config.ts'))});
    const { appendDurable } = await import(${JSON.stringify(path.join(SRC, 'domains/threads/index.ts'))});
    const deps = await createDeps(parseConfig({ ...process.env, LOG_LEVEL: 'silent', HANGAR_NODE_ID: 'replica-c', HANGAR_TEMPLATE_PREBUILD: 'false' }), { isolation: false });
    console.log('ready');
    let n = 0;
    for (let i = 0; i < ${calls}; i++) {
      const frames = Array.from({ length: 1 + (i % 5) }, (_, j) => ({ type: 'tool_result', runId: 'run_third', payload: { toolCallId: 'call_' + i + '_' + j, name: 'exec_command', output: '', isError: false } }));
      n += (await appendDurable(deps, ${JSON.stringify(threadId)}, frames)).length;
    }
    await closeDeps(deps);
    console.log('done ' + n);
  `;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    cwd: path.resolve(SRC, '..'),
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (err += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  return {
    ready: Promise.race([
      until('the third replica to start', () => out.includes('ready'), { timeoutMs: 30_000, intervalMs: POLL }),
      exited.then((c) => Promise.reject(new Error(`third replica exited ${c}: ${err}`))),
    ]),
    done: exited.then((c) => {
      const m = /done (\d+)/.exec(out);
      if (c !== 0 || !m) throw new Error(`third replica exited ${c}: ${err}`);
      return Number(m[1]);
    }),
  };
}

describe('fan-out across Hangar instances', () => {
  const schema = `t_${randomBytes(6).toString('hex')}`;
  let dir: string;
  let a: Harness;
  let b: Harness;
  let owner: Actor;
  let env: Record<string, string>;
  const serverA = liveServer(() => a);
  const serverB = liveServer(() => b);

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'hangar-fanout-'));
    // Replicas share the database, Redis, the data directory and the session-token secret, as a deployment's do.
    env = {
      DATABASE_URL: `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}schema=${schema}`,
      REDIS_URL: 'redis://127.0.0.1:6379',
      HANGAR_DATA_DIR: dir,
      HANGAR_SECRET_KEY: randomBytes(32).toString('hex'),
    };
    a = await createHarness({ ...env, HANGAR_NODE_ID: 'replica-a' });
    b = await createHarness({ ...env, HANGAR_NODE_ID: 'replica-b' });
    owner = await createOrgAdmin(a);
    await serverA.listen();
    await serverB.listen();
  });
  afterAll(async () => {
    serverA.closeAll();
    serverB.closeAll();
    await a?.close();
    await b?.close();
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a subscriber on A sees durable frames appended and transient frames posted through B, in order, once each', async () => {
    const t = await createThread(a, owner);
    const c = await serverA.connect(t.id, { api_key: owner.key });
    const expected: string[] = [];
    for (let i = 0; i < 20; i++) {
      const events = await appendDurable(b.deps, t.id, messages(1 + (i % 2), `b${i}`));
      expected.push(...events.map((e) => `d${e.sequence}`));
      const res = await postFrame(b, owner, t.id, {
        type: 'tool_output_delta',
        runId: 'run_b',
        rolloutId: t.activeRolloutId,
        sequenceNumber: events.at(-1)!.sequence,
        delta: `out ${i}`,
        messageId: `tool_${i}`,
      });
      expect(res.statusCode, res.body).toBe(202);
      expected.push(`t${i}`);
    }
    await until('every frame', () => c.frames.length === expected.length + 1, { timeoutMs: 20_000, intervalMs: POLL, detail: () => c.frames.length });
    await sleep(100); // nothing more (no repeats) arrives
    expect(c.frames.slice(1).map((f) => (f.type === 'tool_output_delta' ? `t${f.delta.slice(4)}` : `d${f.sequence}`))).toEqual(expected);
    expect(c.durable().map((f) => f.sequence)).toEqual(range(1, 30));
  });

  it('revoking a key through A closes its socket on B with 4401 within a second', async () => {
    const t = await createThread(a, owner);
    const key = await keyFor(a, owner, ['*']);
    const onB = await serverB.connect(t.id, { api_key: key });
    expect(onB.snapshot.view).toBe('owner');
    const keys = json(await a.app.inject({ method: 'GET', url: '/v1/api-keys?limit=200', headers: owner.headers })).data as {
      id: string;
      prefix: string;
    }[];
    const id = keys.find((k) => key.startsWith(k.prefix))!.id;
    expect((await a.app.inject({ method: 'DELETE', url: `/v1/api-keys/${id}`, headers: owner.headers })).statusCode).toBe(200);
    await onB.waitFor(() => onB.close !== null, 'the close on B', 1_000);
    expect(onB.close!.code).toBe(4401);
    const frames = onB.frames.length;
    await appendDurable(a.deps, t.id, messages(1));
    await sleep(200);
    expect(onB.frames).toHaveLength(frames);
  });

  it('removing a member through A closes their socket on B', async () => {
    const member = await addOrgMember(a, owner);
    const t = await createThread(a, member);
    const onB = await serverB.connect(t.id, { token: member.token });
    expect(onB.snapshot.view).toBe('owner');
    const res = await a.app.inject({ method: 'DELETE', url: `/v1/organizations/${owner.orgId}/members/${member.userId}`, headers: owner.headers });
    expect(res.statusCode, res.body).toBe(204);
    await onB.waitFor(() => onB.close !== null, 'the close on B', 1_000);
    expect(onB.close!.code).toBe(4401);
  });

  it('frames appended concurrently through A, B and a third replica process reach subscribers on each instance strictly in sequence, without gaps or repeats', async () => {
    const t = await createThread(a, owner);
    const onA = await serverA.connect(t.id, { api_key: owner.key });
    const onB = await serverB.connect(t.id, { token: owner.token });
    // A and B share this process (and so its per-thread write queue); the third writer is a process of its own,
    // so writers really race for the thread row and their publishes can cross on the way to the subscribers.
    const third = startReplicaWriter(env, t.id, 60);
    await third.ready;
    // Network latency between this process and Redis: A's and B's publishes now and then arrive after frames
    // the third replica committed later, as the ADR says replicas' publishes can cross.
    const restore = [a, b].map((hx) => {
      const bus = hx.deps.bus;
      const publish = bus.publish.bind(bus);
      bus.publish = async (channel, message) => {
        await sleep(Math.random() * 4);
        return publish(channel, message);
      };
      return () => (bus.publish = publish);
    });
    let lateA: Client | null = null;
    let inProcess = 0;
    await Promise.all(
      Array.from({ length: 4 }, async (_, lane) => {
        for (let i = lane; i < 60; i += 4) {
          const events = await appendDurable(i % 2 ? a.deps : b.deps, t.id, messages(1 + (i % 3), `c${i}`));
          inProcess += events.length;
          if (i === 30) lateA = await serverA.connect(t.id, { api_key: owner.key, last_sequence: 10 });
        }
      }),
    );
    const appendedByThird = await third.done;
    for (const r of restore) r();
    const total = inProcess + appendedByThird;
    for (const [name, c] of [
      ['A', onA],
      ['B', onB],
      ['late A', lateA!],
    ] as const) {
      await until(`the last frame on ${name}`, () => c.lastSequence() === total, {
        timeoutMs: 20_000,
        intervalMs: POLL,
        detail: () => [c.lastSequence(), c.frames.length, c.close],
      });
    }
    await sleep(100); // nothing more (no repeats) arrives
    expect(onA.durable().map((f) => f.sequence)).toEqual(range(1, total));
    expect(onB.durable().map((f) => f.sequence)).toEqual(range(1, total));
    expect(lateA!.durable().map((f) => f.sequence)).toEqual(range(11, total));

    const stored: Frame[] = [];
    for (let cursor: string | null = ''; cursor !== null; ) {
      const page: any = json(
        await b.app.inject({
          method: 'GET',
          url: `/v1/threads/${t.id}/events?limit=500${cursor ? `&cursor=${cursor}` : ''}`,
          headers: owner.headers,
        }),
      );
      stored.push(...page.data.events);
      cursor = page.nextCursor;
    }
    expect(onA.durable()).toEqual(stored);
    expect(stored.filter((e) => e.runId === 'run_third')).toHaveLength(appendedByThird);
    const lines = readFileSync(path.join(dir, 'blobs', 'threads', t.orgId, `${t.id}.jsonl`), 'utf8')
      .trimEnd()
      .split('\n');
    expect(lines.map((l) => JSON.parse(l))).toEqual(stored);
  });
});
