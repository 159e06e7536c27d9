import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { securitySuite } from '../../../test/security.js';
import { FakeOAuthServer } from '../../../test/fakes/oauth-server.js';
import { ageToken, FAKE_SCOPES, fakeProvidersEnv, storedTokens as sharedStoredTokens, userCtx, type FakeProvider } from '../../../test/oauth.js';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor as apiKeyFor, type Actor, type Harness } from '../../../test/harness.js';
import { systemCtx, type Ctx } from '../../platform/context.js';
import { decrypt } from '../../platform/crypto/index.js';
import { AppError } from '../../platform/http/errors.js';
import { ROLE_SCOPES } from '../../platform/scopes.js';
import { getAccessToken } from './index.js';
import { keyFor, tokenAad } from './service.js';

const AUTH_URL = 'http://127.0.0.1:8787';
const CALLBACK = `${AUTH_URL}/v1/oauth/callback`;
const SCOPES = FAKE_SCOPES;

/** Test providers: one per behaviour of the loopback server, defined through HANGAR_OAUTH_PROVIDERS_FILE like an operator's. */
const PROVIDERS: FakeProvider[] = [
  { slug: 'fake', behaviour: 'standard', modes: ['oauth2', 'device_code'], platform: true },
  { slug: 'fake-rotating', behaviour: 'rotating', modes: ['oauth2'], platform: true },
  { slug: 'fake-noexp', behaviour: 'no-expiry', modes: ['oauth2'], platform: true },
  { slug: 'fake-slow', behaviour: 'slow-down', modes: ['device_code'], platform: true },
  { slug: 'fake-form', behaviour: 'form-response', modes: ['oauth2'], platform: true },
  { slug: 'fake-byo', behaviour: 'standard', modes: ['oauth2'], platform: false },
];

const ALICE = { id: 'acct-alice', email: 'alice@example.test', username: 'alice', name: 'Alice Example' };
const ALICE2 = { id: 'acct-alice-work', email: 'alice@work.test', username: 'alice-work', name: 'Alice at Work' };
const BOB = { id: 'acct-bob', email: 'bob@example.test', username: 'bob', name: 'Bob Example' };

let fake: FakeOAuthServer;
let h: Harness;
let admin: Actor;
let member: Actor;
let stranger: Actor;
const logLines: string[] = [];
/** Every response body the tests saw, grepped at the end for tokens and secrets. */
const bodies: string[] = [];

function providerEnv(): Record<string, string> {
  return { ...fakeProvidersEnv(fake, PROVIDERS), HANGAR_AUTH_URL: AUTH_URL };
}

async function call(actor: Actor | null, method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: unknown) {
  const res = await h.app.inject({ method, url, headers: actor?.headers ?? {}, ...(payload !== undefined ? { payload: payload as object } : {}) });
  bodies.push(res.body);
  return res;
}

const ctxOf = (a: Actor): Ctx => userCtx(h.deps, a);

/** Connects `account` for `actor` through the browser flow, as a user would: start, consent at the provider, callback. */
async function connect(actor: Actor, provider: string, account: { id: string }, opts: { returnUrl?: string } = {}) {
  const q = new URLSearchParams(opts.returnUrl ? { returnUrl: opts.returnUrl } : {});
  const start = await call(actor, 'GET', `/v1/oauth/start/${provider}?${q}`);
  expect(start.statusCode, start.body).toBe(200);
  const redirect = await fake.authorize(json(start).data.authUrl, account.id);
  const url = new URL(redirect);
  expect(`${url.origin}${url.pathname}`).toBe(CALLBACK);
  const cb = await call(null, 'GET', `${url.pathname}${url.search}`);
  return { start: json(start).data as { authUrl: string; flowId: string }, redirect: url, callback: cb };
}

async function connections(actor: Actor, provider?: string) {
  const res = await call(actor, 'GET', `/v1/oauth/connections${provider ? `?provider=${provider}` : ''}`);
  expect(res.statusCode, res.body).toBe(200);
  return json(res).data as Array<Record<string, any>>;
}

const expireSoon = (id: string, ms = 10_000) => ageToken(h.deps, id, ms);
const storedTokens = (id: string) => sharedStoredTokens(h.deps, id);

async function expectAppError(p: Promise<unknown>, code: string): Promise<AppError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AppError);
  expect((err as AppError).code, (err as Error).message).toBe(code);
  return err as AppError;
}

beforeAll(async () => {
  fake = await new FakeOAuthServer({ redirectUris: [CALLBACK], deviceCodeTtlSeconds: 600 }).start();
  for (const a of [ALICE, ALICE2, BOB]) fake.addAccount(a);
  const sink = new Writable({
    write(chunk, _enc, cb) {
      logLines.push(String(chunk));
      cb();
    },
  });
  h = await createHarness({ ...providerEnv(), LOG_LEVEL: 'trace', HANGAR_OAUTH_TIMEOUT_MS: '2000' }, { log: pino({ level: 'trace' }, sink) });
  admin = await createOrgAdmin(h);
  member = await addOrgMember(h, admin);
  stranger = await createOrgAdmin(h);
});
afterAll(async () => {
  await h?.close();
  await fake?.close();
});

