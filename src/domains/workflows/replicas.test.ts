import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { WebhookReceiver } from '../../../test/fakes/webhook-receiver.js';
import { createHarness, createOrgAdmin, json, testDatabaseUrl, type Actor, type Harness } from '../../../test/harness.js';
import { sleep, until } from '../../../test/helpers.js';
import { describeNeeding, onCi, postgresNeed, type Need } from '../../../test/needs.js';
import { keyedJobId } from '../../platform/job-engine/pgboss.js';
import { CRON_QUEUE, scheduleName } from './triggers.js';

// Two Hangar replicas on one PostgreSQL schema with pg-boss under both: a workflow's cron trigger starts one run per
// tick, and each step of a run is done once, whichever replica takes its job. Runs where HANGAR_TEST_DATABASE_URL
// names a PostgreSQL server; on CI always (a server it cannot reach fails the suite).

const PG_URL = testDatabaseUrl ?? (onCi ? 'postgres://postgres@127.0.0.1:5432/test' : undefined);
const need: Need = PG_URL
  ? await postgresNeed(PG_URL, `PostgreSQL (${PG_URL}), which the replicas share`)
  : {
      what: 'PostgreSQL, which the replicas share (HANGAR_TEST_DATABASE_URL)',
      present: false,
      reason: 'HANGAR_TEST_DATABASE_URL is not set',
      fix: 'start PostgreSQL on 127.0.0.1 (scripts/setup.sh) and set HANGAR_TEST_DATABASE_URL, as .ci/run does',
    };

describeNeeding(need, 'workflows across two replicas on one database', () => {
  const schema = `t_${randomBytes(6).toString('hex')}`;
  const secret = randomBytes(32).toString('hex');
  let rx: WebhookReceiver;
  let a: Harness;
  let b: Harness;
  let admin: Actor;

  const env = (nodeId: string) => ({
    DATABASE_URL: `${PG_URL}${PG_URL!.includes('?') ? '&' : '?'}schema=${schema}`,
    HANGAR_SECRET_KEY: secret,
    HANGAR_NODE_ID: nodeId,
    HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS: 'true',
  });

  beforeAll(async () => {
    rx = await new WebhookReceiver().start();
    // One after the other: the first migrates the shared schema, the second finds it migrated.
    a = await createHarness(env('workflows-replica-a'));
    b = await createHarness(env('workflows-replica-b'));
    admin = await createOrgAdmin(a);
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
    await rx?.stop();
    if (PG_URL) {
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client.query(`DROP SCHEMA IF EXISTS "${schema}_pgboss" CASCADE`);
      await client.end();
    }
  });

  const ok = async (h: Harness, method: 'GET' | 'POST' | 'PATCH', url: string, payload?: unknown, status = 200) => {
    const res = await h.app.inject({ method, url, headers: admin.headers, payload: payload as object });
    expect(res.statusCode, res.body).toBe(status);
    return json(res).data;
  };

  it('a run started on one replica has each step done once, whichever replica takes it', async () => {
    await ok(
      a,
      'POST',
      '/v1/workflows',
      {
        slug: 'shared',
        name: 'Shared',
        steps: [
          { name: 'one', type: 'http', method: 'POST', url: `${rx.url}/one`, body: { n: '{{input.n}}' } },
          { name: 'two', type: 'http', method: 'POST', url: `${rx.url}/two`, body: { n: '{{input.n}}' } },
        ],
      },
      201,
    );
    const runs = [];
    for (let n = 0; n < 6; n++) runs.push(await ok(n % 2 ? b : a, 'POST', '/v1/workflows/shared/runs', { input: { n } }, 202));
    for (const r of runs)
      await until(`run ${r.id} completed`, async () => (await ok(b, 'GET', `/v1/workflows/shared/runs/${r.id}`)).status === 'completed', 30_000);
    for (const path of ['/one', '/two']) {
      const ns = rx.received.filter((d) => d.path === path).map((d) => d.body.n);
      expect(ns.sort()).toEqual([0, 1, 2, 3, 4, 5]);
    }
  });

  it('a cron trigger starts one run per tick across both replicas', async () => {
    await ok(a, 'POST', '/v1/workflows', { slug: 'ticking', name: 'Ticking', steps: [{ name: 'hit', type: 'http', url: `${rx.url}/tick` }] }, 201);
    const t = await ok(
      b,
      'POST',
      '/v1/workflows/ticking/triggers',
      { type: 'cron', name: 'each second', enabled: true, schedule: '* * * * * *' },
      201,
    );
    await until(
      'three ticks ran',
      async () => (await ok(a, 'GET', '/v1/workflows/ticking/runs?status=completed&limit=100')).runs.length >= 3,
      30_000,
    );
    await ok(a, 'PATCH', `/v1/workflows/ticking/triggers/${t.id}`, { enabled: false });
    await sleep(1500);
    const all = (await ok(a, 'GET', '/v1/workflows/ticking/runs?limit=100')).runs;
    await until(
      'every run ended',
      async () => {
        const now = (await ok(a, 'GET', '/v1/workflows/ticking/runs?limit=100')).runs;
        return now.every((r: { status: string }) => r.status === 'completed');
      },
      30_000,
    );
    // One run per tick: each run's dedupe key names its tick's job, whose id is derived from the tick (the same on
    // both replicas); every run maps to a tick of its own and hit the receiver once.
    const rows = await a.deps.db.kysely.selectFrom('workflow_runs').select('dedupe_key').where('trigger_id', '=', t.id).execute();
    expect(rows.length).toBe(all.length);
    const tickOf = new Map<string, string>();
    for (let at = Date.parse(t.createdAt) - (Date.parse(t.createdAt) % 1000); at <= Date.now(); at += 1000) {
      const tick = new Date(at).toISOString();
      tickOf.set(`tick:${keyedJobId(CRON_QUEUE, `sched:${scheduleName(t.id)}:${tick}`)}`, tick);
    }
    const ticks = rows.map((r) => tickOf.get(r.dedupe_key!));
    expect(ticks.every(Boolean), JSON.stringify(rows)).toBe(true);
    expect(new Set(ticks).size).toBe(ticks.length);
    expect(rx.received.filter((d) => d.path === '/tick')).toHaveLength(all.length);
  });
});
