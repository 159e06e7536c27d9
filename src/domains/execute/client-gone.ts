import type { FastifyReply } from 'fastify';
import { clientGone } from '../../platform/http/client-gone.js';
import { CancelledError } from './pool.js';

/**
 * Runs an execution for a request, cancelled when the client disconnects (the sandbox is killed). Then nobody is
 * left to answer: the connection is dropped and `undefined` returned; the activity log has the cancellation.
 */
export async function executeWhileConnected<T>(reply: FastifyReply, work: (signal: AbortSignal) => Promise<T>): Promise<T | undefined> {
  const gone = clientGone(reply);
  try {
    return await work(gone.signal);
  } catch (err) {
    if (err instanceof CancelledError) {
      reply.hijack();
      reply.raw.destroy();
      return undefined;
    }
    throw err;
  } finally {
    gone.release();
  }
}
