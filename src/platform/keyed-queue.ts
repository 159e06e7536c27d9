/**
 * Runs async tasks one at a time per key, in the order they were given, within this process: a task starts
 * after every earlier task with the same key has settled (whether it succeeded or failed). Tasks of different
 * keys run concurrently. Used for a sandbox's lifecycle changes, an organization's sandbox admissions, a
 * thread's durable writes and the template builds of a node. Across processes the database's locks decide.
 */
export class KeyedQueue {
  private readonly tails = new Map<string, Promise<unknown>>();

  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const next = (this.tails.get(key) ?? Promise.resolve()).then(fn, fn);
    const tail = next.catch(() => undefined);
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return next;
  }

  /** Keys with a task running or waiting. */
  get size(): number {
    return this.tails.size;
  }

  /** Settles once every task given so far has settled. */
  async drain(): Promise<void> {
    while (this.tails.size) await Promise.all([...this.tails.values()]);
  }
}
