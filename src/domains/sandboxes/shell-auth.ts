import type { FastifyRequest } from 'fastify';
import type { Authenticate, Credential, Ctx, Deps } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import { credentialOf } from '../../platform/http/server.js';

/**
 * Who opens a shell (ADR 0046). A browser's WebSocket cannot send headers, so the upgrade may carry its credential in
 * the query instead, as the threads' socket does (ADR 0011): exactly one of `api_key` or `token`, and `org_id` for a
 * session token of a user in several organizations. Otherwise the usual headers (the CLI, the SDKs). Unlike the
 * threads' socket, every refusal is an HTTP answer before the upgrade (400, 401, 403), and the checks are the
 * platform's hook's own: an organization, no device credential, the `sandbox:write` scope.
 */

const SCOPE = 'sandbox:write';

/** The credential an upgrade presents: from its query when it has `api_key` or `token`, else from its headers. */
export function shellCredential(req: FastifyRequest): { credential: Credential; orgIdHint?: string } {
  const params = new URL(req.url, 'http://localhost').searchParams;
  const keys = params.getAll('api_key');
  const tokens = params.getAll('token');
  const orgs = params.getAll('org_id');
  const fromHeaders = credentialOf(req);
  if (orgs.length > 1) throw errors.invalid('give org_id once');
  const orgIdHint = orgs[0] || fromHeaders.orgIdHint;
  if (orgs[0] && fromHeaders.orgIdHint && orgs[0] !== fromHeaders.orgIdHint) throw errors.invalid('org_id and X-Org-Id name different organizations');
  if (keys.length + tokens.length === 0) return fromHeaders;
  if (keys.length + tokens.length > 1) throw errors.invalid('give exactly one of the query parameters api_key or token');
  if (fromHeaders.credential.apiKey || fromHeaders.credential.bearer) {
    throw errors.invalid('give the credential once: in the query (api_key or token) or in the headers, not both');
  }
  let credential: Credential;
  if (keys.length) {
    if (!keys[0]!.startsWith('hgr_')) throw errors.unauthenticated('api_key is not an API key; send a session token as token');
    credential = { apiKey: keys[0]! };
  } else credential = { bearer: tokens[0]! };
  return { credential, ...(orgIdHint ? { orgIdHint } : {}) };
}

/** Authenticates a shell's upgrade (query or headers) with the same checks as every route; throws 400/401/403. */
export async function authenticateShell(deps: Deps, authenticate: Authenticate, req: FastifyRequest): Promise<Ctx> {
  const { credential, orgIdHint } = shellCredential(req);
  const principal = await authenticate(credential, orgIdHint);
  if (!principal.orgId) throw errors.forbidden('this request needs an organization: create one with POST /v1/organizations');
  if (principal.kind === 'device') throw errors.forbidden('a device credential is only accepted on the device routes of the mesh');
  if (!principal.scopes.has(SCOPE)) throw errors.missingScope(SCOPE);
  return { deps, requestId: req.id, principal };
}
