import type { Deps } from '../../platform/context.js';
import { every, type Stoppable } from '../../platform/jobs.js';
import { failOrphanedRun, failUndispatchedLocalRuns, isOrphaned, RUN_STATE } from './service.js';

/** How often runs whose process is gone (on any replica) are looked for. */
const ORPHAN_SWEEP_MS = 60_000;

/**
 * Runs left `running` by a process that is gone are finished as failed, so their thread takes new runs and
 * cancel answers 409 for them:
 * - at start-up, this node's (HANGAR_NODE_ID) running runs: this process has started none yet, so a previous
 *   process of this node left them (as the template builder treats this node's `building` templates);
 * - at start-up and then every minute, any node's running run whose thread lock lapsed: the process that ran it
 *   stopped renewing it (a replica that died and did not come back).
 * A local-device run is not held by a process but by its device: the device mesh's dispatch sweeper ends it when
 * its device does not take it, or does not come back, in time (ADR 0029). Here only one that never reached the
 * mesh (its server stopped in between) is ended, once it is older than the mesh would have waited.
 */
export async function startRunJobs(deps: Deps): Promise<Stoppable> {
  const sweep = async (atStart: boolean) => {
    const rows = await deps.db.kysely
      .selectFrom('agent_runs')
      .selectAll()
      .where('status', '=', 'running')
      .where('execution_mode', '!=', 'local-desktop')
      .execute();
    const { active } = deps.state.get(RUN_STATE);
    let failed = 0;
    for (const row of rows) {
      const previousProcess = atStart && row.node_id === deps.config.sandboxes.nodeId && !active.has(row.id);
      if (!previousProcess && !(await isOrphaned(deps, row))) continue;
      try {
        if (await failOrphanedRun(deps, row)) failed++;
      } catch (err) {
        deps.log.error({ err, runId: row.id }, 'could not finish a run whose process is gone');
      }
    }
    if (failed) deps.log.warn({ runs: failed }, 'runs left running by a stopped server finished as failed');
    const lost = await failUndispatchedLocalRuns(deps);
    if (lost) deps.log.warn({ runs: lost }, 'local-device runs never handed to the device mesh finished as failed');
  };
  await sweep(true).catch((err) => deps.log.error({ err }, 'the start-up check of interrupted runs failed'));
  return every(deps, ORPHAN_SWEEP_MS, 'interrupted runs check', () => sweep(false));
}
