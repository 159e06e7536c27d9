import {
  APICallError,
  generateText,
  jsonSchema,
  streamText,
  tool,
  type LanguageModel,
  type LanguageModelUsage,
  type ModelMessage,
  type ToolSet,
} from 'ai';
import { exec, orgId, requireScope, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { stateKey } from '../../platform/state.js';
import { recordUsage, requireCredits, settleAfterCommit } from '../billing/index.js';
import { existingSecretNames, resolveSecret } from '../secrets/index.js';
import { loadCatalogue, type ModelEntry } from './catalogue.js';
import { checkToolTurns, modelMessages, type MessageNames } from './messages.js';
import { OpenAIUpstream, toChatRequest, type ChatRequest, type StreamHooks } from './passthrough.js';
import { createModelProvider, type ModelProvider } from './providers.js';
import type { ProxyBody, ProxyResult, Usage } from './schemas.js';

/** The model gateway of one set of deps: the catalogue and the providers, made once. */
export interface ModelGateway {
  catalogue: ModelEntry[];
  provider: ModelProvider;
  /**
   * The platform's OpenAI-compatible provider as the model proxy's passthrough reaches it, without the AI SDK
   * (ADR 0036); null when there is none (and then every proxy call goes through the AI SDK).
   */
  passthrough: OpenAIUpstream | null;
}

const MODEL_STATE = stateKey('models', () => ({ gateway: null as ModelGateway | null }));

export function modelGateway(deps: Deps): ModelGateway {
  const state = deps.state.get(MODEL_STATE);
  const config = deps.config.models;
  state.gateway ??= {
    catalogue: loadCatalogue(config),
    provider: createModelProvider(config),
    passthrough: config.openai ? new OpenAIUpstream(config.openai) : null,
  };
  return state.gateway;
}

/** Closes the gateway's connections to providers (with the app that made them). */
export async function closeModelGateway(deps: Deps): Promise<void> {
  await deps.state.get(MODEL_STATE).gateway?.passthrough?.close();
}

export async function availableModels(ctx: Ctx) {
  requireScope(ctx, 'models:use');
  const { catalogue, provider } = modelGateway(ctx.deps);
  const byok = catalogue.filter((m) => m.tier === 'byok');
  const secrets = await existingSecretNames(ctx.deps, orgId(ctx), ctx.principal.userId, [...new Set(byok.map((m) => m.requiresSecret!))]);
  return {
    platform: catalogue
      .filter((m) => m.tier === 'platform')
      .map((m) => ({ model: m.id, displayName: m.displayName, available: provider.platformUnavailable(m.provider) === null })),
    byok: byok.map((m) => ({
      model: m.id,
      displayName: m.displayName,
      requiresSecret: m.requiresSecret!,
      available: secrets.has(m.requiresSecret!),
    })),
  };
}

export interface ResolvedModel {
  entry: ModelEntry;
  model: LanguageModel;
}

/**
 * A model the caller may use now: a platform model whose provider is configured, or a BYOK model whose secret
 * the caller (or the organization) has. Errors name what to configure.
 */
export async function resolveModel(ctx: Ctx, id: string, opts: { platformOnly?: boolean; field?: string } = {}): Promise<ResolvedModel> {
  const { entry, key } = await resolveEntry(ctx, id, opts);
  return { entry, model: modelGateway(ctx.deps).provider.languageModel(entry, key) };
}

/** The catalogue entry `resolveModel` checks, and the BYOK key it runs on (the AI SDK model object is not made). */
async function resolveEntry(ctx: Ctx, id: string, opts: { platformOnly?: boolean; field?: string }): Promise<{ entry: ModelEntry; key?: string }> {
  const field = opts.field ?? 'model';
  const { catalogue, provider } = modelGateway(ctx.deps);
  const entry = catalogue.find((m) => m.id === id);
  if (!entry) throw errors.invalidField(field, `unknown model "${id}"; GET /v1/models/available lists the models`);
  if (entry.tier === 'byok') {
    if (opts.platformOnly) throw errors.invalidField(field, `"${id}" is a bring-your-own-key model; the model proxy serves platform models only`);
    const key = await resolveSecret(ctx.deps, orgId(ctx), ctx.principal.userId, entry.requiresSecret!);
    if (!key) throw errors.invalidField(field, `"${id}" needs the secret ${entry.requiresSecret}: create it with POST /v1/secrets`);
    return { entry, key };
  }
  const why = provider.platformUnavailable(entry.provider);
  if (why) throw errors.unavailable(`platform model "${id}" is not available on this server: ${why}`);
  return { entry };
}

export function toUsage(u: LanguageModelUsage | undefined): Usage {
  const input = u?.inputTokens ?? 0;
  const output = u?.outputTokens ?? 0;
  return {
    inputTokens: input,
    outputTokens: output,
    totalTokens: u?.totalTokens ?? input + output,
    cachedInputTokens: u?.inputTokenDetails?.cacheReadTokens ?? u?.cachedInputTokens ?? 0,
    reasoningTokens: u?.outputTokenDetails?.reasoningTokens ?? u?.reasoningTokens ?? 0,
  };
}

const tokenCounter = (deps: Deps) =>
  deps.metrics.counter('hangar_model_tokens_total', "Model tokens used, by model (platform models; `byok` for members' own), kind and source", [
    'model',
    'tier',
    'kind',
    'source',
  ]);

/** The model series of `GET /metrics` (ADR 0040), registered by app.ts. */
export function registerModelMetrics(deps: Deps): void {
  tokenCounter(deps);
}

/** Tokens by model for metrics (ADR 0040): platform models by id; a member's own (BYOK) models all as `byok`. */
function countTokens(deps: Deps, entry: ModelEntry, usage: Usage, source: string): void {
  if (!deps.metrics.enabled) return;
  const tokens = tokenCounter(deps);
  const model = entry.tier === 'platform' ? entry.id : 'byok';
  const uncached = Math.max(0, usage.inputTokens - usage.cachedInputTokens);
  tokens.inc({ model, tier: entry.tier, kind: 'input', source }, uncached);
  tokens.inc({ model, tier: entry.tier, kind: 'cached_input', source }, usage.cachedInputTokens);
  tokens.inc({ model, tier: entry.tier, kind: 'output', source }, usage.outputTokens);
}

/**
 * Records one model call and meters it, in one transaction: the `model_usage` row (at the catalogue price) and its
 * usage event (priced by the organization's plan: its price for the model's class, else the catalogue's; BYOK
 * calls cost nothing and are never charged). The event is charged after the commit (the billing sweep retries).
 */
export async function recordModelUsage(
  deps: Deps,
  input: { orgId: string; userId: string | null; entry: ModelEntry; usage: Usage; source: 'proxy' | 'run' | 'session'; runId?: string },
): Promise<void> {
  const p = input.entry.tier === 'platform' ? input.entry.pricing : null;
  const uncached = Math.max(0, input.usage.inputTokens - input.usage.cachedInputTokens);
  // USD per million tokens x tokens = micro-dollars.
  const cost = p
    ? Math.round(uncached * p.inputPerMTok + input.usage.cachedInputTokens * p.cachedInputPerMTok + input.usage.outputTokens * p.outputPerMTok)
    : 0;
  const ctx = systemCtx(deps, { userId: input.userId ?? 'system', orgId: input.orgId, role: null, scopes: new Set(), apiKeyId: null });
  countTokens(deps, input.entry, input.usage, input.source);
  const id = prefixedId('mus');
  const eventId = await withTx(ctx, async (tx) => {
    await exec(tx)
      .insertInto('model_usage')
      .values({
        id,
        org_id: input.orgId,
        user_id: input.userId,
        model: input.entry.id,
        tier: input.entry.tier,
        source: input.source,
        run_id: input.runId ?? null,
        input_tokens: input.usage.inputTokens,
        output_tokens: input.usage.outputTokens,
        cached_input_tokens: input.usage.cachedInputTokens,
        reasoning_tokens: input.usage.reasoningTokens,
        cost_micros: cost,
        created_at: nowIso(),
      })
      .execute();
    return recordUsage(tx, {
      kind: 'model_tokens',
      orgId: input.orgId,
      userId: input.userId,
      sourceId: id,
      model: input.entry.id,
      tier: input.entry.tier,
      modelClass: input.entry.modelClass,
      pricing: p,
      tokens: {
        inputTokens: input.usage.inputTokens,
        outputTokens: input.usage.outputTokens,
        cachedInputTokens: input.usage.cachedInputTokens,
        reasoningTokens: input.usage.reasoningTokens,
      },
      metadata: { source: input.source, ...(input.runId ? { runId: input.runId } : {}) },
    });
  });
  await settleAfterCommit(deps, [eventId]);
}

/** Provider failures as our own errors: a provider's 401 is the platform's misconfiguration, not the caller's. */
export function providerError(err: unknown, modelId: string): AppError {
  if (err instanceof AppError) return err;
  if (APICallError.isInstance(err)) {
    const status = err.statusCode;
    const detail = (err.message || '').slice(0, 500);
    if (status === 401 || status === 403)
      return new AppError('provider_error', `the model provider refused the credentials for "${modelId}" (${status}): ${detail}`);
    if (status === 429) return errors.rateLimited(`the model provider is rate limiting "${modelId}": ${detail}`);
    if (status !== undefined && status >= 400 && status < 500)
      return errors.invalid(`the model provider rejected the request for "${modelId}" (${status}): ${detail}`);
    if (status !== undefined) return new AppError('provider_error', `the model provider failed for "${modelId}" (${status}): ${detail}`);
    return new AppError('provider_error', `the model provider for "${modelId}" could not be reached: ${detail}`);
  }
  const e = err as Error;
  if (e?.name === 'TimeoutError') return new AppError('provider_timeout', `the model provider did not answer for "${modelId}" in time`);
  return new AppError('provider_error', `the model call for "${modelId}" failed: ${e?.message ?? String(err)}`);
}

function callArgs(body: ProxyBody, model: LanguageModel, signal: AbortSignal, toolNames: Map<string, string>) {
  const o = body.options;
  const tools: ToolSet | undefined = o.tools?.length
    ? Object.fromEntries(
        o.tools.map((t) => [t.name, tool({ description: t.description, inputSchema: jsonSchema(t.parameters as Parameters<typeof jsonSchema>[0]) })]),
      )
    : undefined;
  const messages = modelMessages(o.messages, toolNames);
  const toolChoice =
    o.toolChoice === undefined ? undefined : typeof o.toolChoice === 'string' ? o.toolChoice : { type: 'tool' as const, toolName: o.toolChoice.tool };
  return {
    model,
    messages,
    system: o.system,
    maxOutputTokens: o.maxTokens,
    temperature: o.temperature,
    topP: o.topP,
    stopSequences: o.stop,
    seed: o.seed,
    tools,
    toolChoice: toolChoice as never,
    abortSignal: signal,
    maxRetries: 0,
  };
}

function checkTier(body: ProxyBody) {
  if (body.tier !== 'platform') throw errors.invalidField('tier', `only "platform" is accepted (got "${body.tier}")`);
}

/** A platform model call needs credits (402 when the organization has none); a BYOK call never does. */
async function requireModelCredits(ctx: Ctx, entry: ModelEntry, what: string): Promise<void> {
  if (entry.tier === 'platform') await requireCredits(ctx, orgId(ctx), what);
}

/**
 * A proxy call of a platform model on the OpenAI-compatible provider, with options that all translate, goes through
 * the passthrough (ADR 0036); any other call through the AI SDK.
 */
function passthroughCall(deps: Deps, entry: ModelEntry, body: ProxyBody): { upstream: OpenAIUpstream; request: ChatRequest } | null {
  const upstream = entry.tier === 'platform' && entry.provider === 'openai' ? modelGateway(deps).passthrough : null;
  const request = upstream ? toChatRequest(entry.model, body.options) : null;
  return upstream && request ? { upstream, request } : null;
}

/**
 * How a proxy call is made. `byok`: a bring-your-own-key model may be called too, on the caller's key (the
 * OpenAI-compatible endpoints, ADR 0042; `/v1/model-proxy` itself serves platform models only, ADR 0012).
 * `names`: what the messages and their tool fields are called in errors (default: the proxy's own names).
 */
export interface ProxyCallOptions {
  byok?: boolean;
  names?: MessageNames;
}

/** What every proxy call checks first: the scope, the tier, the tool turns, the model, the credits. */
async function startProxyCall(ctx: Ctx, body: ProxyBody, opts: ProxyCallOptions) {
  requireScope(ctx, 'models:use');
  checkTier(body);
  const toolNames = checkToolTurns(body.options.messages, opts.names);
  const { entry, key } = await resolveEntry(ctx, body.model, { platformOnly: !opts.byok });
  await requireModelCredits(ctx, entry, `a call of model "${entry.id}"`);
  const model = () => modelGateway(ctx.deps).provider.languageModel(entry, key);
  return { entry, toolNames, model };
}

/** `POST /v1/model-proxy`: one platform model call, the whole result at once. */
export async function proxyGenerate(ctx: Ctx, body: ProxyBody, signal: AbortSignal, opts: ProxyCallOptions = {}): Promise<ProxyResult> {
  const { entry, toolNames, model } = await startProxyCall(ctx, body, opts);
  const timeout = AbortSignal.any([signal, AbortSignal.timeout(ctx.deps.config.models.timeoutMs)]);
  const direct = passthroughCall(ctx.deps, entry, body);
  let answer: Omit<ProxyResult, 'model'>;
  try {
    answer = direct ? await direct.upstream.generate(direct.request, timeout) : await generateThroughSdk(callArgs(body, model(), timeout, toolNames));
  } catch (err) {
    throw providerError(err, entry.id);
  }
  await recordModelUsage(ctx.deps, { orgId: orgId(ctx), userId: ctx.principal.userId, entry, usage: answer.usage, source: 'proxy' });
  return { model: entry.id, ...answer };
}

async function generateThroughSdk(args: ReturnType<typeof callArgs>): Promise<Omit<ProxyResult, 'model'>> {
  const result = await generateText(args);
  return {
    text: result.text,
    reasoning: result.reasoningText ?? '',
    toolCalls: result.toolCalls.map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })),
    finishReason: result.finishReason,
    usage: toUsage(result.usage),
  };
}

