import { sql } from 'kysely';
import type { Selectable } from 'kysely';
import type { ApiKeysTable } from '../../database.js';
import {
  exec,
  isOrgAdmin,
  orgId,
  requireScope,
  withTx,
  type Authenticate,
  type Credential,
  type Ctx,
  type Deps,
  type Principal,
} from '../../platform/context.js';
import { markRevocation, revocationMark } from '../../platform/revocations.js';
import { sha256Hex } from '../../platform/crypto/index.js';
import { isUniqueViolation } from '../../platform/db/index.js';
import { errors } from '../../platform/http/errors.js';
import { newestFirstPage } from '../../platform/db/pages.js';
import { base62, nowIso, uuid } from '../../platform/ids.js';
import { ALL_SCOPES, expandScopes, isValidScopePattern, ROLE_SCOPES, type Role, type Scope } from '../../platform/scopes.js';
import { recordActivity } from '../activity/index.js';
import type { ApiKey, CreateApiKeyBody } from './schemas.js';
import { KeyCache, type KnownKey } from './key-cache.js';
import { BUILTIN_ISSUER, createTokenVerifier, type VerifiedSubject } from './tokens.js';

const KEY_PATTERN = /^hgr_(live|test)_[0-9A-Za-z]{40}$/;
const LAST_USED_RESOLUTION_MS = 60_000;

export async function createUser(
  deps: Deps,
  input: { email?: string | null; name?: string | null; issuer?: string; subject?: string },
  trx = deps.db.kysely,
) {
  const id = uuid();
  const row = {
    id,
    email: input.email ?? null,
    name: input.name ?? null,
    idp_issuer: input.issuer ?? BUILTIN_ISSUER,
    idp_subject: input.subject ?? id,
    created_at: nowIso(),
  };
  await trx.insertInto('users').values(row).execute();
  return row;
}

/**
 * The issuer of users an admin added by email before they ever signed in (their subject is the email, lower
 * case). The first sign-in with a verified matching email takes the record over, memberships included.
 */
export const INVITED_ISSUER = 'hangar:invited';

/**
 * The user an admin means by an email: the one user with that email, or else a new invited record that the
 * first sign-in with that (verified) email claims. 409 when several users share the email.
 */
export async function userForEmail(ctx: Ctx, email: string): Promise<{ id: string; email: string | null; name: string | null; invited: boolean }> {
  const normalized = email.trim().toLowerCase();
  const rows = await exec(ctx)
    .selectFrom('users')
    .select(['id', 'email', 'name', 'idp_issuer'])
    .where(sql`lower(email)`, '=', normalized)
    .orderBy('created_at')
    .execute();
  const invited = rows.find((r) => r.idp_issuer === INVITED_ISSUER);
  const real = rows.filter((r) => r.idp_issuer !== INVITED_ISSUER);
  if (real.length > 1) throw errors.conflict(`several users have the email ${normalized}; add the member with the user id instead`);
  const found = real[0] ?? invited;
  if (found) return { id: found.id, email: found.email, name: found.name, invited: found.idp_issuer === INVITED_ISSUER };
  const created = await createUser(ctx.deps, { email: normalized, issuer: INVITED_ISSUER, subject: normalized }, exec(ctx));
  return { id: created.id, email: created.email, name: created.name, invited: true };
}

/** Finds the user behind a verified subject, creating it on first sight. */
async function userForSubject(deps: Deps, subject: VerifiedSubject) {
  const db = deps.db.kysely;
  // Built-in tokens name the user id itself, so `hangar token` works for users of any issuer.
  if (subject.issuer === BUILTIN_ISSUER) {
    return (await db.selectFrom('users').selectAll().where('id', '=', subject.subject).executeTakeFirst()) ?? null;
  }
  const find = () =>
    db.selectFrom('users').selectAll().where('idp_issuer', '=', subject.issuer).where('idp_subject', '=', subject.subject).executeTakeFirst();
  const found = await find();
  if (found) return found;
  // Added by email before the first sign-in: the verified email claims the invited record.
  if (subject.email && subject.emailVerified) {
    const claimed = await db
      .updateTable('users')
      .set({ idp_issuer: subject.issuer, idp_subject: subject.subject, name: subject.name ?? null })
      .where('idp_issuer', '=', INVITED_ISSUER)
      .where('idp_subject', '=', subject.email.trim().toLowerCase())
      .executeTakeFirst()
      .catch((err) => {
        if (isUniqueViolation(err)) return null;
        throw err;
      });
    if (claimed && Number(claimed.numUpdatedRows) === 1) return (await find()) ?? null;
  }
  try {
    return await createUser(deps, { email: subject.email, name: subject.name, issuer: subject.issuer, subject: subject.subject });
  } catch (err) {
    if (isUniqueViolation(err)) return (await find()) ?? null;
    throw err;
  }
}

