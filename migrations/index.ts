import type { Migration } from 'kysely';
import * as foundation from './20261122T0100_foundation.js';
import * as sandboxes from './20261122T0200_sandboxes.js';
import * as threads from './20261122T0300_threads.js';
import * as modelsAndSecrets from './20261122T0400_models_and_secrets.js';
import * as agents from './20261122T0500_agents.js';
import * as runs from './20261122T0600_runs.js';
import * as sandboxDisk from './20261125T1420_sandbox_disk.js';
import * as toolExecutions from './20261125T1510_tool_executions.js';
import * as nodes from './20261125T1700_nodes.js';
import * as oauth from './20261125T2000_oauth.js';
import * as tools from './20261127T1600_tools.js';
import * as billing from './20261127T2000_billing.js';
import * as usageRollups from './20261127T2100_usage_rollups.js';
import * as runmesh from './20261128T0100_runmesh.js';
import * as channels from './20261128T0200_channels.js';
import * as contextSessions from './20261128T1500_context_sessions.js';
import * as jobEngine from './20261128T1600_job_engine.js';
import * as deployments from './20261128T1700_deployments.js';

/** Every migration, in order. Names are timestamps so they sort the way they apply. */
export const migrations: Record<string, Migration> = {
  '20261122T0100_foundation': foundation,
  '20261122T0200_sandboxes': sandboxes,
  '20261122T0300_threads': threads,
  '20261122T0400_models_and_secrets': modelsAndSecrets,
  '20261122T0500_agents': agents,
  '20261122T0600_runs': runs,
  '20261125T1420_sandbox_disk': sandboxDisk,
  '20261125T1510_tool_executions': toolExecutions,
  '20261125T1700_nodes': nodes,
  '20261125T2000_oauth': oauth,
  '20261127T1600_tools': tools,
  '20261127T2000_billing': billing,
  '20261127T2100_usage_rollups': usageRollups,
  '20261128T0100_runmesh': runmesh,
  '20261128T0200_channels': channels,
  '20261128T1500_context_sessions': contextSessions,
  '20261128T1600_job_engine': jobEngine,
  '20261128T1700_deployments': deployments,
};
