/**
 * Installable agents: ready definitions shipped in `installable.json`. Installing one creates an agent from it,
 * installs the tools it needs and records the install, all in one transaction, so a refused install (a taken
 * agent slug, an unknown model) leaves nothing behind. The model is chosen at install time: a catalogue entry
 * cannot know which models a server offers.
 */
import { readFileSync } from 'node:fs';
import type { Selectable } from 'kysely';
import type { InstallableAgentInstallsTable } from '../../database.js';
import { exec, hasScope, isOrgAdmin, orgId, requireScope, withTx, type Ctx } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { stateKey } from '../../platform/state.js';
import { listActivity, recordActivity, type ActivityQuery } from '../activity/index.js';
import { modelGateway } from '../models/index.js';
import { listConnections } from '../oauth/index.js';
import { credentialStatus, findTool, installTool, unavailableReason } from '../tools/index.js';
import {
  InstallableCatalogue,
  type InstallableAgent,
  type InstallableAgentInstall,
  type InstallableDefinition,
  type InstallBody,
  type InstalledToolStatus,
  type InstallResult,
} from './schemas.js';
import { createAgent, deleteAgent } from './service.js';

type InstallRow = Selectable<InstallableAgentInstallsTable>;

/** The shipped catalogue, parsed once per app (a broken file fails the first request that reads it, and its test). */
const CATALOGUE = stateKey('installable-agents', () => {
  const text = readFileSync(new URL('./installable.json', import.meta.url), 'utf8');
  return InstallableCatalogue.parse(JSON.parse(text)).agents;
});

const catalogue = (ctx: Ctx): InstallableDefinition[] => ctx.deps.state.get(CATALOGUE);

function definitionOf(ctx: Ctx, slug: string): InstallableDefinition {
  const def = catalogue(ctx).find((d) => d.slug === slug);
  if (!def) throw errors.notFound('installable agent', slug);
  return def;
}

/** Whether a tool can run here: in this server's catalogue (an operator's may lack it) and configured. */
async function availability(ctx: Ctx, slug: string): Promise<{ slug: string; available: boolean; unavailableReason: string | null }> {
  const found = await findTool(ctx, slug);
  const reason = found ? unavailableReason(ctx, found.entry) : `tool ${slug} is not in this server's tool catalogue`;
  return { slug, available: reason === null, unavailableReason: reason };
}

async function toView(ctx: Ctx, def: InstallableDefinition): Promise<InstallableAgent> {
  const tools = [];
  for (const slug of def.tools) tools.push(await availability(ctx, slug));
  return { ...def, tools };
}

export async function listInstallableAgents(ctx: Ctx): Promise<InstallableAgent[]> {
  requireScope(ctx, 'agent:read');
  const out: InstallableAgent[] = [];
  for (const def of catalogue(ctx)) out.push(await toView(ctx, def));
  return out;
}

export async function getInstallableAgent(ctx: Ctx, slug: string): Promise<InstallableAgent> {
  requireScope(ctx, 'agent:read');
  return toView(ctx, definitionOf(ctx, slug));
}

const toInstall = (row: InstallRow, agentSlug: string | null): InstallableAgentInstall => ({
  id: row.id,
  slug: row.slug,
  agentId: row.agent_id,
  agentSlug,
  installedByUserId: row.user_id,
  createdAt: row.created_at,
});

/** What the caller still has to do before the agent's tools run: credentials to store, an account to connect. */
async function toolReport(ctx: Ctx, slug: string): Promise<InstalledToolStatus> {
  const status = await credentialStatus(ctx, slug);
  let oauthConnected: boolean | null = null;
  if (status.oauthProvider && hasScope(ctx, 'connections:read'))
    oauthConnected = (await listConnections(ctx, status.oauthProvider)).some((c) => c.status === 'active');
  return {
    ...(await availability(ctx, slug)),
    installed: true,
    missingCredentials: status.missingRequired,
    oauthProvider: status.oauthProvider,
    oauthConnected,
  };
}