describe('provider catalogue', () => {
  it('lists the built-in providers and the operator’s, with how each connects and whether it can be connected here', async () => {
    const res = await call(member, 'GET', '/v1/oauth/providers');
    expect(res.statusCode, res.body).toBe(200);
    const bySlug = Object.fromEntries((json(res).data as Array<Record<string, any>>).map((p) => [p.slug, p]));
    for (const slug of ['github', 'google', 'microsoft', 'slack', 'notion']) expect(bySlug[slug], slug).toBeDefined();
    expect(bySlug.github).toMatchObject({ authModes: ['oauth2', 'device_code'], platformClient: false, configRequired: true, enabled: false });
    expect(bySlug.slack).toMatchObject({ scopeSeparator: ',', pkce: false });
    expect(bySlug.fake).toMatchObject({
      authModes: ['oauth2', 'device_code'],
      platformClient: true,
      configRequired: false,
      enabled: true,
      pkce: true,
    });
    expect(bySlug.fake.defaultScopes).toEqual(SCOPES);
    expect(bySlug['fake-byo']).toMatchObject({ platformClient: false, organizationConfig: false, configRequired: true, enabled: false });
  });

  it('an unknown provider is 404; one without any client is 409 naming the setting and the config route', async () => {
    const unknown = await call(admin, 'GET', '/v1/oauth/start/nope');
    expect(unknown.statusCode).toBe(404);
    expect(json(unknown).error.code).toBe('not_found');
    const byo = await call(admin, 'GET', '/v1/oauth/start/fake-byo');
    expect(byo.statusCode).toBe(409);
    expect(json(byo).error.code).toBe('provider_not_configured');
    expect(json(byo).error.message).toContain('HANGAR_OAUTH_FAKE_BYO_CLIENT_ID');
    expect(json(byo).error.message).toContain('POST /v1/oauth/configs');
    const status = await call(admin, 'GET', '/v1/oauth/status/nope');
    expect(status.statusCode).toBe(404);
  });

  it('a malformed providers file stops start-up with a ConfigError naming HANGAR_OAUTH_PROVIDERS_FILE', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'hangar-oauth-bad-'));
    const cases = {
      'not-json.json': '{',
      'no-token-url.json': JSON.stringify({ providers: [{ slug: 'x', name: 'X', authorizationUrl: 'https://x.test/a', account: { id: 'sub' } }] }),
      'oauth2-without-authorize.json': JSON.stringify({
        providers: [{ slug: 'x', name: 'X', tokenUrl: 'https://x.test/t', account: { source: 'token', id: 'a' } }],
      }),
    };
    for (const [name, text] of Object.entries(cases)) {
      writeFileSync(path.join(dir, name), text);
      const err = await createHarness({ HANGAR_OAUTH_PROVIDERS_FILE: path.join(dir, name) }).then(
        async (other) => {
          await other.close();
          return null;
        },
        (e: Error) => e,
      );
      expect(err?.message, name).toContain('HANGAR_OAUTH_PROVIDERS_FILE');
    }
    const typo = await createHarness({ HANGAR_OAUTH_GITHUBB_CLIENT_ID: 'x' }).then(
      async (other) => {
        await other.close();
        return null;
      },
      (e: Error) => e,
    );
    expect(typo?.message).toContain('HANGAR_OAUTH_GITHUBB_CLIENT_ID');
  });
});

