import type { Deps } from '../../platform/context.js';
import type { Stoppable } from '../../platform/jobs.js';
import { TemplateBuilder } from './builder.js';
import { ensureSystemTemplates, systemTemplateState, TEMPLATE_STATE } from './service.js';

/**
 * The templates' background work: the system templates exist; this node's builder takes builds (its queue is
 * where POST /v1/templates and a first use of desktop-ubuntu send them); on a node that runs sandboxes, builds
 * a restart interrupted fail, pending ones are queued again, and desktop-ubuntu is prebuilt when
 * HANGAR_TEMPLATE_PREBUILD is set. Stopping cancels the running build and waits for the queue.
 */
export async function startTemplateJobs(deps: Deps): Promise<Stoppable> {
  await ensureSystemTemplates(deps);
  const builder = new TemplateBuilder(deps);
  const state = deps.state.get(TEMPLATE_STATE);
  const enqueue = (id: string) => builder.enqueue(id);
  state.enqueue = enqueue;
  if (deps.sandboxes.available) {
    await builder.recover();
    if (deps.config.sandboxes.prebuildTemplates) {
      const desktop = await systemTemplateState(deps, 'desktop-ubuntu');
      if (desktop && desktop.status !== 'ready') builder.enqueue(desktop.id);
    }
  }
  return {
    async stop() {
      if (state.enqueue === enqueue) state.enqueue = null;
      await builder.close();
    },
  };
}
