import type { Deps } from '../../platform/context.js';
import type { App } from '../../platform/http/server.js';
import { forwardingHooks } from '../../platform/nodes/index.js';
import { placeSandbox, remoteNodeOf } from './nodes.js';
import type { CreateSandboxBody } from './schemas.js';

/** Routes under /v1/sandboxes/{id} that any replica answers from the database alone. */
const SERVED_ANYWHERE = new Set(['/v1/sandboxes/:id/activity']);

/**
 * Where sandbox requests change node (ADR 0024), as hooks on the sandboxes' route scope: a request for a sandbox of
 * the caller's organization that lives on another live node is forwarded there as it arrives (uploads, downloads,
 * commands and SSE stream through); POST /v1/sandboxes, once its body is validated, goes to the node placement picks.
 * The caller was authenticated here and is authenticated again, from the same credentials, there.
 */
export function forwardSandboxRequests(scope: App, deps: Deps): void {
  forwardingHooks(scope, deps, {
    beforeBody: async (req) => {
      const id = (req.params as { id?: unknown } | undefined)?.id;
      if (typeof id !== 'string' || SERVED_ANYWHERE.has(req.routeOptions.url ?? '')) return null;
      return remoteNodeOf(req.ctx, id);
    },
    afterValidation: async (req) => {
      if (req.method !== 'POST' || req.routeOptions.url !== '/v1/sandboxes') return null;
      return placeSandbox(req.ctx, req.body as CreateSandboxBody);
    },
  });
}
