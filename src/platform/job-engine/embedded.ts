/**
 * The embedded job engine (SQLite default, one process): jobs in the `jobs` table, claimed by this process's loop
 * (an UPDATE … RETURNING moves a due job to `active`), retried with backoff, kept JOB_RETENTION_DAYS. A job left
 * `active` by a process that stopped is tried again at the next start (its attempt counted). Schedules are the
 * shared scheduler's (scheduler.ts).
 */
import { sql, type Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { Database } from '../../database.js';
import { isUniqueViolation } from '../db/errors.js';
import { prefixedId } from '../ids.js';
import {
  DEFAULT_QUEUE,
  JOB_RETENTION_DAYS,
  retryDelay,
  type JobEngine,
  type JobHandler,
  type JobInfo,
  type JobState,
  type QueueOptions,
} from './types.js';

interface Worker {
  handler: JobHandler<unknown>;
  opts: Required<QueueOptions>;
  running: number;
}

const iso = (ms: number) => new Date(ms).toISOString();

export function embeddedEngine(
  db: Kysely<Database>,
  log: Pick<Logger, 'warn' | 'error'>,
  opts: { pollMs?: number } = {},
): Omit<JobEngine, 'schedule' | 'unschedule'> {
  const pollMs = opts.pollMs ?? 250;
  const workers = new Map<string, Worker>();
  const running = new Map<string, { controller: AbortController; done: Promise<void> }>();
  let started = false;
  let stopping = false;
  let timer: NodeJS.Timeout | null = null;
  let sweeper: NodeJS.Timeout | null = null;
  let polling: Promise<void> | null = null;
  /** Queues to look at in the next poll ('all': every queue, as the timer asks). */
  let wanted: Set<string> | 'all' | null = null;

  const queueOpts = (queue: string) => workers.get(queue)?.opts ?? DEFAULT_QUEUE;

  async function runJob(
    w: Worker,
    row: { id: string; queue: string; data: string; attempts: number; retry_limit: number },
    controller: AbortController,
  ) {
    const timeout = setTimeout(() => controller.abort(new Error(`job timed out after ${w.opts.timeoutMs} ms`)), w.opts.timeoutMs);
    timeout.unref();
    let failure: unknown = null;
    try {
      await w.handler({ id: row.id, queue: row.queue, data: JSON.parse(row.data), attempt: row.attempts, signal: controller.signal });
      if (controller.signal.aborted) failure = controller.signal.reason;
    } catch (err) {
      failure = err;
    } finally {
      clearTimeout(timeout);
    }
    const now = Date.now();
    if (!failure) {
      await db
        .updateTable('jobs')
        .set({ state: 'completed', finished_at: iso(now), expires_at: null })
        .where('id', '=', row.id)
        .execute();
      return;
    }
    const message = failure instanceof Error ? failure.message : String(failure);
    const retries = row.attempts - 1;
    if (retries < row.retry_limit && !stopping) {
      await db
        .updateTable('jobs')
        .set({ state: 'retry', run_after: iso(now + retryDelay(w.opts, retries + 1)), last_error: message.slice(0, 2000), expires_at: null })
        .where('id', '=', row.id)
        .execute();
    } else if (retries < row.retry_limit) {
      // Stopping: the attempt is given back, the job runs again at the next start.
      await db
        .updateTable('jobs')
        .set({ state: 'retry', run_after: iso(now), last_error: message.slice(0, 2000), expires_at: null })
        .where('id', '=', row.id)
        .execute();
    } else {
      await db
        .updateTable('jobs')
        .set({ state: 'failed', last_error: message.slice(0, 2000), finished_at: iso(now), expires_at: null })
        .where('id', '=', row.id)
        .execute();
      log.warn({ jobId: row.id, queue: row.queue, attempts: row.attempts, err: message }, 'job failed after its last attempt');
    }
  }

  async function claim(queue: string, w: Worker, n: number) {
    const now = Date.now();
    return db
      .updateTable('jobs')
      .set({ state: 'active', attempts: sql`attempts + 1`, expires_at: iso(now + w.opts.timeoutMs) })
      .where('state', 'in', ['created', 'retry'])
      .where(
        'id',
        'in',
        db
          .selectFrom('jobs')
          .select('id')
          .where('queue', '=', queue)
          .where('state', 'in', ['created', 'retry'])
          .where('run_after', '<=', iso(now))
          .orderBy('run_after')
          .orderBy('id')
          .limit(n),
      )
      .returning(['id', 'queue', 'data', 'attempts', 'retry_limit'])
      .execute();
  }

  async function pollOnce(only: ReadonlySet<string> | null): Promise<void> {
    for (const [queue, w] of workers) {
      if (only && !only.has(queue)) continue;
      const free = w.opts.concurrency - w.running;
      if (free <= 0 || stopping) continue;
      const rows = await claim(queue, w, free);
      for (const row of rows) {
        w.running++;
        const controller = new AbortController();
        const done = runJob(w, row, controller)
          .catch((err) => log.error({ err, jobId: row.id }, 'job engine: recording a job failed'))
          .finally(() => {
            w.running--;
            running.delete(row.id);
            poke(row.queue);
          });
        running.set(row.id, { controller, done });
      }
    }
  }

  /**
   * Polls `queue` (a job was sent to it or one of its slots came free), or every queue: a send looks only at its own
   * queue, so the cost of a send does not grow with the number of queues declared.
   */
  function poke(queue?: string) {
    if (!started || stopping) return;
    wanted = queue === undefined || wanted === 'all' ? 'all' : (wanted ?? new Set<string>()).add(queue);
    drain();
  }

  function drain() {
    if (polling || !wanted || !started || stopping) return;
    const which = wanted;
    wanted = null;
    polling = pollOnce(which === 'all' ? null : which)
      .catch((err) => log.warn({ err }, 'job engine: polling failed'))
      .finally(() => {
        polling = null;
        drain();
      });
  }

  return {
    kind: 'embedded',

    async work(queue, handler, o = {}) {
      workers.set(queue, { handler: handler as JobHandler<unknown>, opts: { ...DEFAULT_QUEUE, ...o }, running: 0 });
      poke(queue);
    },

    async send(queue, data, o = {}) {
      const now = Date.now();
      const id = prefixedId('job');
      try {
        await db
          .insertInto('jobs')
          .values({
            id,
            queue,
            key: o.key ?? null,
            data: JSON.stringify(data ?? null),
            state: 'created',
            attempts: 0,
            retry_limit: queueOpts(queue).retryLimit,
            run_after: iso(now + (o.delayMs ?? 0)),
            expires_at: null,
            last_error: null,
            created_at: iso(now),
            finished_at: null,
          })
          .execute();
      } catch (err) {
        if (o.key && isUniqueViolation(err)) return null;
        throw err;
      }
      if (!o.delayMs) poke(queue);
      return id;
    },

    async backlog() {
      const rows = await db
        .selectFrom('jobs')
        .select(['queue', 'state', (eb) => eb.fn.countAll<number | string>().as('n')])
        .where('state', 'in', ['created', 'retry', 'active'])
        .groupBy(['queue', 'state'])
        .execute();
      return rows.map((r) => ({ queue: r.queue, state: r.state as 'created' | 'retry' | 'active', count: Number(r.n) }));
    },

    async getJob(id): Promise<JobInfo | null> {
      const row = await db.selectFrom('jobs').selectAll().where('id', '=', id).executeTakeFirst();
      if (!row) return null;
      return {
        id: row.id,
        queue: row.queue,
        state: row.state as JobState,
        data: JSON.parse(row.data),
        attempts: row.attempts,
        lastError: row.last_error,
      };
    },

    async start() {
      if (started) return;
      // Jobs a stopped process left running are tried again (the interrupted attempt counts).
      await db
        .updateTable('jobs')
        .set({ state: 'retry', run_after: iso(Date.now()), expires_at: null })
        .where('state', '=', 'active')
        .execute();
      started = true;
      timer = setInterval(() => poke(), pollMs);
      timer.unref();
      const sweep = () =>
        void db
          .deleteFrom('jobs')
          .where('state', 'in', ['completed', 'failed', 'cancelled'])
          .where('finished_at', '<', iso(Date.now() - JOB_RETENTION_DAYS * 86_400_000))
          .execute()
          .catch((err) => log.warn({ err }, 'job engine: retention sweep failed'));
      sweeper = setInterval(sweep, 3_600_000);
      sweeper.unref();
      poke();
    },

    async stop(graceMs = 10_000) {
      stopping = true;
      if (timer) clearInterval(timer);
      if (sweeper) clearInterval(sweeper);
      await polling;
      const all = [...running.values()].map((r) => r.done);
      const grace = new Promise<void>((r) => setTimeout(r, graceMs).unref());
      await Promise.race([Promise.all(all), grace]);
      for (const r of running.values()) r.controller.abort(new Error('the job engine is stopping'));
      await Promise.all(all);
      // Stopped: a later start (another app built on the same collaborators) begins afresh, its queues declared again.
      workers.clear();
      started = false;
      stopping = false;
    },
  };
}
