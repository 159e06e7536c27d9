/**
 * Baseline: a bare Fastify server whose one route answers with a fixed body (captured from Hangar by the
 * parent) and content type. What a request costs with no product code at all.
 */
import Fastify from 'fastify';
import { serveChild } from '../lib/child.js';

interface BareOptions {
  path: string;
  body: Uint8Array;
  contentType: string;
}

const app = Fastify({ logger: false });

serveChild(
  async (options: BareOptions) => {
    const body = Buffer.from(options.body);
    app.get(options.path, (_req, reply) => {
      reply.header('content-type', options.contentType).send(body);
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const address = app.server.address();
    return { port: typeof address === 'object' && address ? address.port : 0 };
  },
  async () => {
    await app.close();
  },
);
