/** One tool call of a run: its frames, its execution in the thread's sandbox, its execution record. */
import type { Selectable } from 'kysely';
import type { AgentRunsTable } from '../../database.js';
import { exec, withTx, type Ctx } from '../../platform/context.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { transientFrames } from '../threads/index.js';
import { CancelledError, type RunIo } from './io.js';
import { runTool, type ToolEnv } from './tools.js';

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
  step: { row: RunRow; call: ToolCall; toolSet: object; sandboxAgent: ToolEnv['agent'] | null; pids: Set<number>; signal: AbortSignal; io: RunIo },
): Promise<unknown> {
  const { row, call: c, toolSet, sandboxAgent, pids, signal, io } = step;
  const { durable, live, origin } = io;
  const { id: runId, thread_id: threadId } = row;
  await durable([{ type: 'tool_call', payload: { toolCallId: c.id, name: c.name, input: c.input } }]);
  await live(transientFrames.toolCallStarted(origin(), c.id, c.name));
  const toolStarted = Date.now();
  const outcome =
    sandboxAgent && c.name in toolSet
      ? await runTool(c.name, c.input, {
          agent: sandboxAgent,
          pids,
          signal,
          onOutput: (chunk) => void live(transientFrames.toolOutputDelta(origin(), c.id, chunk)),
        })
      : { output: `tool ${c.name} is not available to this agent`, isError: true as boolean, image: undefined };
  // The execution record and, for a failure, its activity row: one transaction.
  await withTx(ctx, async (tx) => {
    await exec(tx)
      .insertInto('tool_executions')
      .values({
        id: prefixedId('tex'),
        org_id: row.org_id,
        user_id: ctx.principal.userId,
        run_id: runId,
        tool: c.name,
        via: 'run',
        status: outcome.isError ? 'failed' : 'completed',
        duration_ms: Date.now() - toolStarted,
        created_at: nowIso(),
      })
      .execute();
    if (outcome.isError) {
      await recordActivity(tx, {
        resourceType: 'tool',
        resourceId: c.name,
        toolSlug: c.name,
        agentRunId: runId,
        threadId,
        eventType: 'tool.call.failed',
        status: 'failed',
        title: `Tool ${c.name} failed`,
        summary: outcome.output.slice(0, 500),
      });
    }
  });
  if (signal.aborted) throw new CancelledError();
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
  return {
    type: 'tool-result',
    toolCallId: c.id,
    toolName: c.name,
    output: outcome.image
      ? {
          type: 'content',
          value: [
            { type: 'text', text: outcome.output },
            { type: 'image-data', data: outcome.image.data, mediaType: outcome.image.mediaType },
          ],
        }
      : outcome.isError
        ? { type: 'error-text', value: outcome.output }
        : { type: 'text', value: outcome.output },
  };
}
