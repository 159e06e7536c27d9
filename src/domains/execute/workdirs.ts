/**
 * Work directories off the request path: a few fresh ones are kept ready (making one mounts a tmpfs and
 * claims a sandbox uid, several milliseconds), and used ones are deleted after the answer is sent.
 */
import type { Logger } from 'pino';
import type { Isolation, WorkDir } from '../../platform/isolation/types.js';

export class WorkDirs {
  private readonly spares: WorkDir[] = [];
  private readonly pending = new Set<Promise<unknown>>();
  private filling = 0;
  private closed = false;

  constructor(
    private readonly isolation: Isolation,
    /** How many fresh directories to keep ready. */
    private readonly size: number,
    private readonly log: Logger,
  ) {}

  /**
   * A fresh, empty work directory: a ready one when there is one, else a new one. The pool is refilled when a
   * directory is discarded, after its run, so that making the next one does not queue ahead of this run's start.
   */
  async take(): Promise<WorkDir> {
    const ready = this.spares.pop();
    if (ready) return ready;
    this.refill();
    return this.isolation.createWorkDir();
  }

  /** Deletes a used directory in the background (close() waits for it) and makes a fresh one. */
  discard(work: WorkDir): void {
    this.track(work.dispose().catch((err: Error) => this.log.error({ err, dir: work.path }, 'could not delete a code execution work directory')));
    this.refill();
  }

  private refill(): void {
    while (!this.closed && this.spares.length + this.filling < this.size) {
      this.filling++;
      this.track(
        this.isolation
          .createWorkDir()
          .then(
            (work) => {
              if (this.closed) return work.dispose();
              this.spares.push(work);
            },
            (err: Error) => this.log.warn({ err }, 'could not prepare a code execution work directory'),
          )
          .finally(() => this.filling--),
      );
    }
  }

  private track(p: Promise<unknown>): void {
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  }

  /** Deletes the ready directories and waits for every deletion and preparation under way. */
  async close(): Promise<void> {
    this.closed = true;
    for (const work of this.spares.splice(0)) this.discard(work);
    while (this.pending.size > 0) await Promise.allSettled([...this.pending]);
  }
}
