/**
 * The MCP client for registered MCP servers (streamable HTTP only), on the official SDK. Every call is one short
 * connection: a fresh client and transport, `initialize`, one request (or the pages of `tools/list`), close. So no
 * session state outlives a call, and a server's answer is untrusted input: size-capped, time-bounded, and never
 * allowed to echo the caller's header values into an error message.
 */
import { EgressError } from '../../platform/http/egress.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, ErrorCode, ListToolsResultSchema, McpError as SdkMcpError } from '@modelcontextprotocol/sdk/types.js';

export interface McpTarget {
  url: string;
  headers: Record<string, string>;
  fetch: typeof fetch;
  timeoutMs: number;
}

export interface McpToolInfo {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
}

export type McpErrorCode = 'mcp_unreachable' | 'mcp_protocol' | 'mcp_timeout' | 'mcp_unauthorized';

export class McpError extends Error {
  constructor(
    readonly code: McpErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'McpError';
  }
}

const MAX_TOOLS = 500;
/** `tools/list` pages followed before giving up on a server whose cursor never ends. */
const MAX_PAGES = 100;
const MAX_SCHEMA_BYTES = 64 * 1024;
const MAX_SCHEMA_DEPTH = 32;
const MAX_NAME_CHARS = 128;
const MAX_DESCRIPTION_CHARS = 4096;
const MAX_OUTPUT_BYTES = 256 * 1024;
/** One HTTP answer from the server (a page of tools, one tool result, an error body). */
const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
const MAX_SERVER_MESSAGE_CHARS = 300;

/** The server's tools (all pages, `tools/list` with cursor), at most 500 tools; a tool whose inputSchema JSON exceeds 64 KiB or nests deeper than 32 is dropped. */
export async function listMcpTools(target: McpTarget): Promise<McpToolInfo[]> {
  return withClient(target, async (client, options) => {
    const tools: McpToolInfo[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < MAX_PAGES && tools.length < MAX_TOOLS; page++) {
      const result = await client.request({ method: 'tools/list', params: cursor === undefined ? {} : { cursor } }, ListToolsResultSchema, options());
      for (const tool of result.tools) {
        if (tools.length === MAX_TOOLS) break;
        if (tool.name.length === 0 || tool.name.length > MAX_NAME_CHARS) continue;
        if (!schemaWithinLimits(tool.inputSchema)) continue;
        tools.push({
          name: tool.name,
          description: (tool.description ?? '').slice(0, MAX_DESCRIPTION_CHARS),
          inputSchema: tool.inputSchema,
        });
      }
      cursor = result.nextCursor;
      if (!cursor) break;
    }
    return tools;
  });
}

/** Calls one tool; text content concatenated (images/audio/resources summarised as "[image image/png]" etc.), structuredContent kept, output capped at 256 KiB. A tool-level error is { isError: true }, not an exception. */
export async function callMcpTool(
  target: McpTarget,
  name: string,
  args: Record<string, unknown>,
): Promise<{ output: string; structured?: unknown; isError: boolean }> {
  return withClient(target, async (client, options) => {
    // `client.request` rather than `client.callTool`: the latter validates structuredContent with output schemas
    // compiled from an earlier `tools/list` of the same client, which a one-call client never has.
    const result = await client.request({ method: 'tools/call', params: { name, arguments: args } }, CallToolResultSchema, options());
    const parts = result.content.map((item) => {
      switch (item.type) {
        case 'text':
          return item.text;
        case 'image':
        case 'audio':
          return `[${item.type} ${item.mimeType}]`;
        case 'resource':
          return `[resource ${item.resource.uri}]`;
        case 'resource_link':
          return `[resource link ${item.uri}]`;
        default:
          return '[unsupported content]';
      }
    });
    const out: { output: string; structured?: unknown; isError: boolean } = {
      output: capUtf8(parts.join('\n'), MAX_OUTPUT_BYTES),
      isError: result.isError === true,
    };
    if (result.structuredContent !== undefined && Buffer.byteLength(JSON.stringify(result.structuredContent)) <= MAX_OUTPUT_BYTES) {
      out.structured = result.structuredContent;
    }
    return out;
  });
}