function scopesFor(role: Role, keyScopes?: readonly string[]): Set<Scope> {
  const granted = ROLE_SCOPES[role];
  if (!keyScopes) return new Set([...granted, 'org:create']);
  return new Set([...expandScopes(keyScopes)].filter((s) => granted.has(s)));
}

/**
 * A user's membership: in `orgId` when given, else their oldest (ties broken by organization id); null when
 * there is none. The organizations domain owns memberships and answers this; identity cannot import it (it
 * depends on identity), so app.ts hands it to the authenticator.
 */
export type MembershipLookup = (userId: string, orgId?: string) => Promise<{ orgId: string; role: Role } | null>;

/** What the authenticator reads from tables other domains own. */
export interface AuthenticatorLookups {
  membership: MembershipLookup;
  /** A linked device's credential (`hgd_…`), resolved by the device mesh (ADR 0029); absent: such a credential is refused. */
  device?: (secret: string) => Promise<Principal>;
}

/** Builds the request authenticator: API keys by hash, session JWTs by issuer. */
export function createAuthenticator(deps: Deps, lookups: AuthenticatorLookups): Authenticate {
  const verify = createTokenVerifier(deps.config);
  const db = deps.db.kysely;

  // Looked-up keys, per app; valid while the revocation mark is unchanged (key-cache.ts).
  const cache = new KeyCache();

  /** Reads the key and its owner's role; 401 when the key is unknown, revoked or expired, or its owner gone. */
  async function lookUpKey(hash: string, now: number): Promise<KnownKey> {
    const row = await db
      .selectFrom('api_keys')
      .select(['id', 'org_id', 'user_id', 'scopes', 'revoked_at', 'expires_at', 'last_used_at'])
      .where('hash', '=', hash)
      .executeTakeFirst();
    if (!row || row.revoked_at || (row.expires_at && Date.parse(row.expires_at) <= now)) {
      throw errors.unauthenticated('API key is invalid, expired or revoked');
    }
    const role = (await lookups.membership(row.user_id, row.org_id))?.role;
    if (!role) throw errors.unauthenticated('the owner of this API key is no longer a member of its organization');
    return {
      id: row.id,
      orgId: row.org_id,
      userId: row.user_id,
      role,
      scopes: scopesFor(role, JSON.parse(row.scopes)),
      expiresAt: row.expires_at,
      expiresMs: row.expires_at ? Date.parse(row.expires_at) : Number.POSITIVE_INFINITY,
      lastUsedMs: row.last_used_at ? Date.parse(row.last_used_at) : 0,
    };
  }

  async function byApiKey(secret: string, wantedOrg: string | undefined): Promise<Principal> {
    if (!KEY_PATTERN.test(secret)) throw errors.unauthenticated('API key is malformed');
    const hash = sha256Hex(secret);
    const now = Date.now();
    // Read first: a revocation committed after this read changes the mark, so what is read next cannot outlive it.
    const mark = await revocationMark(db);
    let key = cache.get(hash, mark, now);
    if (!key) {
      key = await lookUpKey(hash, now);
      cache.put(hash, key, mark, now);
    } else if (key.expiresMs <= now) {
      throw errors.unauthenticated('API key is invalid, expired or revoked');
    }
    if (wantedOrg && wantedOrg !== key.orgId) throw errors.forbidden('this API key belongs to another organization');
    // Awaited (at most once a minute per key) so a listing right after a use already shows it. Marked before the
    // write so that concurrent requests of a cached key do not all write it.
    if (now - key.lastUsedMs > LAST_USED_RESOLUTION_MS) {
      key.lastUsedMs = now;
      await db
        .updateTable('api_keys')
        .set({ last_used_at: new Date(now).toISOString() })
        .where('id', '=', key.id)
        .execute()
        .catch((err) => deps.log.warn({ err }, 'could not record API key use'));
    }
    return {
      kind: 'api_key',
      userId: key.userId,
      orgId: key.orgId,
      role: key.role,
      scopes: key.scopes,
      apiKeyId: key.id,
      expiresAt: key.expiresAt,
    };
  }

  async function bySession(token: string, wantedOrg: string | undefined): Promise<Principal> {
    const subject = await verify(token);
    if (!subject) throw errors.unauthenticated('session token is invalid or expired');
    const user = await userForSubject(deps, subject);
    if (!user) throw errors.unauthenticated('session token names an unknown user');
    const membership = await lookups.membership(user.id, wantedOrg);
    if (wantedOrg && !membership) throw errors.notFound('organization', wantedOrg);
    const expiresAt = subject.expiresAt ? new Date(subject.expiresAt).toISOString() : null;
    if (!membership) {
      return { kind: 'session', userId: user.id, orgId: null, role: null, scopes: new Set<Scope>(['org:create']), apiKeyId: null, expiresAt };
    }
    const { role } = membership;
    return { kind: 'session', userId: user.id, orgId: membership.orgId, role, scopes: scopesFor(role), apiKeyId: null, expiresAt };
  }

  /**
   * Who a credential is: an API key (`hgr_…`, from `apiKey` or a bearer) or a session token (bearer), acting in
   * `orgIdHint` when given (a session's membership there; an API key must belong to it). Transport-free: the
   * HTTP hook and the WebSocket each pull the credential out of their own request.
   */
  return async function authenticate(credential: Credential, orgIdHint?: string): Promise<Principal> {
    const secret = credential.apiKey?.trim() || credential.bearer?.trim();
    if (!secret) throw errors.unauthenticated();
    const wantedOrg = orgIdHint || undefined;
    if (secret.startsWith('hgd_')) {
      if (!lookups.device) throw errors.unauthenticated('device credentials are not accepted by this service');
      const principal = await lookups.device(secret);
      if (wantedOrg && wantedOrg !== principal.orgId) throw errors.forbidden('this device belongs to another organization');
      return principal;
    }
    return secret.startsWith('hgr_') ? byApiKey(secret, wantedOrg) : bySession(secret, wantedOrg);
  };
}