describe('browser flow', () => {
  it('start answers the provider’s URL with a random state and PKCE; the callback stores the connection and shows a page', async () => {
    const { start, redirect, callback } = await connect(admin, 'fake', ALICE);
    const auth = new URL(start.authUrl);
    expect(auth.searchParams.get('client_id')).toBe(fake.client('standard').clientId);
    expect(auth.searchParams.get('redirect_uri')).toBe(CALLBACK);
    expect(auth.searchParams.get('code_challenge_method')).toBe('S256');
    expect(auth.searchParams.get('code_challenge')).toMatch(/^[\w-]{43}$/);
    expect(auth.searchParams.get('scope')).toBe(SCOPES.join(' '));
    expect(auth.searchParams.get('state')).toMatch(/^[\w-]{43}$/);
    expect(redirect.searchParams.get('code')).toBeTruthy();
    expect(callback.statusCode, callback.body).toBe(200);
    expect(callback.headers['content-type']).toContain('text/html');
    expect(callback.headers['cache-control']).toBe('no-store');
    expect(callback.body).toContain('alice@example.test');

    const list = await connections(admin, 'fake');
    expect(list).toHaveLength(1);
    expect(list[0]).toMatchObject({
      provider: 'fake',
      accountId: ALICE.id,
      email: ALICE.email,
      username: ALICE.username,
      displayName: ALICE.name,
      status: 'active',
      isDefault: true,
      clientSource: 'platform',
    });
    expect(list[0]!.scopes).toContain('openid');
    expect(Date.parse(list[0]!.expiresAt)).toBeGreaterThan(Date.now());
    await expectActivity(h, admin, { eventType: 'oauth.connection.created', resourceType: 'oauth_connection', resourceId: list[0]!.id });

    const one = await call(admin, 'GET', `/v1/oauth/connections/${list[0]!.id}`);
    expect(one.statusCode).toBe(200);
    expect(json(one).data.id).toBe(list[0]!.id);
    const status = await call(admin, 'GET', '/v1/oauth/status/fake');
    expect(json(status).data).toMatchObject({ provider: 'fake', connected: true, connections: 1, defaultConnection: { id: list[0]!.id } });
  });

  it('the stored token works at the provider, and tokens never appear in a response (only ciphertext is stored)', async () => {
    const [c] = await connections(admin, 'fake');
    const { access, refresh, row } = await storedTokens(c!.id);
    expect(refresh).toBeTruthy();
    expect(row.access_token_ciphertext).not.toContain(access);
    const me = await fetch(fake.urls('standard').userinfo, { headers: { authorization: `Bearer ${access}` } });
    expect(me.status).toBe(200);
    expect(((await me.json()) as { sub: string }).sub).toBe(ALICE.id);
    for (const body of bodies) {
      expect(body).not.toContain(access);
      expect(body).not.toContain(refresh!);
    }
  });

  it('returns to an allowed returnUrl with the outcome; a returnUrl off the allowlist is refused before anything starts', async () => {
    const ok = await connect(admin, 'fake', ALICE, { returnUrl: `${AUTH_URL}/console/connections?tab=oauth` });
    expect(ok.callback.statusCode).toBe(303);
    const back = new URL(ok.callback.headers.location as string);
    expect(`${back.origin}${back.pathname}`).toBe(`${AUTH_URL}/console/connections`);
    expect(back.searchParams.get('tab')).toBe('oauth');
    expect(back.searchParams.get('oauth')).toBe('connected');
    expect(back.searchParams.get('provider')).toBe('fake');
    // The same account again: the connection is updated, not duplicated.
    expect(back.searchParams.get('connectionId')).toBe((await connections(admin, 'fake'))[0]!.id);
    expect(await connections(admin, 'fake')).toHaveLength(1);
    for (const bad of ['https://evil.test/steal', 'javascript:alert(1)', `http://user:pw@127.0.0.1:8787/x`, 'not a url']) {
      const res = await call(admin, 'GET', `/v1/oauth/start/fake?returnUrl=${encodeURIComponent(bad)}`);
      expect(res.statusCode, bad).toBe(400);
      expect(json(res).error.message).toContain('HANGAR_OAUTH_RETURN_URLS');
    }
  });

  it('a state used twice, unknown, expired or finished by another user fails clearly and stores nothing', async () => {
    const before = (await connections(member)).length;
    // used twice
    const first = await connect(member, 'fake', BOB);
    expect(first.callback.statusCode).toBe(200);
    const again = await call(null, 'GET', `${first.redirect.pathname}${first.redirect.search}`);
    expect(again.statusCode).toBe(400);
    expect(again.body).toContain('already used');
    expect(await connections(member)).toHaveLength(before + 1);
    // unknown and missing
    const unknown = await call(null, 'GET', '/v1/oauth/callback?state=forged&code=x');
    expect(unknown.statusCode).toBe(400);
    expect(unknown.body).toContain('unknown');
    expect((await call(null, 'GET', '/v1/oauth/callback?code=x')).statusCode).toBe(400);
    // expired
    const start = await call(member, 'GET', '/v1/oauth/start/fake');
    const redirect = new URL(await fake.authorize(json(start).data.authUrl, ALICE2.id));
    await h.deps.db.kysely
      .updateTable('oauth_flows')
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where('id', '=', json(start).data.flowId)
      .execute();
    const expired = await call(null, 'GET', `${redirect.pathname}${redirect.search}`);
    expect(expired.statusCode).toBe(400);
    expect(expired.body).toContain('expired');
    // finished by another signed-in user: refused, and spent for its owner too
    const start2 = await call(member, 'GET', '/v1/oauth/start/fake');
    const redirect2 = new URL(await fake.authorize(json(start2).data.authUrl, ALICE2.id));
    const wrongUser = await h.app.inject({ method: 'GET', url: `${redirect2.pathname}${redirect2.search}`, headers: admin.headers });
    expect(wrongUser.statusCode).toBe(400);
    expect(wrongUser.body).toContain('another user');
    const owner = await h.app.inject({ method: 'GET', url: `${redirect2.pathname}${redirect2.search}`, headers: member.headers });
    expect(owner.statusCode).toBe(400);
    expect(await connections(member)).toHaveLength(before + 1);
    expect((await connections(admin)).some((c) => c.accountId === ALICE2.id)).toBe(false);
  });

  it('a denial at the provider is shown to the user and recorded; nothing is stored', async () => {
    const before = (await connections(member)).length;
    const start = await call(member, 'GET', `/v1/oauth/start/fake?returnUrl=${encodeURIComponent(`${AUTH_URL}/done`)}`);
    const redirect = new URL(await fake.authorize(json(start).data.authUrl, ALICE2.id, { deny: true }));
    expect(redirect.searchParams.get('error')).toBe('access_denied');
    const cb = await call(null, 'GET', `${redirect.pathname}${redirect.search}`);
    expect(cb.statusCode).toBe(303);
    const back = new URL(cb.headers.location as string);
    expect(back.searchParams.get('oauth')).toBe('error');
    expect(back.searchParams.get('error')).toBe('access_denied');
    expect(await connections(member)).toHaveLength(before);
    await expectActivity(h, member, { eventType: 'oauth.connection.failed', metadata: { provider: 'fake', error: 'access_denied' } });
  });

  it('custom scopes replace the defaults; a provider answering with a form-encoded body connects too', async () => {
    const start = await call(admin, 'GET', '/v1/oauth/start/fake-form?scopes=openid,email,offline_access');
    expect(new URL(json(start).data.authUrl).searchParams.get('scope')).toBe('openid email offline_access');
    const redirect = new URL(await fake.authorize(json(start).data.authUrl, ALICE.id));
    const cb = await call(null, 'GET', `${redirect.pathname}${redirect.search}`);
    expect(cb.statusCode, cb.body).toBe(200);
    const [c] = await connections(admin, 'fake-form');
    expect(c).toMatchObject({ accountId: ALICE.id, status: 'active' });
    expect(Date.parse(c!.expiresAt)).toBeGreaterThan(Date.now());
    const bad = await call(admin, 'GET', `/v1/oauth/start/fake?scopes=${encodeURIComponent('a"b')}`);
    expect(bad.statusCode).toBe(400);
  });
});