/**
 * One model call made by the platform on a member's behalf (e.g. a context session's compaction summary): the
 * model resolved for the caller (BYOK keys included), credits checked for a platform model, the call bounded by
 * `timeoutMs`, and its usage recorded and metered like any call (source `session`).
 */
export async function generateForCaller(
  ctx: Ctx,
  modelId: string,
  call: {
    system: string;
    prompt: string;
    maxOutputTokens: number;
    timeoutMs: number;
    signal?: AbortSignal;
    source: 'session';
    runId?: string;
    what: string;
  },
): Promise<{ text: string; usage: Usage }> {
  const { entry, model } = await resolveModel(ctx, modelId);
  await requireModelCredits(ctx, entry, call.what);
  const timeout = AbortSignal.any([...(call.signal ? [call.signal] : []), AbortSignal.timeout(call.timeoutMs)]);
  let result: Awaited<ReturnType<typeof generateText>>;
  try {
    result = await generateText({
      model,
      system: call.system,
      prompt: call.prompt,
      maxOutputTokens: call.maxOutputTokens,
      abortSignal: timeout,
      maxRetries: 1,
    });
  } catch (err) {
    throw providerError(err, entry.id);
  }
  const usage = toUsage(result.usage);
  await recordModelUsage(ctx.deps, { orgId: orgId(ctx), userId: ctx.principal.userId, entry, usage, source: call.source, runId: call.runId });
  return { text: result.text, usage };
}

