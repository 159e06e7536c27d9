/**
 * `oauth`: the internal verb `getAccessToken(ctx, { provider })` of the OAuth domain (src/domains/oauth/tokens.ts),
 * in one run, against a real authorization server (test/fakes/oauth-server.ts: oidc-provider on loopback).
 *   (1) cache hit: a fresh token, called sequentially in this process, against a baseline that does the minimum by
 *       hand: one select of the same row from oauth_connections by id (Kysely) and one AES-GCM decrypt of its access
 *       token. Median and p90 µs per call, ratio getAccessToken / baseline; ABBA blocks after a warm-up.
 *   (2) expiry: the row aged (issued an hour ago, expires_at 10 s from now: inside the 60 s refresh margin), the fake's token endpoint
 *       slowed down (--token-delay ms), then 50 getAccessToken calls fired at once. Every round must send exactly one
 *       refresh_token request to the provider and give all callers the same new token; otherwise the benchmark fails.
 *       Each round is paired (ABBA) with a single caller at expiry, the baseline for the wall time.
 * Hangar is built in this process as test/harness.ts builds it (embedded SQLite in a temp dir, silent log), with a
 * provider `bench` defined in a temp HANGAR_OAUTH_PROVIDERS_FILE and a platform client at the fake; the connection
 * is made through the product's own browser flow (GET /v1/oauth/start/bench, consent at the fake, GET of the callback).
 *
 * Options: --iterations N (cache-hit calls per target, default 20000), --rounds N (ABBA blocks they are split into,
 * default 20), --warmup N (2000), --callers N (concurrent callers at expiry, 50), --refresh-rounds N (5),
 * --token-delay MS (the fake's token endpoint delay during (2), 100).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { getAccessToken, type AccessToken } from '../src/domains/oauth/tokens.js';
import { keyFor, tokenAad } from '../src/domains/oauth/service.js';
import { systemCtx, type Ctx } from '../src/platform/context.js';
import { decrypt } from '../src/platform/crypto/index.js';
import { ROLE_SCOPES } from '../src/platform/scopes.js';
import { createHarness, createOrgAdmin, type Harness } from '../test/harness.js';
import { FakeOAuthServer } from '../test/fakes/oauth-server.js';
import { table } from './lib/load.js';

export const description = 'OAuth getAccessToken: cache hit vs select+decrypt by hand; N concurrent callers at expiry share one refresh';

const PROVIDER = 'bench';
/** Fixed, so the redirect URI can be registered at the fake before Hangar starts; nothing listens there. */
const AUTH_URL = 'http://127.0.0.1:8787';
const REDIRECT_URI = `${AUTH_URL}/v1/oauth/callback`;
const ACCOUNT = { id: 'acct-bench', email: 'bench-user@example.test', username: 'bench-user', name: 'Bench User' };

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}
const median = (xs: number[]) => percentile(xs, 50);
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