describe('several accounts, defaults and getAccessToken', () => {
  it('a second account is not the default until set; account selects by email, username, display name, account id or connection id', async () => {
    await connect(admin, 'fake', ALICE2);
    const list = await connections(admin, 'fake');
    expect(list).toHaveLength(2);
    const first = list.find((c) => c.accountId === ALICE.id)!;
    const second = list.find((c) => c.accountId === ALICE2.id)!;
    expect(first.isDefault).toBe(true);
    expect(second.isDefault).toBe(false);

    const ctx = ctxOf(admin);
    expect((await getAccessToken(ctx, { provider: 'fake' })).connectionId).toBe(first.id);
    for (const account of [ALICE2.email, ALICE2.username, ALICE2.name, ALICE2.id, second.id, 'ALICE@WORK.TEST'])
      expect((await getAccessToken(ctx, { provider: 'fake', account })).connectionId, account).toBe(second.id);
    await expectAppError(getAccessToken(ctx, { provider: 'fake', account: 'nobody@example.test' }), 'connect_required');
    await expectAppError(getAccessToken(ctxOf(member), { provider: 'fake-rotating' }), 'connect_required');

    const set = await call(admin, 'POST', `/v1/oauth/connections/${second.id}/set-default`);
    expect(set.statusCode, set.body).toBe(200);
    expect(json(set).data.isDefault).toBe(true);
    const after = await connections(admin, 'fake');
    expect(after.filter((c) => c.isDefault).map((c) => c.id)).toEqual([second.id]);
    expect((await getAccessToken(ctx, { provider: 'fake' })).connectionId).toBe(second.id);
    const status = await call(admin, 'GET', '/v1/oauth/status/fake');
    expect(json(status).data.defaultConnection.id).toBe(second.id);
  });

  it('a fresh token is served as stored; one about to expire is refreshed once and still works at the provider', async () => {
    const ctx = ctxOf(admin);
    const token = await getAccessToken(ctx, { provider: 'fake' });
    const before = fake.counts.token.refresh_token ?? 0;
    expect((await getAccessToken(ctx, { provider: 'fake' })).accessToken).toBe(token.accessToken);
    expect(fake.counts.token.refresh_token ?? 0).toBe(before);

    await expireSoon(token.connectionId);
    const fresh = await getAccessToken(ctx, { provider: 'fake' });
    expect(fake.counts.token.refresh_token).toBe(before + 1);
    expect(fresh.accessToken).not.toBe(token.accessToken);
    expect(Date.parse(fresh.expiresAt!)).toBeGreaterThan(Date.now() + 60_000);
    const me = await fetch(fake.urls('standard').userinfo, { headers: { authorization: `Bearer ${fresh.accessToken}` } });
    expect(me.status).toBe(200);
    const [c] = (await connections(admin, 'fake')).filter((x) => x.id === token.connectionId);
    expect(c!.lastRefreshedAt).toBeTruthy();
    await expectActivity(h, admin, { eventType: 'oauth.connection.refreshed', resourceType: 'oauth_connection', resourceId: token.connectionId });
  });

  it('50 callers at expiry cause exactly one refresh at the provider and all get the same new token', async () => {
    const ctx = ctxOf(admin);
    const { connectionId } = await getAccessToken(ctx, { provider: 'fake' });
    await expireSoon(connectionId);
    const before = fake.counts.token.refresh_token ?? 0;
    fake.tokenDelayMs = 150;
    try {
      const tokens = await Promise.all(Array.from({ length: 50 }, () => getAccessToken(ctx, { provider: 'fake' })));
      expect(fake.counts.token.refresh_token).toBe(before + 1);
      expect(new Set(tokens.map((t) => t.accessToken)).size).toBe(1);
    } finally {
      fake.tokenDelayMs = 0;
    }
  });

  it('a rotating provider’s new refresh token is kept, so refresh keeps working', async () => {
    await connect(admin, 'fake-rotating', ALICE);
    const ctx = ctxOf(admin);
    const seen = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const { connectionId } = await getAccessToken(ctx, { provider: 'fake-rotating' });
      const { refresh } = await storedTokens(connectionId);
      expect(seen.has(refresh!)).toBe(false);
      seen.add(refresh!);
      await expireSoon(connectionId);
      const t = await getAccessToken(ctx, { provider: 'fake-rotating' });
      expect(t.expiresAt && Date.parse(t.expiresAt)).toBeGreaterThan(Date.now() + 60_000);
    }
  });

  it('a provider that sends no expires_in: the token has no expiry and is used as it is, never refreshed', async () => {
    await connect(admin, 'fake-noexp', ALICE);
    const [c] = await connections(admin, 'fake-noexp');
    expect(c!.expiresAt).toBeNull();
    const before = fake.counts.token.refresh_token ?? 0;
    const t1 = await getAccessToken(ctxOf(admin), { provider: 'fake-noexp' });
    const t2 = await getAccessToken(ctxOf(admin), { provider: 'fake-noexp' });
    expect(t1.expiresAt).toBeNull();
    expect(t2.accessToken).toBe(t1.accessToken);
    expect(fake.counts.token.refresh_token ?? 0).toBe(before);
  });

  it('a grant revoked at the provider: the refresh gets invalid_grant, the connection is expired and reported, callers get connect_required', async () => {
    await connect(member, 'fake', BOB);
    const ctx = ctxOf(member);
    const { connectionId } = await getAccessToken(ctx, { provider: 'fake', account: BOB.email });
    await fake.revokeGrants(BOB.id);
    await expireSoon(connectionId);
    const err = await expectAppError(getAccessToken(ctx, { provider: 'fake', account: BOB.email }), 'connect_required');
    expect(err.message).toContain('reconnect');
    const c = (await connections(member, 'fake')).find((x) => x.id === connectionId)!;
    expect(c.status).toBe('expired');
    expect(c.lastError).toContain('invalid_grant');
    await expectActivity(h, member, { eventType: 'oauth.connection.expired', resourceType: 'oauth_connection', resourceId: connectionId });
    await expectAppError(getAccessToken(ctx, { provider: 'fake', account: BOB.email }), 'connect_required');
    // Reconnecting the same account makes it active again.
    await connect(member, 'fake', BOB);
    expect((await connections(member, 'fake')).find((x) => x.id === connectionId)!.status).toBe('active');
    expect((await getAccessToken(ctx, { provider: 'fake', account: BOB.email })).connectionId).toBe(connectionId);
  });

  it('a provider that does not answer: 504, the connection shows error; after the back-off the next call refreshes it', async () => {
    const ctx = ctxOf(admin);
    const { connectionId, accessToken } = await getAccessToken(ctx, { provider: 'fake-form' });
    await expireSoon(connectionId, -1000);
    fake.tokenDelayMs = 3000; // past HANGAR_OAUTH_TIMEOUT_MS (2 s)
    try {
      await expectAppError(getAccessToken(ctx, { provider: 'fake-form' }), 'provider_timeout');
    } finally {
      fake.tokenDelayMs = 0;
    }
    const c = (await connections(admin, 'fake-form'))[0]!;
    expect(c.status).toBe('error');
    expect(c.lastError).toContain('did not answer');
    const fresh = await getAccessToken(ctx, { provider: 'fake-form' }); // waits out the 2 s back-off, then refreshes
    expect(fresh.accessToken).not.toBe(accessToken);
    expect((await connections(admin, 'fake-form'))[0]).toMatchObject({ status: 'active', lastError: null });
  });

  it('getAccessToken needs connections:use and sees only the caller’s own connections', async () => {
    const noUse = systemCtx(h.deps, {
      userId: admin.userId,
      orgId: admin.orgId,
      role: 'admin',
      scopes: new Set([...ROLE_SCOPES.admin].filter((s) => s !== 'connections:use')),
      apiKeyId: null,
    });
    expect((await getAccessToken(ctxOf(admin), { provider: 'fake' })).accessToken).toBeTruthy(); // the control
    const err = await expectAppError(getAccessToken(noUse, { provider: 'fake' }), 'forbidden');
    expect(err.message).toContain('connections:use');
    // The admin's account named by the member finds nothing; the stranger's organization finds nothing.
    await expectAppError(getAccessToken(ctxOf(member), { provider: 'fake', account: ALICE.email }), 'connect_required');
    await expectAppError(getAccessToken(ctxOf(stranger), { provider: 'fake' }), 'connect_required');
  });
});

