import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Behaviour, FakeOAuthServer } from './oauth-server.js';

const REDIRECT = 'http://127.0.0.1:9/callback'; // never contacted: authorize() stops at the redirect leaving the issuer
const DEVICE = 'urn:ietf:params:oauth:grant-type:device_code';
const SCOPE = 'openid email profile offline_access';

let server: FakeOAuthServer;

beforeAll(async () => {
  server = await new FakeOAuthServer({ redirectUris: [REDIRECT], accessTokenTtlSeconds: 1234 }).start();
  server.addAccount({ id: 'acct-alice', email: 'alice@example.test', username: 'alice', name: 'Alice Liddell' });
  server.addAccount({ id: 'acct-bob', email: 'bob@example.test', username: 'bob', name: 'Bob Builder' });
});

afterAll(async () => {
  await server?.close();
});

type Auth = 'post' | 'basic';

/** POSTs a form to the token-ish endpoint `url` as client `b`; returns status, content type and the parsed body. */
async function post(srv: FakeOAuthServer, b: Behaviour, url: string, params: Record<string, string>, auth: Auth = 'post') {
  const { clientId, clientSecret } = srv.client(b);
  const headers: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' };
  const body = new URLSearchParams(params);
  if (auth === 'basic')
    headers.authorization = `Basic ${Buffer.from(`${encodeURIComponent(clientId)}:${encodeURIComponent(clientSecret)}`).toString('base64')}`;
  else {
    body.set('client_id', clientId);
    body.set('client_secret', clientSecret);
  }
  const res = await fetch(url, { method: 'POST', headers, body });
  const type = res.headers.get('content-type') ?? '';
  const text = await res.text();
  const json: Record<string, any> = type.includes('json') ? JSON.parse(text) : text ? Object.fromEntries(new URLSearchParams(text)) : {};
  return { status: res.status, type, json };
}

/** A real browser-flow code exchange for client `b`; returns the token response. */
async function codeFlow(b: Behaviour, opts: { auth?: Auth; pkce?: boolean; account?: string } = {}) {
  const { clientId } = server.client(b);
  const state = randomBytes(8).toString('hex');
  const verifier = randomBytes(32).toString('base64url');
  const auth = new URL(server.urls(b).authorization);
  auth.search = new URLSearchParams({
    client_id: clientId,
    response_type: 'code',
    redirect_uri: REDIRECT,
    scope: SCOPE,
    state,
    prompt: 'consent',
  }).toString();
  if (opts.pkce !== false) {
    auth.searchParams.set('code_challenge', createHash('sha256').update(verifier).digest('base64url'));
    auth.searchParams.set('code_challenge_method', 'S256');
  }
  const back = new URL(await server.authorize(auth.href, opts.account ?? 'acct-alice'));
  expect(back.origin + back.pathname).toBe(REDIRECT);
  expect(back.searchParams.get('state')).toBe(state);
  const code = back.searchParams.get('code');
  expect(code).toBeTruthy();
  const params: Record<string, string> = { grant_type: 'authorization_code', code: code!, redirect_uri: REDIRECT };
  if (opts.pkce !== false) params.code_verifier = verifier;
  return post(server, b, server.urls(b).token, params, opts.auth);
}

const refresh = (b: Behaviour, refreshToken: string, auth?: Auth) =>
  post(server, b, server.urls(b).token, { grant_type: 'refresh_token', refresh_token: refreshToken }, auth);

