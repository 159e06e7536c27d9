import type { Deps } from '../../platform/context.js';
import { every, type Stoppable } from '../../platform/jobs.js';
import { refreshDueMcpServers } from './custom.js';

/** Refreshes registered MCP servers' tool lists every HANGAR_TOOLS_MCP_REFRESH_MS (0: only on demand). */
export async function startToolJobs(deps: Deps): Promise<Stoppable> {
  const interval = deps.config.tools.mcpRefreshMs;
  if (!interval) return { stop: async () => {} };
  // Checked more often than the interval, so a server is refreshed within a few minutes of falling due.
  return every(deps, Math.min(interval, 5 * 60 * 1000), 'refreshing MCP servers', async () => {
    await refreshDueMcpServers(deps, interval);
  });
}