describe('device-code flow', () => {
  const rewindPoll = (attemptId: string) =>
    h.deps.db.kysely
      .updateTable('oauth_flows')
      .set({ updated_at: new Date(Date.now() - 3600_000).toISOString() })
      .where('id', '=', attemptId)
      .execute();
  const poll = async (provider: string, attemptId: string, actor = admin) => {
    const res = await call(actor, 'POST', `/v1/oauth/device/status/${provider}`, { attemptId });
    expect(res.headers['cache-control']).toBe('no-store');
    return res;
  };

  it('slow_down adds 5 s and is remembered; polls faster than the interval do not reach the provider; approval stores the connection', async () => {
    const start = await call(admin, 'POST', '/v1/oauth/device/start/fake-slow', {});
    expect(start.statusCode, start.body).toBe(200);
    expect(start.headers['cache-control']).toBe('no-store');
    const d = json(start).data;
    expect(d.user_code).toBeTruthy();
    expect(d.verification_uri).toMatch(/^http:\/\/127\.0\.0\.1:\d+\//);
    expect(d.interval).toBe(5);
    expect(d.expires_in).toBeGreaterThan(0);
    const polls = () => fake.counts.token['urn:ietf:params:oauth:grant-type:device_code'] ?? 0;
    const before = polls();

    const p1 = json(await poll('fake-slow', d.attemptId)).data;
    expect(p1).toMatchObject({ status: 'slow_down', interval: 10 });
    const tooSoon = json(await poll('fake-slow', d.attemptId)).data;
    expect(tooSoon).toMatchObject({ status: 'pending', interval: 10 });
    expect(polls()).toBe(before + 1);
    await rewindPoll(d.attemptId);
    expect(json(await poll('fake-slow', d.attemptId)).data).toMatchObject({ status: 'slow_down', interval: 15 });
    await rewindPoll(d.attemptId);
    expect(json(await poll('fake-slow', d.attemptId)).data).toMatchObject({ status: 'pending', interval: 15 });

    await fake.approveDevice(d.user_code, ALICE2.id);
    await rewindPoll(d.attemptId);
    const done = json(await poll('fake-slow', d.attemptId)).data;
    expect(done.status).toBe('completed');
    expect(done.connection).toMatchObject({ provider: 'fake-slow', accountId: ALICE2.id, email: ALICE2.email, isDefault: true });
    expect(polls()).toBe(before + 4);
    // Polling a finished attempt keeps answering its outcome without asking the provider.
    expect(json(await poll('fake-slow', d.attemptId)).data.status).toBe('completed');
    expect(polls()).toBe(before + 4);
    expect((await getAccessToken(ctxOf(admin), { provider: 'fake-slow' })).accountId).toBe(ALICE2.id);
  });

  it('a denied or expired attempt ends clearly; another user cannot poll it; a provider without device flow refuses to start', async () => {
    const start = json(await call(admin, 'POST', '/v1/oauth/device/start/fake', {})).data;
    expect(json(await poll('fake', start.attemptId)).data.status).toBe('pending');
    // another member of the organization, and another provider's path, do not find it
    expect((await poll('fake', start.attemptId, member)).statusCode).toBe(404);
    expect((await poll('fake-slow', start.attemptId)).statusCode).toBe(404);
    await fake.approveDevice(start.user_code, ALICE.id, { deny: true });
    await rewindPoll(start.attemptId);
    expect(json(await poll('fake', start.attemptId)).data).toMatchObject({ status: 'denied', error: 'access_denied' });

    const late = json(await call(admin, 'POST', '/v1/oauth/device/start/fake', {})).data;
    await h.deps.db.kysely
      .updateTable('oauth_flows')
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where('id', '=', late.attemptId)
      .execute();
    expect(json(await poll('fake', late.attemptId)).data).toMatchObject({ status: 'expired' });

    const noDevice = await call(admin, 'POST', '/v1/oauth/device/start/fake-rotating', {});
    expect(noDevice.statusCode).toBe(400);
    expect(json(noDevice).error.message).toContain('/v1/oauth/start/fake-rotating');
    const noBrowser = await call(admin, 'GET', '/v1/oauth/start/fake-slow');
    expect(noBrowser.statusCode).toBe(400);
    expect((await call(admin, 'POST', '/v1/oauth/device/status/fake', { attemptId: 'oaf_nope' })).statusCode).toBe(404);
    expect((await call(admin, 'POST', '/v1/oauth/device/status/fake', {})).statusCode).toBe(400);
  });
});

describe('bring-your-own-app configs', () => {
  it('an admin stores a config whose secret is never returned; it takes precedence over the platform client; members cannot manage configs', async () => {
    const secret = fake.client('rotating').clientSecret;
    const memberTry = await call(member, 'POST', '/v1/oauth/configs', { provider: 'fake', client_id: 'x', client_secret: 'y' });
    expect(memberTry.statusCode).toBe(403);
    expect(json(memberTry).error.message).toContain('credentials:admin');
    expect((await call(member, 'GET', '/v1/oauth/configs')).statusCode).toBe(403);

    const created = await call(admin, 'POST', '/v1/oauth/configs', {
      provider: 'fake-byo',
      client_id: fake.client('rotating').clientId,
      client_secret: secret,
      scopes: 'openid,email,profile,offline_access',
    });
    expect(created.statusCode, created.body).toBe(201);
    expect(created.body).not.toContain(secret);
    expect(json(created).data).toMatchObject({
      provider: 'fake-byo',
      clientId: 'fake-rotating',
      clientSecretHint: `…${secret.slice(-4)}`,
      enabled: true,
    });
    expect(json(created).data.scopes).toEqual(SCOPES);
    await expectActivity(h, admin, { eventType: 'oauth.config.created', resourceType: 'oauth_config' });
    const list = await call(admin, 'GET', '/v1/oauth/configs');
    expect(json(list).data.map((c: { provider: string }) => c.provider)).toEqual(['fake-byo']);
    expect(list.body).not.toContain(secret);
    const row = await h.deps.db.kysely.selectFrom('oauth_configs').selectAll().where('provider', '=', 'fake-byo').executeTakeFirstOrThrow();
    expect(row.client_secret_ciphertext).not.toContain(secret);

    // The catalogue says it is usable now, and a connection goes through the organization's client.
    const cat = json(await call(member, 'GET', '/v1/oauth/providers')).data.find((p: { slug: string }) => p.slug === 'fake-byo');
    expect(cat).toMatchObject({ organizationConfig: true, configRequired: false, enabled: true });
    const { start, callback } = await connect(member, 'fake-byo', BOB);
    expect(new URL(start.authUrl).searchParams.get('client_id')).toBe('fake-rotating');
    expect(callback.statusCode, callback.body).toBe(200);
    const [c] = await connections(member, 'fake-byo');
    expect(c!.clientSource).toBe('organization');
    await expireSoon(c!.id);
    expect((await getAccessToken(ctxOf(member), { provider: 'fake-byo' })).connectionId).toBe(c!.id);

    // Replacing: 200; the new secret replaces the old.
    const replaced = await call(admin, 'POST', '/v1/oauth/configs', { provider: 'fake-byo', client_id: 'fake-rotating', client_secret: secret });
    expect(replaced.statusCode).toBe(200);
    expect(json(replaced).data.scopes).toBeNull();
    await expectActivity(h, admin, { eventType: 'oauth.config.updated' });

    // An organization config for a provider with a platform client wins over it.
    await call(admin, 'POST', '/v1/oauth/configs', { provider: 'fake', client_id: fake.client('rotating').clientId, client_secret: secret });
    const viaOrg = json(await call(admin, 'GET', '/v1/oauth/start/fake')).data.authUrl;
    expect(new URL(viaOrg).searchParams.get('client_id')).toBe('fake-rotating');
    expect((await call(admin, 'DELETE', '/v1/oauth/configs/fake')).statusCode).toBe(204);
    const viaPlatform = json(await call(admin, 'GET', '/v1/oauth/start/fake')).data.authUrl;
    expect(new URL(viaPlatform).searchParams.get('client_id')).toBe('fake-standard');
  });

  it('disabling turns the provider off for new connections and for token use; deleting removes it', async () => {
    const off = await call(admin, 'PATCH', '/v1/oauth/configs/fake-byo', { enabled: false });
    expect(off.statusCode, off.body).toBe(200);
    expect(json(off).data.enabled).toBe(false);
    const start = await call(member, 'GET', '/v1/oauth/start/fake-byo');
    expect(start.statusCode).toBe(409);
    expect(json(start).error.code).toBe('provider_disabled');
    expect(json(start).error.message).toContain('PATCH /v1/oauth/configs/fake-byo');
    await expectAppError(getAccessToken(ctxOf(member), { provider: 'fake-byo' }), 'provider_disabled');
    const cat = json(await call(member, 'GET', '/v1/oauth/providers')).data.find((p: { slug: string }) => p.slug === 'fake-byo');
    expect(cat.enabled).toBe(false);
    expect((await call(admin, 'PATCH', '/v1/oauth/configs/fake-byo', { enabled: true })).statusCode).toBe(200);
    expect((await call(member, 'GET', '/v1/oauth/start/fake-byo')).statusCode).toBe(200);

    expect((await call(admin, 'DELETE', '/v1/oauth/configs/fake-byo')).statusCode).toBe(204);
    await expectActivity(h, admin, { eventType: 'oauth.config.deleted', metadata: { connectionsRevoked: 1 } });
    // The member's connection through the deleted client can be neither refreshed nor revoked: it is revoked.
    const [gone] = await connections(member, 'fake-byo');
    expect(gone).toMatchObject({ status: 'revoked' });
    expect(gone!.lastError).toContain('deleted');
    await expectAppError(getAccessToken(ctxOf(member), { provider: 'fake-byo' }), 'connect_required');
    expect((await call(admin, 'DELETE', '/v1/oauth/configs/fake-byo')).statusCode).toBe(404);
    expect((await call(admin, 'PATCH', '/v1/oauth/configs/fake-byo', { enabled: true })).statusCode).toBe(404);
  });

  it('bad config input is 400 and stores nothing', async () => {
    for (const payload of [
      { provider: 'nope', client_id: 'a', client_secret: 'b' },
      { provider: 'fake', client_id: '', client_secret: 'b' },
      { provider: 'fake', client_id: 'a' },
      { provider: 'fake', client_id: 'a', client_secret: 'b', extra: 1 },
      { provider: 'Fake!', client_id: 'a', client_secret: 'b' },
      { provider: 'fake', client_id: 'a', client_secret: 'x'.repeat(5000) },
    ]) {
      const res = await call(admin, 'POST', '/v1/oauth/configs', payload);
      expect(res.statusCode, JSON.stringify(payload).slice(0, 80)).toBe(400);
    }
    expect(json(await call(admin, 'GET', '/v1/oauth/configs')).data).toEqual([]);
    expect((await call(admin, 'PATCH', '/v1/oauth/configs/fake', { enabled: 'yes' })).statusCode).toBe(400);
  });
});

describe('disconnecting and isolation', () => {
  it('another member or organization never sees, defaults or deletes a connection (the owner’s requests are the control)', async () => {
    const [c] = await connections(admin, 'fake-noexp');
    const urls = [
      ['GET', `/v1/oauth/connections/${c!.id}`],
      ['POST', `/v1/oauth/connections/${c!.id}/set-default`],
    ] as const;
    for (const [method, url] of urls) expect((await call(admin, method, url)).statusCode, url).toBe(200);
    for (const other of [member, stranger]) {
      for (const [method, url] of urls) {
        const res = await call(other, method, url);
        expect(res.statusCode, url).toBe(404);
        expect(json(res).error.code).toBe('not_found');
      }
      expect((await call(other, 'DELETE', `/v1/oauth/connections/${c!.id}`)).statusCode).toBe(404);
      expect((await connections(other)).some((x) => x.id === c!.id)).toBe(false);
      expect(json(await call(other, 'GET', '/v1/oauth/status/fake-noexp')).data).toMatchObject({ connected: false, connections: 0 });
    }
    expect((await call(admin, 'GET', `/v1/oauth/connections/${c!.id}`)).statusCode).toBe(200);
    // The member's activity filter on the admin's connection is refused like the resource.
    const act = await call(member, 'GET', `/v1/activity?resource_type=oauth_connection&resource_id=${c!.id}`);
    expect(act.statusCode).toBe(404);
  });

  it('delete revokes at the provider, deletes, and passes the default to the newest other connection', async () => {
    const list = await connections(admin, 'fake');
    const def = list.find((c) => c.isDefault)!;
    const other = list.find((c) => !c.isDefault)!;
    const { access } = await storedTokens(def.id);
    const revocations = fake.counts.revocation;
    const res = await call(admin, 'DELETE', `/v1/oauth/connections/${def.id}`);
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data).toMatchObject({ id: def.id, deleted: true, revokedAtProvider: true, revocationError: null });
    expect(fake.counts.revocation).toBe(revocations + 2); // the refresh token, then the access token
    const me = await fetch(fake.urls('standard').userinfo, { headers: { authorization: `Bearer ${access}` } });
    expect(me.status).toBe(401);
    expect((await call(admin, 'GET', `/v1/oauth/connections/${def.id}`)).statusCode).toBe(404);
    const rest = await connections(admin, 'fake');
    expect(rest.map((c) => [c.id, c.isDefault])).toEqual([[other.id, true]]);
    await expectActivity(h, admin, {
      eventType: 'oauth.connection.deleted',
      resourceType: 'oauth_connection',
      resourceId: def.id,
      metadata: { revokedAtProvider: true },
    });
    expect((await call(admin, 'DELETE', `/v1/oauth/connections/${def.id}`)).statusCode).toBe(404);
  });

  it('no token or client secret appears in any response, log line or activity row', async () => {
    const rows = await h.deps.db.kysely.selectFrom('oauth_connections').selectAll().execute();
    const key = keyFor(h.deps, 'tokens');
    const secrets = rows.flatMap((r) => [
      decrypt(key, r.access_token_ciphertext, tokenAad(r.org_id, r.id, 'access')),
      ...(r.refresh_token_ciphertext ? [decrypt(key, r.refresh_token_ciphertext, tokenAad(r.org_id, r.id, 'refresh'))] : []),
    ]);
    secrets.push(...(['standard', 'rotating', 'no-expiry', 'slow-down', 'form-response'] as const).map((b) => fake.client(b).clientSecret));
    expect(secrets.length).toBeGreaterThan(10);
    const activity = await h.deps.db.kysely.selectFrom('activity_events').select(['title', 'summary', 'metadata']).execute();
    expect(activity.length).toBeGreaterThan(10);
    expect(logLines.length).toBeGreaterThan(10);
    // Request logs show the callback without its query (the authorization code and the state).
    expect(logLines.some((l) => l.includes('/v1/oauth/callback?(redacted)'))).toBe(true);
    expect(logLines.some((l) => /\/v1\/oauth\/callback\?(state|code)=/.test(l))).toBe(false);
    const haystacks = [...bodies, ...logLines, ...activity.map((a) => JSON.stringify(a))];
    for (const s of secrets) for (const text of haystacks) expect(text.includes(s), `a secret leaked into: ${text.slice(0, 200)}`).toBe(false);
  });

  it('the routes need their scopes: a key with only connections:read lists but cannot connect', async () => {
    const key = await apiKeyFor(h, admin, ['connections:read']);
    expect((await h.app.inject({ method: 'GET', url: '/v1/oauth/connections', headers: { 'x-api-key': key } })).statusCode).toBe(200);
    const start = await h.app.inject({ method: 'GET', url: '/v1/oauth/start/fake', headers: { 'x-api-key': key } });
    expect(start.statusCode).toBe(403);
    expect(json(start).error.message).toContain('connections:write');
  });
});

