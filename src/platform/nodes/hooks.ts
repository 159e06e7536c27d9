import type { FastifyRequest } from 'fastify';
import type { Deps } from '../context.js';
import type { App } from '../http/server.js';
import { forwardRequest } from './proxy.js';
import { verifyHop } from './signing.js';

/** A live node other than this one that should serve a request. */
export interface NodeTarget {
  id: string;
  url: string;
}

/**
 * Installs a route scope's forwarding (ADR 0024) as its hooks, so the decision sits in one place per domain:
 * - a request a peer forwarded here (valid signed hop headers) is served here and never forwarded again; forged,
 *   stale or replayed hop headers are a 401, whatever the credentials;
 * - `beforeBody(req)` (after authentication, before the body is read) names the node for requests whose route alone
 *   decides; the request then streams there untouched (uploads, SSE);
 * - `afterValidation(req)` (once the body is validated) names the node for requests whose body decides; the
 *   validated body is sent there as JSON.
 * Either answers null to serve the request here.
 */
export function forwardingHooks(
  scope: App,
  deps: Deps,
  decide: { beforeBody?: (req: FastifyRequest) => Promise<NodeTarget | null>; afterValidation?: (req: FastifyRequest) => Promise<NodeTarget | null> },
): void {
  const forwarded = new WeakSet<FastifyRequest>();
  scope.addHook('onRequest', async (req, reply) => {
    if (verifyHop(deps, req)) {
      forwarded.add(req);
      return;
    }
    if (!req.ctx || !decide.beforeBody) return;
    const node = await decide.beforeBody(req);
    if (node) await forwardRequest(deps, req, reply, node);
  });
  if (decide.afterValidation) {
    const after = decide.afterValidation;
    scope.addHook('preHandler', async (req, reply) => {
      if (forwarded.has(req) || !req.ctx) return;
      const node = await after(req);
      if (node) await forwardRequest(deps, req, reply, node, Buffer.from(JSON.stringify(req.body)));
    });
  }
}
