import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { FakeOAuthServer } from '../../../test/fakes/oauth-server.js';
import { ageToken, fakeProvidersEnv, storedTokens, userCtx, type FakeProvider } from '../../../test/oauth.js';
import { addOrgMember, createHarness, createOrgAdmin, json, testDatabaseUrl, type Actor, type Harness } from '../../../test/harness.js';
import { describeNeeding, onCi, postgresNeed, type Need } from '../../../test/needs.js';
import type { Ctx } from '../../platform/context.js';
import { getAccessToken, type AccessToken } from './index.js';

// Two Hangar replicas on one PostgreSQL schema (one HANGAR_SECRET_KEY), as a deployment runs them, and one loopback
// authorization server: getAccessToken's one-refresh-per-connection rule must hold across the replicas (the lease
// column), not only among the callers of one process (the shared promise), and a replica whose process still holds
// an older token must serve what storage holds.
//
// Runs where HANGAR_TEST_DATABASE_URL names a PostgreSQL server (CI's PostgreSQL pass sets it). On CI it always
// runs: without the variable (the SQLite pass) against the local server, and a server it cannot reach fails the suite.

const PG_URL = testDatabaseUrl ?? (onCi ? 'postgres://postgres@127.0.0.1:5432/test' : undefined);
const need: Need = PG_URL
  ? await postgresNeed(PG_URL, `PostgreSQL (${PG_URL}), which the replicas share`)
  : {
      what: 'PostgreSQL, which the replicas share (HANGAR_TEST_DATABASE_URL)',
      present: false,
      reason: 'HANGAR_TEST_DATABASE_URL is not set',
      fix: 'start PostgreSQL on 127.0.0.1 (scripts/setup.sh) and set HANGAR_TEST_DATABASE_URL, as .ci/run does',
    };

const AUTH_URL = 'http://127.0.0.1:8787';
const CALLBACK = `${AUTH_URL}/v1/oauth/callback`;
const PROVIDERS: FakeProvider[] = [
  { slug: 'fake', behaviour: 'standard' },
  { slug: 'fake-rotating', behaviour: 'rotating' },
];
const TIMEOUT_MS = 2000;
const ALICE = { id: 'acct-alice', email: 'alice@example.test', username: 'alice', name: 'Alice Example' };
const BOB = { id: 'acct-bob', email: 'bob@example.test', username: 'bob', name: 'Bob Example' };

