import http from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import websocket from '@fastify/websocket';
import type { FastifyRequest } from 'fastify';
import type { Deps } from '../../platform/context.js';
import { ErrorBody, errorResponses } from '../../platform/http/envelope.js';
import { errors } from '../../platform/http/errors.js';
import type { App } from '../../platform/http/server.js';
import { HOP_BY_HOP, signHop, verifyHop } from '../../platform/nodes/index.js';
import { remoteNodeOf } from './nodes.js';
import { SandboxParams, ShellQuery } from './schemas.js';
import { redactedRequestLog, redactUrl } from '../../platform/http/redact.js';
import { authenticateShell } from './shell-auth.js';
import { checkShell, serveShell } from './shell.js';

/** How long the sandbox's node has to answer a forwarded upgrade (then the session has no deadline of its own). */
const CONNECT_TIMEOUT_MS = 5_000;
/** A non-101 answer of the other node (an error envelope) is relayed up to this size. */
const ANSWER_LIMIT = 64 * 1024;

function headBlock(statusLine: string, rawHeaders: string[]): string {
  let out = `${statusLine}\r\n`;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) out += `${rawHeaders[i]}: ${rawHeaders[i + 1]}\r\n`;
  return `${out}\r\n`;
}

/**
 * Sends a WebSocket upgrade for a sandbox on another live node there (ADR 0024, ADR 0046) and splices the two
 * connections once it answers 101; any other answer (401, 404, 409, ...) is relayed as it came. The caller's
 * credentials go along and the hop is signed, as forwardRequest does for plain requests. A node that does not answer
 * within CONNECT_TIMEOUT_MS is a 503 before anything was sent.
 */
function forwardUpgrade(deps: Deps, req: FastifyRequest, node: { id: string; url: string }): Promise<void> {
  const target = new URL(req.url, `${node.url}/`);
  const headers: http.OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(req.headers)) if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
  Object.assign(headers, signHop(deps, req.method, req.url, node.id, req.headers), {
    'x-request-id': req.id,
    connection: 'Upgrade',
    upgrade: 'websocket',
  });
  const client: Duplex = req.raw.socket;
  const transport = target.protocol === 'https:' ? https : http;
  return new Promise<void>((resolve, reject) => {
    let answered = false;
    const upstream = transport.request(target, { method: 'GET', headers, agent: false, timeout: CONNECT_TIMEOUT_MS });
    upstream.on('timeout', () => upstream.destroy(new Error(`no answer within ${CONNECT_TIMEOUT_MS} ms`)));
    upstream.on('error', (err) => {
      if (answered) return client.destroy();
      reject(errors.unavailable(`sandbox's node "${node.id}" (${node.url}) did not answer: ${err.message}; try again, or once it is back`));
    });
    upstream.on('upgrade', (res, remote, head) => {
      answered = true;
      upstream.setTimeout(0);
      remote.setTimeout(0);
      client.write(headBlock(`HTTP/1.1 101 ${res.statusMessage ?? 'Switching Protocols'}`, res.rawHeaders));
      if (head.length > 0) client.write(head);
      remote.pipe(client);
      client.pipe(remote);
      remote.on('error', () => client.destroy());
      client.on('error', () => remote.destroy());
      remote.on('close', () => client.destroy());
      client.on('close', () => remote.destroy());
      resolve();
    });
    upstream.on('response', (res) => {
      answered = true;
      const parts: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size <= ANSWER_LIMIT) parts.push(c);
      });
      res.on('end', () => {
        const body = Buffer.concat(parts).subarray(0, ANSWER_LIMIT);
        const keep: string[] = [];
        for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) {
          const name = res.rawHeaders[i]!.toLowerCase();
          if (name !== 'content-length' && name !== 'transfer-encoding' && name !== 'connection')
            keep.push(res.rawHeaders[i]!, res.rawHeaders[i + 1]!);
        }
        keep.push('Content-Length', String(body.length), 'Connection', 'close');
        client.end(Buffer.concat([Buffer.from(headBlock(`HTTP/1.1 ${res.statusCode ?? 502} ${res.statusMessage ?? ''}`, keep)), body]));
      });
      res.on('error', () => client.destroy());
      resolve();
    });
    upstream.end();
    deps.log.debug({ node: node.id, url: redactUrl(req.url) }, 'shell forwarded to the sandbox’s node');
  });
}

