import { runTool as runHostTool, SANDBOX_PLACE, toolDefinitions as hostToolDefinitions, type ToolOutcome } from '../../platform/agent-tools.js';
import type { AgentClient } from '../../platform/sandboxes/index.js';

/**
 * The sandbox runs' tools: the shared tools of src/platform/agent-tools.ts over the sandbox's agent, with its home
 * /home/user and scratch files in /tmp (a device runs the same tools in its workspace folder, see src/device/).
 */
export { ToolInputError, toolResultPart, type ToolOutcome } from '../../platform/agent-tools.js';

export interface ToolEnv {
  agent: AgentClient;
  /** Pids this run started (write_stdin may only reach those). */
  pids: Set<number>;
  /** Streams live output (tool_output_delta frames). */
  onOutput: (chunk: string) => void;
  signal: AbortSignal;
}

/** The definitions the model gets (no `execute`: the run loop executes calls itself, streaming their output into the thread). */
export const toolDefinitions = (names: readonly string[]) => hostToolDefinitions(names, SANDBOX_PLACE);

/** Runs one tool call in the sandbox. Failures the model can act on are outcomes with isError, not exceptions. */
export function runTool(name: string, input: unknown, env: ToolEnv): Promise<ToolOutcome> {
  const { agent, ...rest } = env;
  return runHostTool(name, input, { ...rest, host: agent, home: SANDBOX_PLACE.home, tmp: '/tmp' });
}
