import { Readable } from 'node:stream';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { Ctx } from '../../platform/context.js';
import { type AppError, errors } from '../../platform/http/errors.js';
import { toAppError } from '../../platform/http/server.js';
import { ExecuteBody, executeCode, type Executor } from '../execute/index.js';
import { RunBody, startRun } from '../runs/index.js';
import {
  CommandBody,
  CreateSandboxBody,
  createSandbox,
  destroySandbox,
  listSandboxes,
  readSandboxFile,
  runCommand,
  statSandboxPath,
  uploadSandboxFile,
} from '../sandboxes/index.js';
import { listEvents, listThreads } from '../threads/index.js';

// Hangar's Model Context Protocol server (ADR 0044): one McpServer per HTTP request (stateless), whose tools call the
// owning domains' verbs with the caller's context. Each verb checks its own scope (the REST route's) and organization,
// so a tool the caller may not use answers an `isError` result naming the missing scope, like the API's 403.

/** What a tool hands back: text for the model, and the structured value when there is one. */
interface ToolAnswer {
  text: string;
  structured?: Record<string, unknown>;
  content?: CallToolResult['content'];
}

/** A file read through `sandbox_read_file` is returned inline up to this size; larger ones are downloaded over REST. */
const READ_FILE_LIMIT = 4 * 1024 * 1024;
/** `sandbox_write_file` takes content up to this size (decoded); larger files are uploaded over REST. */
const WRITE_FILE_LIMIT = 8 * 1024 * 1024;
/** How long `run_agent` waits for a run by default, and at most, before answering that it is still running. */
const RUN_WAIT_DEFAULT_S = 120;
const RUN_WAIT_MAX_S = 600;

const SandboxId = z.string().min(1).max(100).describe('The sandbox id (`sbx_…`)');
const SandboxPath = z.string().min(1).max(4096).describe('Absolute, or relative to /home/user');
const Cursor = z.string().min(1).max(500).optional().describe('The `nextCursor` of the previous page');

/** A zod failure of a domain's request schema, as the API's 400 names its fields. */
function fromZod(err: z.ZodError): AppError {
  const issues = err.issues.map((i) => ({ path: i.path.join('.') || 'arguments', message: i.message }));
  return errors.invalid(issues.map((i) => `${i.path}: ${i.message}`).join('; '), issues);
}

/** Parses tool arguments with the REST route's own schema (same limits and defaults). */
function parseAs<T extends z.ZodType>(schema: T, value: unknown): z.output<T> {
  const r = schema.safeParse(value);
  if (!r.success) throw fromZod(r.error);
  return r.data;
}

function errorResult(ctx: Ctx, err: unknown): CallToolResult {
  const e = err instanceof z.ZodError ? fromZod(err) : toAppError(err as Error);
  if (e.status >= 500 && e.code === 'internal') ctx.deps.log.error({ err, requestId: ctx.requestId }, 'an MCP tool call failed');
  return {
    isError: true,
    content: [{ type: 'text', text: `${e.code}: ${e.message}` }],
    structuredContent: { error: { code: e.code, message: e.message, requestId: ctx.requestId } },
  };
}

function ok(a: ToolAnswer): CallToolResult {
  return {
    content: a.content ?? [{ type: 'text', text: a.text }],
    ...(a.structured ? { structuredContent: a.structured } : {}),
  };
}

/** Reads a stream to its end, refusing more than `limit` bytes. */
async function readAll(stream: Readable, limit: number, message: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    size += b.length;
    if (size > limit) {
      stream.destroy();
      throw errors.tooLarge(message);
    }
    parts.push(b);
  }
  return Buffer.concat(parts);
}

const UTF8 = new TextDecoder('utf-8', { fatal: true });
const asText = (b: Buffer): string | null => {
  try {
    return UTF8.decode(b);
  } catch {
    return null;
  }
};

/** What `executeCode` answers: the program's steps. */
type Execution = Awaited<ReturnType<typeof executeCode>>['result'];

