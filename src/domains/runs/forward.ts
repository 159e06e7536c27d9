import type { Deps } from '../../platform/context.js';
import type { App } from '../../platform/http/server.js';
import { forwardingHooks } from '../../platform/nodes/index.js';
import { runNode, threadSandboxNode } from './nodes.js';
import type { RunBody } from './schemas.js';

/**
 * Runs across replicas (ADR 0024): a run's tools act in its thread's sandbox through that sandbox's agent, which
 * only the sandbox's node reaches; so POST /v1/run on a thread whose sandbox lives on another live node is run by
 * that node (the whole request, its SSE stream and the client's disconnect, which cancels the run, included), and a
 * cancel goes to the node whose loop runs the run. Frames reach the thread's subscribers on every replica as always.
 */
export function forwardRunRequests(scope: App, deps: Deps): void {
  forwardingHooks(scope, deps, {
    beforeBody: async (req) => {
      const runId = (req.params as { runId?: unknown } | undefined)?.runId;
      if (typeof runId !== 'string' || req.routeOptions.url !== '/v1/runs/:runId/cancel') return null;
      return runNode(req.ctx, runId);
    },
    afterValidation: async (req) => {
      if (req.method !== 'POST' || req.routeOptions.url !== '/v1/run') return null;
      return threadSandboxNode(req.ctx, (req.body as RunBody).threadId);
    },
  });
}
