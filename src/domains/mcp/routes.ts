import { readFileSync } from 'node:fs';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { ErrorBody, errorResponses } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import { forwardingHooks, type NodeTarget } from '../../platform/nodes/index.js';
import { sharedExecutor } from '../execute/index.js';
import { sandboxRemoteNode } from '../sandboxes/index.js';
import { buildMcpServer } from './server.js';

const tags = ['mcp'];
const VERSION = (JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** One JSON-RPC 2.0 message (request, notification or response); the SDK's transport checks the rest of its shape. */
const JsonRpcMessage = z.looseObject({ jsonrpc: z.literal('2.0') });
export const McpBody = z.union([JsonRpcMessage, z.array(JsonRpcMessage).min(1).max(100)]);

/**
 * The node holding the sandbox a single `tools/call` acts on (its `sandbox_id` argument), when that is another live
 * node: sandbox tools reach the sandbox's agent, which only its node does (ADR 0024), so the request is forwarded there.
 */
async function sandboxNodeOf(req: FastifyRequest): Promise<NodeTarget | null> {
  const body = req.body as { method?: unknown; params?: { name?: unknown; arguments?: { sandbox_id?: unknown } } };
  if (Array.isArray(body) || body.method !== 'tools/call') return null;
  const id = body.params?.arguments?.sandbox_id;
  if (typeof body.params?.name !== 'string' || !body.params.name.startsWith('sandbox_') || typeof id !== 'string') return null;
  return sandboxRemoteNode(req.ctx, id);
}

/**
 * POST /v1/mcp: Hangar as a Model Context Protocol server over streamable HTTP (ADR 0044), stateless: each request
 * gets a fresh server and transport bound to its caller, so any replica answers any request. GET (a standalone SSE
 * stream) and DELETE (ending a session) have no meaning without sessions: they are 405s, as the protocol allows.
 */
export async function mcpRoutes(app: App, deps: Deps) {
  const executor = await sharedExecutor(deps);
  await app.register(async (scope) => {
    const routes = scope as unknown as App; // a child of `app`: the same server, logger and type provider
    forwardingHooks(routes, deps, { afterValidation: sandboxNodeOf });
    routes.post(
      '/v1/mcp',
      {
        schema: {
          tags,
          summary: 'Model Context Protocol endpoint (streamable HTTP)',
          description: [
            'A JSON-RPC 2.0 message (or a batch) of the Model Context Protocol, answered as JSON (stateless: no `Mcp-Session-Id`; GET and DELETE are 405). ',
            'Tools: execute_code, sandbox_create, sandbox_list, sandbox_run_command, sandbox_read_file, sandbox_write_file, sandbox_list_files, sandbox_destroy, ',
            'run_agent, list_threads, read_thread. Each acts as the calling credential and needs the scope of its REST route; a tool the credential may not use ',
            'answers a result with `isError: true` and the API’s error code and message. Clients must accept `application/json` and `text/event-stream` (406 otherwise); ',
            'a message that is not JSON-RPC is a 400.',
          ].join(''),
          body: McpBody,
          response: {
            200: z.unknown().describe('The JSON-RPC response(s)'),
            202: z.null().describe('Accepted: the body held only notifications or responses'),
            ...errorResponses,
            406: ErrorBody,
          },
        },
      },
      async (req, reply) => {
        const server = buildMcpServer(req.ctx, executor, VERSION);
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
        // The SDK writes the answer on the raw response; a client that goes away aborts the tool calls in flight.
        reply.hijack();
        reply.raw.on('close', () => {
          transport.close().catch(() => undefined);
          server.close().catch(() => undefined);
        });
        try {
          await server.connect(transport);
          await transport.handleRequest(req.raw, reply.raw, req.body);
        } catch (err) {
          req.log.error({ err }, 'the MCP transport failed');
          if (!reply.raw.headersSent) {
            reply.raw.writeHead(500, { 'content-type': 'application/json' });
            reply.raw.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32603, message: 'internal error' }, id: null }));
          } else reply.raw.destroy();
        }
      },
    );
  });
}