securitySuite('oauth', [
  { method: 'GET', url: () => '/v1/oauth/providers', scope: 'connections:read' },
  { method: 'GET', url: () => '/v1/oauth/start/github', scope: 'connections:write' },
  { method: 'POST', url: () => '/v1/oauth/device/start/github', scope: 'connections:write', body: {} },
  { method: 'POST', url: () => '/v1/oauth/device/status/github', scope: 'connections:write', body: { attemptId: 'oaf_x' } },
  { method: 'GET', url: () => '/v1/oauth/connections', scope: 'connections:read' },
  { method: 'GET', url: async (owner, h) => `/v1/oauth/connections/${await seedConnection(h, owner)}`, scope: 'connections:read', crossOrg: true },
  {
    method: 'DELETE',
    url: async (owner, h) => `/v1/oauth/connections/${await seedConnection(h, owner)}`,
    scope: 'connections:write',
    crossOrg: true,
  },
  {
    method: 'POST',
    url: async (owner, h) => `/v1/oauth/connections/${await seedConnection(h, owner)}/set-default`,
    scope: 'connections:write',
    crossOrg: true,
  },
  { method: 'GET', url: () => '/v1/oauth/status/github', scope: 'connections:read' },
  { method: 'GET', url: () => '/v1/oauth/configs', scope: 'credentials:admin' },
  { method: 'POST', url: () => '/v1/oauth/configs', scope: 'credentials:admin', body: { provider: 'github', client_id: 'a', client_secret: 'b' } },
  {
    method: 'PATCH',
    url: async (owner, h) => `/v1/oauth/configs/${await seedConfig(h, owner)}`,
    scope: 'credentials:admin',
    body: { enabled: true },
    crossOrg: true,
  },
  { method: 'DELETE', url: async (owner, h) => `/v1/oauth/configs/${await seedConfig(h, owner)}`, scope: 'credentials:admin', crossOrg: true },
]);

