import type { ServerResponse } from 'node:http';
import type { FastifyReply } from 'fastify';

/**
 * Takes over the response and writes `lines` as NDJSON (one JSON object per line) until they end or the client
 * is gone (`gone`). Errors found before this call stay ordinary JSON errors.
 */
export function sendNdjson(reply: FastifyReply, lines: AsyncIterable<unknown>, gone: AbortSignal): Promise<void> {
  return sendNdjsonText(reply, asText(lines), gone);
}

async function* asText(lines: AsyncIterable<unknown>): AsyncIterable<string> {
  for await (const line of lines) yield `${JSON.stringify(line)}\n`;
}

/**
 * Takes over the response and writes NDJSON text as it comes, one socket write per piece (a piece may hold several
 * whole lines, e.g. every line made from one network chunk of a provider's answer), until it ends or the client is
 * gone (`gone`). A client that reads slowly is waited for rather than buffered for.
 */
export function sendNdjsonText(reply: FastifyReply, text: AsyncIterable<string>, gone: AbortSignal): Promise<void> {
  return sendStreamText(reply, text, gone, 'application/x-ndjson; charset=utf-8');
}

/** As `sendNdjsonText`, for any streamed text format (e.g. server-sent events, `text/event-stream`). */
export async function sendStreamText(reply: FastifyReply, text: AsyncIterable<string>, gone: AbortSignal, contentType: string): Promise<void> {
  reply.hijack();
  const raw = reply.raw;
  raw.writeHead(200, {
    ...(reply.getHeaders() as Record<string, string>),
    'content-type': contentType,
    'cache-control': 'no-cache',
    'x-accel-buffering': 'no',
  });
  try {
    for await (const piece of text) {
      if (gone.aborted) break;
      if (!raw.write(piece) && !raw.destroyed) await drained(raw);
    }
  } finally {
    if (!raw.writableEnded) raw.end();
  }
}

function drained(raw: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      raw.off('drain', done);
      raw.off('close', done);
      resolve();
    };
    raw.on('drain', done);
    raw.on('close', done);
  });
}
