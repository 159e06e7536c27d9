import { randomBytes, createHash } from 'node:crypto';
import { orgId, requireScope, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { decrypt, deriveKey, encrypt, sha256Hex } from '../../platform/crypto/index.js';
import { isUniqueViolation } from '../../platform/db/index.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { ROLE_SCOPES } from '../../platform/scopes.js';
import { stateKey } from '../../platform/state.js';
import { recordActivity } from '../activity/index.js';
import { membershipOf } from '../organizations/index.js';
import {
  fetchUserinfo,
  ProviderOAuthError,
  requestTokens,
  revokeToken,
  startDeviceAuthorization,
  type OAuthClient,
  type ProviderHttp,
  type TokenSet,
} from './client.js';
import { clientKey, loadProviders, readPath, type ProviderDefinition } from './providers.js';
import * as repo from './repo.js';
import type { ConnectionRow, FlowRow } from './repo.js';
import type { DeviceStatus, OAuthConfigView, OAuthConnection, OAuthProvider } from './schemas.js';

/** How long a browser or device flow may take, unless the provider's device code expires sooner. */
export const FLOW_TTL_MS = 10 * 60 * 1000;

const OAUTH_STATE = stateKey('oauth', () => ({
  providers: null as ReadonlyMap<string, ProviderDefinition> | null,
  keys: new Map<string, Buffer>(),
  /** Decrypted access tokens by connection id and token version: a hit skips the decrypt. */
  tokens: new Map<string, { version: number; accessToken: string }>(),
  /** Refreshes running in this process, by connection id: concurrent callers share one. */
  refreshing: new Map<string, Promise<ConnectionRow>>(),
}));

export const oauthState = (deps: Deps) => deps.state.get(OAUTH_STATE);

/** The provider catalogue (built-in plus the operator's file), loaded once per app; a bad file stops start-up. */
export function providers(deps: Deps): ReadonlyMap<string, ProviderDefinition> {
  const s = oauthState(deps);
  s.providers ??= loadProviders(deps.config.oauth);
  return s.providers;
}

export function keyFor(deps: Deps, purpose: 'tokens' | 'clients' | 'flows'): Buffer {
  const s = oauthState(deps);
  let key = s.keys.get(purpose);
  if (!key) {
    key = deriveKey(deps.config.secretKey, `oauth-${purpose}`);
    s.keys.set(purpose, key);
  }
  return key;
}

export const http = (deps: Deps): ProviderHttp => ({ timeoutMs: deps.config.oauth.timeoutMs });

// Associated data binds each ciphertext to its row and field: a value copied into another row does not decrypt.
export const tokenAad = (org: string, connectionId: string, field: 'access' | 'refresh') => `${org}:${connectionId}:${field}`;
const clientAad = (org: string, provider: string) => `${org}:${provider}:client_secret`;
const flowAad = (org: string, flowId: string) => `${org}:${flowId}:flow`;

function definition(deps: Deps, slug: string): ProviderDefinition {
  const def = providers(deps).get(slug);
  if (!def) throw errors.notFound('OAuth provider', slug);
  return def;
}

/** The client a new flow uses: the organization's enabled config, else the platform's; clear errors otherwise. */
async function clientFor(ctx: Ctx, def: ProviderDefinition): Promise<OAuthClient & { scopes: string[] | null }> {
  const config = await repo.findConfig(ctx, def.slug);
  if (config) {
    if (!config.enabled)
      throw new AppError(
        'provider_disabled',
        `${def.name} is disabled for this organization; an admin turns it on with PATCH /v1/oauth/configs/${def.slug} {"enabled": true}`,
      );
    return {
      source: 'organization',
      clientId: config.client_id,
      clientSecret: decrypt(keyFor(ctx.deps, 'clients'), config.client_secret_ciphertext, clientAad(config.org_id, def.slug)),
      scopes: config.scopes ? (JSON.parse(config.scopes) as string[]) : null,
    };
  }
  const platform = ctx.deps.config.oauth.clients[clientKey(def.slug)];
  if (platform) return { source: 'platform', clientId: platform.clientId, clientSecret: platform.clientSecret, scopes: null };
  const env = `HANGAR_OAUTH_${clientKey(def.slug).toUpperCase()}_CLIENT_ID`;
  throw new AppError(
    'provider_not_configured',
    `${def.name} has no OAuth client here: an admin adds the organization's own with POST /v1/oauth/configs, or the operator sets ${env}`,
  );
}

/** The client that issued a connection's tokens (refresh and revocation must use the same one). */
export async function clientOfConnection(
  ctx: Ctx,
  def: ProviderDefinition,
  row: Pick<ConnectionRow, 'client_source' | 'client_id'>,
): Promise<OAuthClient | null> {
  if (row.client_source === 'platform') {
    const platform = ctx.deps.config.oauth.clients[clientKey(def.slug)];
    return platform && platform.clientId === row.client_id ? { source: 'platform', ...platform } : null;
  }
  const config = await repo.findConfig(ctx, def.slug);
  if (!config || config.client_id !== row.client_id) return null;
  return {
    source: 'organization',
    clientId: config.client_id,
    clientSecret: decrypt(keyFor(ctx.deps, 'clients'), config.client_secret_ciphertext, clientAad(config.org_id, def.slug)),
  };
}

export function toConnection(row: ConnectionRow): OAuthConnection {
  return {
    id: row.id,
    provider: row.provider,
    accountId: row.account_id,
    email: row.email,
    username: row.username,
    displayName: row.display_name,
    scopes: JSON.parse(row.scopes) as string[],
    status: row.status,
    isDefault: row.is_default === 1,
    clientSource: row.client_source,
    expiresAt: row.expires_at,
    lastError: row.last_error,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    lastRefreshedAt: row.last_refreshed_at,
  };
}

export function connectionActivity(
  ctx: Ctx,
  row: Pick<ConnectionRow, 'id' | 'provider' | 'account_id'>,
  action: string,
  extra: Record<string, unknown> = {},
) {
  return recordActivity(ctx, {
    resourceType: 'oauth_connection',
    resourceId: row.id,
    eventType: `oauth.connection.${action}`,
    status: action === 'expired' ? 'failed' : 'completed',
    title: `${row.provider} connection ${action}`,
    metadata: { provider: row.provider, accountId: row.account_id, ...extra },
  });
}

/**
 * For activity filters on `oauth_connection`: a connection is its user's alone. One that no longer exists (a
 * disconnect) stays filterable: its events are then only the caller's own, as for any non-admin filter.
 */
export async function canSeeConnection(ctx: Ctx, id: string): Promise<boolean> {
  if (await repo.findConnection(ctx, id)) return true;
  return !(await repo.connectionExistsInOrg(ctx, id));
}

// ---------------------------------------------------------------- catalogue

/** Every provider this installation defines, with whether this organization can connect it now. */
export async function listProviders(ctx: Ctx): Promise<OAuthProvider[]> {
  requireScope(ctx, 'connections:read');
  const configs = new Map((await repo.listConfigRows(ctx)).map((c) => [c.provider, c]));
  return [...providers(ctx.deps).values()].map((def) => {
    const config = configs.get(def.slug);
    const platformClient = Boolean(ctx.deps.config.oauth.clients[clientKey(def.slug)]);
    return {
      slug: def.slug,
      name: def.name,
      authModes: def.modes,
      defaultScopes: config?.scopes ? (JSON.parse(config.scopes) as string[]) : def.defaultScopes,
      scopeSeparator: def.scopeSeparator,
      pkce: def.pkce,
      platformClient,
      organizationConfig: Boolean(config),
      configRequired: !config && !platformClient,
      enabled: config ? config.enabled === 1 : platformClient,
      docs: def.docs ?? null,
    };
  });
}

// ---------------------------------------------------------------- browser flow

export const callbackUrl = (deps: Deps): string => `${deps.config.urls.auth.replace(/\/+$/, '')}/v1/oauth/callback`;

/** True when `url` is the auth service's own origin or under an allowlisted origin or prefix. */
function returnUrlAllowed(deps: Deps, url: string): boolean {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return false;
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') return false;
  if (parsed.username || parsed.password) return false;
  const allowed = [new URL(deps.config.urls.auth).origin, ...deps.config.oauth.returnUrls];
  return allowed.some((a) => {
    const base = new URL(a);
    if (base.origin !== parsed.origin) return false;
    const prefix = base.pathname === '/' ? '/' : base.pathname.replace(/\/?$/, '/');
    return prefix === '/' || `${parsed.pathname.replace(/\/?$/, '/')}`.startsWith(prefix);
  });
}

const pkceChallenge = (verifier: string) => createHash('sha256').update(verifier).digest('base64url');

/**
 * Starts a browser flow: a random single-use state bound to the caller, stored (hashed) for ten minutes, and
 * a PKCE verifier unless the provider opts out. Answers the provider's authorization URL.
 */
export async function startBrowserFlow(ctx: Ctx, input: { provider: string; scopes?: string[]; returnUrl?: string }) {
  requireScope(ctx, 'connections:write');
  const def = definition(ctx.deps, input.provider);
  if (!def.modes.includes('oauth2')) throw errors.invalid(`${def.name} connects with the device-code flow: POST /v1/oauth/device/start/${def.slug}`);
  if (input.returnUrl !== undefined && !returnUrlAllowed(ctx.deps, input.returnUrl))
    throw errors.invalidField(
      'returnUrl',
      'is not on the allowlist: the auth service’s own origin, or an origin or prefix the operator lists in HANGAR_OAUTH_RETURN_URLS',
    );
  const client = await clientFor(ctx, def);
  const scopes = input.scopes?.length ? input.scopes : (client.scopes ?? def.defaultScopes);
  const state = randomBytes(32).toString('base64url');
  const verifier = def.pkce ? randomBytes(48).toString('base64url') : null;
  const org = orgId(ctx);
  const now = nowIso();
  const id = prefixedId('oaf');
  const expiresAt = new Date(Date.now() + FLOW_TTL_MS).toISOString();
  const redirectUri = callbackUrl(ctx.deps);
  await repo.insertFlow(ctx, {
    id,
    org_id: org,
    user_id: ctx.principal.userId,
    provider: def.slug,
    kind: 'browser',
    state_hash: sha256Hex(state),
    secret_ciphertext: verifier ? encrypt(keyFor(ctx.deps, 'flows'), verifier, flowAad(org, id)) : null,
    user_code: null,
    verification_uri: null,
    verification_uri_complete: null,
    interval_seconds: null,
    scopes: JSON.stringify(scopes),
    return_url: input.returnUrl ?? null,
    redirect_uri: redirectUri,
    client_source: client.source,
    client_id: client.clientId,
    status: 'pending',
    error: null,
    connection_id: null,
    expires_at: expiresAt,
    created_at: now,
    updated_at: now,
  });
  const url = new URL(def.authorizationUrl!);
  url.searchParams.set('response_type', 'code');
  url.searchParams.set('client_id', client.clientId);
  url.searchParams.set('redirect_uri', redirectUri);
  if (scopes.length) url.searchParams.set('scope', scopes.join(def.scopeSeparator));
  url.searchParams.set('state', state);
  if (verifier) {
    url.searchParams.set('code_challenge', pkceChallenge(verifier));
    url.searchParams.set('code_challenge_method', 'S256');
  }
  for (const [k, v] of Object.entries(def.authorizationParams)) url.searchParams.set(k, v);
  return { authUrl: url.toString(), flowId: id, expiresAt };
}

/** Records a flow that did not end in a connection: the activity row `oauth.connection.failed` (never a secret). */
function flowFailedActivity(ctx: Ctx, flow: Pick<FlowRow, 'id' | 'provider' | 'kind'>, error: string, extra: Record<string, unknown> = {}) {
  return recordActivity(ctx, {
    resourceType: 'oauth_connection',
    resourceId: flow.id,
    eventType: 'oauth.connection.failed',
    status: 'failed',
    title: `${flow.provider} connection failed: ${error}`,
    metadata: { provider: flow.provider, error, flow: flow.kind === 'device' ? 'device_code' : 'browser', ...extra },
  });
}

export interface CallbackResult {
  ok: boolean;
  provider: string | null;
  message: string;
  returnUrl: string | null;
  connection: OAuthConnection | null;
  error: string | null;
}

/**
 * Who else may own a browser flow than a member of its organization: a product end user (channels, ADR 0030) starts
 * flows through the product's server. The channels domain answers it (registered by app.ts: oauth cannot import it).
 */
export type FlowOwnerResolver = (deps: Deps, userId: string, orgId: string, requestId: string) => Promise<Ctx | null>;
const FLOW_OWNERS = stateKey('oauth.flowOwners', () => ({ resolvers: [] as FlowOwnerResolver[] }));

export function registerFlowOwners(deps: Deps, resolver: FlowOwnerResolver): void {
  deps.state.get(FLOW_OWNERS).resolvers.push(resolver);
}

/** The context of the user who started a flow, as long as they are still a member of its organization. */
async function flowOwnerCtx(deps: Deps, flow: FlowRow, requestId: string): Promise<Ctx | null> {
  const membership = await membershipOf(deps, flow.user_id, flow.org_id);
  if (!membership) {
    for (const resolve of deps.state.get(FLOW_OWNERS).resolvers) {
      const owner = await resolve(deps, flow.user_id, flow.org_id, requestId);
      if (owner) return owner;
    }
    return null;
  }
  return {
    ...systemCtx(deps, {
      kind: 'session',
      userId: flow.user_id,
      orgId: flow.org_id,
      role: membership.role,
      scopes: ROLE_SCOPES[membership.role],
      apiKeyId: null,
    }),
    requestId,
  };
}

/**
 * Finishes a browser flow at the provider's redirect: the state must be known, pending, unexpired and (when the
 * request carries a credential) the caller's; it is used up whatever happens next. Exchanges the code, reads the
 * account and stores the connection. Never throws for the provider's or the user's mistakes: answers what to show.
 */
export async function finishBrowserFlow(
  deps: Deps,
  input: { state?: string; code?: string; error?: string; errorDescription?: string; callerUserId?: string | null; requestId: string },
): Promise<CallbackResult> {
  const fail = (message: string, flow?: FlowRow | null, error = 'invalid_state'): CallbackResult => ({
    ok: false,
    provider: flow?.provider ?? null,
    message,
    returnUrl: flow?.return_url ?? null,
    connection: null,
    error,
  });
  if (!input.state || input.state.length > 512) return fail('This link has no valid state. Start connecting again from the app.');
  const flow = await repo.findFlowByState({ deps }, sha256Hex(input.state));
  if (flow?.kind !== 'browser') return fail('This sign-in link is unknown. Start connecting again from the app.');
  if (flow.status !== 'pending')
    return fail('This sign-in link was already used. Start connecting again from the app.', { ...flow, return_url: null });
  if (Date.parse(flow.expires_at) <= Date.now()) {
    await repo.advanceFlow({ deps }, flow, { status: 'failed', error: 'expired', updated_at: nowIso() });
    return fail('This sign-in link expired (they last 10 minutes). Start connecting again from the app.', flow, 'expired');
  }
  if (input.callerUserId && input.callerUserId !== flow.user_id) {
    // Another signed-in user finishing someone's flow: refused, and the flow is spent so it cannot be retried.
    await repo.advanceFlow({ deps }, flow, { status: 'failed', error: 'another user', updated_at: nowIso() });
    return fail('This sign-in was started by another user; it was cancelled.', { ...flow, return_url: null }, 'wrong_user');
  }
  // Use the state up before anything slow, so a second arrival of the same redirect finds it spent.
  const claimedAt = nowIso();
  if (!(await repo.advanceFlow({ deps }, flow, { status: 'failed', error: 'in progress', updated_at: claimedAt })))
    return fail('This sign-in link was already used. Start connecting again from the app.', { ...flow, return_url: null });
  const ctx = await flowOwnerCtx(deps, flow, input.requestId);
  if (!ctx) return fail('The user who started this sign-in is no longer a member of the organization.', flow, 'not_member');
  const finish = (tx: Ctx, status: 'completed' | 'failed', error: string | null, connectionId: string | null) =>
    repo.endFlow(tx, flow.id, { status, error, connection_id: connectionId, updated_at: nowIso() });
  const def = providers(deps).get(flow.provider);
  if (input.error || !input.code || !def) {
    const error = (input.error ?? (def ? 'no_code' : 'unknown_provider')).slice(0, 80);
    const description = input.errorDescription?.slice(0, 300) ?? null;
    await withTx(ctx, async (tx) => {
      await finish(tx, 'failed', error, null);
      await flowFailedActivity(tx, flow, error, description ? { description } : {});
    });
    const reason = error === 'access_denied' ? 'access was denied at the provider' : description ? `${error}: ${description}` : error;
    return fail(`Connecting ${def?.name ?? flow.provider} did not complete (${reason}).`, flow, error);
  }
  try {
    const client = await clientOfConnection(ctx, def, flow);
    if (!client) throw new ProviderOAuthError('client_changed', 'the OAuth client changed while the sign-in was in progress', 400);
    const params: Record<string, string> = { grant_type: 'authorization_code', code: input.code.slice(0, 4096), redirect_uri: flow.redirect_uri! };
    if (flow.secret_ciphertext) params.code_verifier = decrypt(keyFor(deps, 'flows'), flow.secret_ciphertext, flowAad(flow.org_id, flow.id));
    const tokens = await requestTokens(http(deps), def, client, params);
    const connection = await storeConnection(ctx, def, client, tokens, JSON.parse(flow.scopes) as string[]);
    await finish(ctx, 'completed', null, connection.id);
    return { ok: true, provider: def.slug, message: connectedMessage(def, connection), returnUrl: flow.return_url, connection, error: null };
  } catch (err) {
    const error = err instanceof ProviderOAuthError ? err.error : err instanceof AppError ? err.code : 'internal';
    const message = err instanceof ProviderOAuthError || err instanceof AppError ? err.message : 'an unexpected error';
    if (!(err instanceof ProviderOAuthError || err instanceof AppError)) deps.log.error({ err, flowId: flow.id }, 'OAuth callback failed');
    await withTx(ctx, async (tx) => {
      await finish(tx, 'failed', error, null);
      await flowFailedActivity(tx, flow, error);
    });
    return fail(`Connecting ${def.name} failed: ${message}`, flow, error);
  }
}

const connectedMessage = (def: ProviderDefinition, c: OAuthConnection) =>
  `Connected ${def.name} account ${c.email ?? c.username ?? c.displayName ?? c.accountId}.`;

/**
 * Reads the account behind new tokens and stores (or, for an account already connected, updates) the caller's
 * connection. The first connection of a provider becomes the default.
 */
async function storeConnection(
  ctx: Ctx,
  def: ProviderDefinition,
  client: OAuthClient,
  tokens: TokenSet,
  requested: string[],
): Promise<OAuthConnection> {
  const source = def.account.source === 'token' ? tokens.raw : await fetchUserinfo(http(ctx.deps), def, tokens);
  const accountId = readPath(source, def.account.id);
  if (!accountId) throw new ProviderOAuthError('no_account', `${def.name} did not say which account this is (${def.account.id})`, 200);
  const identity = {
    email: readPath(source, def.account.email),
    username: readPath(source, def.account.username),
    display_name: readPath(source, def.account.displayName),
  };
  const org = orgId(ctx);
  const key = keyFor(ctx.deps, 'tokens');
  const now = nowIso();
  const scopes = JSON.stringify(tokens.scopes ?? requested);
  const sealed = (id: string) => ({
    access_token_ciphertext: encrypt(key, tokens.accessToken, tokenAad(org, id, 'access')),
    refresh_token_ciphertext: tokens.refreshToken ? encrypt(key, tokens.refreshToken, tokenAad(org, id, 'refresh')) : null,
  });
  const write = () =>
    withTx(ctx, async (tx) => {
      const existing = await repo.findAccountConnection(tx, def.slug, accountId);
      if (existing) {
        await repo.updateConnection(tx, existing.id, {
          ...identity,
          ...sealed(existing.id),
          scopes,
          status: 'active',
          client_source: client.source,
          client_id: client.clientId,
          token_type: tokens.tokenType,
          expires_at: tokens.expiresAt,
          token_version: existing.token_version + 1,
          refresh_lease_until: null,
          last_error: null,
          updated_at: now,
        });
        await connectionActivity(tx, existing, 'updated', { reconnected: true });
        return (await repo.findConnection(tx, existing.id))!;
      }
      const id = prefixedId('oac');
      const first = (await repo.listConnectionRows(tx, def.slug)).every((c) => c.is_default === 0);
      await repo.insertConnection(tx, {
        id,
        org_id: org,
        user_id: ctx.principal.userId,
        provider: def.slug,
        account_id: accountId,
        ...identity,
        ...sealed(id),
        scopes,
        status: 'active',
        is_default: first ? 1 : 0,
        client_source: client.source,
        client_id: client.clientId,
        token_type: tokens.tokenType,
        expires_at: tokens.expiresAt,
        token_version: 1,
        refresh_lease_until: null,
        last_error: null,
        created_at: now,
        updated_at: now,
        last_refreshed_at: null,
      });
      const row = (await repo.findConnection(tx, id))!;
      await connectionActivity(tx, row, 'created', { scopes: JSON.parse(scopes) });
      return row;
    });
  try {
    return toConnection(await write());
  } catch (err) {
    // The same account connected twice at once: the second becomes an update of the first.
    if (isUniqueViolation(err) && !ctx.trx) return toConnection(await write());
    throw err;
  }
}

// ---------------------------------------------------------------- device flow

/** Starts an RFC 8628 device flow at the provider, for a provider whose definition offers it. */
export async function startDeviceFlow(ctx: Ctx, input: { provider: string; scopes?: string[] }) {
  requireScope(ctx, 'connections:write');
  const def = definition(ctx.deps, input.provider);
  if (!def.modes.includes('device_code'))
    throw errors.invalid(`${def.name} does not offer the device-code flow; use GET /v1/oauth/start/${def.slug} in a browser`);
  const client = await clientFor(ctx, def);
  const scopes = input.scopes?.length ? input.scopes : (client.scopes ?? def.defaultScopes);
  const device = await startDeviceAuthorization(http(ctx.deps), def, client, scopes).catch(providerFailure(def));
  const org = orgId(ctx);
  const id = prefixedId('oaf');
  const created = Date.now();
  const now = new Date(created).toISOString();
  await repo.insertFlow(ctx, {
    id,
    org_id: org,
    user_id: ctx.principal.userId,
    provider: def.slug,
    kind: 'device',
    state_hash: null,
    secret_ciphertext: encrypt(keyFor(ctx.deps, 'flows'), device.deviceCode, flowAad(org, id)),
    user_code: device.userCode,
    verification_uri: device.verificationUri,
    verification_uri_complete: device.verificationUriComplete,
    interval_seconds: device.interval,
    scopes: JSON.stringify(scopes),
    return_url: null,
    redirect_uri: null,
    client_source: client.source,
    client_id: client.clientId,
    status: 'pending',
    error: null,
    connection_id: null,
    expires_at: new Date(created + Math.min(device.expiresIn * 1000, FLOW_TTL_MS * 6)).toISOString(),
    // The first poll may happen at once: the provider is asked only `interval` seconds after the last ask.
    created_at: now,
    updated_at: new Date(created - device.interval * 1000).toISOString(),
  });
  return {
    attemptId: id,
    user_code: device.userCode,
    verification_uri: device.verificationUri,
    verification_uri_complete: device.verificationUriComplete,
    expires_in: device.expiresIn,
    interval: device.interval,
  };
}

function providerFailure(def: ProviderDefinition) {
  return (err: unknown): never => {
    if (err instanceof ProviderOAuthError)
      throw new AppError('provider_error', `${def.name} refused: ${err.error}${err.description ? ` (${err.description})` : ''}`);
    throw err;
  };
}

/**
 * Polls a device flow. Asks the provider at most once per interval (a faster poll is answered `pending` from
 * storage); maps `authorization_pending`, `slow_down` (+5 s, kept for later polls), `access_denied` and
 * `expired_token`, and stores the connection once the user approved.
 */
export async function pollDeviceFlow(ctx: Ctx, input: { provider: string; attemptId: string }): Promise<DeviceStatus> {
  requireScope(ctx, 'connections:write');
  const def = definition(ctx.deps, input.provider);
  const flow = await repo.findMyFlow(ctx, input.attemptId, 'device');
  if (!flow || flow.provider !== def.slug) throw errors.notFound('device authorization', input.attemptId);
  const interval = flow.interval_seconds ?? 5;
  const answer = (status: DeviceStatus['status'], error: string | null = null, connection: OAuthConnection | null = null, every = interval) => ({
    status,
    interval: every,
    connection,
    error,
  });
  if (flow.status === 'completed') {
    const row = flow.connection_id ? await repo.findConnection(ctx, flow.connection_id) : undefined;
    return answer('completed', null, row ? toConnection(row) : null);
  }
  if (flow.status === 'failed')
    return answer(flow.error === 'access_denied' ? 'denied' : flow.error === 'expired_token' ? 'expired' : 'failed', flow.error);
  const now = Date.now();
  if (Date.parse(flow.expires_at) <= now) {
    await repo.advanceFlow(ctx, flow, { status: 'failed', error: 'expired_token', updated_at: new Date(now).toISOString() });
    return answer('expired', 'expired_token');
  }
  // Too soon since the last ask (or another poll is asking right now): not sent to the provider.
  if (now < Date.parse(flow.updated_at) + interval * 1000) return answer('pending');
  const askedAt = new Date(now).toISOString();
  if (!(await repo.advanceFlow(ctx, flow, { updated_at: askedAt }))) return answer('pending');
  const asked = { ...flow, updated_at: askedAt };
  const client = await clientOfConnection(ctx, def, flow);
  if (!client) {
    await repo.advanceFlow(ctx, asked, { status: 'failed', error: 'client_changed', updated_at: nowIso() });
    return answer('failed', 'client_changed');
  }
  let tokens: TokenSet;
  try {
    tokens = await requestTokens(http(ctx.deps), def, client, {
      grant_type: 'urn:ietf:params:oauth:grant-type:device_code',
      device_code: decrypt(keyFor(ctx.deps, 'flows'), flow.secret_ciphertext!, flowAad(flow.org_id, flow.id)),
    });
  } catch (err) {
    if (!(err instanceof ProviderOAuthError)) throw err;
    if (err.error === 'authorization_pending') return answer('pending');
    if (err.error === 'slow_down') {
      const slower = interval + 5;
      await repo.advanceFlow(ctx, asked, { interval_seconds: slower, updated_at: nowIso() });
      return answer('slow_down', null, null, slower);
    }
    const status = err.error === 'access_denied' ? 'denied' : err.error === 'expired_token' ? 'expired' : 'failed';
    await withTx(ctx, async (tx) => {
      await repo.advanceFlow(tx, asked, { status: 'failed', error: err.error, updated_at: nowIso() });
      await flowFailedActivity(tx, flow, err.error);
    });
    return answer(status, err.error);
  }
  const connection = await storeConnection(ctx, def, client, tokens, JSON.parse(flow.scopes) as string[]);
  await repo.advanceFlow(ctx, asked, { status: 'completed', connection_id: connection.id, error: null, updated_at: nowIso() });
  return answer('completed', null, connection);
}

// ---------------------------------------------------------------- connections

export async function listConnections(ctx: Ctx, provider?: string): Promise<OAuthConnection[]> {
  requireScope(ctx, 'connections:read');
  return (await repo.listConnectionRows(ctx, provider)).map(toConnection);
}

export async function getConnection(ctx: Ctx, id: string): Promise<OAuthConnection> {
  requireScope(ctx, 'connections:read');
  const row = await repo.findConnection(ctx, id);
  if (!row) throw errors.notFound('OAuth connection', id);
  return toConnection(row);
}

/** Whether the caller has connected the provider, and which connection is the default. */
export async function providerStatus(ctx: Ctx, provider: string) {
  requireScope(ctx, 'connections:read');
  const def = definition(ctx.deps, provider);
  const rows = await repo.listConnectionRows(ctx, def.slug);
  const def0 = rows.find((r) => r.is_default === 1);
  return {
    provider: def.slug,
    connected: rows.some((r) => r.status === 'active'),
    connections: rows.length,
    defaultConnection: def0 ? toConnection(def0) : null,
  };
}

/** Makes a connection the caller's default for its provider (one default per user and provider). */
export async function setDefaultConnection(ctx: Ctx, id: string): Promise<OAuthConnection> {
  requireScope(ctx, 'connections:write');
  return withTx(ctx, async (tx) => {
    const row = await repo.findConnection(tx, id);
    if (!row) throw errors.notFound('OAuth connection', id);
    if (row.is_default !== 1) {
      await repo.setDefaultRow(tx, row.provider, row.id);
      await connectionActivity(tx, row, 'default_set');
    }
    return toConnection({ ...row, is_default: 1 });
  });
}

/**
 * Disconnects: revokes the tokens at the provider when it can (the refresh token, which takes the access
 * token with it at most providers, else the access token), then deletes the connection. A provider that
 * cannot be reached does not keep the connection: it is deleted, and the answer says the revocation failed.
 */
export async function deleteConnection(ctx: Ctx, id: string): Promise<{ id: string; revokedAtProvider: boolean; revocationError: string | null }> {
  requireScope(ctx, 'connections:write');
  const row = await repo.findConnection(ctx, id);
  if (!row) throw errors.notFound('OAuth connection', id);
  const def = providers(ctx.deps).get(row.provider);
  let revoked = false;
  let revocationError: string | null = null;
  if (def?.revocationUrl) {
    try {
      const client = await clientOfConnection(ctx, def, row);
      if (!client) throw new ProviderOAuthError('client_changed', 'the client that issued the tokens is no longer configured', 400);
      const key = keyFor(ctx.deps, 'tokens');
      const org = orgId(ctx);
      if (row.refresh_token_ciphertext)
        await revokeToken(http(ctx.deps), def, client, decrypt(key, row.refresh_token_ciphertext, tokenAad(org, row.id, 'refresh')), 'refresh_token');
      revoked = await revokeToken(
        http(ctx.deps),
        def,
        client,
        decrypt(key, row.access_token_ciphertext, tokenAad(org, row.id, 'access')),
        'access_token',
      );
    } catch (err) {
      if (!(err instanceof ProviderOAuthError || err instanceof AppError)) throw err;
      revocationError = err.message;
    }
  }
  await withTx(ctx, async (tx) => {
    const gone = await repo.deleteConnectionRow(tx, row.id);
    if (Number(gone.numDeletedRows) === 0) throw errors.notFound('OAuth connection', id);
    if (row.is_default === 1) {
      // The newest remaining connection of the provider becomes the default.
      const rest = await repo.listConnectionRows(tx, row.provider);
      const next = rest.at(-1);
      if (next) await repo.setDefaultRow(tx, row.provider, next.id);
    }
    await connectionActivity(tx, row, 'deleted', { revokedAtProvider: revoked });
  });
  oauthState(ctx.deps).tokens.delete(row.id);
  return { id: row.id, revokedAtProvider: revoked, revocationError };
}

// ---------------------------------------------------------------- configs

function toConfig(row: repo.ConfigRow): OAuthConfigView {
  return {
    provider: row.provider,
    clientId: row.client_id,
    clientSecretHint: `…${row.secret_hint}`,
    scopes: row.scopes ? (JSON.parse(row.scopes) as string[]) : null,
    enabled: row.enabled === 1,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

function configActivity(
  ctx: Ctx,
  row: Pick<repo.ConfigRow, 'id' | 'provider' | 'client_id'>,
  action: 'created' | 'updated' | 'deleted',
  extra: Record<string, unknown> = {},
) {
  return recordActivity(ctx, {
    resourceType: 'oauth_config',
    resourceId: row.id,
    eventType: `oauth.config.${action}`,
    status: 'completed',
    title: `OAuth config for ${row.provider} ${action}`,
    metadata: { provider: row.provider, clientId: row.client_id, ...extra },
  });
}

export async function listConfigs(ctx: Ctx): Promise<OAuthConfigView[]> {
  requireScope(ctx, 'credentials:admin');
  return (await repo.listConfigRows(ctx)).map(toConfig);
}

/** Creates or replaces the organization's own client for a provider; the secret is encrypted and write-only. */
export async function putConfig(
  ctx: Ctx,
  input: { provider: string; clientId: string; clientSecret: string; scopes?: string[] },
): Promise<{ config: OAuthConfigView; created: boolean }> {
  requireScope(ctx, 'credentials:admin');
  if (!providers(ctx.deps).has(input.provider))
    throw errors.invalidField('provider', `no OAuth provider "${input.provider}" is defined; GET /v1/oauth/providers lists them`);
  const org = orgId(ctx);
  const now = nowIso();
  const fields = {
    client_id: input.clientId,
    client_secret_ciphertext: encrypt(keyFor(ctx.deps, 'clients'), input.clientSecret, clientAad(org, input.provider)),
    secret_hint: input.clientSecret.slice(-4),
    scopes: input.scopes?.length ? JSON.stringify(input.scopes) : null,
    updated_at: now,
  };
  const write = () =>
    withTx(ctx, async (tx) => {
      const existing = await repo.findConfig(tx, input.provider);
      if (existing) {
        await repo.updateConfig(tx, existing.id, fields);
        // Tokens issued to the replaced client cannot be refreshed or revoked with the new one.
        const revoked =
          existing.client_id === input.clientId
            ? 0
            : await repo.revokeClientConnections(
                tx,
                input.provider,
                existing.client_id,
                `the organization's OAuth client for ${input.provider} was replaced`,
              );
        await configActivity(tx, { ...existing, client_id: input.clientId }, 'updated', revoked ? { connectionsRevoked: revoked } : {});
        return { config: toConfig({ ...existing, ...fields }), created: false };
      }
      const row = {
        id: prefixedId('oacfg'),
        org_id: org,
        provider: input.provider,
        enabled: 1,
        created_by_user_id: ctx.principal.userId,
        created_at: now,
        ...fields,
      };
      await repo.insertConfig(tx, row);
      await configActivity(tx, row, 'created');
      return { config: toConfig(row), created: true };
    });
  try {
    return await write();
  } catch (err) {
    if (isUniqueViolation(err) && !ctx.trx) return write();
    throw err;
  }
}

export async function setConfigEnabled(ctx: Ctx, provider: string, enabled: boolean): Promise<OAuthConfigView> {
  requireScope(ctx, 'credentials:admin');
  return withTx(ctx, async (tx) => {
    const row = await repo.findConfig(tx, provider);
    if (!row) throw errors.notFound('OAuth config', provider);
    const now = nowIso();
    await repo.updateConfig(tx, row.id, { enabled: enabled ? 1 : 0, updated_at: now });
    await configActivity(tx, row, 'updated', { enabled });
    return toConfig({ ...row, enabled: enabled ? 1 : 0, updated_at: now });
  });
}

export async function deleteConfig(ctx: Ctx, provider: string): Promise<void> {
  requireScope(ctx, 'credentials:admin');
  await withTx(ctx, async (tx) => {
    const row = await repo.findConfig(tx, provider);
    if (!row) throw errors.notFound('OAuth config', provider);
    await repo.deleteConfigRow(tx, row.id);
    const revoked = await repo.revokeClientConnections(tx, provider, row.client_id, `the organization's OAuth config for ${provider} was deleted`);
    await configActivity(tx, row, 'deleted', { connectionsRevoked: revoked });
  });
}
