import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  addOrgMember,
  createHarness,
  createOrgAdmin,
  json,
  keyFor,
  testDatabaseUrl,
  testRedisUrl,
  type Actor,
  type Harness,
} from '../../../test/harness.js';
import { describeNeeding, onCi, postgresNeed, replicaNeed, type Need } from '../../../test/needs.js';

// API keys are cached per replica (identity's key cache). A key revoked, or its owner removed or demoted, through one
// replica must be refused by the other on the very next request: with a shared Redis the revocation reaches it before
// the revoking request has answered; without one, the replicas cannot hear each other, so neither caches keys.

const PG_URL = testDatabaseUrl ?? (onCi ? 'postgres://postgres@127.0.0.1:5432/test' : undefined);
const REDIS_URL = testRedisUrl ?? 'redis://127.0.0.1:6379';
const noPostgres: Need = {
  what: 'PostgreSQL, which the replicas share (HANGAR_TEST_DATABASE_URL)',
  present: false,
  reason: 'HANGAR_TEST_DATABASE_URL is not set',
  fix: 'start PostgreSQL on 127.0.0.1 (scripts/setup.sh) and set HANGAR_TEST_DATABASE_URL, as .ci/run does',
};
const withRedis = PG_URL ? await replicaNeed(PG_URL, REDIS_URL) : noPostgres;
const withoutRedis = PG_URL ? await postgresNeed(PG_URL, `PostgreSQL (${PG_URL}), which the replicas share`) : noPostgres;

function twoReplicas(redisUrl: string | undefined) {
  const schema = `t_${randomBytes(6).toString('hex')}`;
  const secret = randomBytes(32).toString('hex');
  const state = {} as { a: Harness; b: Harness; admin: Actor };
  const env = (node: string) => ({
    DATABASE_URL: `${PG_URL}${PG_URL!.includes('?') ? '&' : '?'}schema=${schema}`,
    REDIS_URL: redisUrl,
    HANGAR_SECRET_KEY: secret,
    HANGAR_NODE_ID: node,
  });
  beforeAll(async () => {
    // One after the other: the first migrates the shared schema, the second finds it migrated.
    state.a = await createHarness(env('keys-replica-a'));
    state.b = await createHarness(env('keys-replica-b'));
    state.admin = await createOrgAdmin(state.a);
  });
  afterAll(async () => {
    await state.b?.close();
    await state.a?.close();
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
  });
  return state;
}

const get = (h: Harness, url: string, key: string) => h.app.inject({ method: 'GET', url, headers: { 'x-api-key': key } });

/** Uses the key on both replicas (twice, so a cache has it) and expects 200 each time. */
async function warm(s: { a: Harness; b: Harness }, url: string, key: string) {
  for (const h of [s.a, s.b, s.a, s.b]) expect((await get(h, url, key)).statusCode).toBe(200);
}

function attacks(s: { a: Harness; b: Harness; admin: Actor }) {
  it('a key revoked through one replica is refused by the other on the next request', async () => {
    const created = json(
      await s.a.app.inject({ method: 'POST', url: '/v1/api-keys', headers: s.admin.headers, payload: { name: 'leaked', scopes: ['org:read'] } }),
    ).data;
    await warm(s, '/v1/me', created.key);
    const revoked = await s.a.app.inject({ method: 'DELETE', url: `/v1/api-keys/${created.id}`, headers: s.admin.headers });
    expect(revoked.statusCode).toBe(200);
    for (const h of [s.b, s.a]) {
      const res = await get(h, '/v1/me', created.key);
      expect(res.statusCode).toBe(401);
      expect(json(res).error.code).toBe('unauthenticated');
    }
  });

  it('a member removed through one replica is refused by the other on the next request', async () => {
    const leaving = await addOrgMember(s.a, s.admin, 'member');
    await warm(s, '/v1/me', leaving.key);
    const removed = await s.a.app.inject({
      method: 'DELETE',
      url: `/v1/organizations/${s.admin.orgId}/members/${leaving.userId}`,
      headers: s.admin.headers,
    });
    expect(removed.statusCode).toBeLessThan(300);
    for (const h of [s.b, s.a]) expect((await get(h, '/v1/me', leaving.key)).statusCode).toBe(401);
  });

  it('a demotion through one replica applies on the other on the next request', async () => {
    const demoted = await addOrgMember(s.a, s.admin, 'admin');
    const key = await keyFor(s.a, demoted, ['billing:read']);
    await warm(s, '/v1/billing/credits', key);
    const changed = await s.a.app.inject({
      method: 'PATCH',
      url: `/v1/organizations/${s.admin.orgId}/members/${demoted.userId}`,
      headers: s.admin.headers,
      payload: { role: 'member' },
    });
    expect(changed.statusCode).toBe(200);
    for (const h of [s.b, s.a]) {
      const res = await get(h, '/v1/billing/credits', key);
      expect(res.statusCode).toBe(403);
      expect(json(res).error.code).toBe('forbidden');
    }
  });
}

describeNeeding(withRedis, 'API key revocation across two replicas sharing PostgreSQL and Redis', () => {
  attacks(twoReplicas(REDIS_URL));
});

describeNeeding(withoutRedis, 'API key revocation across two replicas sharing PostgreSQL without a bus between them', () => {
  attacks(twoReplicas(undefined));
});