/** A connection of `owner` to the built-in github provider, stored as a flow would store it (no provider needed). */
async function seedConnection(hh: Harness, owner: Actor): Promise<string> {
  const id = `oac_seed${Math.random().toString(36).slice(2, 10)}`;
  const now = new Date().toISOString();
  await hh.deps.db.kysely
    .insertInto('oauth_connections')
    .values({
      id,
      org_id: owner.orgId,
      user_id: owner.userId,
      provider: 'github',
      account_id: id,
      email: null,
      username: 'seed',
      display_name: null,
      scopes: '[]',
      status: 'active',
      is_default: 0,
      client_source: 'platform',
      client_id: 'seed',
      access_token_ciphertext: 'v1.x.x.x',
      refresh_token_ciphertext: null,
      token_type: 'Bearer',
      expires_at: null,
      token_version: 1,
      refresh_lease_until: null,
      last_error: null,
      created_at: now,
      updated_at: now,
      last_refreshed_at: null,
    })
    .execute();
  return id;
}

/** `owner`'s organization config for a provider of its own (a fresh slug each time, so a DELETE control finds it). */
async function seedConfig(hh: Harness, owner: Actor): Promise<string> {
  const res = await hh.app.inject({
    method: 'POST',
    url: '/v1/oauth/configs',
    headers: owner.headers,
    payload: { provider: 'github', client_id: 'seed', client_secret: 'seed-secret' },
  });
  expect(res.statusCode, res.body).toBeLessThan(300);
  return 'github';
}
