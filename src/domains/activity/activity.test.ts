import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { addOrgMember, createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { securitySuite } from '../../../test/security.js';
import { systemCtx } from '../../platform/context.js';
import { ROLE_SCOPES } from '../../platform/scopes.js';
import { recordActivity, type ActivityInput } from './index.js';

interface Event {
  id: string;
  resourceType: string;
  resourceId: string;
  eventType: string;
  severity: string;
  status: string;
  actorUserId: string | null;
  occurredAt: string;
  [k: string]: unknown;
}

describe('activity', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness();
  });
  afterAll(() => h.close());
  afterEach(() => {
    vi.useRealTimers();
  });

  /** Records an event as `actor` through the product's own recorder, optionally at a given time. */
  async function record(actor: Actor, event: Partial<ActivityInput> & { eventType: string }, at?: string): Promise<string> {
    const ctx = systemCtx(h.deps, { userId: actor.userId, orgId: actor.orgId, role: actor.role, scopes: ROLE_SCOPES[actor.role], apiKeyId: null });
    if (at) vi.useFakeTimers({ toFake: ['Date'], now: new Date(at) });
    try {
      return await recordActivity(ctx, { resourceType: 'agent', resourceId: 'agt_test', status: 'completed', title: event.eventType, ...event });
    } finally {
      if (at) vi.useRealTimers();
    }
  }

  const get = (actor: { headers: Record<string, string> }, query = '') =>
    h.app.inject({ method: 'GET', url: `/v1/activity${query}`, headers: actor.headers });

  async function events(actor: { headers: Record<string, string> }, query = ''): Promise<Event[]> {
    const res = await get(actor, query);
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data.events;
  }

  describe('filters', () => {
    let admin: Actor;
    const ids: Record<string, string> = {};
    beforeAll(async () => {
      admin = await createOrgAdmin(h);
      // One event per id-like filter, each carrying a value no other event has, plus noise.
      ids.thread_id = await record(admin, { eventType: 'agent.run.started', threadId: 'thr_filter1', status: 'started' });
      ids.agent_run_id = await record(admin, { eventType: 'agent.run.completed', agentRunId: 'run_filter1' });
      ids.sandbox_id = await record(admin, { eventType: 'sandbox.created', resourceType: 'sandbox', resourceId: 'sbx_1', sandboxId: 'sbx_1' });
      ids.workspace_id = await record(admin, {
        eventType: 'workspace.file.added',
        resourceType: 'workspace',
        resourceId: 'ws_x',
        workspaceId: 'ws_x',
        status: 'added',
      });
      ids.tool_slug = await record(admin, {
        eventType: 'tool.call.failed',
        resourceType: 'tool',
        resourceId: 'web_search',
        toolSlug: 'web_search',
        status: 'failed',
      });
      ids.installable_agent_install_id = await record(admin, {
        eventType: 'installable_agent.installed',
        resourceType: 'installable_agent_install',
        resourceId: 'iai_1',
        installableAgentInstallId: 'iai_1',
      });
      ids.code_execution_id = await record(admin, {
        eventType: 'code_execution.completed',
        resourceType: 'code_execution',
        resourceId: 'cex_1',
        codeExecutionId: 'cex_1',
      });
      ids.runmesh_node_id = await record(admin, {
        eventType: 'runmesh.device.linked',
        resourceType: 'runmesh_device',
        resourceId: 'node_1',
        runmeshNodeId: 'node_1',
        severity: 'warning',
      });
      for (let i = 0; i < 3; i++) await record(admin, { eventType: 'noise.event', threadId: `thr_noise${i}`, agentRunId: `run_noise${i}` });
    });

    const byParam: [string, string, string][] = [
      ['thread_id', 'thr_filter1', 'threadId'],
      ['agent_run_id', 'run_filter1', 'agentRunId'],
      ['sandbox_id', 'sbx_1', 'sandboxId'],
      ['workspace_id', 'ws_x', 'workspaceId'],
      ['tool_slug', 'web_search', 'toolSlug'],
      ['installable_agent_install_id', 'iai_1', 'installableAgentInstallId'],
      ['code_execution_id', 'cex_1', 'codeExecutionId'],
      ['runmesh_node_id', 'node_1', 'runmeshNodeId'],
    ];
    for (const [param, value, field] of byParam) {
      it(`${param} selects the events carrying it`, async () => {
        const found = await events(admin, `?${param}=${value}`);
        expect(found.map((e) => e.id)).toEqual([ids[param]]);
        expect(found[0]![field]).toBe(value);
        expect(await events(admin, `?${param}=${value}_other`)).toEqual([]);
      });
    }

    it('event_type, status and severity select exactly', async () => {
      expect((await events(admin, '?event_type=tool.call.failed')).map((e) => e.id)).toEqual([ids.tool_slug]);
      expect((await events(admin, '?event_type=tool.call')).map((e) => e.id)).toEqual([]);
      expect((await events(admin, '?status=started')).map((e) => e.id)).toEqual([ids.thread_id]);
      expect((await events(admin, '?status=added')).map((e) => e.id)).toEqual([ids.workspace_id]);
      // A failed event is an error unless it says otherwise; others are info.
      expect((await events(admin, '?severity=error')).map((e) => e.id)).toEqual([ids.tool_slug]);
      expect((await events(admin, '?severity=warning')).map((e) => e.id)).toEqual([ids.runmesh_node_id]);
      const info = await events(admin, '?severity=info&limit=200');
      expect(info.every((e) => e.severity === 'info')).toBe(true);
      expect(info.map((e) => e.id)).toContain(ids.thread_id);
    });

    it('filters combine', async () => {
      expect((await events(admin, '?event_type=noise.event&thread_id=thr_noise1')).map((e) => e.threadId)).toEqual(['thr_noise1']);
      expect(await events(admin, '?event_type=noise.event&thread_id=thr_filter1')).toEqual([]);
      expect((await events(admin, '?resource_type=tool&status=failed&severity=error')).map((e) => e.id)).toEqual([ids.tool_slug]);
    });

    it('resource_type alone, and with resource_id', async () => {
      const sandboxes = await events(admin, '?resource_type=sandbox');
      expect(sandboxes.map((e) => e.id)).toEqual([ids.sandbox_id]);
      expect(sandboxes[0]).toMatchObject({ resourceType: 'sandbox', resourceId: 'sbx_1' });
      expect((await events(admin, '?resource_type=code_execution&resource_id=cex_1')).map((e) => e.id)).toEqual([ids.code_execution_id]);
      expect(await events(admin, '?resource_type=code_execution&resource_id=cex_2')).toEqual([]);
      // A sandbox that does not exist is a 404 once the sandbox domain checks access.
      const unknown = await get(admin, '?resource_type=sandbox&resource_id=cex_1');
      expect(unknown.statusCode).toBe(404);
      expect(json(unknown).error.code).toBe('not_found');
    });

    it('resource_id without resource_type is 400', async () => {
      const res = await get(admin, '?resource_id=sbx_1');
      expect(res.statusCode).toBe(400);
      expect(json(res).error).toMatchObject({
        code: 'invalid_request',
        issues: [{ path: 'resource_id', message: expect.stringContaining('resource_type') }],
      });
    });

    it('rejects values outside the spec with 400', async () => {
      for (const q of ['?resource_type=spaceship', '?severity=fatal', '?since=yesterday', '?until=2020-01-01', '?event_type=', '?actor_user_id=']) {
        const res = await get(admin, q);
        expect(res.statusCode, q).toBe(400);
        expect(json(res).error.code).toBe('invalid_request');
      }
    });

    it('a value PostgreSQL cannot store is a 400, not a server error', async () => {
      const res = await get(admin, '?event_type=a%00b');
      expect(res.statusCode).toBeLessThan(500);
      if (res.statusCode !== 200) expect(json(res).error.code).toBe('invalid_request');
    });

    it('events have the documented shape', async () => {
      const [e] = await events(admin, '?thread_id=thr_filter1');
      expect(e).toEqual({
        id: expect.stringMatching(/^act_/),
        resourceType: 'agent',
        resourceId: 'agt_test',
        eventType: 'agent.run.started',
        severity: 'info',
        status: 'started',
        title: 'agent.run.started',
        summary: '',
        actorUserId: admin.userId,
        threadId: 'thr_filter1',
        occurredAt: expect.any(String),
      });
      expect(new Date(e!.occurredAt).toISOString()).toBe(e!.occurredAt);
    });

    it('never shows another organization’s events', async () => {
      const stranger = await createOrgAdmin(h);
      const theirs = await events(stranger, '?limit=200');
      expect(theirs.map((e) => e.id)).not.toEqual(expect.arrayContaining([ids.thread_id]));
      expect(theirs.every((e) => e.actorUserId === stranger.userId)).toBe(true);
      expect(await events(stranger, '?thread_id=thr_filter1')).toEqual([]);
    });
  });

  describe('time bounds and paging', () => {
    let admin: Actor;
    const timed: string[] = [];
    beforeAll(async () => {
      admin = await createOrgAdmin(h);
      for (let day = 1; day <= 5; day++) {
        timed.push(await record(admin, { eventType: 'timed.event', title: `day ${day}` }, `2020-01-0${day}T00:00:00.000Z`));
      }
    });

    it('lists newest first', async () => {
      const found = await events(admin, '?event_type=timed.event');
      expect(found.map((e) => e.id)).toEqual([...timed].reverse());
      expect(found.map((e) => e.occurredAt)).toEqual(['05', '04', '03', '02', '01'].map((d) => `2020-01-${d}T00:00:00.000Z`));
    });

    it('since and until are inclusive bounds, in any offset', async () => {
      const ids = async (q: string) => (await events(admin, `?event_type=timed.event${q}`)).map((e) => e.id);
      expect(await ids('&since=2020-01-02T00:00:00Z&until=2020-01-04T00:00:00Z')).toEqual([timed[3], timed[2], timed[1]]);
      expect(await ids('&since=2020-01-02T02:00:00%2B02:00')).toEqual([timed[4], timed[3], timed[2], timed[1]]);
      expect(await ids('&until=2020-01-01T23:59:59.999Z')).toEqual([timed[0]]);
      expect(await ids('&since=2020-01-05T00:00:00.001Z')).toEqual([]);
      expect(await ids('&since=2020-01-03T00:00:00Z&until=2020-01-03T00:00:00Z')).toEqual([timed[2]]);
    });

    it('since after until is 400', async () => {
      const res = await get(admin, '?since=2020-01-04T00:00:00Z&until=2020-01-02T00:00:00Z');
      expect(res.statusCode).toBe(400);
      expect(json(res).error.code).toBe('invalid_request');
    });

    it('pages newest first with no duplicates or gaps, also among events of the same instant', async () => {
      // Six more events sharing one timestamp, so only the id tells them apart.
      const same: string[] = [];
      for (let i = 0; i < 6; i++) same.push(await record(admin, { eventType: 'timed.event', title: `tie ${i}` }, '2020-01-03T12:00:00.000Z'));
      const all = (await events(admin, '?event_type=timed.event&limit=200')).map((e) => e.id);
      expect(all).toHaveLength(11);
      expect(new Set(all)).toEqual(new Set([...timed, ...same]));
      expect(all.slice(0, 2)).toEqual([timed[4], timed[3]]);
      expect(all.slice(8)).toEqual([timed[2], timed[1], timed[0]]);

      for (const size of [1, 2, 3, 4]) {
        const seen: string[] = [];
        let cursor: string | null = null;
        let pages = 0;
        do {
          const res = await get(admin, `?event_type=timed.event&limit=${size}${cursor ? `&cursor=${cursor}` : ''}`);
          expect(res.statusCode).toBe(200);
          const body = json(res);
          expect(body.data.events.length).toBeLessThanOrEqual(size);
          seen.push(...body.data.events.map((e: Event) => e.id));
          cursor = body.meta.nextCursor;
          expect(body.meta.hasMore).toBe(cursor !== null);
          pages++;
        } while (cursor);
        expect(seen).toEqual(all);
        expect(pages).toBe(Math.ceil(all.length / size));
      }
    });

    it('a cursor keeps its place when newer events arrive', async () => {
      const first = json(await get(admin, '?event_type=timed.event&limit=2'));
      await record(admin, { eventType: 'timed.event', title: 'late' });
      const second = json(await get(admin, `?event_type=timed.event&limit=2&cursor=${first.meta.nextCursor}`));
      const firstIds = first.data.events.map((e: Event) => e.id);
      const secondIds = second.data.events.map((e: Event) => e.id);
      expect(secondIds.some((id: string) => firstIds.includes(id))).toBe(false);
      expect(second.data.events[0].occurredAt <= first.data.events[1].occurredAt).toBe(true);
    });

    it('a cursor combines with since and until', async () => {
      const page1 = json(await get(admin, '?event_type=timed.event&since=2020-01-02T00:00:00Z&until=2020-01-04T00:00:00Z&limit=1'));
      expect(page1.data.events.map((e: Event) => e.id)).toEqual([timed[3]]);
      const rest = await events(
        admin,
        `?event_type=timed.event&since=2020-01-02T00:00:00Z&until=2020-01-04T00:00:00Z&limit=200&cursor=${page1.meta.nextCursor}`,
      );
      expect(rest.map((e) => e.id).slice(-2)).toEqual([timed[2], timed[1]]);
      expect(rest.map((e) => e.id)).not.toContain(timed[3]);
      expect(rest.map((e) => e.id)).not.toContain(timed[0]);
    });

    it('rejects a cursor it did not issue', async () => {
      const b64 = (s: string) => Buffer.from(s).toString('base64url');
      for (const cursor of ['garbage!!', b64('{"a":1}'), b64('["2020-01-01T00:00:00.000Z"]'), b64('not json'), b64('[null,null]'), b64('[1,2]')]) {
        const res = await get(admin, `?cursor=${encodeURIComponent(cursor)}`);
        expect(res.statusCode, cursor).toBe(400);
        expect(json(res).error).toMatchObject({ code: 'invalid_request', issues: [{ path: 'cursor', message: expect.any(String) }] });
      }
    });
  });

  describe('bytes', () => {
    // The mapping from a row to the event that the API has always written, and JSON.stringify of the page around it:
    // the database now writes each event's JSON itself, and must give these bytes exactly.
    const OPTIONAL = {
      thread_id: 'threadId',
      agent_run_id: 'agentRunId',
      sandbox_id: 'sandboxId',
      workspace_id: 'workspaceId',
      tool_slug: 'toolSlug',
      installable_agent_install_id: 'installableAgentInstallId',
      code_execution_id: 'codeExecutionId',
      runmesh_node_id: 'runmeshNodeId',
    } as const;
    function toEvent(row: Record<string, string | null>) {
      const e: Record<string, unknown> = {
        id: row.id,
        resourceType: row.resource_type,
        resourceId: row.resource_id,
        eventType: row.event_type,
        severity: row.severity,
        status: row.status,
        title: row.title,
        summary: row.summary,
        actorUserId: row.actor_user_id,
        occurredAt: row.occurred_at,
      };
      for (const [column, key] of Object.entries(OPTIONAL)) if (row[column]) e[key] = row[column];
      if (row.metadata) e.metadata = JSON.parse(row.metadata);
      return e;
    }

    let admin: Actor;
    beforeAll(async () => {
      admin = await createOrgAdmin(h);
      // Every BMP character but the surrogates (and NUL, which PostgreSQL cannot store in text), in one title.
      let every = '';
      for (let c = 1; c < 0x10000; c++) if (c < 0xd800 || c > 0xdfff) every += String.fromCharCode(c);
      await record(admin, {
        eventType: 'bytes.every_character',
        title: every,
        summary: `astral 😀, lone surrogate \ud800 stored as U+FFFD, quote " backslash \\ slash / \u2028\u2029 <script>`,
        metadata: { '2': 'integer-like key first', b: { nested: [1, null, true, 'x"y\\z\n\u0001é😀'] }, n: 1e21, f: 0.1 + 0.2, neg: -0, e: {} },
      });
      await record(admin, {
        eventType: 'bytes.every_optional',
        threadId: 'thr_1',
        agentRunId: 'run_1',
        sandboxId: 'sbx_1',
        workspaceId: 'ws_1',
        toolSlug: 'web-search',
        installableAgentInstallId: 'iai_1',
        codeExecutionId: 'cex_1',
        runmeshNodeId: 'rmn_1',
        metadata: {},
      });
      // Empty strings count as unset, as they always have.
      await record(admin, { eventType: 'bytes.empty_optional', threadId: '', sandboxId: '', toolSlug: '', summary: '' });
      // A system action: no actor.
      await h.deps.db.kysely
        .insertInto('activity_events')
        .values({
          id: `act_${Date.now().toString(36)}bytes`,
          org_id: admin.orgId,
          resource_type: 'organization',
          resource_id: admin.orgId,
          event_type: 'bytes.no_actor',
          severity: 'warning',
          status: 'noted',
          title: 'no actor',
          summary: '',
          actor_user_id: null,
          actor_api_key_id: null,
          thread_id: null,
          agent_run_id: null,
          sandbox_id: null,
          workspace_id: null,
          tool_slug: null,
          installable_agent_install_id: null,
          code_execution_id: null,
          runmesh_node_id: null,
          metadata: null,
          occurred_at: new Date().toISOString(),
        })
        .execute();
    });

    it('answers exactly the bytes JSON.stringify gave for the objects the rows used to become', async () => {
      const rows = (await h.deps.db.kysely
        .selectFrom('activity_events')
        .selectAll()
        .where('org_id', '=', admin.orgId)
        .orderBy('occurred_at', 'desc')
        .orderBy('id', 'desc')
        .execute()) as unknown as Record<string, string | null>[];
      expect(rows.length).toBeGreaterThan(4);

      const all = await get(admin, '?limit=200');
      expect(all.statusCode).toBe(200);
      expect(all.headers['content-type']).toBe('application/json; charset=utf-8');
      const requestId = all.headers['x-request-id'];
      expect(all.body).toBe(JSON.stringify({ data: { events: rows.map(toEvent) }, meta: { requestId, hasMore: false, nextCursor: null } }));

      const first = await get(admin, '?limit=2');
      const meta = json(first).meta;
      expect(meta.hasMore).toBe(true);
      expect(first.body).toBe(
        JSON.stringify({ data: { events: rows.slice(0, 2).map(toEvent) }, meta: { requestId: first.headers['x-request-id'], ...meta } }),
      );
      const next = await get(admin, `?limit=2&cursor=${meta.nextCursor}`);
      expect(json(next).data.events).toEqual(rows.slice(2, 4).map(toEvent));
    });
  });

  describe('limit', () => {
    let admin: Actor;
    beforeAll(async () => {
      admin = await createOrgAdmin(h);
      for (let i = 0; i < 55; i++) await record(admin, { eventType: 'bulk.event', title: `bulk ${i}` });
    });

    it('defaults to 50', async () => {
      const res = json(await get(admin, '?event_type=bulk.event'));
      expect(res.data.events).toHaveLength(50);
      expect(res.meta).toMatchObject({ hasMore: true, nextCursor: expect.any(String) });
      const rest = json(await get(admin, `?event_type=bulk.event&cursor=${res.meta.nextCursor}`));
      expect(rest.data.events).toHaveLength(5);
      expect(rest.meta).toMatchObject({ hasMore: false, nextCursor: null });
    });

    it('accepts 1 to 200', async () => {
      expect(json(await get(admin, '?event_type=bulk.event&limit=1')).data.events).toHaveLength(1);
      const max = json(await get(admin, '?event_type=bulk.event&limit=200'));
      expect(max.data.events).toHaveLength(55);
      expect(max.meta).toMatchObject({ hasMore: false, nextCursor: null });
    });

    it('refuses 0, 201 and non-integers with 400 rather than clamping', async () => {
      for (const limit of ['0', '201', '1000', '-1', '1.5', 'ten', '']) {
        const res = await get(admin, `?limit=${limit}`);
        expect(res.statusCode, `limit=${limit}`).toBe(400);
        const error = json(res).error;
        expect(error.code).toBe('invalid_request');
        expect(error.issues.some((i: { path: string }) => i.path.includes('limit'))).toBe(true);
      }
    });
  });

  describe('who sees what', () => {
    let admin: Actor;
    let alice: Actor;
    let bob: Actor;
    let projectWorkspace: string;

    const upload = async (actor: Actor, workspace: string, name: string) => {
      const res = await h.app.inject({
        method: 'PUT',
        url: `/v1/workspaces/${workspace}/files/${name}`,
        headers: { ...actor.headers, 'content-type': 'text/plain' },
        payload: `hello from ${name}`,
      });
      expect(res.statusCode, res.body).toBe(201);
    };
    const newKey = async (actor: Actor, name: string) => {
      const res = await h.app.inject({ method: 'POST', url: '/v1/api-keys', headers: actor.headers, payload: { name, scopes: ['org:read'] } });
      expect(res.statusCode).toBe(201);
      return json(res).data.id as string;
    };

    beforeAll(async () => {
      admin = await createOrgAdmin(h);
      alice = await addOrgMember(h, admin, 'member');
      bob = await addOrgMember(h, admin, 'member');
      projectWorkspace = json(await h.app.inject({ method: 'GET', url: `/v1/projects/${admin.projectId}`, headers: admin.headers })).data.workspaceId;
      await newKey(admin, 'admin key');
      await newKey(alice, 'alice key');
      await newKey(bob, 'bob key');
      await upload(bob, projectWorkspace, 'shared-by-bob.txt');
      await upload(bob, bob.personalWorkspaceId, 'private-to-bob.txt');
      await upload(alice, projectWorkspace, 'shared-by-alice.txt');
    });

    it('a member sees only their own actions', async () => {
      const mine = await events(alice, '?limit=200');
      expect(mine.length).toBeGreaterThanOrEqual(2);
      expect(mine.every((e) => e.actorUserId === alice.userId)).toBe(true);
      expect(mine.map((e) => e.eventType)).toEqual(expect.arrayContaining(['api_key.created', 'workspace.file.added']));
      expect(await events(alice, `?actor_user_id=${alice.userId}&limit=200`)).toEqual(mine);
    });

    it('an admin filtering by a member’s Personal workspace sees its events', async () => {
      const list = await events(admin, `?resource_type=workspace&resource_id=${bob.personalWorkspaceId}&limit=200`);
      expect(list.map((e) => e.title)).toContain('Added private-to-bob.txt');
      expect(list.every((e) => e.resourceId === bob.personalWorkspaceId)).toBe(true);
    });

    it('an admin sees everyone’s actions', async () => {
      const all = await events(admin, '?limit=200');
      const actors = new Set(all.map((e) => e.actorUserId));
      expect(actors).toEqual(new Set([admin.userId, alice.userId, bob.userId]));
      const bobs = await events(admin, `?actor_user_id=${bob.userId}&limit=200`);
      expect(bobs.every((e) => e.actorUserId === bob.userId)).toBe(true);
      expect(bobs.filter((e) => e.eventType === 'workspace.file.added')).toHaveLength(2);
      expect(bobs.map((e) => e.title)).toContain('API key "bob key" created');
    });

    it('actor_user_id of someone else is 403 for a member', async () => {
      for (const other of [bob.userId, admin.userId]) {
        const res = await get(alice, `?actor_user_id=${other}`);
        expect(res.statusCode).toBe(403);
        expect(json(res).error.code).toBe('forbidden');
      }
    });

    it('a member sees everyone’s events on a workspace they can access', async () => {
      const found = await events(alice, `?resource_type=workspace&resource_id=${projectWorkspace}`);
      expect(found.map((e) => [e.actorUserId, e.eventType])).toEqual([
        [alice.userId, 'workspace.file.added'],
        [bob.userId, 'workspace.file.added'],
      ]);
      expect(found.every((e) => e.resourceId === projectWorkspace && e.workspaceId === projectWorkspace)).toBe(true);
      // The resource grants access to its events, not to the member's filters on others.
      const res = await get(alice, `?resource_type=workspace&resource_id=${projectWorkspace}&actor_user_id=${bob.userId}`);
      expect(res.statusCode).toBe(403);
    });

    it('another member’s Personal workspace is 404, and its events stay hidden', async () => {
      const res = await get(alice, `?resource_type=workspace&resource_id=${bob.personalWorkspaceId}`);
      expect(res.statusCode).toBe(404);
      expect(json(res).error.code).toBe('not_found');
      expect(await events(alice, `?workspace_id=${bob.personalWorkspaceId}`)).toEqual([]);
      const own = await events(bob, `?resource_type=workspace&resource_id=${bob.personalWorkspaceId}`);
      expect(own.map((e) => e.eventType)).toEqual(['workspace.file.added']);
    });

    it('another organization’s workspace is 404 for a member', async () => {
      const stranger = await createOrgAdmin(h);
      const res = await get(alice, `?resource_type=workspace&resource_id=${stranger.personalWorkspaceId}`);
      expect(res.statusCode).toBe(404);
    });

    it('a member’s resource filter on a type without an access check shows only their own events', async () => {
      const bobsKey = await newKey(bob, 'bob second key');
      expect(await events(alice, `?resource_type=api_key&resource_id=${bobsKey}`)).toEqual([]);
      expect((await events(admin, `?resource_type=api_key&resource_id=${bobsKey}`)).map((e) => e.actorUserId)).toEqual([bob.userId]);
    });
  });
});

securitySuite('activity', [
  { method: 'GET', url: () => '/v1/activity', scope: 'activity:read' },
  { method: 'GET', url: (o) => `/v1/activity?resource_type=workspace&resource_id=${o.personalWorkspaceId}`, scope: 'activity:read', crossOrg: true },
]);
