/**
 * `triggers`: verified trigger invokes (issue 19) at the wire, and the durable job engine (ADR 0032) under
 * deployments and triggers.
 *   (1) Trigger invokes, on the embedded SQLite default, everything in this process (Hangar built as
 *       test/harness.ts does, the model `test/fakes/openai.ts` on loopback answering "ok" at once, the load
 *       generator, the baseline). Setup: an agent `{ model: 'm1' }`, a deployment `{ runtimeSlug, apiSlug,
 *       maxConcurrent: 100 (the most allowed), timeout: 60 }`, a `webhook`-source trigger with a secret and
 *       `allowedIps: ['127.0.0.0/8']` (so the allowlist check runs). HANGAR_DEPLOYMENTS_MAX_QUEUED is raised to
 *       100000 so the bench never meets the 429 of a full queue. Load: signed `POST /v1/triggers/{id}/invoke`
 *       (a new JSON body each, `X-Webhook-Signature: <hex HMAC-SHA256 of the raw body>`, and with `--delivery-id on`
 *       a unique `webhook-id` header each, so the replay check stores a delivery row too) at a fixed open-loop
 *       `--rate` for `--seconds` per round over a keep-alive undici Pool; latency = from sending to reading the full
 *       202 `{ fired: true, invocationId }`. Baseline: a bare Fastify route in this process reading the raw body
 *       (a buffer parser), computing the same HMAC and comparing in constant time, answering 202. ABBA rounds after
 *       a warm-up of each; after each Hangar round the benchmark waits for the queue to drain (every invocation of
 *       the deployment ended). At the end every 202 must have created exactly one invocation, each `completed`.
 *   (2) Job engine throughput: --jobs N no-op jobs sent one after another and worked (concurrency --concurrency),
 *       timed from the first send to the last completion, on the embedded engine (SQLite file in WAL mode, as the
 *       app opens it) and on pg-boss (PostgreSQL, a schema of its own, dropped after). Baseline in the same run and
 *       database: the same number of bare single-row INSERTs of the same shape (what queueing costs at the least).
 *       Rounds alternate (ABBA). PostgreSQL is skipped with a line when unreachable (HANGAR_TEST_DATABASE_URL, else
 *       postgres://postgres@127.0.0.1:5432/test).
 * Options: --part triggers,jobs (both); trigger invokes: --rate N (100/s), --seconds N (per round and target, 10),
 * --warmup N (seconds of each, 2), --connections N (16), --delivery-id on|off (on); job engine: --jobs N (1000),
 * --concurrency N (4), --db sqlite,postgres; both: --rounds N (2).
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import Fastify, { type FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import pg from 'pg';
import pino from 'pino';
import { Pool } from 'undici';
import { openDb, type Db } from '../src/platform/db/index.js';
import { migrateToLatest } from '../src/platform/db/migrate.js';
import { embeddedEngine } from '../src/platform/job-engine/embedded.js';
import { pgBossEngine } from '../src/platform/job-engine/pgboss.js';
import type { JobEngine } from '../src/platform/job-engine/types.js';
import { FakeOpenAI } from '../test/fakes/openai.js';
import { startInProcessHangar, stopInProcessHangar, type InProcessHangar } from './lib/in-process.js';
import { type LoadResult, openLoop, table } from './lib/load.js';

export const description =
  'signed trigger invokes under open-loop load vs a bare HMAC handler; job engine throughput (embedded on SQLite, pg-boss on PostgreSQL) against bare inserts';

// ---- (1) trigger invokes

const AIM_ADDED_MEDIAN_MS = 2;
const TRIGGER_SECRET = 'bench-trigger-secret-0123456789abcdef';

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

function stats(samples: number[]) {
  const s = [...samples].sort((a, b) => a - b);
  return { n: s.length, p50: percentile(s, 50), p90: percentile(s, 90), p99: percentile(s, 99), max: s.length ? s[s.length - 1]! : NaN };
}

const signed = (v: number) => `${v >= 0 ? '+' : ''}${v.toFixed(2)}`;

async function api(h: InProcessHangar, method: string, urlPath: string, body?: unknown) {
  const res = await fetch(`${h.url}${urlPath}`, {
    method,
    headers: { 'x-api-key': h.apiKey, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${urlPath}: ${res.status} ${text.slice(0, 300)}`);
  return JSON.parse(text).data;
}

const hmacHex = (secret: string, body: string | Buffer) => createHmac('sha256', secret).update(body).digest('hex');
const fixed = (v: string | Buffer) => createHash('sha256').update(v).digest();

/** The bare handler: raw body, the same HMAC, a constant-time comparison (both sides hashed to 32 bytes), 202. */
async function startBare(secret: string): Promise<{ app: FastifyInstance; url: string }> {
  const app = Fastify({ logger: false });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
  app.post('/invoke', async (req, reply) => {
    const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    const given = String(req.headers['x-webhook-signature'] ?? '')
      .trim()
      .replace(/^sha256=/i, '')
      .toLowerCase();
    if (!timingSafeEqual(fixed(given), fixed(hmacHex(secret, raw)))) return reply.status(401).send({ error: 'bad signature' });
    return reply.status(202).send({ fired: true });
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  return { app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` };
}

type Target = 'bare' | 'hangar';

interface TriggerOptions {
  rate: number;
  seconds: number;
  warmup: number;
  connections: number;
  rounds: number;
  deliveryIds: boolean;
  /** held: the first runs hang at the model, so every later invocation stays queued during the load; live: runs go on. */
  runs: 'held' | 'live';
}

/** The `deployments.invocation` queue's worker concurrency (src/domains/deployments/jobs.ts): runs that can hold it. */
const INVOCATION_WORKERS = 20;

async function triggerInvokes(o: TriggerOptions): Promise<string> {
  let model: FakeOpenAI | undefined;
  let hangar: InProcessHangar | undefined;
  let bare: Awaited<ReturnType<typeof startBare>> | undefined;
  const pools: Pool[] = [];
  const cleanup = async () => {
    for (const p of pools.splice(0)) await p.close().catch(() => undefined);
    await bare?.app.close().catch(() => undefined);
    bare = undefined;
    if (hangar) await stopInProcessHangar(hangar).catch((err) => console.error(`triggers: Hangar cleanup failed: ${(err as Error).message}`));
    hangar = undefined;
    await model?.stop().catch(() => undefined);
    model = undefined;
  };
  const onSignal = () => {
    void cleanup().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    process.stdout.write('starting Hangar (in process), the fake model and the bare Fastify handler... ');
    model = await new FakeOpenAI().start();
    hangar = await startInProcessHangar('triggers', {
      HANGAR_OPENAI_BASE_URL: model.url,
      HANGAR_OPENAI_API_KEY: 'sk-bench',
      HANGAR_OPENAI_MODELS: 'm1',
      HANGAR_DEPLOYMENTS_MAX_QUEUED: '100000',
    });
    bare = await startBare(TRIGGER_SECRET);
    const h = hangar;
    console.log(`Hangar on ${h.url}`);

    await api(h, 'POST', '/v1/agents', { slug: 'hooked', model: 'm1', instructions: 'Be brief.' });
    // Held runs answer once the load is over (warm-ups, rounds, a margin); the deployment's timeout outlasts them.
    const holdMs = (2 * o.warmup + 2 * o.rounds * o.seconds) * 1000 + 5000;
    const timeout = Math.min(3600, Math.max(60, Math.ceil(holdMs / 1000) + 60));
    const deployment = await api(h, 'POST', '/v1/deployments', { runtimeSlug: 'hooked', apiSlug: 'bench-hook', maxConcurrent: 100, timeout });
    const trigger = await api(h, 'POST', '/v1/triggers', {
      deployment: 'bench-hook',
      source: 'webhook',
      secret: TRIGGER_SECRET,
      allowedIps: ['127.0.0.0/8'],
      message: 'Event {{payload.type}} #{{payload.seq}}: {{payload}}',
    });
    const invokePath = new URL(trigger.webhookUrl as string).pathname;
    const deploymentId = deployment.id as string;
    const triggerId = trigger.id as string;

    const hangarPool = new Pool(h.url, { connections: o.connections, pipelining: 1 });
    const barePool = new Pool(bare.url, { connections: o.connections, pipelining: 1 });
    pools.push(hangarPool, barePool);

    let seq = 0;
    const event = () => {
      seq++;
      return JSON.stringify({
        type: 'bench.event',
        seq,
        at: new Date().toISOString(),
        data: { repo: 'bench/hook', ref: `refs/heads/b${seq}`, ok: true },
      });
    };
    const headersFor = (body: string): Record<string, string> => ({
      'content-type': 'application/json',
      'x-webhook-signature': `sha256=${hmacHex(TRIGGER_SECRET, body)}`,
      ...(o.deliveryIds ? { 'webhook-id': `bench-${process.pid}-${seq}` } : {}),
    });
    const invocationIds = new Set<string>();
    const failures: string[] = [];
    let accepted = 0;
    const sendOnce: Record<Target, () => Promise<number | null>> = {
      async bare() {
        const body = event();
        const headers = headersFor(body);
        const t0 = performance.now();
        const res = await barePool.request({ path: '/invoke', method: 'POST', headers, body });
        const text = await res.body.text();
        const ms = performance.now() - t0;
        return res.statusCode === 202 && text === '{"fired":true}' ? ms : null;
      },
      async hangar() {
        const body = event();
        const headers = headersFor(body);
        const t0 = performance.now();
        const res = await hangarPool.request({ path: invokePath, method: 'POST', headers, body });
        const text = await res.body.text();
        const ms = performance.now() - t0;
        if (res.statusCode !== 202) {
          if (failures.length < 3) failures.push(`${res.statusCode} ${text.slice(0, 200)}`);
          return null;
        }
        const d = JSON.parse(text).data as { fired: boolean; invocationId?: string };
        if (!d.fired || !d.invocationId) return null;
        accepted++;
        invocationIds.add(d.invocationId);
        return ms;
      },
    };

    const count = async (statuses?: string[]) => {
      let q = h.deps.db.kysely
        .selectFrom('deployment_invocations')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('deployment_id', '=', deploymentId);
      if (statuses) q = q.where('status', 'in', statuses);
      return Number((await q.executeTakeFirstOrThrow()).n);
    };
    /** Waits until every invocation of the deployment has ended; answers how long it took (ms). */
    const drain = async () => {
      const t0 = performance.now();
      for (;;) {
        if ((await count(['queued', 'running'])) === 0) return performance.now() - t0;
        if (performance.now() - t0 > 300_000)
          throw new Error(`invocations still queued or running after 300 s: ${await count(['queued', 'running'])}`);
        await sleep(20);
      }
    };

    console.log(
      `(1) trigger invokes: open loop at ${o.rate}/s for ${o.seconds} s per round and target, ${o.rounds} rounds ABBA after ${o.warmup} s of each; ` +
        `${o.connections} keep-alive sockets; a new JSON body each, X-Webhook-Signature (hex HMAC-SHA256), ` +
        `${o.deliveryIds ? 'a unique webhook-id each (delivery stored, replay checked)' : 'no webhook-id (no delivery row, no replay check)'}; ` +
        `allowedIps 127.0.0.0/8; deployment maxConcurrent 100, the model answering "ok" at once` +
        (o.runs === 'held'
          ? `; runs held: the first ${INVOCATION_WORKERS} runs wait ${(holdMs / 1000).toFixed(0)} s at the model, filling the invocation workers, so every later invocation stays queued until the load is over`
          : '; runs live: each invocation runs as soon as a worker is free, in this process, during the load'),
    );
    if (o.runs === 'held')
      model.script(...Array.from({ length: INVOCATION_WORKERS }, () => ({ text: 'ok', delayMs: holdMs, usage: { prompt: 5, completion: 1 } })));
    const targets: Target[] = ['bare', 'hangar'];
    const loads: Record<Target, LoadResult[]> = { bare: [], hangar: [] };
    const drains: number[] = [];
    /** This process's CPU time over each target's rounds (Hangar's: until its queue drained), load generator included. */
    const cpuMs: Record<Target, number> = { bare: 0, hangar: 0 };
    for (const t of targets) {
      const w = await openLoop(sendOnce[t], o.rate, o.warmup);
      if (w.failed) throw new Error(`${t}: ${w.failed} failed requests during the warm-up${failures.length ? `: ${failures.join('; ')}` : ''}`);
    }
    if (o.runs === 'live') drains.push(await drain());
    for (let round = 0; round < o.rounds; round++) {
      const order = round % 2 === 0 ? targets : [...targets].reverse();
      for (const t of order) {
        const cpu0 = process.cpuUsage();
        const r = await openLoop(sendOnce[t], o.rate, o.seconds);
        if (t === 'hangar' && o.runs === 'live') drains.push(await drain());
        const cpu = process.cpuUsage(cpu0);
        cpuMs[t] += (cpu.user + cpu.system) / 1000;
        loads[t].push(r);
      }
    }

    let heldLine = '';
    if (o.runs === 'held') {
      const running = await count(['running']);
      const queued = await count(['queued']);
      heldLine = `during the load ${running} invocations running (held at the model) and ${queued} queued; `;
      const cpu0 = process.cpuUsage();
      drains.push(await drain());
      const cpu = process.cpuUsage(cpu0);
      heldLine += `after it the queue drained in ${(drains[0]! / 1000).toFixed(1)} s (the held runs ending with the load + margin, then ${queued} runs: ${((cpu.user + cpu.system) / 1000 / Math.max(1, queued)).toFixed(2)} ms CPU each)`;
    }
    // Every 202 made one invocation of this trigger, and each ran to its end.
    const rows = await h.deps.db.kysely
      .selectFrom('deployment_invocations')
      .select(['id', 'status', 'trigger_id', 'source', 'created_at', 'started_at', 'finished_at'])
      .where('deployment_id', '=', deploymentId)
      .execute();
    const byStatus = new Map<string, number>();
    for (const r of rows) byStatus.set(r.status, (byStatus.get(r.status) ?? 0) + 1);
    const missing = [...invocationIds].filter((id) => !rows.some((r) => r.id === id)).length;
    const foreign = rows.filter((r) => r.trigger_id !== triggerId || r.source !== 'trigger').length;
    const listed = (await api(h, 'GET', `/v1/deployments/${deploymentId}/invocations?limit=5`)) as unknown[];
    const ms = (a: string | null, b: string | null) => (a && b ? Date.parse(b) - Date.parse(a) : NaN);
    const wait = stats(rows.map((r) => ms(r.created_at, r.started_at)).filter(Number.isFinite));
    const total = stats(rows.map((r) => ms(r.created_at, r.finished_at)).filter(Number.isFinite));

    const loadStat = (t: Target) => {
      const all = loads[t].flatMap((r) => r.latencies);
      const secs = loads[t].reduce((s, r) => s + r.seconds, 0);
      return {
        ...stats(all),
        rps: all.length / secs,
        failed: loads[t].reduce((s, r) => s + r.failed, 0),
        maxLag: Math.max(...loads[t].map((r) => r.maxLag)),
        cpuPer: cpuMs[t] / Math.max(1, all.length),
      };
    };
    const b = loadStat('bare');
    const hg = loadStat('hangar');
    const added = hg.p50 - b.p50;
    const verdict = added < AIM_ADDED_MEDIAN_MS ? 'PASS' : 'MISS';
    const fmt = (label: string, s: ReturnType<typeof loadStat>) => [
      label,
      s.n,
      s.rps.toFixed(0),
      s.failed,
      s.p50.toFixed(2),
      s.p90.toFixed(2),
      s.p99.toFixed(2),
      s.max.toFixed(1),
      s.maxLag.toFixed(1),
      s.cpuPer.toFixed(2),
    ];
    console.log('');
    console.log(
      table(
        ['target', 'n', 'invokes/s', 'failed', 'median ms', 'p90 ms', 'p99 ms', 'max ms', 'max send lag ms', 'CPU ms/req'],
        [fmt('bare Fastify: raw body, HMAC, compare -> 202', b), fmt('Hangar trigger invoke (verify, queue) -> 202', hg)],
      ),
    );
    console.log(
      `added median ${added.toFixed(2)} ms (x${(hg.p50 / b.p50).toFixed(1)} the bare median; p90 ${signed(hg.p90 - b.p90)}, p99 ${signed(hg.p99 - b.p99)} ms): ` +
        `${verdict} against the aim of < ${AIM_ADDED_MEDIAN_MS} ms`,
    );
    const perRound = (t: Target) => loads[t].map((r) => stats(r.latencies).p50.toFixed(2)).join(' / ');
    console.log(`medians per round (ms): bare ${perRound('bare')}; Hangar ${perRound('hangar')}`);
    const statusLine = [...byStatus].map(([s, n]) => `${n} ${s}`).join(', ');
    console.log(
      `invocations: ${rows.length} for ${accepted} accepted invokes (warm-up included; ${missing === 0 ? 'none missing' : `${missing} MISSING`}): ${statusLine}; ` +
        (o.runs === 'live'
          ? `queue drained ${drains.map((d) => `${d.toFixed(0)} ms`).join(', ')} after the warm-up and each Hangar round`
          : heldLine),
    );
    console.log(
      o.runs === 'live'
        ? `CPU per request (this process, load generator included; Hangar's until its queue drained, so with its run): ` +
            `Hangar ${hg.cpuPer.toFixed(2)} ms, bare ${b.cpuPer.toFixed(2)} ms: one core sustains about ${Math.round(1000 / hg.cpuPer)} invokes/s with their runs`
        : `CPU per request (this process, load generator included; runs held): Hangar ${hg.cpuPer.toFixed(2)} ms, bare ${b.cpuPer.toFixed(2)} ms`,
    );
    console.log(
      `invocation queued -> started median ${wait.p50.toFixed(0)} ms (p99 ${wait.p99.toFixed(0)}), queued -> finished median ${total.p50.toFixed(0)} ms ` +
        `(p99 ${total.p99.toFixed(0)}, max ${total.max.toFixed(0)})`,
    );
    if (hg.failed || b.failed)
      console.log(`failed requests: bare ${b.failed}, Hangar ${hg.failed}${failures.length ? ` (${failures.join('; ')})` : ''}`);
    if (missing || foreign || rows.length !== accepted || invocationIds.size !== accepted)
      throw new Error(
        `${accepted} invokes accepted (${invocationIds.size} distinct ids) but ${rows.length} invocations stored, ${missing} missing, ${foreign} not from the trigger`,
      );
    if ((byStatus.get('completed') ?? 0) !== rows.length) throw new Error(`not every invocation completed: ${statusLine}`);
    if (!Array.isArray(listed) || listed.length === 0) throw new Error('GET /v1/deployments/{id}/invocations lists none');

    return (
      `trigger invokes (runs ${o.runs}) at ${o.rate}/s median ${hg.p50.toFixed(2)} ms vs bare ${b.p50.toFixed(2)} (added ${added.toFixed(2)} ms, ${verdict} < ${AIM_ADDED_MEDIAN_MS}; ` +
      `p99 ${hg.p99.toFixed(1)} vs ${b.p99.toFixed(1)}), ${rows.length}/${accepted} invocations, all completed`
    );
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cleanup();
  }
}

// ---- (2) job engine throughput

const log = pino({ level: 'silent' });
type Engine = Omit<JobEngine, 'schedule' | 'unschedule'>;

async function engineRound(engine: Engine, queue: string, jobs: number): Promise<number> {
  let done = 0;
  let finish!: () => void;
  const all = new Promise<void>((r) => {
    finish = r;
  });
  await engine.work(
    queue,
    async () => {
      if (++done === jobs) finish();
    },
    { concurrency: CONCURRENCY },
  );
  const t0 = performance.now();
  for (let i = 0; i < jobs; i++) await engine.send(queue, { i });
  await all;
  return performance.now() - t0;
}

let CONCURRENCY = 4;

async function bareRound(db: Db, jobs: number): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < jobs; i++) {
    await sql`insert into bench_bare (id, queue, data, state, created_at) values (${randomBytes(8).toString('hex')}, ${'bare'}, ${JSON.stringify({ i })}, ${'created'}, ${new Date().toISOString()})`.execute(
      db.kysely,
    );
  }
  return performance.now() - t0;
}

