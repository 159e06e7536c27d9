import { sql, type Kysely, type Migration } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../migrations/index.js';
import { migrateToLatest, productMigrations } from '../src/platform/db/migrate.js';
import { checkChecksums, describeProblems, migrationFiles } from '../scripts/migration-checksums-lib.js';
import { FakeOpenAI } from './fakes/openai.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from './harness.js';

describe('migrations are append-only', () => {
  it('every migration file is the one that landed, and every file has a recorded checksum', () => {
    const problems = checkChecksums();
    expect(describeProblems(problems), 'migration checksums').toBe('');
  });

  it('the product runs exactly the migration files: the frozen migrations/index.ts list and every later file', async () => {
    const files = migrationFiles().map((f) => f.replace(/\.ts$/, ''));
    expect(Object.keys(await productMigrations()).sort()).toEqual(files);
    expect(files).toEqual(expect.arrayContaining(Object.keys(migrations)));
    // A file found by name is a migration module like those listed.
    const found = (await productMigrations())['20261128T1800_deployment_sweep'];
    expect(typeof found?.up).toBe('function');
  });
});

/**
 * The migrations as they were before `tool_executions` was added to 20261122T0600_runs after it had landed:
 * a database migrated then has 0600 recorded as applied and no such table.
 */
function migrationsBeforeToolExecutions(): Record<string, Migration> {
  const list = migrationsUpTo('20261122T0600_runs');
  const runs = migrations['20261122T0600_runs']!;
  list['20261122T0600_runs'] = {
    ...runs,
    async up(db: Kysely<any>) {
      await runs.up(db);
      await db.schema.dropTable('tool_executions').execute();
    },
  };
  return list;
}

/** The tables of the database's own schema (PostgreSQL's introspection lists every schema's: other test files' too). */
async function ownTables(db: Kysely<any>, dialect: 'sqlite' | 'postgres') {
  const tables = await db.introspection.getTables();
  if (dialect === 'sqlite') return tables;
  const { rows } = await sql<{ schema: string }>`select current_schema() as schema`.execute(db);
  return tables.filter((t) => t.schema === rows[0]?.schema);
}

describe('a database migrated before tool_executions was added to 20261122T0600_runs', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let admin: Actor;

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness(
      { HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_OPENAI_MODELS: 'm1' },
      {
        prepareDatabase: async (db) => {
          await migrateToLatest(db.kysely, db.dialect, migrationsBeforeToolExecutions());
          const tables = (await ownTables(db.kysely, db.dialect)).map((t) => t.name);
          expect(tables).toContain('agent_runs');
          expect(tables).not.toContain('tool_executions');
        },
      },
    );
    admin = await createOrgAdmin(h);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('has the table and its index once migrated to the latest', async () => {
    const tables = await ownTables(h.deps.db.kysely, h.deps.db.dialect);
    const table = tables.find((t) => t.name === 'tool_executions');
    // 20261127T1600_tools rebuilt it later with the columns an API call records (no run, how, error, chain steps).
    expect(table?.columns.map((c) => c.name).sort()).toEqual([
      'created_at',
      'credential_sources',
      'duration_ms',
      'error_code',
      'id',
      'org_id',
      'run_id',
      'status',
      'tool',
      'user_id',
      'via',
    ]);
    const indexes =
      h.deps.db.dialect === 'postgres'
        ? await sql<{
            name: string;
          }>`select indexname as name from pg_indexes where schemaname = current_schema() and tablename = 'tool_executions'`.execute(h.deps.db.kysely)
        : await sql<{ name: string }>`select name from sqlite_master where type = 'index' and tbl_name = 'tool_executions'`.execute(h.deps.db.kysely);
    expect(indexes.rows.map((r) => r.name)).toContain('tool_executions_org_time');
  });

  it('a run whose model calls a tool completes and counts the tool execution', async () => {
    const agent = await h.app.inject({
      method: 'POST',
      url: '/v1/agents',
      headers: admin.headers,
      payload: { slug: 'plain', model: 'm1', instructions: 'Be terse.' },
    });
    expect(agent.statusCode, agent.body).toBe(201);
    fake.script({ toolCalls: [{ id: 'call_1', name: 'exec_command', arguments: JSON.stringify({ cmd: 'true' }) }] }, { text: 'done' });
    const res = await h.app.inject({ method: 'POST', url: '/v1/run', headers: admin.headers, payload: { agent: 'plain', prompt: 'Run true' } });
    expect(res.statusCode, res.body).toBe(200);
    const run = json(res).data;
    expect(run).toMatchObject({ status: 'completed', result: 'done', error: null });
    const counted = await h.deps.db.kysely.selectFrom('tool_executions').selectAll().where('run_id', '=', run.runId).execute();
    expect(counted.map((t) => [t.tool, t.org_id])).toEqual([['exec_command', admin.orgId]]);
  });
});

/** The product's migrations up to and including `last`. */
function migrationsUpTo(last: string): Record<string, Migration> {
  const names = Object.keys(migrations);
  return Object.fromEntries(names.slice(0, names.indexOf(last) + 1).map((n) => [n, migrations[n]!]));
}