/** Creates the agent, installs its tools (for the caller or the organization) and records the install, atomically. */
export async function installAgent(ctx: Ctx, slug: string, body: InstallBody): Promise<InstallResult> {
  requireScope(ctx, 'agent:write');
  requireScope(ctx, 'tools:write');
  const scope = body.scope ?? 'user';
  if (scope === 'organization') requireScope(ctx, 'tools:admin');
  const def = definitionOf(ctx, slug);
  const model = body.model ?? modelGateway(ctx.deps).catalogue[0]?.id;
  if (!model)
    throw errors.invalidField(
      'model',
      'this server offers no model: configure one (HANGAR_OPENAI_MODELS, HANGAR_ANTHROPIC_MODELS or HANGAR_MODELS_FILE) or pass `model`',
    );
  const missing = [];
  for (const tool of def.tools) if (!(await findTool(ctx, tool))) missing.push(tool);
  if (missing.length) throw errors.conflict(`${def.slug} needs tool(s) ${missing.join(', ')}, which this server's tool catalogue lacks`);
  const { row, agent } = await withTx(ctx, async (tx) => {
    for (const tool of def.tools) await installTool(tx, tool, scope);
    const agent = await createAgent(tx, {
      slug: body.agentSlug ?? def.slug,
      name: def.name,
      description: def.description,
      executionMode: def.executionMode,
      model,
      instructions: def.instructions,
      tools: def.tools,
      config: def.config,
      metadata: { installableAgent: def.slug },
    });
    const row: InstallRow = {
      id: prefixedId('iai'),
      org_id: orgId(tx),
      user_id: ctx.principal.userId,
      slug: def.slug,
      agent_id: agent.id,
      created_at: nowIso(),
    };
    await exec(tx).insertInto('installable_agent_installs').values(row).execute();
    await recordActivity(tx, {
      resourceType: 'installable_agent_install',
      resourceId: row.id,
      installableAgentInstallId: row.id,
      eventType: 'installable_agent.installed',
      status: 'completed',
      title: `Installable agent ${def.slug} installed as agent ${agent.slug}`,
      metadata: { slug: def.slug, agentSlug: agent.slug, model, scope },
    });
    return { row, agent };
  });
  const tools: InstalledToolStatus[] = [];
  for (const tool of def.tools) tools.push(await toolReport(ctx, tool));
  return { install: toInstall(row, agent.slug), agent, tools };
}

/** The organization's installs with their agents' current slugs: members see their own, admins every one. */
function installsQuery(ctx: Ctx) {
  let q = exec(ctx)
    .selectFrom('installable_agent_installs as i')
    .leftJoin('agents as a', (j) => j.onRef('a.id', '=', 'i.agent_id').onRef('a.org_id', '=', 'i.org_id'))
    .selectAll('i')
    .select('a.slug as agent_slug')
    .where('i.org_id', '=', orgId(ctx));
  if (!isOrgAdmin(ctx)) q = q.where('i.user_id', '=', ctx.principal.userId);
  return q;
}

/** An install the caller may see; another organization's, or (for members) another member's, is a 404. */
async function visibleInstall(ctx: Ctx, id: string): Promise<InstallRow & { agent_slug: string | null }> {
  const row = await installsQuery(ctx).where('i.id', '=', id).executeTakeFirst();
  if (!row) throw errors.notFound('installable agent install', id);
  return row;
}

export async function listInstalls(ctx: Ctx): Promise<InstallableAgentInstall[]> {
  requireScope(ctx, 'agent:read');
  const rows = await installsQuery(ctx).orderBy('i.created_at', 'desc').orderBy('i.id', 'desc').execute();
  return rows.map((r) => toInstall(r, r.agent_slug));
}

export async function getInstall(ctx: Ctx, id: string): Promise<InstallableAgentInstall> {
  requireScope(ctx, 'agent:read');
  const row = await visibleInstall(ctx, id);
  return toInstall(row, row.agent_slug);
}

/** Deletes the install and the agent it created (if still there); the tools stay installed for other agents. */
export async function uninstallAgent(ctx: Ctx, id: string): Promise<void> {
  requireScope(ctx, 'agent:write');
  const row = await visibleInstall(ctx, id);
  await withTx(ctx, async (tx) => {
    const deleted = await exec(tx)
      .deleteFrom('installable_agent_installs')
      .where('org_id', '=', orgId(tx))
      .where('id', '=', row.id)
      .executeTakeFirst();
    if (!Number(deleted.numDeletedRows)) throw errors.notFound('installable agent install', id);
    if (row.agent_slug) await deleteAgent(tx, row.agent_slug);
    await recordActivity(tx, {
      resourceType: 'installable_agent_install',
      resourceId: row.id,
      installableAgentInstallId: row.id,
      eventType: 'installable_agent.uninstalled',
      status: 'completed',
      title: `Installable agent ${row.slug} uninstalled${row.agent_slug ? ` (agent ${row.agent_slug} deleted)` : ''}`,
      metadata: { slug: row.slug, agentSlug: row.agent_slug },
    });
  });
}

/** The activity check for `installable_agent_install` resources: the same visibility as the install routes. */
export async function canSeeInstall(ctx: Ctx, id: string): Promise<boolean> {
  return Boolean(await installsQuery(ctx).where('i.id', '=', id).executeTakeFirst());
}

/** An install's events; seeing the install is what authorizes them (whoever acted). */
export async function listInstallActivity(ctx: Ctx, id: string, query: Omit<ActivityQuery, 'installable_agent_install_id'>) {
  requireScope(ctx, 'activity:read');
  const row = await visibleInstall(ctx, id);
  return listActivity(ctx, { ...query, installable_agent_install_id: row.id }, { resourceAuthorized: true });
}
