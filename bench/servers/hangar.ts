/**
 * Hangar as in production (embedded SQLite, silent log, no response validation) on a fresh temp data dir,
 * seeded through the product's own service functions, then listening on 127.0.0.1:<ephemeral port>.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { buildApp, closeDeps, createDeps } from '../../src/app.js';
import { parseConfig } from '../../src/config.js';
import type { ActivityEventsTable } from '../../src/database.js';
import { bootstrapOrganization } from '../../src/domains/organizations/index.js';
import type { Deps } from '../../src/platform/context.js';
import type { App } from '../../src/platform/http/server.js';
import { base62 } from '../../src/platform/ids.js';
import { serveChild } from '../lib/child.js';
import { BENCH_BOOTSTRAP } from '../lib/in-process.js';

export interface HangarOptions {
  /** Activity events to seed in the organization. */
  activityEvents?: number;
  /** Extra configuration, as environment variables (e.g. a tools catalogue file). */
  env?: Record<string, string>;
}

export interface HangarInfo {
  apiKey: string;
  orgId: string;
  userId: string;
  dataDir: string;
  seedMs: number;
}

let dataDir: string | undefined;
let deps: Deps | undefined;
let app: App | undefined;

const SAMPLE_EVENTS = [
  { resource_type: 'sandbox', event_type: 'sandbox.started', status: 'running', title: 'Sandbox started', col: 'sandbox_id' },
  { resource_type: 'sandbox', event_type: 'sandbox.stopped', status: 'stopped', title: 'Sandbox stopped', col: 'sandbox_id' },
  { resource_type: 'agent', event_type: 'agent.run.completed', status: 'completed', title: 'Agent run completed', col: 'agent_run_id' },
  { resource_type: 'thread', event_type: 'thread.message.created', status: 'created', title: 'Message posted', col: 'thread_id' },
  { resource_type: 'tool', event_type: 'tool.call.failed', status: 'failed', title: 'Tool call failed', col: 'tool_slug' },
  { resource_type: 'workspace', event_type: 'workspace.file.uploaded', status: 'created', title: 'File uploaded', col: 'workspace_id' },
  { resource_type: 'code_execution', event_type: 'code_execution.finished', status: 'completed', title: 'Code ran', col: 'code_execution_id' },
] as const;

/** Inserts `count` events for `org`, newest `spacingMs` before now, spaced `spacingMs` apart, in one transaction. */
async function seedActivity(deps: Deps, org: string, userId: string, apiKeyId: string | null, count: number) {
  const spacingMs = 37_000;
  const start = Date.now() - spacingMs;
  const rows: ActivityEventsTable[] = [];
  for (let i = 0; i < count; i++) {
    const t = start - i * spacingMs - (i % 7) * 1000;
    const s = SAMPLE_EVENTS[i % SAMPLE_EVENTS.length]!;
    const resourceId = `${s.resource_type.slice(0, 3)}_${base62(16)}`;
    const row: ActivityEventsTable = {
      id: `act_${t.toString(36).padStart(9, '0')}${base62(14)}`,
      org_id: org,
      resource_type: s.resource_type,
      resource_id: resourceId,
      event_type: s.event_type,
      severity: s.status === 'failed' ? 'error' : 'info',
      status: s.status,
      title: s.title,
      summary: `${s.title} (${i}) by the benchmark seed, with a summary of typical length`,
      actor_user_id: userId,
      actor_api_key_id: apiKeyId,
      thread_id: null,
      agent_run_id: null,
      sandbox_id: null,
      workspace_id: null,
      tool_slug: null,
      installable_agent_install_id: null,
      code_execution_id: null,
      runmesh_node_id: null,
      metadata: i % 3 === 0 ? JSON.stringify({ durationMs: 100 + (i % 900), attempt: 1 + (i % 3), region: 'local' }) : null,
      occurred_at: new Date(t).toISOString(),
    };
    row[s.col] = s.col === 'tool_slug' ? 'web-search' : resourceId;
    if (s.resource_type === 'agent') row.thread_id = `thr_${base62(16)}`;
    rows.push(row);
  }
  const CHUNK = 500; // 21 columns × 500 rows stays well under SQLite's bound-parameter limit
  await deps.db.kysely.transaction().execute(async (trx) => {
    for (let i = 0; i < rows.length; i += CHUNK) {
      await trx
        .insertInto('activity_events')
        .values(rows.slice(i, i + CHUNK))
        .execute();
    }
  });
}

serveChild(
  async (options: HangarOptions = {}) => {
    const t0 = performance.now();
    dataDir = mkdtempSync(path.join(tmpdir(), 'hangar-bench-'));
    const config = parseConfig({
      HANGAR_DATA_DIR: dataDir,
      LOG_LEVEL: 'silent',
      HANGAR_SECRET_KEY: randomBytes(32).toString('hex'),
      HOST: '127.0.0.1',
      PORT: '0',
      // The execute bench's one organization may use the whole pool (it measures the sandbox, not the fair share).
      HANGAR_EXECUTE_ORG_CONCURRENCY: process.env.HANGAR_EXECUTE_ORG_CONCURRENCY,
      ...options.env,
    });
    deps = await createDeps(config);

    const { user, org, key } = await bootstrapOrganization(deps, BENCH_BOOTSTRAP);
    if (options.activityEvents) await seedActivity(deps, org.id, user.id, key.id, options.activityEvents);
    const seedMs = performance.now() - t0;

    app = await buildApp(deps);
    await app.listen({ host: config.host, port: 0 });
    const address = app.server.address();
    const info: HangarInfo = { apiKey: key.key, orgId: org.id, userId: user.id, dataDir, seedMs };
    return { port: typeof address === 'object' && address ? address.port : 0, info: { ...info } };
  },
  async () => {
    try {
      if (app) await app.close();
      if (deps) await closeDeps(deps);
    } finally {
      if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    }
  },
);