describeNeeding(need, 'OAuth tokens across two replicas on one database', () => {
  const schema = `t_${randomBytes(6).toString('hex')}`;
  let fake: FakeOAuthServer;
  let a: Harness;
  let b: Harness;
  let admin: Actor;
  let member: Actor;
  const secret = randomBytes(32).toString('hex');

  /** The same providers file, platform clients, database schema and secret key for both replicas; each its own node id. */
  function replicaEnv(nodeId: string): Record<string, string> {
    const env: Record<string, string> = {
      DATABASE_URL: `${PG_URL}${PG_URL!.includes('?') ? '&' : '?'}schema=${schema}`,
      HANGAR_SECRET_KEY: secret,
      HANGAR_NODE_ID: nodeId,
      ...fakeProvidersEnv(fake, PROVIDERS),
      HANGAR_AUTH_URL: AUTH_URL,
      // Short, so a test can make a refresh time out (the provider delayed past it) without waiting long.
      HANGAR_OAUTH_TIMEOUT_MS: String(TIMEOUT_MS),
      LOG_LEVEL: 'silent',
      HANGAR_VALIDATE_RESPONSES: 'true',
    };
    return env;
  }

  /** The user's server-side context on one replica (what a tool or channel running there would pass). */
  const ctxOn = (h: Harness, actor: Actor): Ctx => userCtx(h.deps, actor);

  const refreshes = () => fake.counts.token.refresh_token ?? 0;

  /** Connects through the product: the flow starts on replica A, the provider redirects the browser to replica B. */
  async function connect(actor: Actor, provider: string, account: { id: string }): Promise<string> {
    const start = await a.app.inject({ method: 'GET', url: `/v1/oauth/start/${provider}`, headers: actor.headers });
    expect(start.statusCode, start.body).toBe(200);
    const redirect = new URL(await fake.authorize(json(start).data.authUrl, account.id));
    expect(`${redirect.origin}${redirect.pathname}`).toBe(CALLBACK);
    const cb = await b.app.inject({ method: 'GET', url: `${redirect.pathname}${redirect.search}` });
    expect(cb.statusCode, cb.body).toBe(200);
    const list = await a.app.inject({ method: 'GET', url: `/v1/oauth/connections?provider=${provider}`, headers: actor.headers });
    const found = (json(list).data as Array<{ id: string; accountId: string; status: string }>).find((c) => c.accountId === account.id);
    expect(found?.status).toBe('active');
    return found!.id;
  }

  /** Ages a connection's token as the other tests do: issued an hour ago, expiring in ten seconds (so it is due). */
  const expireSoon = (id: string) => ageToken(a.deps, id);

  const stored = (id: string) => storedTokens(a.deps, id);

  const events = (id: string, eventType: string) =>
    a.deps.db.kysely
      .selectFrom('activity_events')
      .select('id')
      .where('resource_type', '=', 'oauth_connection')
      .where('resource_id', '=', id)
      .where('event_type', '=', eventType)
      .execute()
      .then((r) => r.length);

  const worksAtProvider = async (token: string) =>
    (await fetch(fake.urls('standard').userinfo, { headers: { authorization: `Bearer ${token}` } })).status;

  beforeAll(async () => {
    fake = await new FakeOAuthServer({ redirectUris: [CALLBACK] }).start();
    for (const acct of [ALICE, BOB]) fake.addAccount(acct);
    // One after the other: the first migrates the shared schema, the second finds it migrated.
    a = await createHarness(replicaEnv('oauth-replica-a'));
    b = await createHarness(replicaEnv('oauth-replica-b'));
    admin = await createOrgAdmin(a);
    member = await addOrgMember(b, admin);
  });
  afterAll(async () => {
    if (fake) fake.tokenDelayMs = 0;
    await b?.close();
    await a?.close();
    await fake?.close();
    if (PG_URL) {
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client.end();
    }
  });

  it('both replicas see one database: an organization made on A is the one B serves, and a flow started on A ends on B', async () => {
    const id = await connect(admin, 'fake', ALICE);
    const onA = await getAccessToken(ctxOn(a, admin), { provider: 'fake' });
    const onB = await getAccessToken(ctxOn(b, admin), { provider: 'fake' });
    expect(onA.connectionId).toBe(id);
    expect(onB).toEqual(onA);
    expect(await worksAtProvider(onB.accessToken)).toBe(200);
  });

  for (const [provider, behaviour] of [
    ['fake', 'standard'],
    ['fake-rotating', 'rotating'],
  ] as const) {
    it(`${behaviour}: 50 callers at expiry, 25 on each replica, send exactly one refresh to the provider and all get the same new token`, async () => {
      const id = provider === 'fake' ? (await getAccessToken(ctxOn(a, admin), { provider })).connectionId : await connect(admin, provider, ALICE);
      const [ctxA, ctxB] = [ctxOn(a, admin), ctxOn(b, admin)];
      // Both processes hold the current token in their caches.
      const old = await getAccessToken(ctxA, { provider });
      expect((await getAccessToken(ctxB, { provider })).accessToken).toBe(old.accessToken);
      const before = await stored(id);
      await expireSoon(id);
      const count = refreshes();
      const refreshedEvents = await events(id, 'oauth.connection.refreshed');
      fake.tokenDelayMs = 300;
      let tokens: AccessToken[];
      try {
        tokens = await Promise.all(Array.from({ length: 50 }, (_, i) => getAccessToken(i % 2 === 0 ? ctxA : ctxB, { provider })));
      } finally {
        fake.tokenDelayMs = 0;
      }
      expect(refreshes() - count).toBe(1);
      const distinct = [...new Set(tokens.map((t) => t.accessToken))];
      expect(distinct, 'every caller, on either replica, gets the one new token').toHaveLength(1);
      expect(distinct[0]).not.toBe(old.accessToken);
      for (const t of tokens) expect(Date.parse(t.expiresAt!)).toBeGreaterThan(Date.now() + 60_000);

      const after = await stored(id);
      expect(after.access).toBe(distinct[0]);
      expect(after.row).toMatchObject({ status: 'active', token_version: before.row.token_version + 1, refresh_lease_until: null, last_error: null });
      if (behaviour === 'rotating') expect(after.refresh).not.toBe(before.refresh);
      else expect(after.refresh).toBe(before.refresh);
      expect(await events(id, 'oauth.connection.refreshed')).toBe(refreshedEvents + 1);
      expect(await events(id, 'oauth.connection.expired')).toBe(0);
      expect(await worksAtProvider(distinct[0]!)).toBe(200);

      // Afterwards both replicas serve it without asking the provider again.
      expect((await getAccessToken(ctxA, { provider })).accessToken).toBe(distinct[0]);
      expect((await getAccessToken(ctxB, { provider })).accessToken).toBe(distinct[0]);
      expect(refreshes() - count).toBe(1);
      // The refresh token storage holds is the one the provider honours: the next refresh, on either replica, works.
      await expireSoon(id);
      const next = await getAccessToken(ctxB, { provider });
      expect(refreshes() - count).toBe(2);
      expect(next.accessToken).not.toBe(distinct[0]);
      expect((await stored(id)).row.status).toBe('active');
    });
  }

  it('after A refreshed a rotating connection, B (which cached the old token) serves the new one, refreshes from storage when due, and never marks it expired', async () => {
    const id = await connect(member, 'fake-rotating', BOB);
    const [ctxA, ctxB] = [ctxOn(a, member), ctxOn(b, member)];
    const t1 = await getAccessToken(ctxB, { provider: 'fake-rotating' });
    expect((await getAccessToken(ctxA, { provider: 'fake-rotating' })).accessToken).toBe(t1.accessToken);
    const r1 = (await stored(id)).refresh;
    const count = refreshes();

    // A refreshes; the provider rotates the refresh token.
    await expireSoon(id);
    const t2 = await getAccessToken(ctxA, { provider: 'fake-rotating' });
    expect(refreshes() - count).toBe(1);
    expect(t2.accessToken).not.toBe(t1.accessToken);
    const r2 = (await stored(id)).refresh;
    expect(r2).not.toBe(r1);

    // B's process still holds t1: its next call serves t2, from storage, without a refresh of its own.
    expect((await getAccessToken(ctxB, { provider: 'fake-rotating' })).accessToken).toBe(t2.accessToken);
    expect(refreshes() - count).toBe(1);

    // Due again, B refreshes with the rotated refresh token storage holds (the provider would refuse r1), and A follows.
    await expireSoon(id);
    const t3 = await getAccessToken(ctxB, { provider: 'fake-rotating' });
    expect(refreshes() - count).toBe(2);
    expect(t3.accessToken).not.toBe(t2.accessToken);
    expect((await getAccessToken(ctxA, { provider: 'fake-rotating' })).accessToken).toBe(t3.accessToken);
    expect(await worksAtProvider(t3.accessToken)).toBe(200);

    // Due again with both replicas asking at once while the provider is slow: still one refresh, one token.
    await expireSoon(id);
    fake.tokenDelayMs = 300;
    let racing: AccessToken[];
    try {
      racing = await Promise.all([ctxB, ctxA, ctxB, ctxA].map((ctx) => getAccessToken(ctx, { provider: 'fake-rotating' })));
    } finally {
      fake.tokenDelayMs = 0;
    }
    expect(refreshes() - count).toBe(3);
    expect(new Set(racing.map((t) => t.accessToken)).size).toBe(1);
    expect(racing[0]!.accessToken).not.toBe(t3.accessToken);

    const { row } = await stored(id);
    expect(row).toMatchObject({ status: 'active', last_error: null, refresh_lease_until: null });
    expect(await events(id, 'oauth.connection.expired')).toBe(0);
    expect(await events(id, 'oauth.connection.refreshed')).toBe(3);
    const list = await b.app.inject({ method: 'GET', url: '/v1/oauth/connections?provider=fake-rotating', headers: member.headers });
    expect(json(list).data).toEqual([expect.objectContaining({ id, status: 'active', lastError: null })]);
  });
  it('after a refresh failed on A (the provider timed out), B serves the still-valid token at once during the back-off instead of waiting; the next refresh works', async () => {
    const [ctxA, ctxB] = [ctxOn(a, admin), ctxOn(b, admin)];
    const old = await getAccessToken(ctxA, { provider: 'fake' });
    const id = old.connectionId;
    await expireSoon(id);
    const count = refreshes();
    fake.tokenDelayMs = TIMEOUT_MS + 1000;
    let onA: AccessToken;
    try {
      onA = await getAccessToken(ctxA, { provider: 'fake' });
    } finally {
      fake.tokenDelayMs = 0;
    }
    // The token still works for ten seconds: A's caller gets it, and the failure is recorded with a back-off lease.
    expect(onA.accessToken).toBe(old.accessToken);
    expect(refreshes() - count).toBe(1);
    const failed = (await stored(id)).row;
    expect(failed.status).toBe('active');
    expect(failed.last_error).toContain('refresh failed');
    expect(Date.parse(failed.refresh_lease_until!)).toBeGreaterThan(Date.now());

    const t0 = Date.now();
    expect((await getAccessToken(ctxB, { provider: 'fake' })).accessToken).toBe(old.accessToken);
    expect(Date.now() - t0, 'B does not wait out the back-off').toBeLessThan(1000);
    expect(refreshes() - count).toBe(1);

    // Once the back-off has passed, the next caller (on B) refreshes, and the error is cleared.
    await a.deps.db.kysely
      .updateTable('oauth_connections')
      .set({ refresh_lease_until: new Date(Date.now() - 1000).toISOString() })
      .where('id', '=', id)
      .execute();
    const fresh = await getAccessToken(ctxB, { provider: 'fake' });
    expect(refreshes() - count).toBe(2);
    expect(fresh.accessToken).not.toBe(old.accessToken);
    expect((await getAccessToken(ctxA, { provider: 'fake' })).accessToken).toBe(fresh.accessToken);
    expect((await stored(id)).row).toMatchObject({ status: 'active', last_error: null, refresh_lease_until: null });
  });
});