/**
 * The shell's WebSocket route (ADR 0046). In a scope of its own, registered after the threads' routes (which
 * register the WebSocket plugin): a sandbox on another live node gets the upgrade forwarded there. An upgrade
 * authenticates here (`wsAuth: 'query'` lets it past the platform's hook): from its query (browsers) or its headers,
 * with the same checks, each refusal an HTTP answer. Forwarded, the query goes along (inside the signed hop) and the
 * other node authenticates it again. Request logs show the query with its credential redacted.
 */
export async function sandboxShellRoutes(app: App, deps: Deps) {
  if (!app.hasDecorator('websocketServer')) await app.register(websocket, { options: { maxPayload: 64 * 1024 } });
  await app.register(async (scope) => {
    const routes = scope as unknown as App;
    routes.addHook('onRequest', async (req, reply) => {
      // The platform's hook authenticated everything but a real upgrade (`wsAuth: 'query'`): that is done here.
      if (!req.ctx) req.ctx = await authenticateShell(deps, app.authenticate, req);
      if (verifyHop(deps, req)) return; // forwarded here by a peer: served here
      const id = (req.params as { id?: unknown } | undefined)?.id;
      if (!req.ctx || !req.ws || typeof id !== 'string') return;
      const node = await remoteNodeOf(req.ctx, id);
      if (!node) return;
      await forwardUpgrade(deps, req, node);
      reply.hijack();
    });
    routes.route({
      method: 'GET',
      url: '/v1/sandboxes/:id/shell',
      config: { scope: 'sandbox:write', wsAuth: 'query' },
      // The query may hold a credential (api_key, token): request logs show it redacted.
      logSerializers: redactedRequestLog,
      schema: {
        tags: ['sandboxes'],
        summary: 'An interactive terminal (WebSocket)',
        description: [
          'A WebSocket (`Upgrade: websocket`): an interactive bash on a new terminal, as the sandbox user, ',
          'in the template’s working directory; `command` runs that instead (`/bin/bash -c`). Query: `cols`, `rows` (1–1000; default 80×24), `command`, `term` (default xterm-256color). ',
          'Binary frames carry terminal bytes both ways. Text frames from the client: `{"type":"resize","cols":N,"rows":N}`. ',
          'The server ends with a text frame `{"type":"exit","code":N,"signal":null|"SIGHUP",...,"timedOut":false}` (code 128+n after a signal) and closes with 1000; ',
          'a failure is `{"type":"error","code","message"}` and close 1011; 30 min without input or output closes with 4408; the shell is killed after 12 h. ',
          'A closed socket hangs the shell up (SIGHUP, then SIGKILL after 2 s). Errors before the upgrade are HTTP answers: 401, 403 (needs `sandbox:write`), 404, 409 `invalid_state` unless running, 503. ',
          'A plain GET is a 400. ',
          'Credentials: the usual headers, or (browsers, whose WebSocket cannot send headers) in the query: exactly one of `api_key` or `token`, ',
          'and `org_id` for a session token (both, or a query credential beside a header one, is a 400); the same checks either way, and request logs redact them.',
        ].join(''),
        params: SandboxParams,
        querystring: ShellQuery,
        response: { ...errorResponses, 502: ErrorBody, 503: ErrorBody },
      },
      preHandler: async (req) => {
        await checkShell(req.ctx, req.params.id);
      },
      handler: async () => {
        throw errors.invalid('this is a WebSocket: connect with Upgrade: websocket');
      },
      wsHandler: (socket, req) => {
        serveShell(req.ctx, req.params.id, req.query, socket).catch((err) => {
          deps.log.warn({ err }, 'sandbox shell failed');
          socket.close(1011, 'internal error');
        });
      },
    });
  });
}
