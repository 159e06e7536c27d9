import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * Each table belongs to one domain (ADR 0017): only that domain's files name it in a query; every other
 * domain, the CLI and app.ts go through the owner's exported verbs. A new table is added here with its owner.
 */
const OWNER: Record<string, string> = {
  users: 'identity',
  api_keys: 'identity',
  organizations: 'organizations',
  memberships: 'organizations',
  projects: 'organizations',
  activity_events: 'activity',
  workspaces: 'storage',
  workspace_files: 'storage',
  storage_usage: 'storage',
  credit_ledger: 'billing',
  billing_accounts: 'billing',
  usage_events: 'billing',
  usage_rollups: 'billing',
  topups: 'billing',
  payment_events: 'billing',
  promo_codes: 'billing',
  promo_redemptions: 'billing',
  sandboxes: 'sandboxes',
  sandbox_runtime: 'sandboxes',
  templates: 'templates',
  agents: 'agents',
  threads: 'threads',
  thread_rollouts: 'threads',
  thread_events: 'threads',
  thread_run_locks: 'threads',
  model_usage: 'models',
  secrets: 'secrets',
  agent_runs: 'runs',
  tool_executions: 'tools',
  runmesh_links: 'runmesh',
  runmesh_nodes: 'runmesh',
  runmesh_settings: 'runmesh',
  runmesh_audit: 'runmesh',
  runmesh_dispatches: 'runmesh',
  channels: 'channels',
  channel_conversations: 'channels',
  channel_messages: 'channels',
  channel_privacy_requests: 'channels',
  channel_privacy_grants: 'channels',
  product_apps: 'channels',
  product_end_users: 'channels',
  channel_bindings: 'channels',
  channel_link_sessions: 'channels',
  channel_links: 'channels',
  context_sessions: 'sessions',
  context_session_tags: 'sessions',
  context_blocks: 'sessions',
  jobs: 'platform',
  job_schedules: 'platform',
  deployments: 'deployments',
  deployment_invocations: 'deployments',
  webhook_deliveries: 'deployments',
  webhook_delivery_attempts: 'deployments',
  triggers: 'triggers',
  trigger_deliveries: 'triggers',
  workflows: 'workflows',
  workflow_versions: 'workflows',
  workflow_runs: 'workflows',
  workflow_step_runs: 'workflows',
  workflow_triggers: 'workflows',
  tool_installs: 'tools',
  tool_credentials: 'tools',
  custom_tools: 'tools',
  installable_agent_installs: 'agents',
  thread_sandboxes: 'runs',
  system_settings: 'platform',
  nodes: 'platform',
  oauth_configs: 'oauth',
  oauth_connections: 'oauth',
  oauth_flows: 'oauth',
};

const QUERY = /\b(?:selectFrom|insertInto|updateTable|deleteFrom|replaceInto|mergeInto|innerJoin|leftJoin|rightJoin|fullJoin)\(\s*['"`]([a-z_]+)/g;

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return sources(p);
    return p.endsWith('.ts') && !p.endsWith('.test.ts') ? [p] : [];
  });
}

describe('table ownership', () => {
  const src = path.resolve(__dirname, '../src');

  it('every table a query names has an owner, and only its owner queries it', () => {
    const unknown: string[] = [];
    const foreign: string[] = [];
    for (const file of sources(src)) {
      const rel = path.relative(src, file).split(path.sep).join('/');
      const domain = rel.startsWith('domains/') ? rel.split('/')[1] : rel.startsWith('platform/') ? 'platform' : rel;
      for (const m of readFileSync(file, 'utf8').matchAll(QUERY)) {
        const table = m[1];
        const owner = OWNER[table];
        if (!owner) unknown.push(`${rel}: ${table}`);
        else if (owner !== domain) foreign.push(`${rel} queries ${table} (owned by ${owner})`);
      }
    }
    expect(unknown).toEqual([]);
    expect(foreign).toEqual([]);
  });

  it('route files run no queries and do not reach the database through deps', () => {
    const offenders = sources(src)
      .filter((f) => /routes[^/]*\.ts$/.test(f))
      .filter((f) => {
        const text = readFileSync(f, 'utf8');
        return [...text.matchAll(QUERY)].length > 0 || /\bdeps\.db\b|\.kysely\b/.test(text);
      })
      .map((f) => path.relative(src, f));
    expect(offenders).toEqual([]);
  });

  it('sees queries (the scan is not vacuous)', () => {
    const text = readFileSync(path.join(src, 'domains/threads/history.ts'), 'utf8');
    expect([...text.matchAll(QUERY)].map((m) => m[1])).toContain('thread_events');
  });
});
