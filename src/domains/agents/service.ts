import type { Selectable } from 'kysely';
import type { AgentsTable } from '../../database.js';
import { exec, orgId, requireAnyScope, requireScope, withTx, type Ctx } from '../../platform/context.js';
import { isUniqueViolation } from '../../platform/db/index.js';
import { errors } from '../../platform/http/errors.js';
import { nowIso, uuid } from '../../platform/ids.js';
import { listActivity, recordActivity, type ActivityQuery } from '../activity/index.js';
import { modelGateway } from '../models/index.js';
import { resolveTemplate } from '../templates/index.js';
import { findTool } from '../tools/index.js';
import { SANDBOX_TOOLS, type Agent, type CreateAgentBody, type PatchAgentBody } from './schemas.js';

type Row = Selectable<AgentsTable>;

function toAgent(row: Row): Agent {
  return {
    id: row.id,
    slug: row.slug,
    name: row.name,
    description: row.description,
    executionMode: row.execution_mode as Agent['executionMode'],
    targetDeviceId: row.target_device_id,
    model: row.model,
    instructions: row.instructions,
    tools: JSON.parse(row.tools) as Agent['tools'],
    config: JSON.parse(row.config) as Agent['config'],
    sandboxTemplate: row.sandbox_template,
    metadata: JSON.parse(row.metadata) as Record<string, string>,
    createdByUserId: row.created_by_user_id,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** The agent a run starts (agent:run) or an activity listing names (activity:read). */
export async function findAgentRow(ctx: Ctx, slug: string): Promise<Row> {
  requireAnyScope(ctx, ['agent:run', 'activity:read', 'sessions:read', 'sessions:write']);
  return agentRow(ctx, slug);
}

/** findAgentRow without its scope check, for the verbs here (each checked its own scope first). */
async function agentRow(ctx: Ctx, slug: string): Promise<Row> {
  const row = await exec(ctx).selectFrom('agents').selectAll().where('org_id', '=', orgId(ctx)).where('slug', '=', slug).executeTakeFirst();
  if (!row) throw errors.notFound('agent', slug);
  return row;
}

/** The rules an agent definition must satisfy whichever way it was made (create or patch). */
async function validate(ctx: Ctx, a: Agent): Promise<void> {
  if (a.executionMode === 'local-desktop' && !a.targetDeviceId) {
    throw errors.invalidField('targetDeviceId', 'is required for a local-desktop agent: it names the device the agent runs on');
  }
  if (a.executionMode !== 'local-desktop' && a.targetDeviceId) {
    throw errors.invalidField('targetDeviceId', `applies to local-desktop agents only (this one is ${a.executionMode})`);
  }
  if (a.executionMode === 'managed') {
    const needSandbox = a.tools.filter((t) => SANDBOX_TOOLS.includes(t));
    if (needSandbox.length)
      throw errors.invalidField('tools', `${needSandbox.join(', ')} run in a sandbox; a managed agent has none (use executionMode in_sandbox)`);
  }
  const catalogueTools = a.tools.filter((t) => !SANDBOX_TOOLS.includes(t));
  const unknown: string[] = [];
  for (const slug of catalogueTools) if (!(await findTool(ctx, slug))) unknown.push(slug);
  if (unknown.length) throw errors.invalidField('tools', `unknown tool(s) ${unknown.join(', ')}: GET /v1/tools lists the catalogue`);
  if (a.model && !modelGateway(ctx.deps).catalogue.some((m) => m.id === a.model)) {
    throw errors.invalidField('model', `unknown model "${a.model}"; GET /v1/models/available lists the models`);
  }
  if (a.sandboxTemplate) {
    if (a.executionMode !== 'in_sandbox') throw errors.invalidField('sandboxTemplate', 'applies to in_sandbox agents only');
    await resolveTemplate(ctx, a.sandboxTemplate).catch(() => {
      throw errors.invalidField('sandboxTemplate', `unknown template "${a.sandboxTemplate}"`);
    });
  }
}

function agentActivity(ctx: Ctx, row: Row, eventType: string, title: string, metadata: Record<string, unknown> = {}) {
  return recordActivity(ctx, {
    resourceType: 'agent',
    resourceId: row.id,
    eventType,
    status: 'completed',
    title,
    metadata: { slug: row.slug, ...metadata },
  });
}

export async function createAgent(ctx: Ctx, body: CreateAgentBody): Promise<Agent> {
  requireScope(ctx, 'agent:write');
  const now = nowIso();
  const row: Row = {
    id: uuid(),
    org_id: orgId(ctx),
    slug: body.slug,
    name: body.name ?? body.slug,
    description: body.description ?? null,
    execution_mode: body.executionMode,
    target_device_id: body.targetDeviceId ?? null,
    model: body.model ?? null,
    instructions: body.instructions ?? null,
    tools: JSON.stringify([...new Set(body.tools)]),
    config: JSON.stringify(body.config),
    sandbox_template: body.sandboxTemplate ?? null,
    metadata: JSON.stringify(body.metadata),
    created_by_user_id: ctx.principal.userId,
    created_at: now,
    updated_at: now,
  };
  await validate(ctx, toAgent(row));
  try {
    await withTx(ctx, async (tx) => {
      await exec(tx).insertInto('agents').values(row).execute();
      await agentActivity(tx, row, 'agent.created', `Agent ${row.slug} created`);
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw errors.conflict(`your organization already has an agent "${body.slug}"`);
    throw err;
  }
  return toAgent(row);
}

export async function listAgents(ctx: Ctx): Promise<Agent[]> {
  requireScope(ctx, 'agent:read');
  const rows = await exec(ctx).selectFrom('agents').selectAll().where('org_id', '=', orgId(ctx)).orderBy('slug').execute();
  return rows.map(toAgent);
}

export async function getAgent(ctx: Ctx, slug: string): Promise<Agent> {
  requireScope(ctx, 'agent:read');
  return toAgent(await agentRow(ctx, slug));
}

export async function updateAgent(ctx: Ctx, slug: string, body: PatchAgentBody): Promise<Agent> {
  requireScope(ctx, 'agent:write');
  const row = await agentRow(ctx, slug);
  const current = toAgent(row);
  const next: Agent = {
    ...current,
    ...Object.fromEntries(Object.entries(body).filter(([, v]) => v !== undefined)),
    updatedAt: nowIso(),
  } as Agent;
  if (body.executionMode && body.executionMode !== 'local-desktop' && body.targetDeviceId === undefined) next.targetDeviceId = null;
  if (body.executionMode && body.executionMode !== 'in_sandbox' && body.sandboxTemplate === undefined) next.sandboxTemplate = null;
  await validate(ctx, next);
  const changed = Object.keys(body).filter((k) => (body as Record<string, unknown>)[k] !== undefined);
  await withTx(ctx, async (tx) => {
    await exec(tx)
      .updateTable('agents')
      .set({
        name: next.name,
        description: next.description,
        execution_mode: next.executionMode,
        target_device_id: next.targetDeviceId,
        model: next.model,
        instructions: next.instructions,
        tools: JSON.stringify([...new Set(next.tools)]),
        config: JSON.stringify(next.config),
        sandbox_template: next.sandboxTemplate,
        metadata: JSON.stringify(next.metadata),
        updated_at: next.updatedAt,
      })
      .where('id', '=', row.id)
      .execute();
    await agentActivity(tx, row, 'agent.updated', `Agent ${row.slug} updated`, { fields: changed });
  });
  return next;
}

export async function deleteAgent(ctx: Ctx, slug: string): Promise<void> {
  requireScope(ctx, 'agent:write');
  const row = await agentRow(ctx, slug);
  await withTx(ctx, async (tx) => {
    await exec(tx).deleteFrom('agents').where('id', '=', row.id).execute();
    await agentActivity(tx, row, 'agent.deleted', `Agent ${row.slug} deleted`);
  });
}

export async function canSeeAgent(ctx: Ctx, id: string): Promise<boolean> {
  const row = await exec(ctx).selectFrom('agents').select('id').where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();
  return Boolean(row);
}

/** An agent's activity: seeing the agent is what authorizes its events (and its runs'). */
export async function listAgentActivity(ctx: Ctx, slug: string, query: Omit<ActivityQuery, 'resource_type' | 'resource_id'>) {
  const row = await findAgentRow(ctx, slug);
  return listActivity(ctx, { ...query, resource_type: 'agent', resource_id: row.id }, { resourceAuthorized: true });
}
