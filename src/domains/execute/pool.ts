/**
 * A bounded pool: at most `concurrency` executions at once, at most `queue` waiting. Beyond that a
 * request is refused at once (429) rather than piling up memory and latency.
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

interface Waiter {
  resolve(slot: Slot): void;
  reject(err: Error): void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

export class Pool {
  private active = 0;
  private readonly waiting: Waiter[] = [];

  constructor(
    readonly concurrency: number,
    readonly queue: number,
  ) {}

  get running(): number {
    return this.active;
  }

  get queued(): number {
    return this.waiting.length;
  }

  /**
   * Takes a place synchronously (throws 429 when every slot and queue place is taken) and returns a
   * promise of the slot. Aborting `signal` while waiting gives the place up and rejects with CancelledError.
   */
  enter(signal?: AbortSignal): Promise<Slot> {
    if (this.active < this.concurrency) {
      this.active++;
      return Promise.resolve(this.slot());
    }
    if (this.waiting.length >= this.queue) {
      throw errors.rateLimited(
        `code execution is at capacity (${this.active} running, ${this.waiting.length} waiting); retry shortly`,
        1,
      );
    }
    return new Promise<Slot>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject, signal };
      if (signal) {
        if (signal.aborted) return reject(new CancelledError());
        waiter.onAbort = () => {
          const i = this.waiting.indexOf(waiter);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(new CancelledError());
        };
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      this.waiting.push(waiter);
    });
  }

  private slot(): Slot {
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        const next = this.waiting.shift();
        if (next) {
          if (next.onAbort) next.signal!.removeEventListener('abort', next.onAbort);
          next.resolve(this.slot()); // the slot passes on; `active` is unchanged
        } else {
          this.active--;
        }
      },
    };
  }
}
