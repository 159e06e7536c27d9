/**
 * Cron schedules for both engines: the `job_schedules` table holds each schedule and the last tick sent. Every
 * process with the engine running looks once a second; a due tick is sent as a job keyed `sched:<name>:<tick>`,
 * so the engine's idempotency keys make it one job however many replicas saw it (no lock). A process that was down
 * sends only the latest tick it missed, once.
 */
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { Database } from '../../database.js';
import { cronProblem, nextTick } from './cron.js';
import type { JobEngine, ScheduleSpec } from './types.js';

/** Ticks looked through to find the latest one missed (about an hour of a per-second schedule). */
const MAX_STEPS = 4000;

export interface Scheduler {
  schedule(name: string, spec: ScheduleSpec): Promise<void>;
  unschedule(name: string): Promise<void>;
  /** Sends what is due now (the loop calls it every second; tests may call it). */
  tick(now?: Date): Promise<number>;
  start(): void;
  stop(): Promise<void>;
}

export function createScheduler(
  db: Kysely<Database>,
  send: JobEngine['send'],
  log: Pick<Logger, 'warn'>,
  opts: { intervalMs?: number } = {},
): Scheduler {
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<unknown> | null = null;

  /** The latest tick of `cron` after `from` and at or before `now`, or null. */
  function latestDue(cron: string, tz: string, from: Date, now: Date): Date | null {
    let t = nextTick(cron, tz, from);
    if (!t || t > now) return null;
    for (let i = 0; i < MAX_STEPS; i++) {
      const n = nextTick(cron, tz, t);
      if (!n || n > now) return t;
      t = n;
    }
    // Very many missed ticks: the newest one is found from a point closer to now.
    return latestDue(cron, tz, new Date(Math.max(t.getTime(), now.getTime() - 3_600_000)), now) ?? t;
  }

  async function tick(now = new Date()): Promise<number> {
    const rows = await db.selectFrom('job_schedules').selectAll().execute();
    let sent = 0;
    for (const s of rows) {
      const from = new Date(s.last_tick ?? s.created_at);
      let due: Date | null;
      try {
        due = latestDue(s.cron, s.tz, from, now);
      } catch (err) {
        log.warn({ err, schedule: s.name }, 'schedule: its cron cannot be read');
        continue;
      }
      if (!due) continue;
      const at = due.toISOString();
      const id = await send(s.queue, JSON.parse(s.data), { key: `sched:${s.name}:${at}` });
      if (id) sent++;
      await db
        .updateTable('job_schedules')
        .set({ last_tick: at })
        .where('name', '=', s.name)
        .where((eb) => eb.or([eb('last_tick', 'is', null), eb('last_tick', '<', at)]))
        .execute();
    }
    return sent;
  }

  return {
    async schedule(name, spec) {
      const tz = spec.tz ?? 'UTC';
      const problem = cronProblem(spec.cron, tz);
      if (problem) throw new Error(problem);
      const now = new Date().toISOString();
      const values = { cron: spec.cron.trim(), tz, queue: spec.queue, data: JSON.stringify(spec.data ?? null), updated_at: now };
      // A new schedule starts from now (no past ticks); a replaced one keeps its last tick.
      await db
        .insertInto('job_schedules')
        .values({ name, ...values, last_tick: now, created_at: now })
        .onConflict((oc) => oc.column('name').doUpdateSet(values))
        .execute();
    },
    async unschedule(name) {
      await db.deleteFrom('job_schedules').where('name', '=', name).execute();
    },
    tick,
    start() {
      if (timer) return;
      const run = () => {
        if (running) return;
        running = tick()
          .catch((err) => log.warn({ err }, 'schedules: a tick failed'))
          .finally(() => (running = null));
      };
      run();
      timer = setInterval(run, opts.intervalMs ?? 1000);
      timer.unref();
    },
    async stop() {
      if (timer) clearInterval(timer);
      timer = null;
      await running;
    },
  };
}
