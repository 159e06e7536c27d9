/**
 * The durable job engine (ADR 0032): background work that survives restarts, retries with backoff, runs once per
 * idempotency key across replicas, and cron schedules that fire once per tick across replicas. On PostgreSQL it
 * is pg-boss (pgboss.ts); on the embedded SQLite default, an in-process engine over the `jobs` and
 * `job_schedules` tables with the same guarantees for one process (embedded.ts).
 */

export interface QueueOptions {
  /** Attempts after the first one fails (default 5). */
  retryLimit?: number;
  /** Delay before the first retry (default 1,000 ms). */
  retryDelayMs?: number;
  /** Each next retry waits twice as long, with jitter (default true). */
  backoff?: boolean;
  /** A job still running after this long has failed (its signal aborts) and is retried (default 15 minutes). */
  timeoutMs?: number;
  /** Jobs of this queue this process runs at once (default 1). */
  concurrency?: number;
}

export interface SendOptions {
  /**
   * Idempotency key: the queue gets one job per key, however often (and from however many replicas) it is sent;
   * a send whose key has a job answers null. Keys are kept as long as finished jobs are (JOB_RETENTION_DAYS).
   */
  key?: string;
  /** Run no earlier than this many milliseconds from now. */
  delayMs?: number;
}

export interface Job<T = unknown> {
  id: string;
  queue: string;
  data: T;
  /** 1 for the first try. */
  attempt: number;
  /** Aborted when the job times out or the engine stops. */
  signal: AbortSignal;
}

export type JobHandler<T = unknown> = (job: Job<T>) => Promise<void>;

export const JOB_STATES = ['created', 'retry', 'active', 'completed', 'failed', 'cancelled'] as const;
export type JobState = (typeof JOB_STATES)[number];

export interface JobInfo {
  id: string;
  queue: string;
  state: JobState;
  data: unknown;
  /** Tries started so far. */
  attempts: number;
  lastError: string | null;
}

export interface ScheduleSpec {
  /** Five fields (minute hour day-of-month month day-of-week), or six with seconds first. */
  cron: string;
  /** IANA time zone the fields are read in (default UTC). */
  tz?: string;
  /** The queue each tick sends a job to, with `data`. */
  queue: string;
  data?: unknown;
}

export interface JobEngine {
  readonly kind: 'embedded' | 'pg-boss';
  /** This process works `queue` with `handler`; call before start() or after. */
  work<T>(queue: string, handler: JobHandler<T>, opts?: QueueOptions): Promise<void>;
  /**
   * Queues a job (durably, before answering); null when its `key` already has one. Call it after the transaction
   * that made the job's work necessary has committed, never inside it (on SQLite the engine writes on the same
   * connection, which the open transaction holds); a start-up job re-sends what a crash between the two lost,
   * and the key makes that harmless.
   */
  send<T>(queue: string, data: T, opts?: SendOptions): Promise<string | null>;
  /**
   * Creates or replaces the schedule `name`. Each tick sends one job, once across replicas. A tick missed while
   * no process ran is sent once at the next start (never once per missed tick).
   */
  schedule(name: string, spec: ScheduleSpec): Promise<void>;
  unschedule(name: string): Promise<void>;
  getJob(id: string): Promise<JobInfo | null>;
  /** Jobs waiting (created, retry) and running (active), by queue: the backlog `GET /metrics` shows (ADR 0040). */
  backlog(): Promise<{ queue: string; state: 'created' | 'retry' | 'active'; count: number }[]>;
  start(): Promise<void>;
  /** Stops taking jobs and waits for the running ones (their signals abort after `graceMs`). */
  stop(graceMs?: number): Promise<void>;
}

/** Finished jobs (and their keys) are kept this long. */
export const JOB_RETENTION_DAYS = 14;

export const DEFAULT_QUEUE: Required<QueueOptions> = {
  retryLimit: 5,
  retryDelayMs: 1000,
  backoff: true,
  timeoutMs: 15 * 60_000,
  concurrency: 1,
};

/** The delay before retry number `retry` (1-based): exponential with full jitter over its upper half. */
export function retryDelay(opts: Required<QueueOptions>, retry: number, random = Math.random): number {
  if (!opts.backoff) return opts.retryDelayMs;
  const ceiling = opts.retryDelayMs * 2 ** Math.min(30, retry - 1);
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}
