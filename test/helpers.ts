import { setTimeout as delay } from 'node:timers/promises';
import { expect } from 'vitest';

/** The test helpers every suite shares: waiting, Server-Sent Events, error envelopes. */

export const sleep = (ms: number): Promise<void> => delay(ms);

export interface UntilOptions {
  /** How long to wait before failing; default 10 s. */
  timeoutMs?: number;
  /** How often to ask; default 25 ms. */
  intervalMs?: number;
  /** Added to the failure message: what the state was when time ran out. */
  detail?: () => unknown;
}

/**
 * Polls `fn` until it answers something truthy and returns that; fails naming `what` when time runs out.
 * A number for `opts` is the timeout in ms.
 */
type Falsy = null | undefined | false | 0 | '';

export async function until<T>(what: string, fn: () => T | Falsy | Promise<T | Falsy>, opts: number | UntilOptions = {}): Promise<T> {
  const { timeoutMs = 10_000, intervalMs = 25, detail } = typeof opts === 'number' ? { timeoutMs: opts } : opts;
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v as T;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}${detail ? ` ${JSON.stringify(detail())}` : ''}`);
    await sleep(intervalMs);
  }
}

export interface SseEvent {
  event: string;
  /** The event's `id:` field, where the stream sends one. */
  id?: string;
  data: any;
}

/** One event block (the text between blank lines); null for a keep-alive comment or a block without data. */
function parseSseBlock(block: string): SseEvent | null {
  const ev: SseEvent = { event: 'message', data: undefined };
  const data: string[] = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') ev.event = value;
    else if (field === 'id') ev.id = value;
    else if (field === 'data') data.push(value);
  }
  if (!data.length) return null;
  ev.data = JSON.parse(data.join('\n'));
  return ev;
}

/** Parses a complete Server-Sent Events body into its events (data parsed as JSON). */
export function parseSse(text: string): SseEvent[] {
  return text
    .split('\n\n')
    .map(parseSseBlock)
    .filter((e): e is SseEvent => e !== null);
}

/** Reads Server-Sent Events from a fetch response until the stream ends or `stop` says so. */
export async function readSse(res: Response, stop?: (ev: SseEvent) => boolean): Promise<SseEvent[]> {
  const events: SseEvent[] = [];
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    for (let cut = buf.indexOf('\n\n'); cut >= 0; cut = buf.indexOf('\n\n')) {
      const ev = parseSseBlock(buf.slice(0, cut));
      buf = buf.slice(cut + 2);
      if (!ev) continue;
      events.push(ev);
      if (stop?.(ev)) {
        await reader.cancel().catch(() => undefined);
        return events;
      }
    }
  }
  return events;
}

/**
 * Asserts an error answer: the status, a JSON body `{ error }` with this code and a request id. Returns the
 * error for further checks.
 */
export function expectError<
  E = { code: string; message: string; requestId: string; issues?: { path: string; message: string }[]; state?: string; activeRunId?: string },
>(res: { statusCode: number; body: string; headers?: Record<string, unknown> }, status: number, code: string): E {
  expect(res.statusCode, res.body).toBe(status);
  if (res.headers) expect(String(res.headers['content-type'])).toContain('application/json');
  let body: any;
  try {
    body = JSON.parse(res.body);
  } catch {
    throw new Error(`response is not JSON: ${res.body.slice(0, 500)}`);
  }
  const err = body.error;
  expect(err.code).toBe(code);
  expect(err.requestId).toBeTruthy();
  return err as E;
}

/** Calls `fn`, which must throw (synchronously) an instance of `type` (default Error); returns what it threw. */
export function rejection<E extends Error = Error>(fn: () => unknown, type?: abstract new (...args: any[]) => E): E {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(type ?? Error);
    return err as E;
  }
  throw new Error(`expected ${type?.name ?? 'an error'} to be thrown`);
}