function toApiKey(row: Selectable<ApiKeysTable>): ApiKey {
  return {
    id: row.id,
    name: row.name,
    environment: row.environment as ApiKey['environment'],
    prefix: row.prefix,
    scopes: JSON.parse(row.scopes),
    userId: row.user_id,
    createdAt: row.created_at,
    lastUsedAt: row.last_used_at,
    expiresAt: row.expires_at,
    revokedAt: row.revoked_at,
  };
}

/**
 * The scopes a new key gets. A pattern whose every match the caller holds is kept as written, so `*` from
 * an admin keeps meaning "all my role allows", including scopes added in later versions. A wildcard the
 * caller holds only in part becomes the concrete scopes it does hold; a named scope not held is a 403.
 */
function grantableScopes(held: ReadonlySet<Scope>, patterns: readonly string[]): string[] {
  const kept: string[] = [];
  const granted = new Set<Scope>();
  const refused: string[] = [];
  for (const pattern of new Set(patterns)) {
    const matching = [...expandScopes([pattern])];
    const mine = matching.filter((s) => held.has(s));
    const wildcard = pattern === '*' || pattern.endsWith(':*');
    if (mine.length === matching.length) kept.push(pattern);
    else if (wildcard && mine.length > 0) {
      for (const s of mine) granted.add(s);
    } else refused.push(pattern);
  }
  if (refused.length) throw errors.forbidden(`cannot grant scopes you do not hold: ${refused.join(', ')}`);
  const covered = expandScopes(kept);
  return [...kept, ...ALL_SCOPES.filter((s) => granted.has(s) && !covered.has(s))];
}

