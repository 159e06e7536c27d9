import type { FastifyRequest } from 'fastify';
import type { Deps } from '../../platform/context.js';
import type { App } from '../../platform/http/server.js';
import { forwardRequest, verifyHop } from '../../platform/nodes/index.js';
import { placeSandbox, remoteNodeOf } from './nodes.js';
import type { CreateSandboxBody } from './schemas.js';

/** Routes under /v1/sandboxes/{id} that any replica answers from the database alone. */
const SERVED_ANYWHERE = new Set(['/v1/sandboxes/:id/activity']);

/**
 * The one place where sandbox requests change node (ADR 0024), as hooks on the sandboxes' route scope:
 * - a request for a sandbox of the caller's organization that lives on another live node is forwarded there as it
 *   arrives (before its body is read: uploads, downloads, commands and SSE stream through untouched);
 * - POST /v1/sandboxes, once its body is validated, goes to the node placement picks;
 * - a request a peer forwarded here (valid signed hop headers) is served here, never forwarded again; forged or
 *   stale hop headers are a 401 whatever the credentials.
 * The caller was authenticated here (the global hook) and is authenticated again, from the same credentials, there.
 */
export function forwardSandboxRequests(scope: App, deps: Deps): void {
  const forwarded = new WeakSet<FastifyRequest>();
  scope.addHook('onRequest', async (req, reply) => {
    if (verifyHop(deps, req)) {
      forwarded.add(req);
      return;
    }
    const id = (req.params as { id?: unknown } | undefined)?.id;
    if (typeof id !== 'string' || !req.ctx || SERVED_ANYWHERE.has(req.routeOptions.url ?? '')) return;
    const node = await remoteNodeOf(req.ctx, id);
    if (node) await forwardRequest(deps, req, reply, node);
  });
  scope.addHook('preHandler', async (req, reply) => {
    if (forwarded.has(req) || req.method !== 'POST' || req.routeOptions.url !== '/v1/sandboxes') return;
    const node = await placeSandbox(req.ctx, req.body as CreateSandboxBody);
    if (node) await forwardRequest(deps, req, reply, node, Buffer.from(JSON.stringify(req.body)));
  });
}