type Options = () => { timeout: number; signal: AbortSignal };

/**
 * Connects, runs `op`, always closes. The deadline covers everything (connect, every page, close): the SDK's own
 * per-request `timeout` is set to what is left, and an overall timer aborts whatever is still in flight.
 */
async function withClient<T>(target: McpTarget, op: (client: Client, options: Options) => Promise<T>): Promise<T> {
  let url: URL;
  try {
    url = new URL(target.url);
  } catch {
    throw new McpError('mcp_unreachable', 'the MCP server URL is not a valid URL');
  }
  const deadline = Date.now() + target.timeoutMs;
  const abort = new AbortController();
  let fail!: (e: McpError) => void;
  const failed = new Promise<never>((_, reject) => {
    fail = (e) => {
      reject(e);
      abort.abort(e);
    };
  });
  // Settled by the race below, or never awaited when the work finished first.
  failed.catch(() => undefined);
  const timer = setTimeout(() => fail(timeoutError(target)), target.timeoutMs);
  const options: Options = () => ({ timeout: Math.max(1, deadline - Date.now()), signal: abort.signal });

  const client = new Client({ name: 'hangar', version: '0.1.0' });
  const transport = new StreamableHTTPClientTransport(url, {
    fetch: cappedFetch(target.fetch, (e) => fail(e)),
    requestInit: { headers: target.headers },
  });
  try {
    const work = (async () => {
      await client.connect(transport, options());
      return op(client, options);
    })();
    return await Promise.race([work, failed]);
  } catch (e) {
    throw toMcpError(e, target);
  } finally {
    clearTimeout(timer);
    // A stateful server gave us a session; end it so it does not linger until the server's own expiry.
    if (transport.sessionId && !abort.signal.aborted) {
      await Promise.race([transport.terminateSession().catch(() => undefined), sleep(Math.min(1000, Math.max(0, deadline - Date.now())))]);
    }
    await client.close().catch(() => undefined);
  }
}

