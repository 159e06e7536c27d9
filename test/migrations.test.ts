import { sql, type Kysely, type Migration } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../migrations/index.js';
import { migrateToLatest } from '../src/platform/db/migrate.js';
import { checkChecksums, describeProblems, migrationFiles } from '../scripts/migration-checksums-lib.js';
import { FakeOpenAI } from './fakes/openai.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from './harness.js';

describe('migrations are append-only', () => {
  it('every migration file is the one that landed, and every file is in migrations/checksums.json', () => {
    const problems = checkChecksums();
    expect(describeProblems(problems), 'migrations/checksums.json').toBe('');
  });

  it('migrations/index.ts lists exactly the migration files, in file-name order', () => {
    expect(Object.keys(migrations)).toEqual(migrationFiles().map((f) => f.replace(/\.ts$/, '')));
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
