/**
 * The job engine on PostgreSQL: pg-boss 10 in its own schema (ADR 0032). This file implements everything of
 * `JobEngine` but `schedule`/`unschedule`, which the shared scheduler (scheduler.ts) builds on `send` for both
 * engines; pg-boss's own cron (`boss.schedule`) is switched off.
 *
 * What pg-boss 10 does, and how the interface's guarantees are met on it (file:line in node_modules/pg-boss/src):
 * - A job is inserted with `INSERT … ON CONFLICT DO NOTHING RETURNING id` and its id may be given
 *   (`COALESCE($1::uuid, gen_random_uuid())`, plans.js:814,839); `send` answers null when no row came back
 *   (manager.js:380-386). Each queue is a partition whose primary key is (name, id) (plans.js:320). So an
 *   idempotency key becomes the job's id, a UUID v5 of (queue, key): a second send of the key, from any replica,
 *   inserts nothing and answers null. The key blocks while the job is in the `job` table in any state; maintenance
 *   moves finished jobs to the `archive` table (plans.js:935-951), which no longer blocks, so finished jobs are
 *   archived only after JOB_RETENTION_DAYS (archiveCompletedAfterSeconds / archiveFailedAfterSeconds).
 * - The insert joins the queue table (plans.js:838): a send to a queue that does not exist inserts nothing and
 *   answers null as a duplicate would, so queues are created (idempotently: plans.js:257) before the first send.
 *   A job takes its retry and expiry settings from its queue when it is sent (plans.js:794-810); `work` writes the
 *   queue's options (createQueue, then updateQueue, which create_queue does not do for an existing queue).
 * - A fetch moves the job to active and counts a retry when it had started before (plans.js:532); a failure
 *   retries while retry_count < retry_limit (plans.js:607-610) after retry_delay seconds, or with backoff
 *   retry_delay · 2^(n) / 2 · (1 + random) (plans.js:615-621): the first retry waits between 1× and 2× the delay.
 * - An active job past its expiry is failed (and retried) by maintenance (plans.js:566-570, boss.js:115-125), which
 *   runs every `maintenanceIntervalSeconds` in one process at a time (boss.js:102). In the process that runs it, the
 *   handler is raced against the expiry (manager.js:20-33,216): the job fails then, and its signal aborts here.
 * - A worker fetches `batchSize` jobs and waits for all of them before fetching again (worker.js:44-82), so
 *   `concurrency` is that many workers of batch size 1. Workers poll; pg-boss's floor is 0.5 s (attorney.js:6,287),
 *   the latency from another replica's send to a handler on an idle queue (up to 0.5 s). A worker also waits the
 *   interval after a job (worker.js:77), which would cap it at 2 jobs a second: after each job it is notified
 *   (notifyWorker, worker.js:33-39) to fetch again at once, and a send wakes an idle worker of its queue in the
 *   same process.
 * - `stop` of pg-boss fails the jobs still running after its timeout ("pg-boss shut down while active",
 *   manager.js:114-121, index.js:169), and its after-handler complete/fail are not awaited (manager.js:217-219):
 *   this engine completes or fails each job itself, awaited, before its handler wrapper returns (pg-boss's own
 *   complete then matches no active row, plans.js:552).
 */
import { createHash } from 'node:crypto';
import PgBoss from 'pg-boss';
import type { Logger } from 'pino';
import {
  DEFAULT_QUEUE,
  JOB_RETENTION_DAYS,
  type Job,
  type JobEngine,
  type JobHandler,
  type JobInfo,
  type JobState,
  type QueueOptions,
  type SendOptions,
} from './types.js';

/** The engine without cron: the shared scheduler adds `schedule` and `unschedule`. */
export type PgBossEngine = Omit<JobEngine, 'schedule' | 'unschedule'> & { readonly kind: 'pg-boss' };

export interface PgBossEngineOptions {
  connectionString: string;
  /** pg-boss's own schema (created and migrated by start()). */
  schema: string;
  log: Logger;
  /** How often a job left active by a process that died is failed (and retried); default 30 s. */
  maintenanceIntervalSeconds?: number;
  /** Connections in pg-boss's pool (default 10): each worker's poll and each send takes one briefly. */
  maxConnections?: number;
}