describe('a database migrated through 20261127T2000_billing before usage_rollups existed', () => {
  let h: Harness;
  const t = (day: string, hh: string) => `${day}T${hh}:00:00.000Z`;

  beforeAll(async () => {
    h = await createHarness(
      {},
      {
        prepareDatabase: async (db) => {
          await migrateToLatest(db.kysely, db.dialect, migrationsUpTo('20261127T2000_billing'));
          // As the billing migration first landed: without usage_rollups and its index (a later version has both).
          await db.kysely.schema.dropTable('usage_rollups').execute();
          await db.kysely.schema.dropIndex('usage_events_org_state').execute();
          expect((await ownTables(db.kysely, db.dialect)).map((x) => x.name)).not.toContain('usage_rollups');
          // As the schema was then (not today's Database type).
          const old = db.kysely as Kysely<any>;
          await old
            .insertInto('users')
            .values({
              id: 'usr_old',
              email: 'old@example.test',
              name: 'Old',
              idp_issuer: 'hangar',
              idp_subject: 'usr_old',
              created_at: t('2026-11-01', '00'),
            })
            .execute();
          await old
            .insertInto('organizations')
            .values({
              id: 'org_old',
              idp_org_id: 'idp_old',
              name: 'Old',
              slug: 'old',
              plan: 'free',
              enterprise: 0,
              settings: '{}',
              default_project_id: 'prj_old',
              created_by_user_id: 'usr_old',
              created_at: t('2026-11-01', '00'),
            })
            .execute();
          const event = (id: string, over: Record<string, unknown>) => ({
            id,
            org_id: 'org_old',
            user_id: 'usr_a',
            kind: 'model_tokens',
            source_id: id,
            subject: 'm1',
            tier: 'platform',
            input_tokens: 0,
            output_tokens: 0,
            cached_input_tokens: 0,
            reasoning_tokens: 0,
            quantity: 0,
            cost_micros: 0,
            state: 'settled',
            ledger_entry_id: null,
            metadata: null,
            started_at: t('2026-11-20', '10'),
            ended_at: null,
            created_at: t('2026-11-20', '10'),
            updated_at: t('2026-11-20', '10'),
            ...over,
          });
          await old
            .insertInto('usage_events')
            .values([
              event('e1', { input_tokens: 100, output_tokens: 10, cost_micros: 30 }),
              event('e2', { input_tokens: 50, output_tokens: 5, cost_micros: 15, created_at: t('2026-11-20', '23') }),
              event('e3', { input_tokens: 7, cost_micros: 2, created_at: t('2026-11-21', '01') }),
              event('e4', { kind: 'sandbox_runtime', subject: 'sbx_1', quantity: 60, cost_micros: 40, state: 'forgiven' }),
              event('e5', { kind: 'sandbox_runtime', subject: 'sbx_2', quantity: 30, cost_micros: 20, state: 'forgiven', user_id: null }),
              event('e6', { input_tokens: 999, cost_micros: 999, state: 'pending' }),
            ])
            .execute();
        },
      },
    );
  });
  afterAll(() => h?.close());

  it('sums the final events already there into usage_rollups once, grouped as the meter groups them', async () => {
    const rows = await h.deps.db.kysely
      .selectFrom('usage_rollups')
      .select(['day', 'user_id', 'kind', 'subject', 'state', 'events', 'input_tokens', 'output_tokens', 'quantity', 'cost_micros'])
      .where('org_id', '=', 'org_old')
      .orderBy('day')
      .orderBy('kind')
      .orderBy('user_id')
      .execute();
    expect(
      rows.map((r) => ({
        ...r,
        events: Number(r.events),
        input_tokens: Number(r.input_tokens),
        output_tokens: Number(r.output_tokens),
        quantity: Number(r.quantity),
        cost_micros: Number(r.cost_micros),
      })),
    ).toEqual([
      {
        day: '2026-11-20',
        user_id: 'usr_a',
        kind: 'model_tokens',
        subject: 'm1',
        state: 'settled',
        events: 2,
        input_tokens: 150,
        output_tokens: 15,
        quantity: 0,
        cost_micros: 45,
      },
      {
        day: '2026-11-20',
        user_id: '',
        kind: 'sandbox_runtime',
        subject: '',
        state: 'forgiven',
        events: 1,
        input_tokens: 0,
        output_tokens: 0,
        quantity: 30,
        cost_micros: 20,
      },
      {
        day: '2026-11-20',
        user_id: 'usr_a',
        kind: 'sandbox_runtime',
        subject: '',
        state: 'forgiven',
        events: 1,
        input_tokens: 0,
        output_tokens: 0,
        quantity: 60,
        cost_micros: 40,
      },
      {
        day: '2026-11-21',
        user_id: 'usr_a',
        kind: 'model_tokens',
        subject: 'm1',
        state: 'settled',
        events: 1,
        input_tokens: 7,
        output_tokens: 0,
        quantity: 0,
        cost_micros: 2,
      },
    ]);
  });
});
