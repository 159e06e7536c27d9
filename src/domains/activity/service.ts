import type { Selectable } from 'kysely';
import type { ActivityEventsTable } from '../../database.js';
import { exec, isOrgAdmin, orgId, requireScope, type Ctx, type Deps } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import { newestFirstPage } from '../../platform/db/pages.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { stateKey } from '../../platform/state.js';
import type { ActivityEvent, ActivityQuery, ResourceType } from './schemas.js';

export interface ActivityInput {
  resourceType: ResourceType;
  resourceId: string;
  eventType: string;
  status: string;
  title: string;
  summary?: string;
  severity?: 'info' | 'warning' | 'error';
  threadId?: string;
  agentRunId?: string;
  sandboxId?: string;
  workspaceId?: string;
  toolSlug?: string;
  installableAgentInstallId?: string;
  codeExecutionId?: string;
  runmeshNodeId?: string;
  metadata?: Record<string, unknown>;
}

/** Records one activity event in the caller's transaction, so it exists exactly when the change does. */
export async function recordActivity(ctx: Ctx, event: ActivityInput, org = orgId(ctx)): Promise<string> {
  const id = prefixedId('act');
  await exec(ctx)
    .insertInto('activity_events')
    .values({
      id,
      org_id: org,
      resource_type: event.resourceType,
      resource_id: event.resourceId,
      event_type: event.eventType,
      severity: event.severity ?? (event.status === 'failed' ? 'error' : 'info'),
      status: event.status,
      title: event.title,
      summary: event.summary ?? '',
      actor_user_id: ctx.principal.userId,
      actor_api_key_id: ctx.principal.apiKeyId,
      thread_id: event.threadId ?? null,
      agent_run_id: event.agentRunId ?? null,
      sandbox_id: event.sandboxId ?? null,
      workspace_id: event.workspaceId ?? null,
      tool_slug: event.toolSlug ?? null,
      installable_agent_install_id: event.installableAgentInstallId ?? null,
      code_execution_id: event.codeExecutionId ?? null,
      runmesh_node_id: event.runmeshNodeId ?? null,
      metadata: event.metadata ? JSON.stringify(event.metadata) : null,
      occurred_at: nowIso(),
    })
    .execute();
  return id;
}

type AccessCheck = (ctx: Ctx, resourceId: string) => Promise<boolean>;
type HiddenCheck = { type: ResourceType; check: (ctx: Ctx, id: string) => Promise<boolean> };

/**
 * How activity filters are checked against the domains that own the resources, one registry per app: buildApp
 * registers each domain's checks (`registerSandboxActivity(registry)`, ...) before the routes serve.
 */
export class ActivityRegistry {
  readonly accessChecks = new Map<string, AccessCheck>();
  readonly hiddenChecks = new Map<'sandbox_id' | 'thread_id', HiddenCheck>();

  /** How to tell whether the caller may see a resource, for `resource_type`+`resource_id` filters. */
  resource(type: ResourceType, check: AccessCheck): void {
    this.accessChecks.set(type, check);
  }

  /**
   * How to tell that a filter value names a resource that exists in the organization but is hidden from the
   * caller: such a filter is a 404, as the resource's own routes answer (an unknown id just matches nothing, so
   * events of deleted resources stay readable).
   */
  hiddenFilter(param: 'sandbox_id' | 'thread_id', type: ResourceType, check: HiddenCheck['check']): void {
    this.hiddenChecks.set(param, { type, check });
  }
}

const ACTIVITY_REGISTRY = stateKey('activity', () => new ActivityRegistry());

/** The app's activity registry (on its Deps). */
export const activityRegistry = (deps: Deps): ActivityRegistry => deps.state.get(ACTIVITY_REGISTRY);