describe('FakeOAuthServer', () => {
  it('publishes discovery metadata whose endpoints are the ones urls() returns', async () => {
    const meta = await (await fetch(`${server.issuer}/.well-known/openid-configuration`)).json();
    const urls = server.urls('standard');
    expect(server.issuer).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(meta).toMatchObject({
      issuer: server.issuer,
      authorization_endpoint: urls.authorization,
      token_endpoint: urls.token,
      revocation_endpoint: urls.revocation,
      userinfo_endpoint: urls.userinfo,
      device_authorization_endpoint: urls.deviceAuthorization,
    });
    expect(meta.code_challenge_methods_supported).toEqual(['S256']);
    expect(meta.token_endpoint_auth_methods_supported).toEqual(expect.arrayContaining(['client_secret_post', 'client_secret_basic']));
  });

  it('standard: a browser-flow code exchange with PKCE gives expires_in, a refresh token, and userinfo claims', async () => {
    const before = server.counts.token.authorization_code ?? 0;
    const t = await codeFlow('standard');
    expect(t.status).toBe(200);
    expect(t.type).toMatch(/^application\/json/);
    expect(t.json).toMatchObject({ token_type: 'Bearer', expires_in: 1234 });
    expect(t.json.access_token).toEqual(expect.any(String));
    expect(t.json.refresh_token).toEqual(expect.any(String));
    expect(t.json.scope.split(' ')).toEqual(expect.arrayContaining(['openid', 'email', 'profile', 'offline_access']));
    expect(server.counts.token.authorization_code).toBe(before + 1);

    const userinfoBefore = server.counts.userinfo;
    const me = await fetch(server.urls('standard').userinfo, { headers: { authorization: `Bearer ${t.json.access_token}` } });
    expect(me.status).toBe(200);
    expect(await me.json()).toEqual({
      sub: 'acct-alice',
      email: 'alice@example.test',
      email_verified: true,
      preferred_username: 'alice',
      name: 'Alice Liddell',
    });
    expect(server.counts.userinfo).toBe(userinfoBefore + 1);
  });

  it('accepts client_secret_basic, a confidential client without PKCE, and rejects a wrong secret or a wrong verifier', async () => {
    const t = await codeFlow('standard', { auth: 'basic', pkce: false, account: 'acct-bob' });
    expect(t.status).toBe(200);
    const me = await (await fetch(server.urls('standard').userinfo, { headers: { authorization: `Bearer ${t.json.access_token}` } })).json();
    expect(me.sub).toBe('acct-bob');

    const bad = await fetch(server.urls('standard').token, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'refresh_token',
        refresh_token: t.json.refresh_token,
        client_id: 'fake-standard',
        client_secret: 'nope',
      }),
    });
    expect(bad.status).toBe(401);
    expect((await bad.json()).error).toBe('invalid_client');

    // A code bound to a PKCE challenge is refused with a wrong verifier.
    const state = 's';
    const auth = new URL(server.urls('standard').authorization);
    const challenge = createHash('sha256').update('the-right-verifier-the-right-verifier-123456').digest('base64url');
    auth.search = new URLSearchParams({
      client_id: 'fake-standard',
      response_type: 'code',
      redirect_uri: REDIRECT,
      scope: SCOPE,
      state,
      code_challenge: challenge,
      code_challenge_method: 'S256',
    }).toString();
    const code = new URL(await server.authorize(auth.href, 'acct-alice')).searchParams.get('code')!;
    const wrong = await post(server, 'standard', server.urls('standard').token, {
      grant_type: 'authorization_code',
      code,
      redirect_uri: REDIRECT,
      code_verifier: 'a-wrong-verifier-a-wrong-verifier-a-wrong-verifier',
    });
    expect(wrong).toMatchObject({ status: 400, json: { error: 'invalid_grant' } });
  });

  it('standard: refresh does not rotate, the same refresh token keeps working', async () => {
    const t = await codeFlow('standard');
    const before = server.counts.token.refresh_token ?? 0;
    for (let i = 0; i < 3; i++) {
      const r = await refresh('standard', t.json.refresh_token, i % 2 ? 'basic' : 'post');
      expect(r.status).toBe(200);
      expect(r.json.expires_in).toBe(1234);
      expect(r.json.access_token).not.toBe(t.json.access_token);
      expect(r.json.refresh_token ?? t.json.refresh_token).toBe(t.json.refresh_token);
    }
    expect(server.counts.token.refresh_token).toBe(before + 3);
  });

  it('rotating: every refresh returns a new refresh token and the old one answers invalid_grant', async () => {
    const t = await codeFlow('rotating');
    const r1 = await refresh('rotating', t.json.refresh_token);
    expect(r1.status).toBe(200);
    expect(r1.json.refresh_token).toEqual(expect.any(String));
    expect(r1.json.refresh_token).not.toBe(t.json.refresh_token);
    const r2 = await refresh('rotating', r1.json.refresh_token);
    expect(r2.status).toBe(200);
    expect(r2.json.refresh_token).not.toBe(r1.json.refresh_token);
    const old = await refresh('rotating', r1.json.refresh_token);
    expect(old).toMatchObject({ status: 400, json: { error: 'invalid_grant' } });
  });

  it('revokeGrants makes the refresh tokens of the account answer invalid_grant, not those of other accounts', async () => {
    const alice = await codeFlow('standard', { account: 'acct-alice' });
    const bob = await codeFlow('standard', { account: 'acct-bob' });
    expect((await refresh('standard', alice.json.refresh_token)).status).toBe(200);
    await server.revokeGrants('acct-alice');
    expect(await refresh('standard', alice.json.refresh_token)).toMatchObject({ status: 400, json: { error: 'invalid_grant' } });
    const me = await fetch(server.urls('standard').userinfo, { headers: { authorization: `Bearer ${alice.json.access_token}` } });
    expect(me.status).toBe(401); // its access tokens are gone too
    expect((await refresh('standard', bob.json.refresh_token)).status).toBe(200);
    await server.revokeGrants('acct-bob');
  });

  it('revocation endpoint (RFC 7009) revokes a refresh token and is counted', async () => {
    const t = await codeFlow('standard');
    const before = server.counts.revocation;
    const r = await post(
      server,
      'standard',
      server.urls('standard').revocation,
      { token: t.json.refresh_token, token_type_hint: 'refresh_token' },
      'basic',
    );
    expect(r.status).toBe(200);
    expect(server.counts.revocation).toBe(before + 1);
    expect(await refresh('standard', t.json.refresh_token)).toMatchObject({ status: 400, json: { error: 'invalid_grant' } });
  });

  it('a denied consent redirects back with error=access_denied and the state', async () => {
    const auth = new URL(server.urls('standard').authorization);
    auth.search = new URLSearchParams({
      client_id: 'fake-standard',
      response_type: 'code',
      redirect_uri: REDIRECT,
      scope: SCOPE,
      state: 'xyz',
    }).toString();
    const back = new URL(await server.authorize(auth.href, 'acct-alice', { deny: true }));
    expect(back.origin + back.pathname).toBe(REDIRECT);
    expect(back.searchParams.get('error')).toBe('access_denied');
    expect(back.searchParams.get('state')).toBe('xyz');
    expect(back.searchParams.get('code')).toBeNull();
  });

  it('no-expiry: token responses carry no expires_in', async () => {
    const t = await codeFlow('no-expiry');
    expect(t.status).toBe(200);
    expect(t.json.access_token).toEqual(expect.any(String));
    expect(t.json).not.toHaveProperty('expires_in');
    const r = await refresh('no-expiry', t.json.refresh_token);
    expect(r.status).toBe(200);
    expect(r.json).not.toHaveProperty('expires_in');
  });

  it('form-response: the token endpoint answers application/x-www-form-urlencoded, errors included', async () => {
    const t = await codeFlow('form-response');
    expect(t.status).toBe(200);
    expect(t.type).toMatch(/^application\/x-www-form-urlencoded/);
    expect(t.json).toMatchObject({ token_type: 'Bearer', expires_in: '1234' });
    expect(t.json.refresh_token).toEqual(expect.any(String));
    const r = await refresh('form-response', t.json.refresh_token);
    expect(r.type).toMatch(/^application\/x-www-form-urlencoded/);
    expect(r.json.access_token).toEqual(expect.any(String));
    const bad = await refresh('form-response', 'not-a-token');
    expect(bad).toMatchObject({ status: 400, json: { error: 'invalid_grant' } });
    expect(bad.type).toMatch(/^application\/x-www-form-urlencoded/);
  });

  it('slow-down: the first two device polls answer slow_down, then authorization_pending until approved, then tokens', async () => {
    const start = await post(server, 'slow-down', server.urls('slow-down').deviceAuthorization, { scope: SCOPE });
    expect(start.status).toBe(200);
    expect(start.json).toMatchObject({ verification_uri: `${server.issuer}/device`, user_code: expect.any(String), device_code: expect.any(String) });
    const before = server.counts.token[DEVICE] ?? 0;
    const poll = () => post(server, 'slow-down', server.urls('slow-down').token, { grant_type: DEVICE, device_code: start.json.device_code });
    expect(await poll()).toMatchObject({ status: 400, json: { error: 'slow_down' } });
    expect(await poll()).toMatchObject({ status: 400, json: { error: 'slow_down' } });
    expect(await poll()).toMatchObject({ status: 400, json: { error: 'authorization_pending' } });
    await server.approveDevice(start.json.user_code, 'acct-bob');
    const done = await poll();
    expect(done.status).toBe(200);
    expect(done.json).toMatchObject({ token_type: 'Bearer', expires_in: 1234, refresh_token: expect.any(String) });
    expect(server.counts.token[DEVICE]).toBe(before + 4);
    const me = await (await fetch(server.urls('slow-down').userinfo, { headers: { authorization: `Bearer ${done.json.access_token}` } })).json();
    expect(me).toMatchObject({ sub: 'acct-bob', preferred_username: 'bob' });
  });

  it('device flow: a denied user code gives access_denied on the next poll', async () => {
    const start = await post(server, 'standard', server.urls('standard').deviceAuthorization, { scope: SCOPE }, 'basic');
    const poll = () => post(server, 'standard', server.urls('standard').token, { grant_type: DEVICE, device_code: start.json.device_code });
    expect(await poll()).toMatchObject({ status: 400, json: { error: 'authorization_pending' } });
    await server.approveDevice(start.json.user_code, 'acct-alice', { deny: true });
    expect(await poll()).toMatchObject({ status: 400, json: { error: 'access_denied' } });
    await expect(server.approveDevice('WXYZ-WXYZ', 'acct-alice')).rejects.toThrow(/NotFoundError/);
  });

  it('device flow: an expired device code answers expired_token', async () => {
    const short = await new FakeOAuthServer({ redirectUris: [REDIRECT], deviceCodeTtlSeconds: 1 }).start();
    try {
      const start = await post(short, 'standard', short.urls('standard').deviceAuthorization, { scope: SCOPE });
      expect(start.json.expires_in).toBe(1);
      await new Promise((r) => setTimeout(r, 2100));
      const poll = await post(short, 'standard', short.urls('standard').token, { grant_type: DEVICE, device_code: start.json.device_code });
      expect(poll).toMatchObject({ status: 400, json: { error: 'expired_token' } });
    } finally {
      await short.close();
    }
  });

  it('tokenDelayMs delays the token endpoint', async () => {
    const t = await codeFlow('standard');
    server.tokenDelayMs = 300;
    try {
      const t0 = Date.now();
      expect((await refresh('standard', t.json.refresh_token)).status).toBe(200);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(290);
    } finally {
      server.tokenDelayMs = 0;
    }
  });
});