export type StreamLine =
  | { type: 'start'; model: string }
  | { type: 'text-delta'; text: string }
  | { type: 'reasoning-delta'; text: string }
  | { type: 'tool-call'; id: string; name: string; input: unknown }
  | { type: 'finish'; finishReason: string; usage: Usage }
  | { type: 'error'; error: { code: string; message: string } };

const ndjson = (line: StreamLine) => `${JSON.stringify(line)}\n`;

/**
 * `POST /v1/model-proxy/stream`: validates and resolves first (errors before any byte are ordinary HTTP errors),
 * then yields NDJSON text (one or more whole lines at a time); an error mid-stream is an `error` line and the stream
 * ends.
 */
export async function proxyStream(ctx: Ctx, body: ProxyBody, signal: AbortSignal, opts: ProxyCallOptions = {}): Promise<AsyncGenerator<string>> {
  const { entry, toolNames, model } = await startProxyCall(ctx, body, opts);
  const timeout = AbortSignal.any([signal, AbortSignal.timeout(ctx.deps.config.models.timeoutMs)]);
  const direct = passthroughCall(ctx.deps, entry, body);
  if (direct) return direct.upstream.stream(direct.request, signal, timeout, proxyLines(ctx, entry));
  return ndjsonText(await streamLines(ctx, entry, callArgs(body, model(), timeout, toolNames), signal, timeout, { source: 'proxy' }));
}

