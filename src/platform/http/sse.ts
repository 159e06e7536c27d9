import type { FastifyReply, FastifyRequest } from 'fastify';

/** Whether the client asked for a Server-Sent Events stream (`Accept: text/event-stream`). */
export const wantsEventStream = (req: FastifyRequest): boolean => /\btext\/event-stream\b/.test(req.headers.accept ?? '');

export interface EventStream {
  /** Sends one event; `data` is JSON-encoded. Returns false once the client is gone. */
  send(event: string, data: unknown, id?: string | number): boolean;
  end(): void;
  /** Aborted when the client disconnects, so producers stop. */
  readonly signal: AbortSignal;
}

/**
 * Takes over the response for a Server-Sent Events stream: headers already set on the reply (request id,
 * API version) are kept, a comment line every 15 s keeps proxies from closing an idle stream, and the
 * returned signal aborts when the client goes away.
 */
export function openEventStream(reply: FastifyReply, heartbeatMs = 15_000): EventStream {
  const controller = new AbortController();
  reply.hijack();
  const raw = reply.raw;
  raw.writeHead(200, {
    ...(reply.getHeaders() as Record<string, string>),
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache, no-transform',
    connection: 'keep-alive',
    'x-accel-buffering': 'no',
  });
  raw.flushHeaders();
  const heartbeat = setInterval(() => raw.write(': keep-alive\n\n'), heartbeatMs).unref();
  const done = () => {
    clearInterval(heartbeat);
    controller.abort();
  };
  raw.once('close', done);
  return {
    signal: controller.signal,
    send(event, data, id) {
      if (controller.signal.aborted || raw.writableEnded) return false;
      raw.write(`${id !== undefined ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
      return true;
    },
    end() {
      clearInterval(heartbeat);
      if (!raw.writableEnded) raw.end();
    },
  };
}
