import http, { type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http';
import https from 'node:https';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Deps } from '../context.js';
import { errors } from '../http/errors.js';
import { stateKey } from '../state.js';
import { HOP_HEADERS, signHop } from './signing.js';

/** How long the other node has to accept the connection; what follows (a long command, an SSE stream) has no deadline. */
const CONNECT_TIMEOUT_MS = 5_000;

/** Per-connection headers (RFC 9110 §7.6.1) and our own hop headers are not passed along (a forwarded upgrade sets its own). */
export const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'host',
  ...Object.values(HOP_HEADERS),
]);

/** Connections to the other nodes are kept alive between forwarded requests (idle ones do not hold the process). */
const AGENTS = stateKey('node-agents', () => ({ http: new http.Agent({ keepAlive: true }), https: new https.Agent({ keepAlive: true }) }));

function agentFor(deps: Deps, protocol: string): http.Agent {
  const agents = deps.state.get(AGENTS);
  return protocol === 'https:' ? agents.https : agents.http;
}

function passable(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) if (value !== undefined && !HOP_BY_HOP.has(name)) out[name] = value;
  return out;
}

/**
 * Sends the request to the node `node` (ADR 0024) and relays its answer: status, headers and body, streamed both
 * ways and unbuffered (uploads, downloads, SSE). The caller's credentials go along and the hop is signed. Resolves
 * once the other node's answer starts (the reply is then hijacked and piped); a node that cannot be reached is a
 * 503 before anything was sent. A client that goes away closes the forwarded request, so the other node sees it go.
 * `body` replaces the request's own (already parsed) body; otherwise the unread request stream is piped.
 */
export function forwardRequest(
  deps: Deps,
  req: FastifyRequest,
  reply: FastifyReply,
  node: { id: string; url: string },
  body?: Buffer,
): Promise<void> {
  const target = new URL(req.url, `${node.url}/`);
  const headers = passable(req.headers);
  if (body) {
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(body.length);
  }
  Object.assign(headers, signHop(deps, req.method, req.url, node.id, req.headers), { 'x-request-id': req.id });
  const client = target.protocol === 'https:' ? https : http;
  return new Promise<void>((resolve, reject) => {
    let answered = false;
    const unreachable = (why: string) =>
      errors.unavailable(`sandbox's node "${node.id}" (${node.url}) did not answer: ${why}; try again, or once it is back`);
    const upstream = client.request(target, { method: req.method, headers, agent: agentFor(deps, target.protocol) });
    const connectTimer = setTimeout(() => upstream.destroy(new Error(`no connection within ${CONNECT_TIMEOUT_MS} ms`)), CONNECT_TIMEOUT_MS);
    upstream.setNoDelay(true); // headers and body go as they come: no Nagle wait on a request written in pieces
    upstream.once('socket', (socket) => {
      if (!socket.connecting)
        clearTimeout(connectTimer); // a kept-alive connection
      else socket.once('connect', () => clearTimeout(connectTimer));
    });
    upstream.on('error', (err) => {
      clearTimeout(connectTimer);
      if (!answered) reject(unreachable(err.message));
      else reply.raw.destroy(err);
    });
    upstream.on('response', (res) => {
      answered = true;
      clearTimeout(connectTimer);
      reply.hijack();
      const out = passable(res.headers);
      reply.raw.writeHead(res.statusCode ?? 502, out);
      reply.raw.flushHeaders();
      res.pipe(reply.raw);
      res.on('error', (err) => reply.raw.destroy(err));
      resolve();
    });
    // The client went away (its socket closed before the answer was complete): so does the forwarded request.
    reply.raw.once('close', () => {
      if (!reply.raw.writableFinished) upstream.destroy();
    });
    if (body) upstream.end(body);
    else req.raw.pipe(upstream);
    deps.log.debug({ node: node.id, url: req.url }, 'forwarded to the sandbox’s node');
  });
}
