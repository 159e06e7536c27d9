import type { Deps } from '../../platform/context.js';
import { nowIso } from '../../platform/ids.js';
import { every, type Stoppable } from '../../platform/jobs.js';
import { pump, stopProcessing } from './messages.js';
import { expireRequests } from './privacy-repo.js';

/**
 * The channels' background work: messages that are due (retries after a provider failure or a busy thread, and
 * messages a stopped process held) are queued; pending privacy requests past their expiry become expired.
 */
export async function startChannelJobs(deps: Deps): Promise<Stoppable> {
  const tick = async () => {
    await pump(deps);
    await expireRequests({ deps }, nowIso());
  };
  await tick().catch((err) => deps.log.error({ err }, 'the start-up channels sweep failed'));
  const timer = every(deps, Math.min(1000, deps.config.channels.retryBaseMs), 'channels sweep', tick);
  return {
    async stop() {
      await timer.stop();
      await stopProcessing(deps);
    },
  };
}
