/**
 * A bounded pool shared fairly between organizations: at most `concurrency` executions at once, of which
 * at most `orgConcurrency` of one organization; at most `queue` waiting in all and `orgQueue` of one
 * organization. Waiting organizations are served round-robin, each one's own requests in order, so one
 * organization's burst queues behind its own work rather than everyone's. Beyond the limits a request is
 * refused at once (429) rather than piling up memory and latency; an organization over its own limit is
 * refused without taking a place another organization could use.
 */
import { errors } from '../../platform/http/errors.js';

export interface Slot {
  release(): void;
}

export class CancelledError extends Error {
  constructor() {
    super('the execution was cancelled: the client went away');
    this.name = 'CancelledError';
  }
}

export interface PoolLimits {
  /** Executions running at once, in all. */
  concurrency: number;
  /** Executions waiting, in all. */
  queue: number;
  /** Executions of one organization running at once. Default: half the pool, rounded up. */
  orgConcurrency?: number;
  /** Executions of one organization waiting. Default: half the queue, rounded up. */
  orgQueue?: number;
}

interface Waiter {
  org: string;
  resolve(slot: Slot): void;
  reject(err: Error): void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

export class Pool {
  readonly concurrency: number;
  readonly queue: number;
  readonly orgConcurrency: number;
  readonly orgQueue: number;
  private active = 0;
  private waitingCount = 0;
  private readonly runningByOrg = new Map<string, number>();
  /** Each waiting organization's own queue; the map's order is the round-robin order. */
  private readonly waitingByOrg = new Map<string, Waiter[]>();

  constructor(limits: PoolLimits) {
    this.concurrency = limits.concurrency;
    this.queue = limits.queue;
    this.orgConcurrency = Math.min(limits.concurrency, limits.orgConcurrency ?? defaultOrgShare(limits.concurrency));
    this.orgQueue = Math.min(limits.queue, limits.orgQueue ?? defaultOrgShare(limits.queue));
  }

  get running(): number {
    return this.active;
  }

  get queued(): number {
    return this.waitingCount;
  }

  /** Running and waiting executions of one organization. */
  usage(org: string): { running: number; queued: number } {
    return { running: this.runningByOrg.get(org) ?? 0, queued: this.waitingByOrg.get(org)?.length ?? 0 };
  }

  /**
   * Takes a place for `org` synchronously (throws 429 when the organization's share or every place is
   * taken) and returns a promise of the slot. Aborting `signal` while waiting gives the place up and
   * rejects with CancelledError.
   */
  enter(org: string, signal?: AbortSignal): Promise<Slot> {
    const mine = this.usage(org);
    if (this.active < this.concurrency && mine.running < this.orgConcurrency && mine.queued === 0) {
      this.take(org);
      return Promise.resolve(this.slot(org));
    }
    if (this.waitingCount >= this.queue) {
      throw errors.rateLimited(`code execution is at capacity (${this.active} running, ${this.waitingCount} waiting); retry shortly`, 1);
    }
    if (mine.queued >= this.orgQueue) {
      throw errors.rateLimited(
        `your organization's code executions are at capacity (${mine.running} running, ${mine.queued} waiting; ` +
          `at most ${this.orgConcurrency} running and ${this.orgQueue} waiting per organization); retry shortly`,
        1,
      );
    }
    return new Promise<Slot>((resolve, reject) => {
      const waiter: Waiter = { org, resolve, reject, signal };
      if (signal) {
        if (signal.aborted) return reject(new CancelledError());
        waiter.onAbort = () => {
          this.remove(waiter);
          reject(new CancelledError());
        };
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      let own = this.waitingByOrg.get(org);
      if (!own) {
        own = [];
        this.waitingByOrg.set(org, own);
      }
      own.push(waiter);
      this.waitingCount++;
    });
  }

  private take(org: string): void {
    this.active++;
    this.runningByOrg.set(org, (this.runningByOrg.get(org) ?? 0) + 1);
  }

  private remove(waiter: Waiter): void {
    const own = this.waitingByOrg.get(waiter.org);
    const i = own?.indexOf(waiter) ?? -1;
    if (!own || i < 0) return;
    own.splice(i, 1);
    this.waitingCount--;
    if (own.length === 0) this.waitingByOrg.delete(waiter.org);
  }

  private slot(org: string): Slot {
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.active--;
        const left = (this.runningByOrg.get(org) ?? 1) - 1;
        if (left > 0) this.runningByOrg.set(org, left);
        else this.runningByOrg.delete(org);
        this.dispatch();
      },
    };
  }

  /** Starts waiters while there is room: the first waiting organization under its share, which then goes to the back. */
  private dispatch(): void {
    while (this.active < this.concurrency) {
      let next: Waiter | undefined;
      for (const [org, own] of this.waitingByOrg) {
        if ((this.runningByOrg.get(org) ?? 0) >= this.orgConcurrency) continue;
        next = own[0];
        break;
      }
      if (!next) return;
      this.remove(next);
      // Round-robin: an organization that still waits moves behind the others.
      const rest = this.waitingByOrg.get(next.org);
      if (rest) {
        this.waitingByOrg.delete(next.org);
        this.waitingByOrg.set(next.org, rest);
      }
      if (next.onAbort) next.signal!.removeEventListener('abort', next.onAbort);
      this.take(next.org);
      next.resolve(this.slot(next.org));
    }
  }
}

/** Half, rounded up, at least 1. */
export const defaultOrgShare = (n: number) => Math.max(1, Math.ceil(n / 2));
