import type { Deps } from '../../platform/context.js';
import { recurring, type Stoppable } from '../../platform/jobs.js';
import { sweepFlows } from './repo.js';

const SWEEP_EVERY_MS = 10 * 60 * 1000;

/** Forgets browser and device flows an hour after they expired (their state or device code is long useless). */
export async function startOAuthJobs(deps: Deps): Promise<Stoppable> {
  const sweep = () => sweepFlows(deps, new Date(Date.now() - 60 * 60 * 1000).toISOString());
  await sweep().catch((err) => deps.log.warn({ err }, 'sweeping OAuth flows failed'));
  // Every ten minutes, once across replicas (the job engine's schedule).
  return recurring(deps, 'oauth.flow_sweep', SWEEP_EVERY_MS, sweep);
}