const FILTER_COLUMNS = [
  ['event_type', 'event_type'],
  ['severity', 'severity'],
  ['status', 'status'],
  ['thread_id', 'thread_id'],
  ['agent_run_id', 'agent_run_id'],
  ['sandbox_id', 'sandbox_id'],
  ['workspace_id', 'workspace_id'],
  ['tool_slug', 'tool_slug'],
  ['installable_agent_install_id', 'installable_agent_install_id'],
  ['code_execution_id', 'code_execution_id'],
  ['runmesh_node_id', 'runmesh_node_id'],
  ['resource_type', 'resource_type'],
  ['resource_id', 'resource_id'],
] as const;

function toEvent(row: Selectable<ActivityEventsTable>): ActivityEvent {
  const e: ActivityEvent = {
    id: row.id,
    resourceType: row.resource_type,
    resourceId: row.resource_id,
    eventType: row.event_type,
    severity: row.severity as ActivityEvent['severity'],
    status: row.status,
    title: row.title,
    summary: row.summary,
    actorUserId: row.actor_user_id,
    occurredAt: row.occurred_at,
  };
  if (row.thread_id) e.threadId = row.thread_id;
  if (row.agent_run_id) e.agentRunId = row.agent_run_id;
  if (row.sandbox_id) e.sandboxId = row.sandbox_id;
  if (row.workspace_id) e.workspaceId = row.workspace_id;
  if (row.tool_slug) e.toolSlug = row.tool_slug;
  if (row.installable_agent_install_id) e.installableAgentInstallId = row.installable_agent_install_id;
  if (row.code_execution_id) e.codeExecutionId = row.code_execution_id;
  if (row.runmesh_node_id) e.runmeshNodeId = row.runmesh_node_id;
  if (row.metadata) e.metadata = JSON.parse(row.metadata);
  return e;
}

/**
 * Lists the organization's activity, newest first. Non-admins see only their own actions unless
 * the request is authorized by access to the resource (`resourceAuthorized`, or a registered check).
 */
export async function listActivity(ctx: Ctx, query: ActivityQuery, opts: { resourceAuthorized?: boolean } = {}) {
  requireScope(ctx, 'activity:read');
  const org = orgId(ctx);
  const admin = isOrgAdmin(ctx);
  if (query.resource_id && !query.resource_type) {
    throw errors.invalidField('resource_id', 'requires resource_type');
  }
  if (query.actor_user_id && query.actor_user_id !== ctx.principal.userId && !admin) {
    throw errors.forbidden('actor_user_id other than your own requires organization admin access');
  }
  if (query.since && query.until && new Date(query.since) > new Date(query.until)) {
    throw errors.invalidField('since', 'must not be after until');
  }
  let resourceAuthorized = opts.resourceAuthorized ?? false;
  if (!resourceAuthorized && query.resource_type && query.resource_id) {
    const check = activityRegistry(ctx.deps).accessChecks.get(query.resource_type);
    if (check) {
      if (!(await check(ctx, query.resource_id))) throw errors.notFound(query.resource_type, query.resource_id);
      resourceAuthorized = true;
    }
  }

  // A filter naming a resource hidden from the caller answers as if it did not exist (another member's sandbox).
  for (const [param, hidden] of activityRegistry(ctx.deps).hiddenChecks) {
    const value = query[param];
    if (value !== undefined && (await hidden.check(ctx, value))) throw errors.notFound(hidden.type, value);
  }

  let q = exec(ctx).selectFrom('activity_events').selectAll().where('org_id', '=', org);
  for (const [param, column] of FILTER_COLUMNS) {
    const value = query[param];
    if (value !== undefined) q = q.where(column, '=', value);
  }
  const actor = query.actor_user_id ?? (admin || resourceAuthorized ? undefined : ctx.principal.userId);
  if (actor) q = q.where('actor_user_id', '=', actor);
  if (query.since) q = q.where('occurred_at', '>=', new Date(query.since).toISOString());
  if (query.until) q = q.where('occurred_at', '<=', new Date(query.until).toISOString());
  const p = await newestFirstPage(q, { time: 'occurred_at', id: 'id' }, query);
  return { events: p.items.map(toEvent), hasMore: p.hasMore, nextCursor: p.nextCursor };
}