/** The caller's fetch with every answer's body capped, so a server cannot make us buffer without bound. */
function cappedFetch(base: typeof fetch, onTooLarge: (e: McpError) => void): typeof fetch {
  return async (input, init) => {
    const res = await base(input, init);
    // Bodies the Response constructor refuses to carry (and redirects the SDK inspects itself) pass through.
    if (!res.body || res.status < 200 || res.status === 204 || res.status === 205 || res.status === 304) return res;
    let seen = 0;
    const limited = res.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, controller) {
          seen += chunk.byteLength;
          if (seen > MAX_RESPONSE_BYTES) {
            const e = new McpError('mcp_protocol', `the MCP server sent an answer larger than ${MAX_RESPONSE_BYTES / 1024 / 1024} MiB`);
            controller.error(e);
            onTooLarge(e);
            return;
          }
          controller.enqueue(chunk);
        },
      }),
    );
    return new Response(limited, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

function timeoutError(target: McpTarget): McpError {
  return new McpError('mcp_timeout', `the MCP server did not answer within ${target.timeoutMs} ms`);
}

/** Maps whatever the SDK, the fetch or the server threw onto the four codes; messages never carry header values. */
function toMcpError(e: unknown, target: McpTarget): McpError {
  if (e instanceof McpError) return e;
  // The egress guard refused the request (a private address, a redirect off the origin, a cap): say so plainly.
  for (let cur: unknown = e, i = 0; cur instanceof Error && i < 5; cur = cur.cause, i++) {
    if (cur instanceof EgressError) {
      return cur.code === 'timeout'
        ? timeoutError(target)
        : new McpError('mcp_unreachable', `the MCP server could not be reached (${cur.code}: ${cur.message})`);
    }
  }
  if (e instanceof StreamableHTTPError) {
    const status = e.code ?? -1;
    if (status === 401 || status === 403) {
      return new McpError('mcp_unauthorized', `the MCP server refused the credentials (HTTP ${status})`);
    }
    if (status === -1) return new McpError('mcp_protocol', 'the MCP server answered with an unexpected content type');
    if (status >= 500 || status === 408 || status === 429) {
      return new McpError('mcp_unreachable', `the MCP server is not available (HTTP ${status})`);
    }
    return new McpError('mcp_protocol', `the MCP server answered HTTP ${status}; is the URL its streamable HTTP endpoint?`);
  }
  if (e instanceof SdkMcpError) {
    if (e.code === ErrorCode.RequestTimeout) return timeoutError(target);
    if (e.code === ErrorCode.ConnectionClosed) return new McpError('mcp_unreachable', 'the connection to the MCP server closed');
    return new McpError('mcp_protocol', `the MCP server returned an error: ${serverText(e.message, target)}`);
  }
  if (e instanceof SyntaxError) return new McpError('mcp_protocol', 'the MCP server sent malformed JSON');
  // The SDK's answer schemas are zod (core) schemas: a failed parse is a `$ZodError` carrying `issues`.
  if (e instanceof Error && Array.isArray((e as { issues?: unknown }).issues))
    return new McpError('mcp_protocol', 'the MCP server sent an answer that is not valid MCP');
  if (e instanceof Error && (e.name === 'AbortError' || e.name === 'TimeoutError')) return timeoutError(target);
  if (e instanceof TypeError || (e instanceof Error && 'code' in e)) {
    return new McpError('mcp_unreachable', `the MCP server could not be reached${networkReason(e)}`);
  }
  if (e instanceof Error && /protocol version|initialize/i.test(e.message)) {
    return new McpError('mcp_protocol', 'the MCP server did not complete the MCP handshake');
  }
  return new McpError('mcp_unreachable', 'the MCP server could not be reached');
}

/** A system error code (`ECONNREFUSED`, `ENOTFOUND`) from the error or its cause: useful, and never secret. */
function networkReason(e: Error): string {
  for (let cur: unknown = e, i = 0; cur instanceof Error && i < 5; cur = cur.cause, i++) {
    const code = (cur as { code?: unknown }).code;
    if (typeof code === 'string' && /^[A-Z_]{3,40}$/.test(code)) return ` (${code})`;
  }
  return '';
}

/** A server's own error text, shortened and with any of the caller's header values (which it may echo) removed. */
function serverText(message: string, target: McpTarget): string {
  let text = message.replace(/^MCP error -?\d+: /, '');
  for (const value of Object.values(target.headers)) {
    for (const part of [value, ...value.split(/\s+/)]) {
      if (part.length >= 4) text = text.split(part).join('[redacted]');
    }
  }
  return text.length > MAX_SERVER_MESSAGE_CHARS ? `${text.slice(0, MAX_SERVER_MESSAGE_CHARS)}…` : text;
}

function schemaWithinLimits(schema: Record<string, unknown>): boolean {
  if (Buffer.byteLength(JSON.stringify(schema)) > MAX_SCHEMA_BYTES) return false;
  // Iterative, so a hostile schema cannot exhaust the stack while being measured.
  const stack: [unknown, number][] = [[schema, 1]];
  while (stack.length > 0) {
    const [value, depth] = stack.pop() as [unknown, number];
    if (depth > MAX_SCHEMA_DEPTH) return false;
    if (value !== null && typeof value === 'object') {
      for (const child of Object.values(value)) {
        if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
      }
    }
  }
  return true;
}

/** Cuts `text` to at most `max` UTF-8 bytes on a character boundary, saying so. */
function capUtf8(text: string, max: number): string {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= max) return text;
  const marker = '\n[output truncated]';
  let end = max - Buffer.byteLength(marker);
  // Step back off a UTF-8 continuation byte so no character is split.
  while (end > 0 && ((bytes[end] as number) & 0xc0) === 0x80) end--;
  return bytes.subarray(0, end).toString('utf8') + marker;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