const positive = (name: string, v: string | undefined, min = 1) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer >= ${min}`);
  return n;
};

export async function run(argv: string[]): Promise<string> {
  const { values } = parseArgs({
    args: argv,
    options: {
      iterations: { type: 'string', default: '20000' },
      rounds: { type: 'string', default: '20' },
      warmup: { type: 'string', default: '2000' },
      callers: { type: 'string', default: '50' },
      'refresh-rounds': { type: 'string', default: '5' },
      'token-delay': { type: 'string', default: '100' },
    },
    strict: true,
  });
  const iterations = positive('iterations', values.iterations);
  const rounds = positive('rounds', values.rounds);
  const warmup = positive('warmup', values.warmup, 0);
  const callers = positive('callers', values.callers, 2);
  const refreshRounds = positive('refresh-rounds', values['refresh-rounds']);
  const tokenDelayMs = positive('token-delay', values['token-delay'], 0);

  let fake: FakeOAuthServer | undefined;
  let h: Harness | undefined;
  const tmp = mkdtempSync(path.join(tmpdir(), 'hangar-bench-oauth-'));
  const cleanup = async () => {
    const hh = h;
    h = undefined;
    if (hh) await hh.close().catch((err) => console.error(`oauth: Hangar cleanup failed: ${(err as Error).message}`));
    const f = fake;
    fake = undefined;
    if (f) await f.close().catch(() => undefined);
    rmSync(tmp, { recursive: true, force: true });
  };
  const onExit = () => {
    rmSync(tmp, { recursive: true, force: true });
    if (h) rmSync(h.dataDir, { recursive: true, force: true });
  };
  const onSignal = () => {
    void cleanup().finally(() => process.exit(130));
  };
  process.on('exit', onExit);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  try {
    // ---- setup: the fake provider, Hangar, and a connection made through the product's browser flow ----
    fake = await new FakeOAuthServer({ redirectUris: [REDIRECT_URI] }).start();
    fake.addAccount(ACCOUNT);
    const urls = fake.urls('standard');
    const providersFile = path.join(tmp, 'providers.json');
    writeFileSync(
      providersFile,
      JSON.stringify({
        providers: [
          {
            slug: PROVIDER,
            name: 'Bench',
            modes: ['oauth2'],
            authorizationUrl: urls.authorization,
            tokenUrl: urls.token,
            revocationUrl: urls.revocation,
            userinfoUrl: urls.userinfo,
            defaultScopes: ['openid', 'email', 'profile', 'offline_access'],
            account: { source: 'userinfo', id: 'sub', email: 'email', username: 'preferred_username', displayName: 'name' },
          },
        ],
      }),
    );
    const client = fake.client('standard');
    h = await createHarness({
      HANGAR_AUTH_URL: AUTH_URL,
      HANGAR_OAUTH_PROVIDERS_FILE: providersFile,
      HANGAR_OAUTH_BENCH_CLIENT_ID: client.clientId,
      HANGAR_OAUTH_BENCH_CLIENT_SECRET: client.clientSecret,
      HANGAR_VALIDATE_RESPONSES: 'false',
    });
    const { deps, app } = h;
    const admin = await createOrgAdmin(h, 'Bench OAuth');

    const start = await app.inject({ method: 'GET', url: `/v1/oauth/start/${PROVIDER}`, headers: admin.headers });
    if (start.statusCode !== 200) throw new Error(`GET /v1/oauth/start/${PROVIDER}: ${start.statusCode} ${start.body}`);
    const back = new URL(await fake.authorize(start.json().data.authUrl, ACCOUNT.id));
    if (`${back.origin}${back.pathname}` !== REDIRECT_URI) throw new Error(`the provider redirected to ${back.href}`);
    const callback = await app.inject({ method: 'GET', url: `${back.pathname}${back.search}` });
    if (callback.statusCode !== 200) throw new Error(`GET /v1/oauth/callback: ${callback.statusCode} ${callback.body.slice(0, 500)}`);

    const ctx: Ctx = systemCtx(deps, {
      kind: 'session',
      userId: admin.userId,
      orgId: admin.orgId,
      role: 'admin',
      scopes: ROLE_SCOPES.admin,
      apiKeyId: null,
    });
    const db = deps.db.kysely;
    const first = await getAccessToken(ctx, { provider: PROVIDER });
    const connectionId = first.connectionId;
    const org = admin.orgId;
    console.log(
      `fake provider on ${fake.issuer}; connection ${connectionId} (${first.email}), token expires ${first.expiresAt}; ` +
        `database: ${deps.config.database.kind}`,
    );

    // ---- (1) cache hit ----
    const baseline = async (): Promise<string> => {
      const row = await db.selectFrom('oauth_connections').selectAll().where('id', '=', connectionId).executeTakeFirstOrThrow();
      return decrypt(keyFor(deps, 'tokens'), row.access_token_ciphertext, tokenAad(org, connectionId, 'access'));
    };
    const hangar = async (): Promise<string> => (await getAccessToken(ctx, { provider: PROVIDER })).accessToken;
    const expected = first.accessToken;
    if ((await baseline()) !== expected) throw new Error('the baseline decrypts another token than getAccessToken returns');

    const block = async (fn: () => Promise<string>, n: number, into: number[] | null) => {
      for (let i = 0; i < n; i++) {
        const t0 = performance.now();
        const token = await fn();
        const us = (performance.now() - t0) * 1000;
        if (token !== expected) throw new Error('a cache-hit call returned another token');
        into?.push(us);
      }
    };
    await block(baseline, warmup, null);
    await block(hangar, warmup, null);
    const perBlock = Math.max(1, Math.ceil(iterations / rounds));
    const base: number[] = [];
    const hit: number[] = [];
    const cpu = { base: 0, hit: 0 };
    const timed = async (which: 'base' | 'hit') => {
      const c0 = process.cpuUsage();
      await block(which === 'base' ? baseline : hangar, perBlock, which === 'base' ? base : hit);
      const c = process.cpuUsage(c0);
      cpu[which] += c.user + c.system;
    };
    for (let r = 0; r < rounds; r++) {
      // ABBA: baseline first in even rounds, getAccessToken first in odd ones.
      if (r % 2 === 0) {
        await timed('base');
        await timed('hit');
      } else {
        await timed('hit');
        await timed('base');
      }
    }
    const fmt = (x: number, d = 1) => x.toFixed(d);
    const hitRatio = median(hit) / median(base);
    console.log('');
    console.log(
      table(
        ['(1) cache hit', 'calls', 'median µs', 'mean µs', 'p90 µs', 'p99 µs', 'CPU µs/call', 'ratio (median)'],
        [
          [
            'baseline: select by id + decrypt',
            base.length,
            fmt(median(base)),
            fmt(mean(base)),
            fmt(percentile(base, 90)),
            fmt(percentile(base, 99)),
            fmt(cpu.base / base.length),
            '',
          ],
          [
            'getAccessToken (cached token)',
            hit.length,
            fmt(median(hit)),
            fmt(mean(hit)),
            fmt(percentile(hit, 90)),
            fmt(percentile(hit, 99)),
            fmt(cpu.hit / hit.length),
            `x${hitRatio.toFixed(2)}`,
          ],
        ],
      ),
    );

    // ---- (2) concurrent callers at expiry ----
    const expireSoon = async () => {
      await db
        .updateTable('oauth_connections')
        .set({ expires_at: new Date(Date.now() + 10_000).toISOString(), updated_at: new Date(Date.now() - 3_600_000).toISOString() })
        .where('id', '=', connectionId)
        .execute();
    };
    const version = async () =>
      (await db.selectFrom('oauth_connections').select('token_version').where('id', '=', connectionId).executeTakeFirstOrThrow()).token_version;
    const refreshes = () => fake!.counts.token.refresh_token ?? 0;

    interface Burst {
      callers: number;
      refreshes: number;
      distinct: number;
      ms: number;
    }
    let previous = expected;
    /** Expires the token, fires `n` callers at once, checks the outcome; throws when it is wrong. */
    const burst = async (n: number, label: string): Promise<Burst> => {
      await expireSoon();
      const v0 = await version();
      const r0 = refreshes();
      const t0 = performance.now();
      const settled = await Promise.allSettled(Array.from({ length: n }, () => getAccessToken(ctx, { provider: PROVIDER })));
      const ms = performance.now() - t0;
      const sent = refreshes() - r0;
      const failed = settled.filter((s): s is PromiseRejectedResult => s.status === 'rejected');
      if (failed.length) throw new Error(`${label}: ${failed.length}/${n} callers failed, first: ${(failed[0]!.reason as Error).message}`);
      const tokens = (settled as PromiseFulfilledResult<AccessToken>[]).map((s) => s.value);
      const distinct = new Set(tokens.map((t) => t.accessToken)).size;
      const v1 = await version();
      const problems: string[] = [];
      if (sent !== 1) problems.push(`${sent} refresh_token requests reached the provider (expected exactly 1)`);
      if (distinct !== 1) problems.push(`the callers got ${distinct} different tokens`);
      if (tokens[0]!.accessToken === previous) problems.push('the callers got the old token');
      if (v1 !== v0 + 1) problems.push(`token_version went from ${v0} to ${v1}`);
      if (!tokens.every((t) => t.expiresAt && Date.parse(t.expiresAt) - Date.now() > 60_000))
        problems.push('a caller got a token expiring within 60 s');
      if (problems.length) throw new Error(`${label}: ${problems.join('; ')}`);
      previous = tokens[0]!.accessToken;
      return { callers: n, refreshes: sent, distinct, ms };
    };

    fake.tokenDelayMs = tokenDelayMs;
    const single: Burst[] = [];
    const many: Burst[] = [];
    try {
      for (let r = 0; r < refreshRounds; r++) {
        const one = () => burst(1, `round ${r + 1}, 1 caller`).then((b) => single.push(b));
        const all = () => burst(callers, `round ${r + 1}, ${callers} callers`).then((b) => many.push(b));
        if (r % 2 === 0) {
          await one();
          await all();
        } else {
          await all();
          await one();
        }
      }
    } finally {
      if (fake) fake.tokenDelayMs = 0;
    }
    // The refreshed token is a real one: the provider's userinfo accepts it.
    const me = await fetch(urls.userinfo, { headers: { authorization: `Bearer ${previous}` } });
    const sub = me.ok ? ((await me.json()) as { sub?: string }).sub : undefined;
    if (sub !== ACCOUNT.id) throw new Error(`the provider's userinfo refused the refreshed token (${me.status})`);

    const maxRefreshes = Math.max(...many.map((b) => b.refreshes));
    const wallRatio = median(many.map((b) => b.ms)) / median(single.map((b) => b.ms));
    const row = (label: string, bs: Burst[], ratio: string) => [
      label,
      bs.length,
      bs.map((b) => b.refreshes).join(','),
      Math.max(...bs.map((b) => b.refreshes)),
      Math.max(...bs.map((b) => b.distinct)),
      fmt(median(bs.map((b) => b.ms))),
      fmt(Math.max(...bs.map((b) => b.ms))),
      ratio,
    ];
    console.log('');
    console.log(
      table(
        [
          `(2) at expiry, token endpoint +${tokenDelayMs} ms`,
          'rounds',
          'refreshes per round',
          'max',
          'distinct tokens',
          'median ms',
          'max ms',
          'ratio (median)',
        ],
        [row('baseline: 1 caller', single, ''), row(`${callers} concurrent callers`, many, `x${wallRatio.toFixed(2)}`)],
      ),
    );
    console.log(`\nevery round: exactly one refresh_token request at the provider, all callers got the same new token (userinfo accepts it)`);

    return (
      `oauth: cache hit median ${fmt(median(hit))} µs vs select+decrypt ${fmt(median(base))} µs, ratio ${hitRatio.toFixed(2)}; ` +
      `${callers} callers at expiry: max ${maxRefreshes} refresh per round over ${refreshRounds} rounds, ` +
      `${fmt(median(many.map((b) => b.ms)), 0)} ms vs 1 caller ${fmt(median(single.map((b) => b.ms)), 0)} ms (x${wallRatio.toFixed(2)})`
    );
  } finally {
    await cleanup();
    process.off('exit', onExit);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