/** The lines of a passthrough stream that are the service's: `start`, `finish` once metered, `error` as mapped. */
function proxyLines(ctx: Ctx, entry: ModelEntry): StreamHooks {
  const { deps } = ctx;
  const org = orgId(ctx);
  const userId = ctx.principal.userId;
  return {
    start: ndjson({ type: 'start', model: entry.id }),
    async finish(usage, finishReason) {
      await recordModelUsage(deps, { orgId: org, userId, entry, usage, source: 'proxy' });
      return ndjson({ type: 'finish', finishReason, usage });
    },
    errorLine(err) {
      const e = providerError(err, entry.id);
      return ndjson({ type: 'error', error: { code: e.code, message: e.message } });
    },
  };
}

async function* ndjsonText(lines: AsyncGenerator<StreamLine>): AsyncGenerator<string> {
  for await (const line of lines) yield ndjson(line);
}

/**
 * A model call for a run whose loop runs elsewhere (a local-device run, ADR 0029): the run's model resolved for its
 * owner (so BYOK keys resolve), messages and tools as the device's loop built them, the same NDJSON lines as
 * `/v1/model-proxy/stream`, and usage metered against the run.
 */
export async function runModelStream(
  ctx: Ctx,
  input: {
    modelId: string;
    runId: string;
    messages: ModelMessage[];
    system?: string;
    tools: { name: string; description?: string; parameters: Record<string, unknown> }[];
    maxTokens?: number;
    temperature?: number;
  },
  signal: AbortSignal,
): Promise<AsyncGenerator<StreamLine>> {
  const { entry, model } = await resolveModel(ctx, input.modelId, { field: 'agent.model' });
  await requireModelCredits(ctx, entry, `a call of model "${entry.id}"`);
  const timeout = AbortSignal.any([signal, AbortSignal.timeout(ctx.deps.config.models.timeoutMs)]);
  const tools: ToolSet | undefined = input.tools.length
    ? Object.fromEntries(
        input.tools.map((t) => [
          t.name,
          tool({ description: t.description, inputSchema: jsonSchema(t.parameters as Parameters<typeof jsonSchema>[0]) }),
        ]),
      )
    : undefined;
  const args = {
    model,
    messages: input.messages,
    system: input.system,
    maxOutputTokens: input.maxTokens,
    temperature: input.temperature,
    tools,
    abortSignal: timeout,
    maxRetries: 0,
  };
  return streamLines(ctx, entry, args, signal, timeout, { source: 'run', runId: input.runId });
}

