/**
 * `hangar mcp`: Hangar's MCP tools for a local MCP host (`{ "command": "hangar", "args": ["mcp"] }`), on stdin and
 * stdout. It is a bridge (ADR 0044): each JSON-RPC message from the host goes to the server's streamable HTTP
 * endpoint (`/v1/mcp`) with the credential `hangar login` saved (or HANGAR_API_KEY), and each answer comes back, so
 * the tools are defined once, on the server, and act with that credential's scopes. Standard output carries protocol
 * frames only; diagnostics go to standard error.
 */
import { parseArgs } from 'node:util';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { isJSONRPCRequest, isJSONRPCResultResponse, type JSONRPCMessage, type RequestId } from '@modelcontextprotocol/sdk/types.js';
import { ClientCliError, credentials, normalizeUrl } from './cli.js';

export const MCP_USAGE = `usage: hangar mcp [--base-url URL]
Serves Hangar's MCP tools on stdin/stdout for an MCP host, e.g. { "command": "hangar", "args": ["mcp"] }.
Uses the credential \`hangar login\` saved (HANGAR_API_KEY and HANGAR_BASE_URL, when set, instead).`;

/** JSON-RPC's "server error" range: the bridge could not get an answer from Hangar. */
const BRIDGE_ERROR = -32000;

/** Why a message could not be delivered, in words for the host's log and the model. */
function describeFailure(err: unknown, baseUrl: string): string {
  if (err instanceof StreamableHTTPError) {
    // The server's error envelope, when it sent one (401 bad credential, 403, 413...).
    const body = /\{.*\}$/s.exec(err.message)?.[0];
    try {
      const e = (JSON.parse(body ?? '') as { error?: { code?: string; message?: string } }).error;
      if (e?.code) return `Hangar at ${baseUrl} answered ${err.code} ${e.code}: ${e.message ?? ''}`;
    } catch {
      // not the envelope
    }
    return `Hangar at ${baseUrl} answered ${err.code ?? 'an error'}: ${err.message}`;
  }
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return `Hangar at ${baseUrl} could not be reached: ${cause?.code ?? cause?.message ?? (err as Error).message}`;
}

/**
 * Runs the bridge until the host closes standard input. `stdin`/`stdout` are the process's unless given (tests).
 * Exits 0 when the host closes it; a missing login is a usage error (2) before anything is read.
 */
export async function runMcpBridge(
  argv: string[],
  env: NodeJS.ProcessEnv,
  err: (text: string) => void,
  io: { stdin?: NodeJS.ReadableStream; stdout?: NodeJS.WritableStream } = {},
): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { 'base-url': { type: 'string' }, help: { type: 'boolean', short: 'h', default: false } },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    err(MCP_USAGE);
    return 0;
  }
  if (positionals.length) throw new ClientCliError(MCP_USAGE);
  const c = await credentials(env);
  const baseUrl = values['base-url'] ? normalizeUrl(values['base-url']) : c.baseUrl;

  const remote = new StreamableHTTPClientTransport(new URL('/v1/mcp', `${baseUrl}/`), {
    requestInit: { headers: { authorization: `Bearer ${c.credential}` } },
  });
  const local = new StdioServerTransport(
    io.stdin as ConstructorParameters<typeof StdioServerTransport>[0],
    io.stdout as ConstructorParameters<typeof StdioServerTransport>[1],
  );
  // The host's initialize requests, to learn the protocol version the server settles on (sent on every later request).
  const initializing = new Set<RequestId>();

  const answerError = async (msg: JSONRPCMessage, message: string) => {
    if (!isJSONRPCRequest(msg)) return; // a notification or a response has nobody waiting for an answer
    await local.send({ jsonrpc: '2.0', id: msg.id, error: { code: BRIDGE_ERROR, message } }).catch(() => undefined);
  };

  remote.onmessage = (msg) => {
    if (isJSONRPCResultResponse(msg) && initializing.delete(msg.id)) {
      const version = (msg.result as { protocolVersion?: unknown }).protocolVersion;
      if (typeof version === 'string') remote.setProtocolVersion(version);
    }
    local.send(msg).catch((e) => err(`hangar mcp: cannot write to the host: ${(e as Error).message}`));
  };
  remote.onerror = (e) => err(`hangar mcp: ${describeFailure(e, baseUrl)}`);

  local.onmessage = (msg) => {
    if (isJSONRPCRequest(msg) && msg.method === 'initialize') initializing.add(msg.id);
    remote.send(msg).catch(async (e) => {
      const message = describeFailure(e, baseUrl);
      err(`hangar mcp: ${message}`);
      if (isJSONRPCRequest(msg)) initializing.delete(msg.id);
      await answerError(msg, message);
    });
  };
  local.onerror = (e) => err(`hangar mcp: a message from the host could not be read: ${e.message}`);

  const closed = new Promise<void>((resolve) => {
    local.onclose = () => resolve();
  });
  await remote.start();
  await local.start();
  // The host ends the session by closing our standard input.
  const stdin = io.stdin ?? process.stdin;
  const ended = new Promise<void>((resolve) => {
    stdin.once('end', () => resolve());
    stdin.once('close', () => resolve());
  });
  await Promise.race([closed, ended]);
  await local.close().catch(() => undefined);
  await remote.close().catch(() => undefined);
  return 0;
}
