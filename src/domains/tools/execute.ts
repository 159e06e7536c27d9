/**
 * Server-side tool execution (ADR 0027): the tool must be installed, its arguments match its schema, its
 * credentials come from the chain, and its request goes out through the egress guard. Every call, failed or not,
 * is one `tool_executions` row and one activity event, written together.
 */
import { requireScope, withTx, type Ctx } from '../../platform/context.js';
import { EgressError, egressRequest } from '../../platform/http/egress.js';
import { errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { recordUsage, settleAfterCommit } from '../billing/index.js';
import { toolFetch, toolPolicy, validatorFor } from './catalog.js';
import { resolveCredentials } from './credentials.js';
import type { HttpExecution } from './definition.js';
import { httpRequestFromArgs, httpRequestOutput } from './http-request.js';
import { buildRequest, capOutput, mapResponse, ToolArgumentError, type BuiltRequest } from './http-tool.js';
import { callMcpTool, McpError } from './mcp.js';
import * as repo from './repo.js';
import type { CredentialStep, ExecuteBody, ToolExecution } from './schemas.js';
import { braveSearch, SearchProviderError } from './search.js';
import { findTool, requireInstalled, type FoundTool } from './service.js';

export interface ExecuteOptions {
  via: 'api' | 'run';
  runId?: string;
  threadId?: string;
  signal?: AbortSignal;
}

interface Outcome {
  ok: boolean;
  output: unknown;
  error?: { code: string; message: string };
  httpStatus: number | null;
}

const failed = (code: string, message: string, httpStatus: number | null = null): Outcome => ({
  ok: false,
  output: null,
  error: { code, message },
  httpStatus,
});

/** The MCP server's source as stored: its URL, header templates and the credential fields they use. */
export interface McpSource {
  url: string;
  headers: Record<string, string>;
  credentials: { name: string; description: string; required: boolean }[];
}

/** The request an MCP server's header templates make with these credentials (the same rules as HTTP tools). */
export function mcpHeaders(source: McpSource, values: Record<string, string>): Record<string, string> {
  const ex: HttpExecution = {
    type: 'http',
    method: 'POST',
    url: source.url,
    headers: source.headers,
    query: {},
    bodyType: 'json',
    passArgs: false,
    response: {},
  };
  const { headers } = buildRequest(ex, {}, values);
  delete headers['content-type'];
  delete headers['Content-Type'];
  return headers;
}

async function run(
  ctx: Ctx,
  t: FoundTool,
  args: Record<string, unknown>,
  credentials: Record<string, string>,
  signal?: AbortSignal,
): Promise<Outcome> {
  const policy = toolPolicy(ctx.deps);
  const send = async (req: BuiltRequest, credentialed: boolean) => egressRequest(policy, { ...req, credentialed, signal });
  const ex = t.entry.execution;
  try {
    if (ex.type === 'http') {
      const res = await send(buildRequest(ex, args, credentials), Object.keys(credentials).length > 0);
      const mapped = mapResponse(ex, res);
      return mapped.ok
        ? { ok: true, output: capOutput(mapped.output), httpStatus: mapped.httpStatus }
        : failed('tool_http_error', mapped.error ?? `the service answered ${mapped.httpStatus}`, mapped.httpStatus);
    }
    if (ex.type === 'builtin' && ex.name === 'web_search') {
      const cfg = ctx.deps.config.tools.search;
      if (!cfg) return failed('tool_unavailable', 'no search provider is configured on this server (HANGAR_SEARCH_PROVIDER)');
      const out = await braveSearch((req) => send(req, true), cfg, args as { query: string; count?: number });
      return { ok: true, output: out, httpStatus: 200 };
    }
    if (ex.type === 'builtin') {
      const res = await send(httpRequestFromArgs(args), false);
      return { ok: true, output: httpRequestOutput(res), httpStatus: res.status };
    }
    const source = JSON.parse(t.custom!.source) as McpSource;
    const result = await callMcpTool(
      { url: source.url, headers: mcpHeaders(source, credentials), fetch: toolFetch(ctx.deps), timeoutMs: ctx.deps.config.tools.timeoutMs },
      ex.tool,
      args,
    );
    const output = result.structured === undefined ? result.output : { text: result.output, structured: result.structured };
    return result.isError
      ? { ...failed('tool_error', result.output.slice(0, 2000)), output }
      : { ok: true, output: capOutput(output), httpStatus: null };
  } catch (err) {
    if (err instanceof ToolArgumentError) return failed('invalid_arguments', err.message);
    if (err instanceof EgressError) return failed(err.code, err.message);
    if (err instanceof McpError) return failed(err.code, err.message);
    if (err instanceof SearchProviderError) return failed('tool_provider_error', err.message, err.httpStatus);
    throw err;
  }
}

export interface ExecutionRecord {
  tool: string;
  via: 'api' | 'run';
  runId?: string;
  threadId?: string;
  status: 'completed' | 'failed';
  errorCode?: string | null;
  errorMessage?: string;
  credentialSources?: Record<string, CredentialStep>;
  durationMs: number;
}

/**
 * Records one tool call: the `tool_executions` row, its usage event (a failed call costs nothing) and its
 * `tool.call.completed|failed` activity event, in one transaction; the event is charged after the commit. Inside
 * a caller's transaction the charge is left to the billing sweep (it must not be posted before that commit).
 * Runs record their sandbox tools through this too.
 */
export async function recordToolExecution(ctx: Ctx, r: ExecutionRecord): Promise<string> {
  const id = prefixedId('tex');
  const ownTx = !ctx.trx;
  const eventId = await withTx(ctx, async (tx) => {
    await repo.insertExecution(tx, {
      id,
      org_id: ctx.principal.orgId!,
      user_id: ctx.principal.userId,
      run_id: r.runId ?? null,
      tool: r.tool,
      via: r.via,
      status: r.status,
      error_code: r.errorCode ?? null,
      credential_sources: r.credentialSources ? JSON.stringify(r.credentialSources) : null,
      duration_ms: r.durationMs,
      created_at: nowIso(),
    });
    await recordActivity(tx, {
      resourceType: 'tool',
      resourceId: r.tool,
      toolSlug: r.tool,
      agentRunId: r.runId,
      threadId: r.threadId,
      eventType: r.status === 'completed' ? 'tool.call.completed' : 'tool.call.failed',
      status: r.status,
      title: r.status === 'completed' ? `Tool ${r.tool} completed` : `Tool ${r.tool} failed`,
      summary: r.errorMessage?.slice(0, 500),
      metadata: { via: r.via, executionId: id, durationMs: r.durationMs, ...(r.errorCode ? { errorCode: r.errorCode } : {}) },
    });
    return recordUsage(tx, {
      kind: 'tool_execution',
      orgId: ctx.principal.orgId!,
      userId: ctx.principal.userId,
      sourceId: id,
      tool: r.tool,
      succeeded: r.status === 'completed',
      metadata: { via: r.via, ...(r.runId ? { runId: r.runId } : {}) },
    });
  });
  if (ownTx) await settleAfterCommit(ctx.deps, [eventId]);
  return id;
}

/**
 * A service that repeats a credential in its answer (an error quoting the key it refused, say) must not hand it to
 * the caller or the model: every credential value of the call is blanked out of the output and the error.
 */
function redact(outcome: Outcome, secrets: string[]): Outcome {
  const values = secrets.filter((v) => v.length >= 4);
  if (!values.length) return outcome;
  const clean = (text: string) => values.reduce((t, v) => t.split(v).join('[redacted]'), text);
  const json = outcome.output === null || outcome.output === undefined ? null : JSON.stringify(outcome.output);
  const output = json !== null && values.some((v) => json.includes(v)) ? JSON.parse(clean(json)) : outcome.output;
  return { ...outcome, output, ...(outcome.error ? { error: { ...outcome.error, message: clean(outcome.error.message) } } : {}) };
}

/** Why arguments do not match a schema, in one line. */
function argumentProblem(validate: ReturnType<typeof validatorFor>): string {
  const e = validate.errors?.[0];
  if (!e) return 'the arguments do not match the tool’s input schema';
  const where = e.instancePath ? `arguments${e.instancePath.replace(/\//g, '.')}` : 'arguments';
  const extra = e.keyword === 'additionalProperties' ? ` ("${(e.params as { additionalProperty: string }).additionalProperty}")` : '';
  return `${where} ${e.message ?? 'is invalid'}${extra}`;
}

/**
 * Executes an installed tool as the caller. Caller mistakes (unknown tool, not installed, arguments that do not
 * match the schema, unknown credential fields) are AppErrors; everything after that, missing credentials
 * included, is a recorded execution with `status: "failed"` and an error code.
 */
export async function executeTool(ctx: Ctx, slug: string, body: ExecuteBody, opts: ExecuteOptions): Promise<ToolExecution> {
  requireScope(ctx, 'tools:execute');
  const t = await findTool(ctx, slug);
  if (!t) throw errors.notFound('tool', slug);
  await requireInstalled(ctx, slug);
  const args = body.arguments ?? {};
  const validate = validatorFor(ctx.deps, t.entry.inputSchema);
  if (!validate(args)) throw errors.invalid(argumentProblem(validate), [{ path: 'arguments', message: argumentProblem(validate) }]);
  const started = Date.now();
  const resolved = await resolveCredentials(ctx, t, body);
  let outcome: Outcome;
  let connect: { provider: string; startUrl: string } | undefined;
  if (resolved.missing.length) {
    const how = resolved.oauthProblem
      ? `${resolved.oauthProblem.message}`
      : `pass them in "credentials", store them with POST /v1/tools/${slug}/credentials, or create secrets named ${resolved.missing.map((f) => f.toUpperCase()).join(', ')}`;
    // A product end user lacking their own connection: `connect_required` (ADR 0030).
    outcome = failed(
      resolved.oauthProblem?.code ?? 'credentials_missing',
      `tool ${slug} is missing credential field(s) ${resolved.missing.join(', ')}: ${how}`,
    );
    if (resolved.oauthProblem) connect = { provider: resolved.oauthProblem.provider, startUrl: resolved.oauthProblem.startUrl };
  } else {
    outcome = redact(await run(ctx, t, args, resolved.values, opts.signal), Object.values(resolved.values));
  }
  const durationMs = Date.now() - started;
  const id = await recordToolExecution(ctx, {
    tool: slug,
    via: opts.via,
    runId: opts.runId,
    threadId: opts.threadId,
    status: outcome.ok ? 'completed' : 'failed',
    errorCode: outcome.error?.code ?? null,
    errorMessage: outcome.error?.message,
    credentialSources: resolved.sources,
    durationMs,
  });
  return {
    id,
    tool: slug,
    status: outcome.ok ? 'completed' : 'failed',
    output: outcome.output,
    error: outcome.error
      ? {
          ...outcome.error,
          ...(outcome.error.code === 'credentials_missing' || outcome.error.code === 'connect_required' ? { missingFields: resolved.missing } : {}),
          ...(connect ? { connect } : {}),
        }
      : null,
    credentialSources: resolved.sources,
    connection: resolved.connection,
    httpStatus: outcome.httpStatus,
    durationMs,
  };
}

/** The failed tool calls of a run (tool slug and error code), for callers that explain a run's outcome (channels). */
export async function failedToolCalls(ctx: Ctx, runId: string): Promise<{ tool: string; errorCode: string | null }[]> {
  requireScope(ctx, 'agent:read');
  return repo.failedExecutionsOfRun(ctx, runId);
}
