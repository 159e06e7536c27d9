import type { Deps } from '../../platform/context.js';
import { threadChannel, type BusFrame, type ThreadEvent } from './frames.js';
import { eventsAfter } from './service.js';

/** One socket's side of the hub: the hub hands it serialized frames; it decides what to do under pressure. */
export interface Subscriber {
  /** Owner view gets every frame; metadata view gets thread_* frames only. */
  readonly view: 'owner' | 'metadata';
  deliver(frame: OutgoingFrame): void;
  /** The thread is gone (deleted): close. */
  end(code: number, reason: string): void;
}

export interface OutgoingFrame {
  kind: BusFrame['kind'];
  /** Durable frames only. */
  sequence?: number;
  /** The frame as sent, JSON-encoded once for every subscriber. */
  json: string;
}

interface Topic {
  subscribers: Set<Subscriber>;
  unsubscribe: Promise<() => Promise<void>>;
  /** Highest durable sequence delivered to this topic's subscribers, in order. */
  delivered: number;
  ready: Promise<void>;
  queue: Promise<void>;
}

const GAP_FILL_LIMIT = 1000;

/**
 * Per process, one bus subscription per watched thread, fanned out to its local sockets. Durable frames
 * leave here strictly in sequence order and never twice: a frame that arrives ahead of a missing one (two
 * replicas' writers publish in commit order, but their publishes can cross) makes the hub read the missing
 * ones from the projection first; a repeat is dropped.
 */
export class ThreadHub {
  private readonly topics = new Map<string, Topic>();

  constructor(private readonly deps: Deps) {}

  /** Joins a thread; resolves with the highest sequence the subscriber will get from the hub's stream onwards minus one. */
  async join(threadId: string, sub: Subscriber, currentSequence: () => Promise<number>): Promise<number> {
    let topic = this.topics.get(threadId);
    if (!topic) {
      const t: Topic = {
        subscribers: new Set(),
        delivered: 0,
        unsubscribe: this.deps.bus.subscribe(threadChannel(threadId), (m) => {
          t.queue = t.queue.then(() => this.receive(threadId, t, m as BusFrame)).catch((err) => this.deps.log.warn({ err, threadId }, 'thread fan-out failed'));
        }),
        ready: Promise.resolve(),
        queue: Promise.resolve(),
      };
      // Subscribed first, then the current sequence: a frame committed in between arrives on the bus.
      t.ready = t.unsubscribe.then(async () => {
        t.delivered = await currentSequence();
      });
      t.queue = t.ready;
      topic = t;
      this.topics.set(threadId, t);
    }
    topic.subscribers.add(sub);
    await topic.ready;
    // Wait for frames already queued so the returned mark is exact.
    await topic.queue;
    return topic.delivered;
  }

  leave(threadId: string, sub: Subscriber): void {
    const topic = this.topics.get(threadId);
    if (!topic) return;
    topic.subscribers.delete(sub);
    if (topic.subscribers.size === 0) {
      this.topics.delete(threadId);
      void topic.unsubscribe.then((off) => off()).catch(() => undefined);
    }
  }

  get watched(): number {
    return this.topics.size;
  }

  async close(): Promise<void> {
    for (const [id, topic] of this.topics) {
      for (const sub of topic.subscribers) sub.end(1001, 'server shutting down; reconnect with last_sequence');
      this.topics.delete(id);
      await topic.unsubscribe.then((off) => off()).catch(() => undefined);
    }
  }

  private async receive(threadId: string, topic: Topic, m: BusFrame): Promise<void> {
    if (m.kind === 'durable') {
      const seq = m.event.sequence;
      if (seq <= topic.delivered) return; // a repeat, or already filled from the projection
      if (seq > topic.delivered + 1) {
        const missing = await eventsAfter(this.deps, threadId, topic.delivered, seq - 1, GAP_FILL_LIMIT);
        for (const e of missing) this.fanDurable(topic, e);
      }
      if (seq === topic.delivered + 1) this.fanDurable(topic, m.event);
      return;
    }
    const json = JSON.stringify(m.frame);
    for (const sub of topic.subscribers) {
      if (m.kind === 'meta' || sub.view === 'owner') sub.deliver({ kind: m.kind, json });
    }
    if (m.kind === 'meta' && m.frame.type === 'thread_deleted') {
      for (const sub of topic.subscribers) sub.end(4410, 'thread deleted');
    }
  }

  private fanDurable(topic: Topic, e: ThreadEvent): void {
    topic.delivered = e.sequence;
    const json = JSON.stringify(e);
    for (const sub of topic.subscribers) if (sub.view === 'owner') sub.deliver({ kind: 'durable', sequence: e.sequence, json });
  }
}
