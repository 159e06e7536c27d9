/**
 * Catalogue tools in runs (ADR 0027): an agent's tools besides the sandbox ones are tool slugs. A run offers them to
 * the model with their schemas and executes each call on the server through the tools domain, as the run's user.
 */
import { jsonSchema, tool, type ToolSet } from 'ai';
import type { Ctx } from '../../platform/context.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { ROLE_SCOPES } from '../../platform/scopes.js';
import { SANDBOX_TOOLS } from '../agents/index.js';
import { executeTool, findTool, recordToolExecution, toolsNotInstalled, unavailableReason, type CatalogEntry } from '../tools/index.js';
import type { ToolOutcome } from './tools.js';

/** The catalogue tools among an agent's tools. */
export const catalogueTools = (tools: readonly string[]) => tools.filter((t) => !SANDBOX_TOOLS.includes(t));

/**
 * The run's tools as the tools domain sees them: executing a tool the agent lists is part of running the agent, so
 * the run holds tools:execute where the user's role grants it. Acting through connected accounts still needs the
 * caller's own connections:use.
 */
export function runToolsCtx(ctx: Ctx): Ctx {
  const role = ctx.principal.role;
  if (!role || !ROLE_SCOPES[role].has('tools:execute')) return ctx;
  return { ...ctx, principal: { ...ctx.principal, scopes: new Set([...ctx.principal.scopes, 'tools:execute' as const]) } };
}

/** Refuses a run whose catalogue tools cannot run: gone, unavailable here, or not installed for its user. */
export async function checkCatalogueTools(ctx: Ctx, agentSlug: string, tools: readonly string[]): Promise<void> {
  const slugs = catalogueTools(tools);
  if (!slugs.length) return;
  for (const slug of slugs) {
    const found = await findTool(ctx, slug);
    if (!found) throw errors.invalidField('agent', `agent "${agentSlug}" lists tool ${slug}, which no longer exists; update the agent`);
    const reason = unavailableReason(ctx, found.entry);
    if (reason) throw errors.invalidField('agent', `agent "${agentSlug}" needs ${slug}, and ${reason}; remove the tool from the agent`);
  }
  const missing = await toolsNotInstalled(ctx, slugs);
  if (missing.length)
    throw new AppError(
      'tool_not_installed',
      `agent "${agentSlug}" uses ${missing.join(', ')}, not installed for you or the organization: install with POST /v1/tools/{slug}/install`,
    );
}

const OAUTH_INPUTS = {
  connected_account: { type: 'string', description: 'Which connected account to act as (email, username or account id); the default one otherwise' },
  connected_connection_id: { type: 'string', description: 'The exact connection id to act through' },
};

/** What the model is offered: each catalogue tool with its input schema (OAuth tools also take the account to use). */
export async function catalogueToolDefinitions(ctx: Ctx, slugs: readonly string[]): Promise<ToolSet> {
  const out: ToolSet = {};
  for (const slug of slugs) {
    const found = await findTool(ctx, slug);
    if (!found) continue;
    const entry: CatalogEntry = found.entry;
    const schema = entry.oauth
      ? { ...entry.inputSchema, properties: { ...((entry.inputSchema.properties as object) ?? {}), ...OAUTH_INPUTS } }
      : entry.inputSchema;
    out[slug] = tool({ description: `${entry.name}. ${entry.description}`.slice(0, 1024), inputSchema: jsonSchema(schema as never) });
  }
  return out;
}

/** One catalogue tool call of a run; every failure (the tool's, or a mistake in the model's arguments) is an outcome the model sees. */
export async function runCatalogueTool(
  ctx: Ctx,
  call: { name: string; input: unknown },
  run: { runId: string; threadId: string; signal: AbortSignal },
): Promise<ToolOutcome> {
  const { connected_account, connected_connection_id, ...args } = (call.input && typeof call.input === 'object' ? call.input : {}) as Record<
    string,
    unknown
  >;
  const account = [connected_connection_id, connected_account].find((v): v is string => typeof v === 'string' && v.length > 0);
  const started = Date.now();
  try {
    const r = await executeTool(ctx, call.name, { arguments: args, ...(account ? { oauth: { account } } : {}) }, { via: 'run', ...run });
    if (r.status === 'completed') return { output: typeof r.output === 'string' ? r.output : JSON.stringify(r.output), isError: false };
    return { output: `${call.name} failed (${r.error?.code}): ${r.error?.message}`, isError: true };
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    // Refused before it ran (arguments that do not match the schema, a tool uninstalled mid-run): still one recorded call.
    await recordToolExecution(ctx, {
      tool: call.name,
      via: 'run',
      runId: run.runId,
      threadId: run.threadId,
      status: 'failed',
      errorCode: err.code,
      errorMessage: err.message,
      durationMs: Date.now() - started,
    });
    return { output: `${call.name} failed (${err.code}): ${err.message}`, isError: true };
  }
}
