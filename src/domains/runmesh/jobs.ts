import { ConfigError } from '../../config.js';
import type { Deps } from '../../platform/context.js';
import { every, type Stoppable } from '../../platform/jobs.js';
import { sweepDispatches } from './dispatch.js';
import { expireLinks } from './links.js';
import { parseMeshCidr } from './wireguard.js';

/** How often expired links and overdue device runs are looked for. */
const SWEEP_MS = 5_000;

/**
 * The device mesh's background work: the mesh range is checked at start-up (a bad HANGAR_RUNMESH_CIDR stops it,
 * naming the setting); then links past their expiry become `expired`, and local-device runs their device did not
 * take, or did not come back to, within the dispatch timeout fail (ADR 0029).
 */
export async function startRunmeshJobs(deps: Deps): Promise<Stoppable> {
  try {
    parseMeshCidr(deps.config.runmesh.cidr);
  } catch (err) {
    throw new ConfigError('HANGAR_RUNMESH_CIDR', (err as Error).message);
  }
  const sweep = async () => {
    await expireLinks(deps);
    const failed = await sweepDispatches(deps);
    if (failed) deps.log.warn({ runs: failed }, 'local-device runs whose device did not take them (or did not come back) in time failed');
  };
  await sweep().catch((err) => deps.log.error({ err }, 'the start-up device mesh sweep failed'));
  return every(deps, Math.min(SWEEP_MS, deps.config.runmesh.dispatchTimeoutSeconds * 500), 'device mesh sweep', sweep);
}
