import type { FastifyReply } from 'fastify';

/**
 * Takes over the response and writes `lines` as NDJSON (one JSON object per line) until they end or the client
 * is gone (`gone`). Errors found before this call stay ordinary JSON errors.
 */
export async function sendNdjson(reply: FastifyReply, lines: AsyncIterable<unknown>, gone: AbortSignal): Promise<void> {
  reply.hijack();
  const raw = reply.raw;
  raw.writeHead(200, {
    ...(reply.getHeaders() as Record<string, string>),
    'content-type': 'application/x-ndjson; charset=utf-8',
    'cache-control': 'no-cache',
    'x-accel-buffering': 'no',
  });
  try {
    for await (const line of lines) {
      if (gone.aborted) break;
      raw.write(`${JSON.stringify(line)}\n`);
    }
  } finally {
    if (!raw.writableEnded) raw.end();
  }
}