const POLL_SECONDS = 0.5;
/** pg-boss refuses an expiry of 24 hours or more (attorney.js:270). */
const MAX_EXPIRE_SECONDS = 24 * 3600 - 1;
const DAY_SECONDS = 24 * 3600;
/** The namespace of job ids derived from idempotency keys (UUID v5). */
const KEY_NAMESPACE = Buffer.from('6f1c3e0a9b2d4c5e8f7a1b2c3d4e5f60', 'hex');
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The job id of `key` in `queue`: a UUID v5 (SHA-1, RFC 9562 §5.5), the same in every process. */
export function keyedJobId(queue: string, key: string): string {
  const h = createHash('sha1').update(KEY_NAMESPACE).update(`${queue}\n${key}`, 'utf8').digest();
  h[6] = (h[6] & 0x0f) | 0x50;
  h[8] = (h[8] & 0x3f) | 0x80;
  const hex = h.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** pg-boss's queue options for ours: seconds, rounded up (retry delay at least 1 s with backoff). */
export function pgBossQueueOptions(opts: QueueOptions = {}): PgBoss.Queue {
  const o = { ...DEFAULT_QUEUE, ...opts };
  return {
    name: '',
    retryLimit: o.retryLimit,
    retryDelay: Math.max(o.backoff ? 1 : 0, Math.ceil(o.retryDelayMs / 1000)),
    retryBackoff: o.backoff,
    expireInSeconds: Math.min(MAX_EXPIRE_SECONDS, Math.max(1, Math.ceil(o.timeoutMs / 1000))),
  };
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** What failed a job, from pg-boss's `output` of its last failure (an Error of ours, or pg-boss's `{ value }`). */
function lastError(state: JobState, output: unknown): string | null {
  if (state === 'completed' || !output || typeof output !== 'object') return null;
  const o = output as { message?: unknown; value?: unknown };
  if (typeof o.message === 'string') return o.message;
  if (typeof o.value === 'string') return o.value;
  if (o.value && typeof o.value === 'object' && typeof (o.value as { message?: unknown }).message === 'string') {
    return (o.value as { message: string }).message;
  }
  return null;
}

interface LocalWorker {
  id: string;
  busy: boolean;
}

interface Registration {
  queue: string;
  handler: JobHandler<never>;
  opts: QueueOptions;
}

export function pgBossEngine(opts: PgBossEngineOptions): PgBossEngine {
  const { schema, log } = opts;
  const boss = new PgBoss({
    connectionString: opts.connectionString,
    schema,
    max: opts.maxConnections ?? 10,
    application_name: 'hangar-jobs',
    // Cron is the shared scheduler's (job_schedules); pg-boss's would also add a queue and a worker of its own.
    schedule: false,
    supervise: true,
    maintenanceIntervalSeconds: opts.maintenanceIntervalSeconds ?? 30,
    // Finished jobs (and so their keys) stay in the job table for the retention, then a retention in the archive.
    archiveCompletedAfterSeconds: JOB_RETENTION_DAYS * DAY_SECONDS,
    archiveFailedAfterSeconds: JOB_RETENTION_DAYS * DAY_SECONDS,
    deleteAfterDays: JOB_RETENTION_DAYS,
    // A job never started is archived this long after its start time.
    retentionDays: JOB_RETENTION_DAYS,
  });
  // An EventEmitter without an 'error' listener throws: pg-boss emits pool, worker and maintenance errors here.
  boss.on('error', (err) => log.error({ err }, 'job engine (pg-boss): %s', message(err)));

  let state: 'new' | 'starting' | 'started' | 'stopping' | 'stopped' = 'new';
  let starting: Promise<void> | null = null;
  /** Past the grace of stop(): a job picked up now has its signal aborted at once. */
  let aborting = false;
  const pending: Registration[] = [];
  const workers = new Map<string, LocalWorker[]>();
  const queues = new Map<string, Promise<void>>();
  const running = new Map<AbortController, Promise<void>>();
  const db = () => boss.getDb();

  function ensureQueue(queue: string): Promise<void> {
    let ready = queues.get(queue);
    if (!ready) {
      ready = boss.createQueue(queue, { ...pgBossQueueOptions(), name: queue });
      ready.catch(() => queues.delete(queue));
      queues.set(queue, ready);
    }
    return ready;
  }

  async function runOne<T>(queue: string, handler: JobHandler<T>, pj: PgBoss.JobWithMetadata<T>): Promise<void> {
    const ac = new AbortController();
    let timedOut = false;
    const expireMs = Math.max(1, Number(pj.expireInSeconds)) * 1000;
    // pg-boss fails the job at the same moment (manager.js:216): the handler is told through its signal.
    const timer = setTimeout(() => {
      timedOut = true;
      ac.abort(new Error(`job ${pj.id} of ${queue} timed out after ${expireMs} ms`));
    }, expireMs);
    if (aborting) ac.abort(new Error('job engine stopped'));
    const job: Job<T> = { id: pj.id, queue, data: pj.data, attempt: pj.retryCount + 1, signal: ac.signal };
    const run = (async () => {
      try {
        await handler(job);
        if (!timedOut) await boss.complete(queue, pj.id);
      } catch (err) {
        if (timedOut) return; // pg-boss has failed this attempt; the job may already be running elsewhere
        log.warn({ err, queue, jobId: pj.id, attempt: job.attempt }, 'job failed: %s', message(err));
        await boss.fail(queue, pj.id, { message: message(err) });
      }
    })()
      .catch((err) => log.error({ err, queue, jobId: pj.id }, 'job engine could not record the end of a job'))
      .finally(() => {
        clearTimeout(timer);
        running.delete(ac);
      });
    running.set(ac, run);
    await run;
  }

  async function register(r: Registration): Promise<void> {
    const q = { ...pgBossQueueOptions(r.opts), name: r.queue };
    await ensureQueue(r.queue);
    await boss.updateQueue(r.queue, q);
    const concurrency = Math.max(1, r.opts.concurrency ?? DEFAULT_QUEUE.concurrency);
    const mine = workers.get(r.queue) ?? [];
    workers.set(r.queue, mine);
    for (let i = 0; i < concurrency; i++) {
      const w: LocalWorker = { id: '', busy: false };
      w.id = await boss.work<unknown>(r.queue, { batchSize: 1, includeMetadata: true, pollingIntervalSeconds: POLL_SECONDS }, async (jobs) => {
        w.busy = true;
        try {
          for (const pj of jobs) await runOne(r.queue, r.handler as JobHandler<unknown>, pj);
        } finally {
          w.busy = false;
          // A worker waits its polling interval even after a job (worker.js:77): fetch again at once while
          // there are jobs; an empty fetch does not call back, so an idle queue is polled at the interval.
          if (state === 'started') boss.notifyWorker(w.id);
        }
      });
      mine.push(w);
    }
  }

  /** A job sent from this process wakes one idle worker of its queue here (other replicas poll). */
  function wake(queue: string): void {
    const idle = workers.get(queue)?.find((w) => !w.busy && w.id);
    if (idle && state === 'started') boss.notifyWorker(idle.id);
  }

  return {
    kind: 'pg-boss',

    async work<T>(queue: string, handler: JobHandler<T>, queueOpts: QueueOptions = {}): Promise<void> {
      const r: Registration = { queue, handler: handler as JobHandler<never>, opts: queueOpts };
      if (state === 'started') await register(r);
      else if (state === 'new' || state === 'starting') pending.push(r);
      else throw new Error('the job engine is stopped');
    },

    async send<T>(queue: string, data: T, sendOpts: SendOptions = {}): Promise<string | null> {
      if (state !== 'started') throw new Error(`the job engine is ${state === 'new' ? 'not started' : state}`);
      await ensureQueue(queue);
      // JSON text: pg would send a bare string as text and an array as a PostgreSQL array, neither valid jsonb.
      const payload = JSON.stringify(data ?? null) as unknown as object;
      const options: PgBoss.SendOptions = {};
      if (sendOpts.key !== undefined) options.id = keyedJobId(queue, sendOpts.key);
      // Seconds from the database's now() (plans.js:820), not this host's clock; fractions are kept.
      if (sendOpts.delayMs && sendOpts.delayMs > 0) options.startAfter = sendOpts.delayMs / 1000;
      const id = await boss.send(queue, payload, options);
      if (id && !options.startAfter) wake(queue);
      return id;
    },

    async backlog() {
      if (state !== 'started') return [];
      const res = await db().executeSql(
        `SELECT name, state::text AS state, count(*)::int AS n FROM ${schema}.job WHERE state IN ('created', 'retry', 'active') GROUP BY 1, 2`,
        [],
      );
      return (res?.rows ?? []).map((r: { name: string; state: string; n: number }) => ({
        queue: r.name,
        state: r.state as 'created' | 'retry' | 'active',
        count: Number(r.n),
      }));
    },

    async getJob(id: string): Promise<JobInfo | null> {
      if (!UUID.test(id) || state !== 'started') return null;
      // pg-boss looks a job up by queue and id (its primary key); across queues, one index probe per queue.
      for (const table of ['job', 'archive']) {
        const res = await db().executeSql(
          `SELECT j.id, j.name, j.state, j.data, j.retry_count, j.started_on, j.output
             FROM ${schema}.queue q
             CROSS JOIN LATERAL (SELECT * FROM ${schema}.${table} t WHERE t.name = q.name AND t.id = $1::uuid) j
            LIMIT 1`,
          [id],
        );
        const row = res?.rows[0];
        if (row) {
          const st = row.state as JobState;
          return {
            id: row.id,
            queue: row.name,
            state: st,
            data: row.data,
            attempts: Number(row.retry_count) + (row.started_on ? 1 : 0),
            lastError: lastError(st, row.output),
          };
        }
      }
      return null;
    },

    async start(): Promise<void> {
      if (state === 'started') return;
      if (starting) return starting;
      if (state !== 'new') throw new Error('a stopped job engine cannot start again');
      state = 'starting';
      starting = (async () => {
        await boss.start();
        state = 'started';
        for (const r of pending.splice(0)) await register(r);
      })();
      try {
        await starting;
      } finally {
        starting = null;
      }
    },

    async stop(graceMs = 30_000): Promise<void> {
      if (state !== 'started') {
        state = 'stopped';
        return;
      }
      state = 'stopping';
      const ids = [...workers.values()].flat().map((w) => w.id);
      workers.clear();
      await Promise.all(ids.map((id) => boss.offWork({ id })));
      const all = () => Promise.allSettled([...running.values()]);
      let graceTimer: NodeJS.Timeout | undefined;
      await Promise.race([all(), new Promise((r) => (graceTimer = setTimeout(r, graceMs)))]);
      clearTimeout(graceTimer);
      aborting = true;
      for (const ac of running.keys()) ac.abort(new Error('job engine stopped'));
      // Handlers that heed their signal end now; pg-boss fails what still runs after its (minimum) 1 s.
      await boss.stop({ graceful: true, wait: true, timeout: 1000 });
      state = 'stopped';
    },
  };
}