/** Creates an API key for the caller; a key never holds a scope its creator lacks. The secret is returned once. */
export async function createApiKey(ctx: Ctx, input: CreateApiKeyBody): Promise<ApiKey & { key: string }> {
  requireScope(ctx, 'api_keys:write');
  const org = orgId(ctx);
  const unknown = input.scopes.filter((s) => !isValidScopePattern(s));
  if (unknown.length) throw errors.invalidField('scopes', `unknown scope ${unknown.map((s) => `"${s}"`).join(', ')}`);
  const scopes = grantableScopes(ctx.principal.scopes, input.scopes);
  if (input.expiresAt && new Date(input.expiresAt) <= new Date()) throw errors.invalidField('expiresAt', 'must be in the future');
  const secret = `hgr_${input.environment}_${base62(40)}`;
  const row = {
    id: uuid(),
    org_id: org,
    user_id: ctx.principal.userId,
    name: input.name,
    environment: input.environment,
    prefix: secret.slice(0, 16),
    hash: sha256Hex(secret),
    scopes: JSON.stringify(scopes),
    created_at: nowIso(),
    last_used_at: null,
    expires_at: input.expiresAt ? new Date(input.expiresAt).toISOString() : null,
    revoked_at: null,
  };
  await withTx(ctx, async (tx) => {
    await exec(tx).insertInto('api_keys').values(row).execute();
    await recordActivity(tx, {
      resourceType: 'api_key',
      resourceId: row.id,
      eventType: 'api_key.created',
      status: 'created',
      title: `API key "${row.name}" created`,
      summary: `${row.environment} key ${row.prefix}... with scopes ${scopes.join(', ')}`,
    });
  });
  return { ...toApiKey(row), key: secret };
}

function visibleKeys(ctx: Ctx) {
  let q = exec(ctx).selectFrom('api_keys').selectAll().where('org_id', '=', orgId(ctx));
  if (!isOrgAdmin(ctx)) q = q.where('user_id', '=', ctx.principal.userId);
  return q;
}

export async function listApiKeys(ctx: Ctx, input: { limit: number; cursor?: string; includeRevoked: boolean }) {
  requireScope(ctx, 'api_keys:read');
  let q = visibleKeys(ctx);
  if (!input.includeRevoked) q = q.where('revoked_at', 'is', null);
  const p = await newestFirstPage(q, { time: 'created_at', id: 'id' }, input);
  return { items: p.items.map(toApiKey), hasMore: p.hasMore, nextCursor: p.nextCursor };
}

export async function getApiKey(ctx: Ctx, id: string): Promise<ApiKey> {
  requireScope(ctx, 'api_keys:read');
  const row = await visibleKeys(ctx).where('id', '=', id).executeTakeFirst();
  if (!row) throw errors.notFound('API key', id);
  return toApiKey(row);
}

/** Revokes a key at once (its open sockets on every replica close with 4401); revoking it again changes nothing. */
export async function revokeApiKey(ctx: Ctx, id: string): Promise<ApiKey> {
  requireScope(ctx, 'api_keys:write');
  const key = await withTx(ctx, async (tx) => {
    const row = await visibleKeys(tx).where('id', '=', id).executeTakeFirst();
    if (!row) throw errors.notFound('API key', id);
    if (row.revoked_at) return toApiKey(row);
    const revokedAt = nowIso();
    await exec(tx).updateTable('api_keys').set({ revoked_at: revokedAt }).where('id', '=', id).execute();
    await markRevocation(exec(tx));
    await recordActivity(tx, {
      resourceType: 'api_key',
      resourceId: id,
      eventType: 'api_key.revoked',
      status: 'revoked',
      title: `API key "${row.name}" revoked`,
      summary: `${row.prefix}... can no longer be used`,
    });
    return toApiKey({ ...row, revoked_at: revokedAt });
  });
  await ctx.deps.live.publish({ kind: 'api_key', apiKeyId: id });
  return key;
}
