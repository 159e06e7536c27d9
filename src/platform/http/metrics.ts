/**
 * `GET /metrics` (ADR 0040): on the API port behind `HANGAR_METRICS_TOKEN`, and/or on a listener of its own
 * (`HANGAR_METRICS_PORT`, on `HANGAR_METRICS_HOST`, 127.0.0.1 by default). Off when neither is set: nothing is
 * measured per request then.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Deps } from '../context.js';
import { safeEqual } from '../crypto/index.js';
import { AppError } from './errors.js';

const started = new WeakMap<FastifyRequest, bigint>();

/** Request counts and latencies by method, route pattern and status (before any other hook, so errors count too). */
export function instrumentHttp(app: FastifyInstance, deps: Deps): void {
  if (!deps.metrics.enabled) return;
  const labels = ['method', 'route', 'status'] as const;
  const requests = deps.metrics.counter('hangar_http_requests_total', 'HTTP requests answered, by method, route pattern and status', labels);
  const duration = deps.metrics.histogram(
    'hangar_http_request_duration_seconds',
    'Time to answer an HTTP request, by method, route pattern and status',
    labels,
  );
  app.addHook('onRequest', async (req) => {
    started.set(req, process.hrtime.bigint());
  });
  app.addHook('onResponse', async (req, reply) => {
    const t0 = started.get(req);
    // The pattern, never the URL: ids in paths would make a series per resource.
    const l = { method: req.method, route: req.routeOptions.url ?? 'unmatched', status: String(reply.statusCode) };
    requests.inc(l);
    if (t0 !== undefined) duration.observe(l, Number(process.hrtime.bigint() - t0) / 1e9);
  });
}

/** `GET /metrics` on the API port: with the token as a bearer credential, else 401; 404 when no token is set. */
export function metricsRoute(app: FastifyInstance, deps: Deps): void {
  app.get('/metrics', { config: { auth: 'none' }, schema: { hide: true } }, async (req, reply) => {
    const { token } = deps.config.metrics;
    if (token === null) {
      throw new AppError(
        'not_found',
        'metrics are not served on this port: set HANGAR_METRICS_TOKEN to serve them here to that bearer token, or HANGAR_METRICS_PORT for a listener of their own',
      );
    }
    const given = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')?.[1]?.trim() ?? '';
    if (!given || !safeEqual(given, token)) throw new AppError('unauthenticated', 'GET /metrics needs Authorization: Bearer <HANGAR_METRICS_TOKEN>');
    const { contentType, body } = await deps.metrics.scrape();
    return reply.header('content-type', contentType).header('cache-control', 'no-store').send(body);
  });
}

/** The metrics listener of its own, when `HANGAR_METRICS_PORT` is set; resolves with its address. */
export async function startMetricsListener(deps: Deps): Promise<{ address: AddressInfo; close(): Promise<void> } | null> {
  const { port, host } = deps.config.metrics;
  if (port === null) return null;
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' || path !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('only GET /metrics is served here\n');
      return;
    }
    deps.metrics.scrape().then(
      ({ contentType, body }) => res.writeHead(200, { 'content-type': contentType, 'cache-control': 'no-store' }).end(body),
      (err: Error) => {
        deps.log.error({ err }, 'metrics scrape failed');
        res.writeHead(500, { 'content-type': 'text/plain' }).end('scrape failed\n');
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  deps.log.info(
    { port: address.port, host: address.address },
    `metrics at http://${host.includes(':') ? `[${host}]` : host}:${address.port}/metrics`,
  );
  return {
    address,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
