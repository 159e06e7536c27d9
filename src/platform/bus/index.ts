import { EventEmitter } from 'node:events';
import { Redis } from 'ioredis';
import type { z } from 'zod';

export type BusHandler = (message: unknown) => void;

/** Fan-out of live messages: in-process for one replica, Redis pub/sub across replicas. */
export interface Bus {
  publish(channel: string, message: unknown): Promise<void>;
  /** Resolves once the subscription is active; the returned function unsubscribes. */
  subscribe(channel: string, handler: BusHandler): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

export class MemoryBus implements Bus {
  private readonly emitter = new EventEmitter().setMaxListeners(0);

  async publish(channel: string, message: unknown): Promise<void> {
    // Deliver a copy, as Redis would, so subscribers never share mutable state with the publisher; with no
    // subscriber (a thread nobody watches) there is nothing to copy.
    if (this.emitter.listenerCount(channel) === 0) return;
    this.emitter.emit(channel, JSON.parse(JSON.stringify(message)));
  }

  async subscribe(channel: string, handler: BusHandler) {
    this.emitter.on(channel, handler);
    return async () => {
      this.emitter.off(channel, handler);
    };
  }

  async close(): Promise<void> {
    this.emitter.removeAllListeners();
  }
}

export class RedisBus implements Bus {
  private readonly pub: Redis;
  private readonly sub: Redis;
  private readonly handlers = new Map<string, Set<BusHandler>>();
  /** The SUBSCRIBE of each channel: a second subscriber waits for it too, so neither misses what follows. */
  private readonly subscribed = new Map<string, Promise<unknown>>();

  constructor(
    url: string,
    private readonly prefix = 'hangar:',
  ) {
    this.pub = new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 3 });
    this.sub = new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 3 });
    this.sub.on('message', (channel: string, raw: string) => {
      const set = this.handlers.get(channel.slice(this.prefix.length));
      if (!set) return;
      const message = parseJson(raw);
      for (const h of set) h(message);
    });
  }

  async publish(channel: string, message: unknown): Promise<void> {
    await this.pub.publish(this.prefix + channel, JSON.stringify(message));
  }

  async subscribe(channel: string, handler: BusHandler) {
    let set = this.handlers.get(channel);
    if (!set) {
      set = new Set();
      this.handlers.set(channel, set);
      this.subscribed.set(channel, this.sub.subscribe(this.prefix + channel));
    }
    set.add(handler);
    await this.subscribed.get(channel);
    return async () => {
      const current = this.handlers.get(channel);
      if (!current) return;
      current.delete(handler);
      if (current.size === 0) {
        this.handlers.delete(channel);
        this.subscribed.delete(channel);
        await this.sub.unsubscribe(this.prefix + channel);
      }
    };
  }

  async close(): Promise<void> {
    this.handlers.clear();
    await Promise.allSettled([this.pub.quit(), this.sub.quit()]);
  }
}

/** Not JSON (another program on the channel): handed over as the text, for the subscriber's schema to refuse. */
function parseJson(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

export function createBus(redisUrl: string | undefined, prefix?: string): Bus {
  return redisUrl ? new RedisBus(redisUrl, prefix) : new MemoryBus();
}

/**
 * Subscribes with a schema: the handler gets only messages the schema accepts, parsed; any other (another
 * replica's older format, another program's message) goes to `onInvalid` and no further. What arrives on a
 * channel is input like any other: a replica cannot trust another replica's code version.
 */
export function subscribeParsed<S extends z.ZodType>(
  bus: Bus,
  channel: string,
  schema: S,
  handler: (message: z.output<S>) => void,
  onInvalid: (error: z.ZodError, message: unknown) => void,
): Promise<() => Promise<void>> {
  return bus.subscribe(channel, (message) => {
    const parsed = schema.safeParse(message);
    if (parsed.success) handler(parsed.data);
    else onInvalid(parsed.error, message);
  });
}
