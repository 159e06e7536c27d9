import { CompiledQuery } from 'kysely';
import { exec, isOrgAdmin, orgId, requireScope, type Ctx, type Deps } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import { decodeCursor, toPage } from '../../platform/http/pagination.js';
import type { Dialect } from '../../platform/db/index.js';
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

/** The fields every event has, in the order the API has always written them (the schema lists them otherwise). */
const REQUIRED_FIELDS = [
  ['id', 'id'],
  ['resourceType', 'resource_type'],
  ['resourceId', 'resource_id'],
  ['eventType', 'event_type'],
  ['severity', 'severity'],
  ['status', 'status'],
  ['title', 'title'],
  ['summary', 'summary'],
  ['actorUserId', 'actor_user_id'],
  ['occurredAt', 'occurred_at'],
] as const;

/** The fields an event has only when set (a null or empty column leaves the key out), then `metadata`. */
const OPTIONAL_FIELDS = [
  ['threadId', 'thread_id'],
  ['agentRunId', 'agent_run_id'],
  ['sandboxId', 'sandbox_id'],
  ['workspaceId', 'workspace_id'],
  ['toolSlug', 'tool_slug'],
  ['installableAgentInstallId', 'installable_agent_install_id'],
  ['codeExecutionId', 'code_execution_id'],
  ['runmeshNodeId', 'runmesh_node_id'],
] as const;

/**
 * An event's JSON text (an ActivityEvent), written by the database so that a page's rows never become JS values:
 * one string per row instead of 21 columns, and no object to build and serialize again. The bytes are those
 * JSON.stringify gave for the object the rows used to be mapped to: same keys, same order, same string escapes
 * (SQLite's json_quote and PostgreSQL's to_json escape exactly what JSON.stringify escapes, as the tests check
 * over every BMP character). `metadata` is stored as JSON.stringify wrote it; it goes through json() / ::json so
 * that a row could never write outside its own value, and comes out unchanged.
 */
function eventJson(dialect: Dialect): string {
  const optional = (quote: (column: string) => string) =>
    OPTIONAL_FIELDS.map(([key, column]) => `case when "${column}" <> '' then ',"${key}":' || ${quote(column)} end`).join(', ');
  if (dialect === 'sqlite') {
    // json_object writes the fields every event has in one call; its closing brace goes so the optional ones follow.
    const required = REQUIRED_FIELDS.map(([key, column]) => `'${key}', "${column}"`).join(', ');
    return (
      `concat(rtrim(json_object(${required}), '}'), ${optional((c) => `json_quote("${c}")`)}, ` +
      `case when "metadata" <> '' then ',"metadata":' || json("metadata") end, '}')`
    );
  }
  // PostgreSQL's json_build_object puts spaces around its colons; to_json quotes one value exactly as JSON.stringify.
  const quote = (c: string) => `to_json("${c}")::text`;
  const required = REQUIRED_FIELDS.map(
    ([key, column], i) => `'${i === 0 ? '{' : ','}"${key}":', ${column === 'actor_user_id' ? `coalesce(${quote(column)}, 'null')` : quote(column)}`,
  ).join(', ');
  return `concat(${required}, ${optional(quote)}, case when "metadata" <> '' then ',"metadata":' || "metadata"::json::text end, '}')`;
}

const EVENT_JSON = { sqlite: eventJson('sqlite'), postgres: eventJson('postgres') } as const;

/**
 * Lists the organization's activity, newest first, each event as its JSON text (`events` is them joined with
 * commas, ready to go between brackets). Non-admins see only their own actions unless the request is authorized
 * by access to the resource (`resourceAuthorized`, or a registered check).
 */
export async function listActivityJson(
  ctx: Ctx,
  query: ActivityQuery,
  opts: { resourceAuthorized?: boolean } = {},
): Promise<{ events: string; hasMore: boolean; nextCursor: string | null }> {
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

  // Each condition beside its values, so that the SQL text and its parameters cannot disagree.
  const conditions: string[] = ['"org_id" = ?'];
  const values: (string | number)[] = [org];
  for (const [param, column] of FILTER_COLUMNS) {
    const value = query[param];
    if (value === undefined) continue;
    conditions.push(`"${column}" = ?`);
    values.push(value);
  }
  const actor = query.actor_user_id ?? (admin || resourceAuthorized ? undefined : ctx.principal.userId);
  if (actor) {
    conditions.push('"actor_user_id" = ?');
    values.push(actor);
  }
  if (query.since) {
    conditions.push('"occurred_at" >= ?');
    values.push(new Date(query.since).toISOString());
  }
  if (query.until) {
    conditions.push('"occurred_at" <= ?');
    values.push(new Date(query.until).toISOString());
  }
  if (query.cursor) {
    const [at, id] = decodeCursor(query.cursor, 2);
    if (typeof at !== 'string' || typeof id !== 'string') throw errors.invalidField('cursor', 'is not a cursor this endpoint issued');
    conditions.push('("occurred_at" < ? or ("occurred_at" = ? and "id" < ?))');
    values.push(at, at, id);
  }
  values.push(query.limit + 1);

  // Written here rather than with Kysely's builder, whose building and compiling on every request cost more than
  // running the query: the conditions, keyset and order newestFirstPage writes. Column names come from this file;
  // every value is a parameter (PostgreSQL numbers its placeholders).
  const dialect = ctx.deps.db.dialect;
  let where = `${conditions.join(' and ')} order by "occurred_at" desc, "id" desc limit ?`;
  if (dialect === 'postgres') {
    let n = 0;
    where = where.replace(/\?/g, () => `$${++n}`);
  }
  const text = `select ${EVENT_JSON[dialect]} as "event", "occurred_at", "id" from "activity_events" where ${where}`;
  const { rows } = await exec(ctx).executeQuery<{ event: string; occurred_at: string; id: string }>(CompiledQuery.raw(text, values));
  const p = toPage(rows, query.limit, (r) => [r.occurred_at, r.id]);
  const events = new Array<string>(p.items.length);
  for (let i = 0; i < p.items.length; i++) events[i] = p.items[i]!.event;
  return { events: events.join(','), hasMore: p.hasMore, nextCursor: p.nextCursor };
}

/** `listActivityJson` with the events as objects, for routes that return them inside a larger answer. */
export async function listActivity(ctx: Ctx, query: ActivityQuery, opts: { resourceAuthorized?: boolean } = {}) {
  const p = await listActivityJson(ctx, query, opts);
  return { events: JSON.parse(`[${p.events}]`) as ActivityEvent[], hasMore: p.hasMore, nextCursor: p.nextCursor };
}
