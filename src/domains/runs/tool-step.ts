/** One tool call of a run: its frames, its execution in the thread's sandbox, its execution record. */
import type { Selectable } from 'kysely';
import type { AgentRunsTable } from '../../database.js';
import type { Ctx } from '../../platform/context.js';
import { transientFrames, type MessageSource } from '../threads/index.js';
import { recordToolExecution } from '../tools/index.js';
import { runCatalogueTool, runToolsCtx } from './catalog-tools.js';
import { CancelledError, type RunIo } from './io.js';
import { runTool, toolResultPart, type ToolEnv, type ToolOutcome } from './tools.js';

type RunRow = Selectable<AgentRunsTable>;

export interface ToolCall {
  id: string;
  name: string;
  input: unknown;
}

/**
 * Runs one tool call the model made: `tool_call` and `tool_result` into the thread, live frames around it, the
 * call in the thread's sandbox (a tool the agent lacks fails as such), and its execution record. Returns the
 * tool result for the model's next turn.
 */
export async function toolStep(
  ctx: Ctx,
  step: {
    row: RunRow;
    call: ToolCall;
    toolSet: object;
    /** The run's catalogue tools (executed on the server, not in the sandbox). */
    catalogue: ReadonlySet<string>;
    sandboxAgent: ToolEnv['agent'] | null;
    pids: Set<number>;
    signal: AbortSignal;
    io: RunIo;
    /** Where the sources a tool found go (streamed here, kept with the next assistant message by the loop). */
    sources: MessageSource[];
  },
): Promise<unknown> {
  const { row, call: c, toolSet, catalogue, sandboxAgent, pids, signal, io } = step;
  const { durable, live, origin } = io;
  const { id: runId, thread_id: threadId } = row;
  await durable([{ type: 'tool_call', payload: { toolCallId: c.id, name: c.name, input: c.input } }]);
  await live(transientFrames.toolCallStarted(origin(), c.id, c.name));
  const toolStarted = Date.now();
  let outcome: ToolOutcome;
  if (catalogue.has(c.name)) {
    // A catalogue tool: executed and recorded (execution row and activity) by the tools domain, as the run's user.
    outcome = await runCatalogueTool(runToolsCtx(ctx), c, { runId, threadId, signal });
  } else {
    outcome =
      sandboxAgent && c.name in toolSet
        ? await runTool(c.name, c.input, {
            agent: sandboxAgent,
            pids,
            signal,
            onOutput: (chunk) => void live(transientFrames.toolOutputDelta(origin(), c.id, chunk)),
          })
        : { output: `tool ${c.name} is not available to this agent`, isError: true };
    await recordToolExecution(ctx, {
      tool: c.name,
      via: 'run',
      runId,
      threadId,
      status: outcome.isError ? 'failed' : 'completed',
      errorCode: outcome.isError ? 'tool_error' : null,
      errorMessage: outcome.isError ? outcome.output : undefined,
      durationMs: Date.now() - toolStarted,
    });
  }
  if (signal.aborted) throw new CancelledError();
  for (const source of outcome.isError ? [] : toolSources(c, outcome.output)) {
    step.sources.push(source);
    await live(transientFrames.assistantMessageSource(origin(), { toolCallId: c.id }, source));
  }
  io.onToolResult?.({ toolCallId: c.id, name: c.name, output: outcome.output, isError: outcome.isError });
  await live(transientFrames.toolCallCompleted(origin(), c.id, c.name, outcome.isError));
  await durable([
    {
      type: 'tool_result',
      payload: {
        toolCallId: c.id,
        name: c.name,
        output: outcome.output,
        isError: outcome.isError,
        ...(outcome.image ? { image: { mediaType: outcome.image.mediaType } } : {}),
      },
    },
  ]);
  return toolResultPart(c, outcome);
}

/** The pages a `web_search` call found, as sources (its output is `{ results: [{ title, url, description }] }`). */
function toolSources(c: ToolCall, output: string): MessageSource[] {
  if (c.name !== 'web_search') return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(output);
  } catch {
    return [];
  }
  const results = (parsed as { results?: unknown }).results;
  if (!Array.isArray(results)) return [];
  return results.flatMap((r, i) => {
    const { url, title } = (r ?? {}) as { url?: unknown; title?: unknown };
    if (typeof url !== 'string') return [];
    return [{ sourceType: 'url' as const, id: `${c.id}:${i}`, url, ...(typeof title === 'string' && title ? { title } : {}) }];
  });
}