/** A program's outcome as a model reads it: its output, then how it ended. */
function describeExecution(result: Execution): string {
  const lines: string[] = [];
  for (const [name, stage] of [
    ['compile', result.compile],
    ['run', result.run],
  ] as const) {
    if (!stage || stage.status === 'skipped') continue;
    if (name === 'compile' && stage.status === 'exited' && stage.code === 0 && !stage.stdout && !stage.stderr) continue;
    if (stage.stdout) lines.push(`${name} stdout:\n${stage.stdout}`);
    if (stage.stderr) lines.push(`${name} stderr:\n${stage.stderr}`);
    const end = stage.status === 'exited' ? `exit code ${stage.code}` : `${stage.status}${stage.message ? ` (${stage.message})` : ''}`;
    lines.push(`${name}: ${end}`);
  }
  return lines.join('\n');
}

function describeCommand(r: { stdout: string; stderr: string; exitCode: number | null; signal: string | null; timedOut: boolean }): string {
  const lines: string[] = [];
  if (r.stdout) lines.push(`stdout:\n${r.stdout}`);
  if (r.stderr) lines.push(`stderr:\n${r.stderr}`);
  lines.push(r.timedOut ? 'timed out (killed)' : r.exitCode === null ? `killed by ${r.signal}` : `exit code ${r.exitCode}`);
  return lines.join('\n');
}

/**
 * The MCP server for one caller. Each tool call runs its verb with `ctx` (the request's caller) and `signal`
 * (the request's: a client that goes away stops a program or a command, and cancels a run still being waited for).
 */
