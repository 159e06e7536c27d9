import type { Transaction } from 'kysely';
import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { JobEngine } from './job-engine/index.js';
import type { Database } from '../database.js';
import type { BlobStore } from './blobs/index.js';
import type { Bus } from './bus/index.js';
import type { Db, Executor } from './db/index.js';
import type { Isolation } from './isolation/types.js';
import type { Metrics } from './metrics.js';
import type { SandboxRuntime } from './sandboxes/types.js';
import { errors } from './http/errors.js';
import type { LiveCredentials } from './revocations.js';
import type { RuntimeState } from './state.js';
import type { Role, Scope } from './scopes.js';

/** Long-lived collaborators, built once at start-up and shared by every request. */
export interface Deps {
  config: Config;
  db: Db;
  blobs: BlobStore;
  bus: Bus;
  log: Logger;
  /** Sandboxes for code execution; `available` is false (with the reason) on a host that cannot isolate. */
  isolation: Isolation;
  /** Persistent sandboxes (runc); `available` is false (with the reason) where they cannot run. */
  sandboxes: SandboxRuntime;
  /** This installation's id (names its containers and layer folders on a host shared with others). */
  installId: string;
  /** Open WebSockets by credential: closed on revocation (from any replica, over the bus) and at expiry. */
  live: LiveCredentials;
  /** This app's runtime state (queues, running work, registries), one slot per domain: never a module global. */
  state: RuntimeState;
  /** The durable job engine (ADR 0032): domains declare their queues from their start jobs; app.ts starts it after them. */
  jobs: JobEngine;
  /** Prometheus instruments of this app (ADR 0040); `enabled` is false when nobody can scrape them. */
  metrics: Metrics;
}

/** Who is calling. An API key acts for the user who created it, within that key's organization. */
export interface Principal {
  kind: 'api_key' | 'session' | 'system' | 'device';
  userId: string;
  orgId: string | null;
  role: Role | null;
  scopes: ReadonlySet<Scope>;
  apiKeyId: string | null;
  /** When the credential stops being valid (a session token's `exp`, an API key's expiry); null when never. */
  expiresAt?: string | null;
  /** A linked device's credential (`hgd_…`, ADR 0029): the node it is. Such a principal holds only `runmesh:device`. */
  deviceNodeId?: string;
  /**
   * A product channel's linked end user (ADR 0030): `userId` is their `peu_…` id. Their runs and tools use only
   * their own credentials and connections, never the organization's or the builder's.
   */
  endUser?: { appId: string; appSlug: string; productExternalUserId: string };
}

/** A credential as presented, whatever the transport: an `X-API-Key` value, or an `Authorization: Bearer` token. */
export interface Credential {
  apiKey?: string;
  bearer?: string;
}

/** Resolves a credential (and the organization asked for, if any) to its principal; throws 401/403/404 AppErrors. */
export type Authenticate = (credential: Credential, orgIdHint?: string) => Promise<Principal>;

/** What every service verb receives: collaborators, caller, request id and, inside withTx, the transaction. */
export interface Ctx {
  deps: Deps;
  requestId: string;
  principal: Principal;
  trx?: Transaction<Database>;
}

export const exec = (ctx: Ctx): Executor => ctx.trx ?? ctx.deps.db.kysely;

/** Runs `fn` in a transaction, reusing the caller's when there is one. */
export async function withTx<T>(ctx: Ctx, fn: (ctx: Ctx) => Promise<T>): Promise<T> {
  if (ctx.trx) return fn(ctx);
  return ctx.deps.db.kysely.transaction().execute((trx) => fn({ ...ctx, trx }));
}

/** The caller's organization; a session without one may only create an organization. */
export function orgId(ctx: Ctx): string {
  if (!ctx.principal.orgId) throw errors.forbidden('this request needs an organization: create one with POST /v1/organizations');
  return ctx.principal.orgId;
}

export const hasScope = (ctx: Ctx, scope: Scope): boolean => ctx.principal.scopes.has(scope);

export function requireScope(ctx: Ctx, scope: Scope): void {
  if (!hasScope(ctx, scope)) throw errors.missingScope(scope);
}

/**
 * For a read that routes under different scopes share (a resource and its activity listing, say): the caller
 * holds at least one of them. The 403 names them all.
 */
export function requireAnyScope(ctx: Ctx, scopes: readonly [Scope, ...Scope[]]): void {
  if (!scopes.some((s) => hasScope(ctx, s))) throw errors.missingScope(scopes.join('" or "'));
}

/** Organization admins hold `org:admin` (role admin, or a key granted it). */
export const isOrgAdmin = (ctx: Ctx): boolean => hasScope(ctx, 'org:admin');

export function requireOrgAdmin(ctx: Ctx): void {
  if (!isOrgAdmin(ctx)) throw errors.forbidden('organization admin access is required');
}

/** Credential admins manage OAuth provider configs and organization credentials. */
export function requireCredentialAdmin(ctx: Ctx): void {
  if (!hasScope(ctx, 'credentials:admin')) throw errors.forbidden('credential admin access is required');
}

/** A context for work not started by a request (CLI, start-up jobs). */
export function systemCtx(deps: Deps, principal: Omit<Principal, 'kind'> & { kind?: Principal['kind'] }): Ctx {
  return { deps, requestId: `sys_${Date.now().toString(36)}`, principal: { kind: 'system', ...principal } };
}
