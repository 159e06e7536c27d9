import { setTimeout as sleep } from 'node:timers/promises';
import { orgId, requireScope, withTx, type Ctx } from '../../platform/context.js';
import { decrypt, encrypt } from '../../platform/crypto/index.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso } from '../../platform/ids.js';
import { ProviderOAuthError, requestTokens } from './client.js';
import type { ProviderDefinition } from './providers.js';
import * as repo from './repo.js';
import type { ConnectionRow } from './repo.js';
import { clientOfConnection, connectionActivity, http, keyFor, oauthState, providers, tokenAad } from './service.js';

/** A token is refreshed when it has less than this left, so a caller never gets one about to lapse. */
export const REFRESH_MARGIN_MS = 60_000;

export interface AccessToken {
  accessToken: string;
  tokenType: string;
  expiresAt: string | null;
  connectionId: string;
  provider: string;
  accountId: string;
  email: string | null;
  username: string | null;
  displayName: string | null;
}

const connectRequired = (provider: string, why: string) =>
  new AppError('connect_required', `${why}: connect one with GET /v1/oauth/start/${provider} (or the device flow where offered)`);

/** The connection `account` names (email, username, display name, provider account id or connection id), else the default. */
function pick(rows: ConnectionRow[], provider: string, account?: string): ConnectionRow {
  if (account !== undefined) {
    const a = account.trim();
    const lower = a.toLowerCase();
    const found =
      rows.find((r) => r.id === a) ??
      rows.find((r) => r.account_id === a) ??
      rows.find((r) => r.email?.toLowerCase() === lower) ??
      rows.find((r) => r.username?.toLowerCase() === lower) ??
      rows.find((r) => r.display_name === a);
    if (!found) throw connectRequired(provider, `no connected ${provider} account matches "${a.slice(0, 100)}"`);
    return found;
  }
  const chosen = rows.find((r) => r.is_default === 1) ?? (rows.length === 1 ? rows[0] : undefined);
  if (!chosen) {
    if (rows.length === 0) throw connectRequired(provider, `no ${provider} account is connected`);
    throw connectRequired(provider, `several ${provider} accounts are connected and none is the default; name one with oauth.account`);
  }
  return chosen;
}

function answer(ctx: Ctx, row: ConnectionRow): AccessToken {
  const cache = oauthState(ctx.deps).tokens;
  let hit = cache.get(row.id);
  if (!hit || hit.version !== row.token_version) {
    hit = {
      version: row.token_version,
      accessToken: decrypt(keyFor(ctx.deps, 'tokens'), row.access_token_ciphertext, tokenAad(row.org_id, row.id, 'access')),
    };
    cache.set(row.id, hit);
  }
  return {
    accessToken: hit.accessToken,
    tokenType: row.token_type,
    expiresAt: row.expires_at,
    connectionId: row.id,
    provider: row.provider,
    accountId: row.account_id,
    email: row.email,
    username: row.username,
    displayName: row.display_name,
  };
}

/**
 * Due for a refresh: less than a minute left, or less than half its life for a token that lives under two minutes
 * (else a provider issuing 60-second tokens would be asked for a new one on every call).
 */
function needsRefresh(row: ConnectionRow, now = Date.now()): boolean {
  if (row.expires_at === null) return false;
  const expires = Date.parse(row.expires_at);
  const lifetime = expires - Date.parse(row.updated_at);
  const margin = lifetime > 0 ? Math.min(REFRESH_MARGIN_MS, lifetime / 2) : REFRESH_MARGIN_MS;
  return expires - now < margin;
}

const stillValid = (row: ConnectionRow) => row.expires_at !== null && Date.parse(row.expires_at) > Date.now() + 5_000;

/**
 * A fresh access token of the caller's connection to `provider`, for server-side callers only (tools, channels):
 * never returned by a public route. Refreshes a token that expires within a minute, one refresh per connection at
 * a time across replicas; a token without an expiry is used as it is (ADR 0026).
 */
export async function getAccessToken(ctx: Ctx, input: { provider: string; account?: string }): Promise<AccessToken> {
  requireScope(ctx, 'connections:use');
  const def = providers(ctx.deps).get(input.provider);
  if (!def) throw errors.notFound('OAuth provider', input.provider);
  const rows = await repo.listConnectionRows(ctx, def.slug);
  const row = pick(rows, def.slug, input.account);
  if (row.status === 'expired' || row.status === 'revoked')
    throw connectRequired(def.slug, `the ${def.slug} connection ${row.email ?? row.username ?? row.account_id} has ${row.status}; reconnect it`);
  if (row.client_source === 'organization' && (await repo.findConfig(ctx, def.slug))?.enabled === 0)
    throw new AppError('provider_disabled', `${def.name} is disabled for this organization (PATCH /v1/oauth/configs/${def.slug})`);
  if (!needsRefresh(row)) return answer(ctx, row);
  return answer(ctx, await refresh(ctx, def, row));
}

/** One refresh per connection: callers in this process share a promise; other replicas wait on the lease. */
function refresh(ctx: Ctx, def: ProviderDefinition, row: ConnectionRow): Promise<ConnectionRow> {
  const running = oauthState(ctx.deps).refreshing;
  let p = running.get(row.id);
  if (!p) {
    p = refreshUnderLease(ctx, def, row).finally(() => running.delete(row.id));
    running.set(row.id, p);
  }
  return p;
}