async function measure(name: string, db: Db, engine: Engine, jobs: number, rounds: number) {
  await sql`create table bench_bare (id text primary key, queue text not null, data text not null, state text not null, created_at text not null)`.execute(
    db.kysely,
  );
  await engine.start();
  const e: number[] = [];
  const b: number[] = [];
  // Warm-up of each, then ABBA.
  await engineRound(engine, `${name}.warm`, Math.min(100, jobs));
  await bareRound(db, Math.min(100, jobs));
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 ? ['engine', 'bare', 'bare', 'engine'] : ['bare', 'engine', 'engine', 'bare'];
    for (const [k, which] of order.entries()) {
      if (which === 'engine') e.push(await engineRound(engine, `${name}.r${r}.${k}`, jobs));
      else b.push(await bareRound(db, jobs));
    }
  }
  await engine.stop();
  const rate = (ms: number[]) => (jobs * ms.length * 1000) / ms.reduce((a, x) => a + x, 0);
  return { engine: rate(e), bare: rate(b) };
}

export async function run(args: string[]): Promise<string> {
  const { values } = parseArgs({
    args,
    options: {
      part: { type: 'string', default: 'triggers,jobs' },
      rate: { type: 'string', default: '100' },
      seconds: { type: 'string', default: '10' },
      warmup: { type: 'string', default: '2' },
      connections: { type: 'string', default: '16' },
      'delivery-id': { type: 'string', default: 'on' },
      runs: { type: 'string', default: 'held' },
      jobs: { type: 'string', default: '1000' },
      concurrency: { type: 'string', default: '4' },
      rounds: { type: 'string', default: '2' },
      db: { type: 'string', default: 'sqlite,postgres' },
    },
    allowPositionals: true,
  });
  const positive = (name: string, v: string | undefined) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer`);
    return n;
  };
  const parts = String(values.part).split(',');
  if (!parts.every((p) => p === 'triggers' || p === 'jobs')) throw new Error('--part takes triggers, jobs or both (comma-separated)');
  if (values['delivery-id'] !== 'on' && values['delivery-id'] !== 'off') throw new Error('--delivery-id takes on or off');
  if (values.runs !== 'held' && values.runs !== 'live') throw new Error('--runs takes held or live');
  const jobs = positive('jobs', values.jobs);
  const rounds = positive('rounds', values.rounds);
  CONCURRENCY = positive('concurrency', values.concurrency);
  const triggerOpts: TriggerOptions = {
    rate: positive('rate', values.rate),
    seconds: positive('seconds', values.seconds),
    warmup: positive('warmup', values.warmup),
    connections: positive('connections', values.connections),
    rounds,
    deliveryIds: values['delivery-id'] === 'on',
    runs: values.runs,
  };
  const done: string[] = [];
  if (parts.includes('triggers')) done.push(await triggerInvokes(triggerOpts));
  if (!parts.includes('jobs')) return `triggers: ${done.join('; ')}`;
  console.log('');
  const dbs = String(values.db).split(',');
  const rows: (string | number)[][] = [];
  const summary: string[] = [];

  if (dbs.includes('sqlite')) {
    const dir = mkdtempSync(path.join(tmpdir(), 'hangar-bench-jobs-'));
    const db = await openDb({ kind: 'sqlite', file: path.join(dir, 'hangar.db') });
    try {
      await migrateToLatest(db.kysely, db.dialect);
      const r = await measure('sqlite', db, embeddedEngine(db.kysely, log, { pollMs: 50 }), jobs, rounds);
      rows.push(['sqlite (embedded)', Math.round(r.engine), Math.round(r.bare), (r.engine / r.bare).toFixed(2)]);
      summary.push(`sqlite ${Math.round(r.engine)} jobs/s = ${(r.engine / r.bare).toFixed(2)} of bare inserts`);
    } finally {
      await db.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }

  if (dbs.includes('postgres')) {
    const url = process.env.HANGAR_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
    const schema = `bench_jobs_${process.pid}_${randomBytes(3).toString('hex')}`;
    const admin = new pg.Client({ connectionString: url });
    const reachable = await admin.connect().then(
      () => true,
      (err: Error) => {
        console.log(`postgresql: SKIPPED (${url} unreachable: ${err.message})`);
        return false;
      },
    );
    if (reachable) {
      let db: Db | null = null;
      try {
        db = await openDb({ kind: 'postgres', url, schema });
        const r = await measure('postgres', db, pgBossEngine({ connectionString: url, schema: `${schema}_pgboss`, log }), jobs, rounds);
        rows.push(['postgres (pg-boss)', Math.round(r.engine), Math.round(r.bare), (r.engine / r.bare).toFixed(2)]);
        summary.push(`postgres ${Math.round(r.engine)} jobs/s = ${(r.engine / r.bare).toFixed(2)} of bare inserts`);
      } catch (err) {
        console.log(`postgresql: SKIPPED (${(err as Error).message})`);
      } finally {
        await db?.close();
        await admin.query(`drop schema if exists "${schema}" cascade`).catch(() => undefined);
        await admin.query(`drop schema if exists "${schema}_pgboss" cascade`).catch(() => undefined);
        await admin.end().catch(() => undefined);
      }
    }
  }

  console.log(`\n(2) job engine: ${jobs} jobs per round, concurrency ${CONCURRENCY}, ${rounds * 2} rounds each (ABBA)`);
  console.log(table(['engine', 'jobs/s (send → done)', 'bare inserts/s', 'ratio'], rows));
  done.push(`job engine ${summary.join('; ')}`);
  return `triggers: ${done.join('; ')}`;
}
