import type { Deps } from '../../platform/context.js';
import { recurring, type Stoppable } from '../../platform/jobs.js';
import { refreshDueMcpServers } from './custom.js';

/** Refreshes registered MCP servers' tool lists every HANGAR_TOOLS_MCP_REFRESH_MS (0: only on demand). */
export async function startToolJobs(deps: Deps): Promise<Stoppable> {
  const interval = deps.config.tools.mcpRefreshMs;
  if (!interval) return { stop: async () => {} };
  // Checked more often than the interval, so a server is refreshed within a few minutes of falling due.
  // Once across replicas on the job engine (a period tests shorten below a minute is a per-process timer).
  return recurring(deps, 'tools.mcp_refresh', Math.min(interval, 5 * 60 * 1000), () => refreshDueMcpServers(deps, interval));
}