async function refreshUnderLease(ctx: Ctx, def: ProviderDefinition, seen: ConnectionRow): Promise<ConnectionRow> {
  const leaseMs = ctx.deps.config.oauth.timeoutMs + 5000;
  const started = Date.now();
  // Waiting on a refresh elsewhere while the token still works: as long as the holder's request to the provider may take.
  const patience = started + ctx.deps.config.oauth.timeoutMs + 1000;
  const deadline = started + leaseMs * 2;
  let row = seen;
  for (;;) {
    const now = Date.now();
    if (await repo.takeRefreshLease(ctx, row.id, row.token_version, new Date(now).toISOString(), new Date(now + leaseMs).toISOString())) break;
    const fresh = await repo.findConnection(ctx, row.id);
    if (!fresh) throw connectRequired(def.slug, `the ${def.slug} connection was disconnected`);
    if (fresh.status === 'expired' || fresh.status === 'revoked')
      throw connectRequired(def.slug, `the ${def.slug} connection has ${fresh.status}; reconnect it`);
    if (fresh.token_version !== row.token_version && !needsRefresh(fresh)) return fresh;
    // Someone else holds the lease. A refresh is running on another replica: wait for its token, as callers in this
    // process share its promise (a caller must not get one about to lapse). After a failed refresh (last_error: the
    // lease is its back-off), or once the holder has had its provider timeout, a token that still works is used.
    if (stillValid(fresh) && (fresh.last_error !== null || Date.now() > patience)) return fresh;
    if (Date.now() > deadline) throw errors.unavailable(`the ${def.slug} token is being refreshed elsewhere; try again`);
    row = fresh;
    await sleep(50);
  }
  const org = orgId(ctx);
  const release = (set: Partial<ConnectionRow> = {}) => repo.updateConnection(ctx, row.id, { refresh_lease_until: null, ...set });
  const valid = stillValid(row);
  const c = await clientOfConnection(ctx, def, row);
  if (!c || !row.refresh_token_ciphertext) {
    const why = !c ? 'the OAuth client that issued it is no longer configured' : `${def.name} gave no refresh token`;
    if (valid) {
      await release();
      return row;
    }
    await markExpired(ctx, row, why);
    throw connectRequired(def.slug, `the ${def.slug} connection expired (${why}); reconnect it`);
  }
  const refreshToken = decrypt(keyFor(ctx.deps, 'tokens'), row.refresh_token_ciphertext, tokenAad(org, row.id, 'refresh'));
  try {
    const tokens = await requestTokens(http(ctx.deps), def, c, { grant_type: 'refresh_token', refresh_token: refreshToken });
    const key = keyFor(ctx.deps, 'tokens');
    const now = nowIso();
    const set = {
      access_token_ciphertext: encrypt(key, tokens.accessToken, tokenAad(org, row.id, 'access')),
      // A provider that rotates sends a new refresh token; one that does not keeps the old one valid.
      refresh_token_ciphertext: tokens.refreshToken
        ? encrypt(key, tokens.refreshToken, tokenAad(org, row.id, 'refresh'))
        : row.refresh_token_ciphertext,
      token_type: tokens.tokenType,
      expires_at: tokens.expiresAt,
      scopes: tokens.scopes ? JSON.stringify(tokens.scopes) : row.scopes,
      token_version: row.token_version + 1,
      status: 'active' as const,
      last_error: null,
      refresh_lease_until: null,
      last_refreshed_at: now,
      updated_at: now,
    };
    const written = await withTx(ctx, async (tx) => {
      // Only over the tokens this refresh started from: a reconnect meanwhile wrote newer ones, which win.
      if (!(await repo.updateTokensIfVersion(tx, row.id, row.token_version, set))) return false;
      await connectionActivity(tx, row, 'refreshed', { expiresAt: tokens.expiresAt });
      return true;
    });
    if (!written) {
      const fresh = await repo.findConnection(ctx, row.id);
      if (!fresh) throw connectRequired(def.slug, `the ${def.slug} connection was disconnected`);
      return fresh;
    }
    oauthState(ctx.deps).tokens.set(row.id, { version: set.token_version, accessToken: tokens.accessToken });
    return { ...row, ...set };
  } catch (err) {
    if (err instanceof ProviderOAuthError && err.error === 'invalid_grant') {
      // Another replica may have rotated the refresh token a moment ago: read storage again before giving up.
      const fresh = await repo.findConnection(ctx, row.id);
      if (fresh && fresh.token_version !== row.token_version) {
        await release();
        return fresh;
      }
      await markExpired(ctx, row, `${def.name} refused the refresh token (invalid_grant)`);
      throw connectRequired(def.slug, `the ${def.slug} connection expired (the provider refused its refresh token); reconnect it`);
    }
    const message = err instanceof ProviderOAuthError || err instanceof AppError ? err.message : 'unexpected error';
    // The lease is kept for a short back-off, so callers do not each wait on a provider that is down.
    // A connection whose token has lapsed meanwhile shows `error` until a refresh succeeds (the next call retries).
    await release({
      last_error: `refresh failed: ${message}`.slice(0, 500),
      refresh_lease_until: new Date(Date.now() + Math.min(10_000, ctx.deps.config.oauth.timeoutMs)).toISOString(),
      ...(valid ? {} : { status: 'error' as const }),
    });
    if (valid) return row;
    if (err instanceof AppError) throw err;
    if (err instanceof ProviderOAuthError) throw new AppError('provider_error', `${def.name} refused to refresh the token: ${err.message}`);
    throw err;
  }
}

async function markExpired(ctx: Ctx, row: ConnectionRow, why: string): Promise<void> {
  await withTx(ctx, async (tx) => {
    await repo.updateConnection(tx, row.id, { status: 'expired', last_error: why.slice(0, 500), refresh_lease_until: null, updated_at: nowIso() });
    await connectionActivity(tx, row, 'expired', { reason: why.slice(0, 200) });
  });
  oauthState(ctx.deps).tokens.delete(row.id);
}
