import { subscribeParsed } from '../../platform/bus/index.js';
import type { Deps } from '../../platform/context.js';
import { BusFrame, frameKind, isDurable, threadChannel, type FrameKind, type LiveFrame, type ThreadEvent } from './frames.js';
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
  kind: FrameKind;
  /** Durable frames only. */
  sequence?: number;
  /** The frame as sent, JSON-encoded once for every subscriber. */
  json: string;
}

/** The one way a frame is written to a socket: a catalogue frame, or a durable event read back from the projection. */
export function outgoing(frame: LiveFrame | ThreadEvent): OutgoingFrame {
  const json = JSON.stringify(frame);
  if (isDurable(frame)) return { kind: 'durable', sequence: frame.sequence, json };
  return { kind: frameKind(frame.type), json };
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
        unsubscribe: subscribeParsed(
          this.deps.bus,
          threadChannel(threadId),
          BusFrame,
          (m) => {
            t.queue = t.queue.then(() => this.receive(threadId, t, m)).catch((err) => this.deps.log.warn({ err, threadId }, 'thread fan-out failed'));
          },
          // Another replica's older (or newer) frame, or anything else on the channel: dropped, never fanned out. A
          // durable frame dropped here is not lost: the next one's gap is filled from the projection.
          (error, message) =>
            this.deps.log.warn(
              {
                threadId,
                issues: error.issues.slice(0, 5),
                type: typeof message === 'object' && message && 'type' in message ? String(message.type) : undefined,
              },
              'dropped a malformed thread frame from the bus',
            ),
        ),
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

  /** Open WebSocket subscriptions in this process, across threads. */
  get subscribers(): number {
    let n = 0;
    for (const topic of this.topics.values()) n += topic.subscribers.size;
    return n;
  }

  async close(): Promise<void> {
    for (const [id, topic] of this.topics) {
      for (const sub of topic.subscribers) sub.end(1001, 'server shutting down; reconnect with last_sequence');
      this.topics.delete(id);
      await topic.unsubscribe.then((off) => off()).catch(() => undefined);
    }
  }

  private async receive(threadId: string, topic: Topic, m: BusFrame): Promise<void> {
    if (isDurable(m)) {
      const seq = m.sequence;
      if (seq <= topic.delivered) return; // a repeat, or already filled from the projection
      if (seq > topic.delivered + 1) {
        const missing = await eventsAfter(this.deps, threadId, topic.delivered, seq - 1, GAP_FILL_LIMIT);
        for (const e of missing) this.fanDurable(topic, e);
      }
      if (seq === topic.delivered + 1) this.fanDurable(topic, m);
      return;
    }
    const frame = outgoing(m);
    for (const sub of topic.subscribers) {
      if (frame.kind === 'meta' || sub.view === 'owner') sub.deliver(frame);
    }
    if (m.type === 'thread_deleted') {
      for (const sub of topic.subscribers) sub.end(4410, 'thread deleted');
    }
  }

  private fanDurable(topic: Topic, e: ThreadEvent): void {
    topic.delivered = e.sequence;
    const frame = outgoing(e);
    for (const sub of topic.subscribers) if (sub.view === 'owner') sub.deliver(frame);
  }
}