async function streamLines(
  ctx: Ctx,
  entry: ModelEntry,
  args: Parameters<typeof streamText>[0],
  signal: AbortSignal,
  timeout: AbortSignal,
  meter: { source: 'proxy' | 'run'; runId?: string },
): Promise<AsyncGenerator<StreamLine>> {
  const deps = ctx.deps;
  const org = orgId(ctx);
  const userId = ctx.principal.userId;
  async function* lines(): AsyncGenerator<StreamLine> {
    yield { type: 'start', model: entry.id };
    let streamError: unknown = null;
    const result = streamText({
      ...args,
      onError: ({ error }) => {
        streamError = error;
      },
    });
    try {
      for await (const part of result.fullStream) {
        if (part.type === 'text-delta') yield { type: 'text-delta', text: part.text };
        else if (part.type === 'reasoning-delta') yield { type: 'reasoning-delta', text: part.text };
        else if (part.type === 'tool-call') yield { type: 'tool-call', id: part.toolCallId, name: part.toolName, input: part.input };
        else if (part.type === 'error') streamError = part.error;
        else if (part.type === 'abort')
          streamError = timeout.reason; // the SDK ends an aborted stream quietly; a timeout must still say so
        else if (part.type === 'finish') {
          if (streamError) break;
          const usage = toUsage(part.totalUsage);
          await recordModelUsage(deps, { orgId: org, userId, entry, usage, ...meter });
          yield { type: 'finish', finishReason: part.finishReason, usage };
        }
      }
    } catch (err) {
      streamError = err;
    }
    if (streamError && !signal.aborted) {
      const e = providerError(streamError, entry.id);
      yield { type: 'error', error: { code: e.code, message: e.message } };
    }
  }
  return lines();
}

/** What a run's model calls used, summed from the meter (a local-device run's usage is the platform's count, not the device's word). */
export async function runUsageTotals(ctx: Ctx, runId: string): Promise<Usage> {
  const r = await exec(ctx)
    .selectFrom('model_usage')
    .select((eb) => [
      eb.fn.coalesce(eb.fn.sum<number>('input_tokens'), eb.lit(0)).as('input'),
      eb.fn.coalesce(eb.fn.sum<number>('output_tokens'), eb.lit(0)).as('output'),
      eb.fn.coalesce(eb.fn.sum<number>('cached_input_tokens'), eb.lit(0)).as('cached'),
      eb.fn.coalesce(eb.fn.sum<number>('reasoning_tokens'), eb.lit(0)).as('reasoning'),
    ])
    .where('org_id', '=', orgId(ctx))
    .where('run_id', '=', runId)
    .executeTakeFirstOrThrow();
  const inputTokens = Number(r.input);
  const outputTokens = Number(r.output);
  return {
    inputTokens,
    outputTokens,
    totalTokens: inputTokens + outputTokens,
    cachedInputTokens: Number(r.cached),
    reasoningTokens: Number(r.reasoning),
  };
}
