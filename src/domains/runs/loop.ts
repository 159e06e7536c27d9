/** A run's turn loop: the model thinks (streamed into the thread), then the tools it called run, until it answers or runs out of turns. */
import { streamText, type ModelMessage, type TextStreamPart, type ToolSet } from 'ai';
import type { Selectable } from 'kysely';
import type { AgentRunsTable, AgentsTable } from '../../database.js';
import type { Ctx } from '../../platform/context.js';
import { agentOf } from '../sandboxes/index.js';
import { providerError, recordModelUsage, type resolveModel, toUsage } from '../models/index.js';
import { threadHistory, transientFrames, type MessageSource } from '../threads/index.js';
import { catalogueToolDefinitions, catalogueTools } from './catalog-tools.js';
import { CancelledError, type RunIo } from './io.js';
import type { RunBody, RunResult, RunUsage } from './schemas.js';
import { toolStep } from './tool-step.js';
import { toolDefinitions } from './tools.js';

type AgentRow = Selectable<AgentsTable>;
type RunRow = Selectable<AgentRunsTable>;

const DEFAULT_MAX_TURNS = 20;
const SUMMARY_PREFIX = 'Summary of the conversation so far:\n';

/**
 * Runs the model turns of a managed or in_sandbox run on its thread's history (its active rollout's summary
 * and messages). `row.iterations` and `usage` are updated as it goes; the outcome is the run's status, its
 * last answer and the turn limit it ran under.
 */
export async function runTurns(
  ctx: Ctx,
  run: {
    row: RunRow;
    agent: AgentRow;
    tools: string[];
    model: Awaited<ReturnType<typeof resolveModel>>;
    cfg: RunBody['config'];
    signal: AbortSignal;
    usage: RunUsage;
    io: RunIo;
    /** A context session's blocks, rendered: the model reads them after the agent's instructions. */
    sessionContext?: string;
  },
): Promise<{ status: RunResult['status']; finalText: string | null; maxTurns: number }> {
  const { deps } = ctx;
  const { row, agent, tools, model, cfg, signal, usage, io } = run;
  const { durable, live, origin } = io;
  const { id: runId, thread_id: threadId, execution_mode: mode } = row;
  let messageSeq = 0;
  /** Sources not yet kept with a message: tools' (web_search results), a turn's without text; the next message keeps them. */
  const toolSources: MessageSource[] = [];
  const { summary, messages: past } = await threadHistory(ctx, threadId, row.rollout_id);
  const messages: ModelMessage[] = past.map((m) => ({ role: m.role, content: m.text }));
  const system =
    [agent.instructions, run.sessionContext || null, summary ? `${SUMMARY_PREFIX}${summary}` : null].filter(Boolean).join('\n\n') || undefined;
  const catalogue = new Set(catalogueTools(tools));
  const toolSet: ToolSet = { ...(mode === 'in_sandbox' ? toolDefinitions(tools) : {}), ...(await catalogueToolDefinitions(ctx, [...catalogue])) };
  const sandboxAgent = row.sandbox_id ? (await agentOf(ctx, row.sandbox_id)).agent : null;
  const pids = new Set<number>();
  const maxTurns = cfg.maxTurns ?? DEFAULT_MAX_TURNS;
  let status: RunResult['status'] = 'max_turns';
  let finalText: string | null = null;

  for (let turn = 1; turn <= maxTurns; turn++) {
    row.iterations = turn;
    const messageId = `msg_${runId.slice(0, 8)}_${++messageSeq}`;
    let streamError: unknown = null;
    const stream = streamText({
      model: model.model,
      system,
      messages,
      tools: Object.keys(toolSet).length ? toolSet : undefined,
      maxOutputTokens: cfg.maxTokens,
      temperature: cfg.temperature,
      abortSignal: signal,
      maxRetries: 1,
      onError: ({ error }) => {
        streamError = error;
      },
    });
    let textOut = '';
    let reasoning = '';
    const sources: MessageSource[] = [];
    const calls: { id: string; name: string; input: unknown }[] = [];
    for await (const part of stream.fullStream) {
      if (part.type === 'text-delta') {
        textOut += part.text;
        await live(transientFrames.assistantMessageDelta(origin(), messageId, part.text));
      } else if (part.type === 'reasoning-delta') {
        reasoning += part.text;
        await live(transientFrames.assistantThinkingDelta(origin(), messageId, part.text));
      } else if (part.type === 'source') {
        const source = toSource(part);
        sources.push(source);
        await live(transientFrames.assistantMessageSource(origin(), { messageId }, source));
      } else if (part.type === 'tool-call') calls.push({ id: part.toolCallId, name: part.toolName, input: part.input });
      else if (part.type === 'error') streamError = part.error;
      else if (part.type === 'finish') {
        const u = toUsage(part.totalUsage);
        usage.inputTokens += u.inputTokens;
        usage.outputTokens += u.outputTokens;
        usage.cachedInputTokens += u.cachedInputTokens;
        usage.reasoningTokens += u.reasoningTokens;
        usage.totalTokens += u.totalTokens;
        await recordModelUsage(deps, { orgId: row.org_id, userId: ctx.principal.userId, entry: model.entry, usage: u, source: 'run', runId });
      }
    }
    if (signal.aborted) throw new CancelledError();
    if (streamError) throw providerError(streamError, model.entry.id);

    const assistantParts: Exclude<ModelMessage['content'], string> = [];
    toolSources.push(...sources);
    if (textOut || reasoning) {
      const kept = toolSources.splice(0);
      await durable([
        {
          type: 'assistant_message',
          payload: { messageId, text: textOut, ...(reasoning ? { reasoning } : {}), ...(kept.length ? { sources: kept } : {}) },
        },
      ]);
      if (textOut) {
        finalText = textOut;
        (assistantParts as unknown[]).push({ type: 'text', text: textOut });
      }
    }
    if (!calls.length) {
      if (textOut || assistantParts.length) messages.push({ role: 'assistant', content: textOut });
      status = 'completed';
      break;
    }
    for (const c of calls) (assistantParts as unknown[]).push({ type: 'tool-call', toolCallId: c.id, toolName: c.name, input: c.input });
    messages.push({ role: 'assistant', content: assistantParts } as ModelMessage);
    const results: unknown[] = [];
    for (const c of calls) {
      results.push(await toolStep(ctx, { row, call: c, toolSet, catalogue, sandboxAgent, pids, signal, io, sources: toolSources }));
    }
    messages.push({ role: 'tool', content: results } as ModelMessage);
  }
  return { status, finalText, maxTurns };
}

/** A provider's source part as the frames carry it: what identifies it, without provider-specific metadata. */
function toSource(part: Extract<TextStreamPart<ToolSet>, { type: 'source' }>): MessageSource {
  const cited = Object.values(part.providerMetadata ?? {})
    .map((m) => (m as Record<string, unknown>).citedText)
    .find((t): t is string => typeof t === 'string');
  const common = { id: part.id, ...(part.title ? { title: part.title } : {}), ...(cited ? { citedText: cited } : {}) };
  return part.sourceType === 'url'
    ? { sourceType: 'url', url: part.url, ...common }
    : { sourceType: 'document', mediaType: part.mediaType, ...(part.filename ? { filename: part.filename } : {}), ...common };
}