export function buildMcpServer(ctx: Ctx, executor: Executor, version: string): McpServer {
  const server = new McpServer(
    { name: 'hangar', version },
    {
      instructions:
        'Hangar: run code in one-shot sandboxes (execute_code), work in persistent sandboxes (sandbox_*), run agents (run_agent) and read their threads. ' +
        'Every tool acts as the API key that called it, with its scopes.',
    },
  );

  /** Registers a tool whose failures are `isError` results with the API's error code and message, never protocol errors. */
  const tool = <S extends z.ZodRawShape>(
    name: string,
    meta: { title: string; description: string; readOnly?: boolean; destructive?: boolean },
    shape: S,
    run: (args: z.output<z.ZodObject<S>>, signal: AbortSignal) => Promise<ToolAnswer>,
  ) => {
    server.registerTool(
      name,
      {
        title: meta.title,
        description: meta.description,
        inputSchema: shape,
        annotations: { readOnlyHint: meta.readOnly ?? false, destructiveHint: meta.destructive ?? false, openWorldHint: false },
      },
      // biome-ignore lint/suspicious/noExplicitAny: the SDK infers the arguments from the shape; run() declares them
      (async (args: any, extra: { signal: AbortSignal }) => {
        try {
          return ok(await run(args, extra.signal));
        } catch (err) {
          return errorResult(ctx, err);
        }
      }) as never,
    );
  };

  tool(
    'execute_code',
    {
      title: 'Run code',
      description:
        'Runs a program once in a fresh, isolated sandbox with no network (POST /v1/execute; scope execute:run) and answers its output and exit status. ' +
        'Languages: python, javascript, typescript, bash, c, c++, go, ruby, rust, java, csharp (and aliases such as py, js, ts, sh).',
    },
    {
      language: z.string().min(1).max(64).describe('The language, e.g. python, javascript, bash'),
      code: z.string().max(1_000_000).describe('The program (one file)'),
      stdin: z.string().max(1_000_000).optional().describe('Standard input of the program'),
      args: z.array(z.string().max(4096)).max(100).optional().describe('Command-line arguments'),
    },
    async (a, signal) => {
      const body = parseAs(ExecuteBody, { language: a.language, code: a.code, stdin: a.stdin, args: a.args });
      const { id, result } = await executeCode(ctx, executor, body, signal);
      return { text: describeExecution(result), structured: { executionId: id, ...result } };
    },
  );

  tool(
    'sandbox_create',
    {
      title: 'Create a sandbox',
      description:
        'Starts a persistent sandbox (a Linux container with its own files, kept until destroyed) and answers once it runs commands (POST /v1/sandboxes; scope sandbox:write). ' +
        'Use its id with the other sandbox_ tools; destroy it with sandbox_destroy when done.',
    },
    {
      template: z.string().min(1).max(64).optional().describe('Template slug; default base-ubuntu'),
      name: z.string().min(1).max(63).optional().describe('Display name and hostname'),
      network: z.boolean().optional().describe('Outbound internet access (default true)'),
    },
    async (a) => {
      const sandbox = await createSandbox(ctx, parseAs(CreateSandboxBody, { template: a.template, name: a.name, network: a.network }));
      return { text: `created sandbox ${sandbox.id} (${sandbox.name}, template ${sandbox.template}), state ${sandbox.state}`, structured: sandbox };
    },
  );

  tool(
    'sandbox_list',
    {
      title: 'List sandboxes',
      description: 'Your sandboxes, newest first (GET /v1/sandboxes; scope sandbox:read). Destroyed ones only with state=destroyed.',
      readOnly: true,
    },
    {
      state: z.enum(['starting', 'running', 'paused', 'stopped', 'error', 'destroyed']).optional().describe('Only sandboxes in this state'),
      limit: z.number().int().min(1).max(100).default(50),
      cursor: Cursor,
    },
    async (a) => {
      const p = await listSandboxes(ctx, { limit: a.limit, cursor: a.cursor, state: a.state });
      const lines = p.items.map((s) => `${s.id}  ${s.state.padEnd(8)} ${s.template}  ${s.name}`);
      if (p.hasMore) lines.push(`more: pass cursor "${p.nextCursor}"`);
      return {
        text: lines.length ? lines.join('\n') : 'no sandboxes',
        structured: { sandboxes: p.items, hasMore: p.hasMore, nextCursor: p.nextCursor },
      };
    },
  );

  tool(
    'sandbox_run_command',
    {
      title: 'Run a command in a sandbox',
      description:
        'Runs a shell command (bash -c, as the sandbox user) in a running sandbox and waits for it: stdout, stderr (each cut at 1 MiB) and exit code ' +
        '(POST /v1/sandboxes/{id}/commands; scope sandbox:write). Killed after timeout_seconds (default 60).',
    },
    {
      sandbox_id: SandboxId,
      command: z.string().min(1).max(100_000).describe('The shell command'),
      cwd: SandboxPath.optional().describe('Working directory; default the template’s, else /home/user'),
      stdin: z.string().max(1_000_000).optional().describe('Written to the command’s standard input, which is then closed'),
      timeout_seconds: z.number().int().min(1).max(3600).optional().describe('Kill the command after this many seconds (default 60)'),
    },
    async (a, signal) => {
      const body = parseAs(CommandBody, {
        cmd: a.command,
        cwd: a.cwd,
        stdin: a.stdin,
        timeoutMs: a.timeout_seconds === undefined ? undefined : a.timeout_seconds * 1000,
      });
      const r = await runCommand(ctx, a.sandbox_id, body, signal);
      return { text: describeCommand(r), structured: r };
    },
  );

  tool(
    'sandbox_read_file',
    {
      title: 'Read a file in a sandbox',
      description: `A file’s content (GET /v1/sandboxes/{id}/files/content; scope sandbox:read): UTF-8 text as text, other bytes as a base64 blob; at most ${READ_FILE_LIMIT / 1024 / 1024} MiB.`,
      readOnly: true,
    },
    { sandbox_id: SandboxId, path: SandboxPath },
    async (a) => {
      const message = `the file is larger than ${READ_FILE_LIMIT} bytes, the most sandbox_read_file returns; download it with GET /v1/sandboxes/{id}/files/content`;
      const file = await readSandboxFile(ctx, a.sandbox_id, a.path);
      if (file.size > READ_FILE_LIMIT) {
        file.stream.destroy();
        throw errors.tooLarge(message);
      }
      const bytes = await readAll(file.stream, READ_FILE_LIMIT, message);
      const text = asText(bytes);
      const uri = `hangar://sandboxes/${encodeURIComponent(a.sandbox_id)}/files${a.path.startsWith('/') ? '' : '/'}${a.path}`;
      if (text !== null) return { text, structured: { path: a.path, size: bytes.length, encoding: 'utf8', content: text } };
      return {
        text: '',
        content: [{ type: 'resource', resource: { uri, mimeType: 'application/octet-stream', blob: bytes.toString('base64') } }],
        structured: { path: a.path, size: bytes.length, encoding: 'base64', content: bytes.toString('base64') },
      };
    },
  );

  tool(
    'sandbox_write_file',
    {
      title: 'Write a file in a sandbox',
      description:
        'Writes content to a file in a running sandbox, creating its folders and replacing a file there (PUT /v1/sandboxes/{id}/files/content; scope sandbox:write). ' +
        '`encoding: "base64"` for bytes that are not text.',
    },
    {
      sandbox_id: SandboxId,
      path: SandboxPath,
      content: z
        .string()
        .max(Math.ceil((WRITE_FILE_LIMIT * 4) / 3) + 4)
        .describe('The file’s content'),
      encoding: z.enum(['utf8', 'base64']).default('utf8'),
    },
    async (a) => {
      const bytes = a.encoding === 'base64' ? Buffer.from(a.content, 'base64') : Buffer.from(a.content, 'utf8');
      if (bytes.length > WRITE_FILE_LIMIT)
        throw errors.tooLarge(`content is larger than ${WRITE_FILE_LIMIT} bytes; upload it with PUT /v1/sandboxes/{id}/files/content`);
      const entry = await uploadSandboxFile(ctx, a.sandbox_id, a.path, Readable.from([bytes]), bytes.length);
      return { text: `wrote ${entry.size} bytes to ${entry.path}`, structured: { ...entry } };
    },
  );

  tool(
    'sandbox_list_files',
    {
      title: 'List files in a sandbox',
      description: 'A folder’s entries sorted by name, or one file’s entry (GET /v1/sandboxes/{id}/files; scope sandbox:read).',
      readOnly: true,
    },
    { sandbox_id: SandboxId, path: SandboxPath.default('/home/user') },
    async (a) => {
      const r = await statSandboxPath(ctx, a.sandbox_id, a.path);
      const entries = 'entries' in r ? r.entries : [r.entry];
      const lines = entries.map((e) => `${e.type === 'dir' ? 'd' : e.type === 'symlink' ? 'l' : '-'} ${String(e.size).padStart(10)}  ${e.path}`);
      return { text: lines.length ? lines.join('\n') : '(empty folder)', structured: r };
    },
  );

  tool(
    'sandbox_destroy',
    {
      title: 'Destroy a sandbox',
      description: 'Kills its processes and deletes its container and files (DELETE /v1/sandboxes/{id}; scope sandbox:write). Cannot be undone.',
      destructive: true,
    },
    { sandbox_id: SandboxId },
    async (a) => {
      await destroySandbox(ctx, a.sandbox_id);
      return { text: `destroyed sandbox ${a.sandbox_id}`, structured: { id: a.sandbox_id, state: 'destroyed' } };
    },
  );

  tool(
    'run_agent',
    {
      title: 'Run an agent',
      description:
        'Runs one of the organization’s agents on a prompt (POST /v1/run; scope agent:run), in a new thread or `thread_id`, and waits for its answer up to wait_seconds ' +
        `(default ${RUN_WAIT_DEFAULT_S}, at most ${RUN_WAIT_MAX_S}). A run still going then keeps running: its answer is read later with read_thread.`,
    },
    {
      agent: z.string().min(1).max(100).describe('The agent’s slug'),
      prompt: z.string().min(1).max(1_000_000),
      thread_id: z.string().min(1).max(100).optional().describe('Continue this thread (else a new one is opened)'),
      wait_seconds: z.number().int().min(1).max(RUN_WAIT_MAX_S).default(RUN_WAIT_DEFAULT_S),
    },
    async (a, signal) => {
      const body = parseAs(RunBody, { agent: a.agent, prompt: a.prompt, threadId: a.thread_id });
      // The run is cancelled when the MCP client goes away while waiting for it, as over REST; once the wait is over it is left to finish.
      const cancel = new AbortController();
      let started: { runId: string; threadId: string } | null = null;
      const onGone = () => cancel.abort();
      signal.addEventListener('abort', onGone, { once: true });
      const run = startRun(ctx, body, {
        signal: cancel.signal,
        emit: (frame) => {
          if (!started && 'threadId' in frame && frame.threadId && frame.runId) started = { runId: frame.runId, threadId: frame.threadId };
        },
      });
      let timer: NodeJS.Timeout | undefined;
      const waited = new Promise<'waited'>((resolve) => {
        timer = setTimeout(() => resolve('waited'), a.wait_seconds * 1000);
      });
      try {
        const r = await Promise.race([run, waited]);
        if (r === 'waited') {
          signal.removeEventListener('abort', onGone);
          run.catch((err) => ctx.deps.log.warn({ err, requestId: ctx.requestId }, 'an MCP run left running failed'));
          const s = started as { runId: string; threadId: string } | null;
          return {
            text: `the run is still going after ${a.wait_seconds} s${s ? ` (run ${s.runId}, thread ${s.threadId}): read its answer later with read_thread` : ''}`,
            structured: { status: 'running', runId: s?.runId ?? null, threadId: s?.threadId ?? null },
          };
        }
        const head = r.status === 'completed' ? '' : `run ${r.status}${r.error ? `: ${r.error}` : ''}\n`;
        const answer = typeof r.result === 'string' ? r.result : r.result == null ? '' : JSON.stringify(r.result);
        return { text: `${head}${answer}`.trim() || `run ${r.status} with no answer`, structured: r };
      } finally {
        clearTimeout(timer);
        signal.removeEventListener('abort', onGone);
      }
    },
  );

  tool(
    'list_threads',
    {
      title: 'List threads',
      description: 'Your threads (agent conversations), most recently updated first (GET /v1/threads; scope agent:read).',
      readOnly: true,
    },
    {
      limit: z.number().int().min(1).max(100).default(50),
      cursor: Cursor,
      archived: z.boolean().default(false).describe('Include archived threads'),
    },
    async (a) => {
      const p = await listThreads(ctx, { limit: a.limit, cursor: a.cursor, archived: a.archived });
      const lines = p.items.map((t) => `${t.id}  ${t.updatedAt}  ${t.title ?? '(untitled)'}`);
      if (p.hasMore) lines.push(`more: pass cursor "${p.nextCursor}"`);
      return { text: lines.length ? lines.join('\n') : 'no threads', structured: { threads: p.items, hasMore: p.hasMore, nextCursor: p.nextCursor } };
    },
  );

  tool(
    'read_thread',
    {
      title: 'Read a thread',
      description:
        'A thread’s history, oldest first, one page at a time (GET /v1/threads/{id}/events; scope agent:read): its messages, tool calls and runs. Yours only.',
      readOnly: true,
    },
    {
      thread_id: z.string().min(1).max(100),
      limit: z.number().int().min(1).max(500).default(100),
      cursor: Cursor,
    },
    async (a) => {
      const r = await listEvents(ctx, a.thread_id, { limit: a.limit, cursor: a.cursor });
      const lines: string[] = [];
      for (const e of r.events) {
        const p = e.payload as Record<string, unknown>;
        if (e.type === 'user_message') lines.push(`user: ${String(p.text ?? '')}`);
        else if (e.type === 'assistant_message') lines.push(`assistant: ${String(p.text ?? '')}`);
        else if (e.type === 'tool_call') lines.push(`tool call ${String(p.name)}: ${JSON.stringify(p.input)}`);
        else if (e.type === 'tool_result') lines.push(`tool result ${String(p.name)}${p.isError ? ' (error)' : ''}: ${String(p.output ?? '')}`);
        else if (e.type === 'run_completed') lines.push(`[run ${String(p.runId)} ${String(p.status)}${p.error ? `: ${String(p.error)}` : ''}]`);
      }
      if (r.hasMore) lines.push(`more: pass cursor "${r.nextCursor}"`);
      return {
        text: lines.length ? lines.join('\n') : 'no messages yet',
        structured: { thread: r.thread, events: r.events, hasMore: r.hasMore, nextCursor: r.nextCursor },
      };
    },
  );

  return server;
}
