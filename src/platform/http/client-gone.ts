import type { FastifyReply } from 'fastify';

/**
 * A signal that aborts when the client closes the connection before its answer is complete, for work that
 * should stop when nobody waits for it. Call `release()` once the work ends. It watches the response: the
 * request stream closes as soon as its body has been read (Node's autoDestroy).
 */
export function clientGone(reply: FastifyReply): { signal: AbortSignal; release(): void } {
  const controller = new AbortController();
  const onClose = () => {
    if (!reply.raw.writableFinished) controller.abort();
  };
  reply.raw.once('close', onClose);
  return { signal: controller.signal, release: () => reply.raw.off('close', onClose) };
}
