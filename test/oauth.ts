import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { keyFor, tokenAad } from '../src/domains/oauth/service.js';
import { systemCtx, type Ctx, type Deps } from '../src/platform/context.js';
import { decrypt } from '../src/platform/crypto/index.js';
import { ROLE_SCOPES } from '../src/platform/scopes.js';
import type { Behaviour, FakeOAuthServer } from './fakes/oauth-server.js';
import type { Actor } from './harness.js';

/** The scopes test providers ask for: what the loopback server needs for userinfo and refresh tokens. */
export const FAKE_SCOPES = ['openid', 'email', 'profile', 'offline_access'];

export interface FakeProvider {
  slug: string;
  behaviour: Behaviour;
  modes?: string[];
  /** The platform has a client for it (HANGAR_OAUTH_<SLUG>_CLIENT_ID); default true. */
  platform?: boolean;
}

/**
 * The environment that defines `providers` on the loopback server, as an operator would: a providers file
 * (HANGAR_OAUTH_PROVIDERS_FILE) and the platform clients.
 */
export function fakeProvidersEnv(fake: FakeOAuthServer, providers: FakeProvider[]): Record<string, string> {
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'hangar-oauth-')), 'providers.json');
  writeFileSync(
    file,
    JSON.stringify({
      providers: providers.map((p) => {
        const u = fake.urls(p.behaviour);
        return {
          slug: p.slug,
          name: `Fake ${p.behaviour}`,
          modes: p.modes ?? ['oauth2'],
          authorizationUrl: u.authorization,
          tokenUrl: u.token,
          deviceAuthorizationUrl: u.deviceAuthorization,
          revocationUrl: u.revocation,
          userinfoUrl: u.userinfo,
          defaultScopes: FAKE_SCOPES,
          account: { source: 'userinfo', id: 'sub', email: 'email', username: 'preferred_username', displayName: 'name' },
        };
      }),
    }),
  );
  const env: Record<string, string> = { HANGAR_OAUTH_PROVIDERS_FILE: file };
  for (const p of providers.filter((x) => x.platform !== false)) {
    const key = p.slug.replace(/-/g, '_').toUpperCase();
    env[`HANGAR_OAUTH_${key}_CLIENT_ID`] = fake.client(p.behaviour).clientId;
    env[`HANGAR_OAUTH_${key}_CLIENT_SECRET`] = fake.client(p.behaviour).clientSecret;
  }
  return env;
}

/** The user's server-side context (what a tool or channel acting for them passes to getAccessToken). */
export const userCtx = (deps: Deps, actor: Actor): Ctx =>
  systemCtx(deps, { kind: 'session', userId: actor.userId, orgId: actor.orgId, role: actor.role, scopes: ROLE_SCOPES[actor.role], apiKeyId: null });

/** Ages a connection's token: issued an hour ago, expiring in `ms` (inside the refresh margin by default). */
export const ageToken = (deps: Deps, id: string, ms = 10_000) =>
  deps.db.kysely
    .updateTable('oauth_connections')
    .set({ expires_at: new Date(Date.now() + ms).toISOString(), updated_at: new Date(Date.now() - 3600_000).toISOString() })
    .where('id', '=', id)
    .execute();

/** A connection's row and its decrypted tokens, read the way the domain stores them. */
export async function storedTokens(deps: Deps, id: string) {
  const row = await deps.db.kysely.selectFrom('oauth_connections').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const key = keyFor(deps, 'tokens');
  return {
    row,
    access: decrypt(key, row.access_token_ciphertext, tokenAad(row.org_id, row.id, 'access')),
    refresh: row.refresh_token_ciphertext ? decrypt(key, row.refresh_token_ciphertext, tokenAad(row.org_id, row.id, 'refresh')) : null,
  };
}
