/**
 * The client side of the CLI: commands that talk to a Hangar server over its public API with a stored credential
 * (`hangar login`), and need none of the server's configuration. Human output by default, `--json` on each.
 *
 *   hangar login [--base-url URL] [--key KEY]     checks the key (or HANGAR_API_KEY, or a line on stdin) and saves it
 *   hangar logout                                 forgets it
 *   hangar whoami [--json]                        who the saved credential is
 *   hangar exec FILE [--language L] [--json]      runs a file once in a sandbox; exits with the program's exit code
 *   hangar activity [--limit N] [filters] [--json]  the organization's activity log, newest first
 *   hangar template create|ls|logs|rm ...         custom templates, a build's log as it comes (src/client/templates.ts)
 *
 * The credential lives in credentials.json (0600) in $HANGAR_CONFIG_DIR, else $XDG_CONFIG_HOME/hangar, else
 * ~/.config/hangar; HANGAR_API_KEY and HANGAR_BASE_URL, when set, are used instead of it.
 */
import { readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ApiError, DeviceApi } from '../device/api.js';
import { writePrivateJson } from '../device/config.js';

export const CLIENT_USAGE = `Client commands (a Hangar server's public API, with the credential \`hangar login\` saves):
  login [--base-url URL] [--key KEY]          check an API key or session token (else HANGAR_API_KEY, else a line on stdin) and save it
  logout                                      forget the saved credential
  whoami [--json]                             the user and organization the credential acts as
  exec FILE [--language L] [--stdin TEXT] [--json]
                                              run FILE once in a sandbox (language from its extension); exit code = the program's
  activity [--limit N] [--type EVENT_TYPE] [--resource-type T] [--severity S] [--since ISO] [--json]
                                              the organization's activity log, newest first
  sandbox create [--template T] [--name N] [--json] | sandbox ls [--json]
  sandbox exec ID -- CMD [ARGS...]             run a command in a sandbox, its output as it comes; exit code = the command's
  sandbox pause|resume|rm ID [--json]
  sandbox shell ID [--command CMD]            an interactive terminal in a sandbox; exit code = the shell's
  sandbox cp SRC DEST                          copy a file in or out: LOCAL ID:PATH uploads, ID:PATH LOCAL (or -) downloads
  run AGENT PROMPT [--thread ID] [--json]      run an agent: its answer as it streams, tool calls on stderr; exit 0 when it completed
  template create --name SLUG (--dockerfile FILE | --config FILE.json|yaml) [--no-follow] [--json]
                                              build a template: its log on stderr as it comes; exit 0 when it is ready, 1 when it failed
  template ls [--json] | template logs SLUG [--follow] | template rm SLUG [--json]
  threads tail ID [--no-follow] [--json]      a thread's recent history, then its frames live (reconnects and resumes by sequence)
  mcp [--base-url URL]                        serve Hangar's MCP tools on stdin/stdout for an MCP host (bridged to the server's /v1/mcp)`;

export const CLIENT_COMMANDS = new Set(['login', 'logout', 'whoami', 'exec', 'activity', 'sandbox', 'template', 'run', 'mcp']);

/** Whether argv (after `hangar`) is a client command: one of CLIENT_COMMANDS, or `threads tail` (`threads rebuild` is the server's). */
export const isClientCommand = (argv: readonly string[]): boolean =>
  CLIENT_COMMANDS.has(argv[0] ?? '') || (argv[0] === 'threads' && argv[1] === 'tail');

export class ClientCliError extends Error {
  constructor(
    message: string,
    /** The process exit code (2: a usage or API error). */
    readonly exitCode = 2,
  ) {
    super(message);
  }
}

export interface Credentials {
  baseUrl: string;
  credential: string;
}

export interface ClientIo {
  env: NodeJS.ProcessEnv;
  out(text: string): void;
  err(text: string): void;
  /** A line of standard input (the credential for `login` when none is given). */
  readLine(): Promise<string>;
}

const DEFAULT_BASE_URL = 'http://127.0.0.1:8080';

/** `$HANGAR_CONFIG_DIR`, else `$XDG_CONFIG_HOME/hangar`, else `~/.config/hangar`. */
export function clientConfigDir(env: NodeJS.ProcessEnv): string {
  if (env.HANGAR_CONFIG_DIR) return path.resolve(env.HANGAR_CONFIG_DIR);
  if (env.XDG_CONFIG_HOME) return path.join(path.resolve(env.XDG_CONFIG_HOME), 'hangar');
  return path.join(os.homedir(), '.config', 'hangar');
}

const credentialsFile = (env: NodeJS.ProcessEnv) => path.join(clientConfigDir(env), 'credentials.json');

async function savedCredentials(env: NodeJS.ProcessEnv): Promise<Credentials | null> {
  let text: string;
  try {
    text = await readFile(credentialsFile(env), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  const c = JSON.parse(text) as Partial<Credentials>;
  if (typeof c.baseUrl !== 'string' || typeof c.credential !== 'string')
    throw new ClientCliError(`${credentialsFile(env)} is not a Hangar credentials file`);
  return c as Credentials;
}

/** The credential to use: HANGAR_API_KEY (with HANGAR_BASE_URL) over the saved one. */
export async function credentials(env: NodeJS.ProcessEnv): Promise<Credentials> {
  const saved = await savedCredentials(env);
  const credential = env.HANGAR_API_KEY || saved?.credential;
  if (!credential) throw new ClientCliError('not logged in: run `hangar login` (or set HANGAR_API_KEY)');
  return { baseUrl: normalizeUrl(env.HANGAR_BASE_URL || saved?.baseUrl || DEFAULT_BASE_URL), credential };
}

export function normalizeUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new ClientCliError(`not a URL: ${url}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ClientCliError(`the base URL must be http:// or https:// (got ${url})`);
  return u.toString().replace(/\/+$/, '');
}

/** An API error as a CLI message: the server's code and message, and its request id to quote. */
function apiFailure(err: unknown): never {
  if (err instanceof ApiError) {
    if (err.status === 0) throw new ClientCliError(err.message);
    throw new ClientCliError(`${err.status} ${err.code}: ${err.message}${err.requestId ? ` (request ${err.requestId})` : ''}`);
  }
  throw err;
}

export async function withApi<T>(c: Credentials, fn: (api: DeviceApi) => Promise<T>): Promise<T> {
  // One attempt: these calls are not all idempotent (an execution must not run twice).
  const api = new DeviceApi({ url: c.baseUrl, token: c.credential, attempts: 1 });
  try {
    return await fn(api);
  } catch (err) {
    return apiFailure(err);
  } finally {
    await api.close();
  }
}

interface Me {
  user: { id: string; email: string | null; name: string | null };
  authType: string;
  currentOrganizationId: string | null;
  organizations: { id: string; name: string; role: string }[];
}

const describeMe = (me: Me, baseUrl: string) => {
  const org = me.organizations.find((o) => o.id === me.currentOrganizationId);
  const who = me.user.email ?? me.user.name ?? me.user.id;
  return `${who} at ${baseUrl}${org ? `, organization ${org.name} (${org.id}, ${org.role})` : ''}`;
};

/** Language by file extension, as `POST /v1/execute` names them. */
const EXTENSIONS: Record<string, string> = {
  '.py': 'python',
  '.js': 'javascript',
  '.mjs': 'javascript',
  '.cjs': 'javascript',
  '.ts': 'typescript',
  '.mts': 'typescript',
  '.sh': 'bash',
  '.bash': 'bash',
  '.c': 'c',
  '.cpp': 'c++',
  '.cc': 'c++',
  '.cxx': 'c++',
  '.go': 'go',
  '.rb': 'ruby',
  '.rs': 'rust',
  '.java': 'java',
  '.cs': 'csharp',
};

interface Stage {
  stdout: string;
  stderr: string;
  code: number | null;
  signal: string | null;
  status: string;
  message?: string | null;
}

export async function clientCli(command: string, argv: string[], io: ClientIo): Promise<number> {
  if (command === 'template') {
    // Its own options (src/client/templates.ts).
    const { templateCommand } = await import('./templates.js');
    return templateCommand(argv, io);
  }
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      'base-url': { type: 'string' },
      key: { type: 'string' },
      language: { type: 'string' },
      stdin: { type: 'string' },
      limit: { type: 'string' },
      type: { type: 'string' },
      'resource-type': { type: 'string' },
      severity: { type: 'string' },
      since: { type: 'string' },
      template: { type: 'string' },
      thread: { type: 'string' },
      name: { type: 'string' },
      json: { type: 'boolean', default: false },
      'no-follow': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    io.out(CLIENT_USAGE);
    return 0;
  }
  const { env } = io;
  switch (command) {
    case 'login': {
      const baseUrl = normalizeUrl(values['base-url'] ?? env.HANGAR_BASE_URL ?? DEFAULT_BASE_URL);
      const credential = (values.key ?? env.HANGAR_API_KEY ?? (await io.readLine())).trim();
      if (!credential) throw new ClientCliError('no credential: pass --key, set HANGAR_API_KEY, or type it on standard input');
      const me = await withApi({ baseUrl, credential }, (api) => api.call<Me>('GET', '/v1/me'));
      const file = await writePrivateJson(clientConfigDir(env), 'credentials.json', { baseUrl, credential } satisfies Credentials);
      io.out(`logged in as ${describeMe(me, baseUrl)}; saved in ${file}`);
      return 0;
    }
    case 'logout': {
      await rm(credentialsFile(env), { force: true });
      io.out('logged out');
      return 0;
    }
    case 'whoami': {
      const c = await credentials(env);
      const me = await withApi(c, (api) => api.call<Me>('GET', '/v1/me'));
      io.out(values.json ? JSON.stringify(me) : describeMe(me, c.baseUrl));
      return 0;
    }
    case 'exec': {
      const file = positionals[0];
      if (!file || positionals.length > 1) throw new ClientCliError('usage: hangar exec FILE [--language L] [--stdin TEXT] [--json]');
      const language = values.language ?? EXTENSIONS[path.extname(file).toLowerCase()];
      if (!language) throw new ClientCliError(`cannot tell the language of ${file} from its extension: pass --language`);
      let content: string;
      try {
        content = await readFile(file, 'utf8');
      } catch (err) {
        throw new ClientCliError(`cannot read ${file}: ${(err as Error).message}`);
      }
      const c = await credentials(env);
      const body = { language, files: [{ name: path.basename(file), content }], ...(values.stdin !== undefined ? { stdin: values.stdin } : {}) };
      // The execution answer is the raw result (no envelope), as the spec shows it.
      const result = await withApi(
        c,
        async (api) => (await (await api.fetch('POST', '/v1/execute', body)).json()) as { compile?: Stage; run: Stage },
      );
      if (values.json) {
        io.out(JSON.stringify(result));
      } else {
        for (const stage of [result.compile, result.run]) {
          if (!stage) continue;
          if (stage.stdout) io.out(stage.stdout.replace(/\n$/, ''));
          if (stage.stderr) io.err(stage.stderr.replace(/\n$/, ''));
        }
        for (const [name, stage] of [['compile', result.compile] as const, ['run', result.run] as const]) {
          if (stage && stage.status !== 'exited' && stage.status !== 'skipped')
            io.err(`hangar: ${name} step ${stage.status}${stage.message ? `: ${stage.message}` : ''}`);
        }
      }
      // The program's exit code, as if it had run here: a failed compile step's, else the run's; 1 for a signal or a limit.
      const compileFailed = result.compile && (result.compile.status !== 'exited' || result.compile.code !== 0);
      const last = compileFailed ? result.compile! : result.run;
      return last.status === 'exited' ? (last.code ?? 1) : 1;
    }
    case 'activity': {
      const c = await credentials(env);
      const query = new URLSearchParams();
      query.set('limit', values.limit ?? '20');
      if (values.type) query.set('event_type', values.type);
      if (values['resource-type']) query.set('resource_type', values['resource-type']);
      if (values.severity) query.set('severity', values.severity);
      if (values.since) query.set('since', values.since);
      const data = await withApi(c, (api) =>
        api.call<{ events: { occurredAt: string; eventType: string; severity: string; title: string; summary: string }[] }>(
          'GET',
          `/v1/activity?${query}`,
        ),
      );
      if (values.json) {
        io.out(JSON.stringify(data.events));
        return 0;
      }
      if (!data.events.length) io.out('no activity');
      for (const e of data.events) {
        const mark = e.severity === 'info' ? ' ' : e.severity === 'warning' ? '!' : 'x';
        io.out(`${e.occurredAt.replace('T', ' ').replace(/\.\d+Z$/, 'Z')} ${mark} ${e.eventType.padEnd(28)} ${e.summary || e.title}`);
      }
      return 0;
    }
    case 'sandbox':
      return sandboxCommand(positionals, values, io);
    case 'run':
      return runCommand(positionals, values, io);
    case 'threads':
      return threadsTail(positionals, { json: values.json, follow: !values['no-follow'] }, io);
    default:
      throw new ClientCliError(`unknown command "${command}"`);
  }
}

interface SandboxView {
  id: string;
  name: string;
  template: string;
  state: string;
  createdAt: string;
}

const SANDBOX_USAGE =
  'usage: hangar sandbox create [--template T] [--name N] | ls | exec ID -- CMD [ARGS...] | shell ID [--command CMD] | cp SRC DEST | pause ID | resume ID | rm ID';

/** `ID:PATH` of `hangar sandbox cp`, or null for a local path. */
function remotePath(arg: string): { id: string; path: string } | null {
  const m = /^(sbx_[A-Za-z0-9_-]+):(.+)$/.exec(arg);
  return m ? { id: m[1]!, path: m[2]! } : null;
}

async function sandboxCommand(positionals: string[], values: { template?: string; name?: string; json?: boolean }, io: ClientIo): Promise<number> {
  const [sub, id, ...cmd] = positionals;
  const c = await credentials(io.env);
  const show = (sbx: SandboxView) =>
    io.out(values.json ? JSON.stringify(sbx) : `${sbx.id} ${sbx.state} (${sbx.template}${sbx.name ? `, ${sbx.name}` : ''})`);
  const needId = () => {
    if (!id || !/^[A-Za-z0-9_-]+$/.test(id)) throw new ClientCliError(`${SANDBOX_USAGE}\n(no sandbox id)`);
    return encodeURIComponent(id);
  };
  switch (sub) {
    case 'create': {
      const body = { ...(values.template ? { template: values.template } : {}), ...(values.name ? { name: values.name } : {}) };
      show(await withApi(c, (api) => api.call<SandboxView>('POST', '/v1/sandboxes', body)));
      return 0;
    }
    case 'ls': {
      const sandboxes = await withApi(c, (api) => api.call<SandboxView[]>('GET', '/v1/sandboxes?limit=100'));
      if (values.json) io.out(JSON.stringify(sandboxes));
      else if (!sandboxes.length) io.out('no sandboxes');
      else for (const s of sandboxes) io.out(`${s.id.padEnd(30)} ${s.state.padEnd(9)} ${s.template.padEnd(16)} ${s.name}`);
      return 0;
    }
    case 'pause':
    case 'resume': {
      show(await withApi(c, (api) => api.call<SandboxView>('POST', `/v1/sandboxes/${needId()}/${sub}`)));
      return 0;
    }
    case 'rm': {
      await withApi(c, (api) => api.fetch('DELETE', `/v1/sandboxes/${needId()}`, undefined));
      io.out(values.json ? JSON.stringify({ id, deleted: true }) : `${id} destroyed`);
      return 0;
    }
    case 'cp': {
      const [src, dest] = [id, cmd[0]];
      if (!src || !dest || cmd.length > 1) throw new ClientCliError('usage: hangar sandbox cp LOCAL ID:PATH | hangar sandbox cp ID:PATH LOCAL|-');
      const from = remotePath(src);
      const to = remotePath(dest);
      if ((from === null) === (to === null))
        throw new ClientCliError('one side of hangar sandbox cp is a sandbox path (sbx_...:PATH), the other a local one');
      if (to) {
        let bytes: Buffer;
        try {
          bytes = await readFile(src);
        } catch (err) {
          throw new ClientCliError(`cannot read ${src}: ${(err as Error).message}`);
        }
        await withApi(c, (api) =>
          api.fetch('PUT', `/v1/sandboxes/${encodeURIComponent(to.id)}/files/content?path=${encodeURIComponent(to.path)}`, new Uint8Array(bytes)),
        );
        io.err(`${src} -> ${dest} (${bytes.length} bytes)`);
        return 0;
      }
      const res = await withApi(c, async (api) =>
        Buffer.from(
          await (
            await api.fetch('GET', `/v1/sandboxes/${encodeURIComponent(from!.id)}/files/content?path=${encodeURIComponent(from!.path)}`, undefined)
          ).arrayBuffer(),
        ),
      );
      if (dest === '-') process.stdout.write(res);
      else {
        await writeFile(dest, res);
        io.err(`${src} -> ${dest} (${res.length} bytes)`);
      }
      return 0;
    }
    case 'exec': {
      const path = `/v1/sandboxes/${needId()}/commands`;
      if (!cmd.length) throw new ClientCliError('usage: hangar sandbox exec ID -- CMD [ARGS...]');
      // bash -c runs the words as the user typed them after --.
      const body = { cmd: cmd.join(' ') };
      return withApi(c, async (api) => {
        const res = await api.fetch('POST', path, body, undefined, { accept: 'text/event-stream' });
        let exit: { exitCode: number | null; signal: string | null; timedOut: boolean } | null = null;
        for await (const ev of serverSentEvents(res.body)) {
          const data = JSON.parse(ev.data) as {
            data?: string;
            message?: string;
            exitCode?: number | null;
            signal?: string | null;
            timedOut?: boolean;
          };
          if (ev.event === 'stdout') process.stdout.write(data.data ?? '');
          else if (ev.event === 'stderr') process.stderr.write(data.data ?? '');
          else if (ev.event === 'exit') exit = { exitCode: data.exitCode ?? null, signal: data.signal ?? null, timedOut: data.timedOut ?? false };
          else if (ev.event === 'error') throw new ClientCliError(`the command's output broke off: ${data.message}`);
        }
        if (!exit) throw new ClientCliError('the stream ended before the command did');
        if (exit.timedOut) io.err('hangar: the command timed out');
        else if (exit.signal) io.err(`hangar: the command was killed by ${exit.signal}`);
        return exit.exitCode ?? 1;
      });
    }
    default:
      throw new ClientCliError(SANDBOX_USAGE);
  }
}

const clip = (text: string, n = 200) => (text.length > n ? `${text.slice(0, n)}…` : text);

/**
 * `hangar run AGENT PROMPT`: `POST /v1/run` with `stream: true`. The answer's text goes to stdout as it streams;
 * tool calls and their results, one line each, and the end to stderr; `--json` prints the run result instead.
 */
async function runCommand(positionals: string[], values: { thread?: string; json?: boolean }, io: ClientIo): Promise<number> {
  const [agent, ...words] = positionals;
  const prompt = words.join(' ');
  if (!agent || !prompt) throw new ClientCliError('usage: hangar run AGENT PROMPT [--thread ID] [--json]');
  const c = await credentials(io.env);
  const body = { agent, prompt, stream: true, ...(values.thread ? { threadId: values.thread } : {}) };
  return withApi(c, async (api) => {
    const res = await api.fetch('POST', '/v1/run', body, undefined, { accept: 'text/event-stream' });
    type Result = { runId?: string; threadId?: string; status?: string; error?: string | null };
    let result = null as Result | null;
    let midLine = false;
    const text = (t: string) => {
      if (values.json || !t) return;
      process.stdout.write(t);
      midLine = !t.endsWith('\n');
    };
    const note = (line: string) => {
      if (values.json) return;
      if (midLine) process.stdout.write('\n');
      midLine = false;
      io.err(line);
    };
    for await (const ev of serverSentEvents(res.body)) {
      const f = JSON.parse(ev.data) as Record<string, unknown>;
      switch (ev.event) {
        case 'assistant_message_delta':
          text(typeof f.delta === 'string' ? f.delta : '');
          break;
        case 'tool_call':
          note(`→ ${String(f.name)} ${clip(JSON.stringify(f.input ?? {}))}`);
          break;
        case 'tool_result':
          note(
            `${f.isError ? '✗' : '←'} ${String(f.name)}: ${clip(
              String(f.output ?? '')
                .replace(/\s+/g, ' ')
                .trim(),
            )}`,
          );
          break;
        case 'result':
          result = f as Result;
          break;
        case 'error':
          throw new ClientCliError(`the run's stream broke off: ${String(f.message ?? ev.data)}`);
      }
    }
    if (!result) throw new ClientCliError('the stream ended before the run did');
    if (values.json) io.out(JSON.stringify(result));
    else {
      if (midLine) process.stdout.write('\n');
      io.err(`run ${result.runId} ${result.status}${result.error ? `: ${result.error}` : ''} (thread ${result.threadId})`);
    }
    return result.status === 'completed' ? 0 : 1;
  });
}

type Frame = Record<string, unknown> & { type?: string; sequence?: number; payload?: Record<string, unknown> };

/**
 * `hangar threads tail ID`: the thread's WebSocket (`/v1/threads/{id}/events`): the snapshot's recent events, then
 * live frames, rendered like `hangar run` (or one JSON line each with `--json`). A dropped connection is reopened
 * with `last_sequence`, so nothing durable is missed or shown twice; a refusal (4401, 4403, 4404, 4410) ends it.
 */
async function threadsTail(positionals: string[], opts: { json?: boolean; follow: boolean }, io: ClientIo): Promise<number> {
  const [sub, id] = positionals;
  if (sub !== 'tail' || !id || !/^[A-Za-z0-9_-]+$/.test(id)) throw new ClientCliError('usage: hangar threads tail ID [--no-follow] [--json]');
  const c = await credentials(io.env);
  const { WebSocket } = await import('ws');
  const url = new URL(`/v1/threads/${encodeURIComponent(id)}/events`, c.baseUrl);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  url.searchParams.set(c.credential.startsWith('hgr_') ? 'api_key' : 'token', c.credential);
  let last: number | null = null;
  let announced = false;
  let midLine = false;
  const streamed = new Set<string>();
  const out = (t: string) => {
    process.stdout.write(t);
    midLine = !t.endsWith('\n');
  };
  const note = (line: string) => {
    if (midLine) out('\n');
    io.err(line);
  };
  const render = (f: Frame) => {
    if (opts.json) return io.out(JSON.stringify(f));
    const p = (f.payload ?? f) as Record<string, unknown>;
    switch (f.type) {
      case 'run_started':
        return note(`── run ${String(p.runId ?? f.runId ?? '')} started`);
      case 'run_completed':
        return note(`── run ${String(p.runId ?? f.runId ?? '')} ${String(p.status ?? '')}${p.error ? `: ${String(p.error)}` : ''}`);
      case 'user_message':
        if (midLine) out('\n');
        return out(`> ${String(p.text ?? '')}\n`);
      case 'assistant_message_delta':
        if (typeof f.messageId === 'string') streamed.add(f.messageId);
        return out(typeof f.delta === 'string' ? f.delta : '');
      case 'assistant_message':
        if (typeof p.messageId === 'string' && streamed.has(p.messageId)) return midLine ? out('\n') : undefined;
        if (midLine) out('\n');
        return out(`${String(p.text ?? '')}\n`);
      case 'tool_call':
        return note(`→ ${String(p.name)} ${clip(JSON.stringify(p.input ?? {}))}`);
      case 'tool_result':
        return note(
          `${p.isError ? '✗' : '←'} ${String(p.name)}: ${clip(
            String(p.output ?? '')
              .replace(/\s+/g, ' ')
              .trim(),
          )}`,
        );
      case 'thread_deleted':
        return note('── the thread was deleted');
    }
  };
  for (let attempt = 0; ; attempt++) {
    if (last !== null) url.searchParams.set('last_sequence', String(last));
    const ended = await new Promise<{ code: number; reason: string; opened: boolean }>((resolve) => {
      const ws = new WebSocket(url);
      let opened = false;
      ws.on('open', () => {
        opened = true;
      });
      ws.on('message', (data) => {
        let f: Frame;
        try {
          f = JSON.parse(String(data)) as Frame;
        } catch {
          return;
        }
        if (f.type === 'snapshot') {
          // The first snapshot (or a resync) shows recent events up to lastSequence; a resumed one is followed by
          // the replay of what came after `last`, so `last` stays.
          if (typeof f.lastSequence === 'number' && (last === null || f.resync)) last = f.lastSequence;
          if (!opts.json && !announced)
            note(`── thread ${id}${(f.thread as { title?: string } | undefined)?.title ? `: ${(f.thread as { title: string }).title}` : ''}`);
          if (opts.json) io.out(JSON.stringify({ ...f, events: undefined }));
          announced = true;
          for (const e of (f.events ?? []) as Frame[]) render(e);
          if (!opts.follow) ws.close(1000, 'done');
          return;
        }
        if (typeof f.sequence === 'number') {
          if (last !== null && f.sequence <= last) return; // replayed before: shown once
          last = f.sequence;
        }
        render(f);
      });
      ws.on('close', (code, reason) => resolve({ code, reason: String(reason), opened }));
      ws.on('error', () => undefined); // 'close' follows
    });
    if (!opts.follow && ended.code === 1000) return 0;
    if (ended.code === 4410) return 0; // the thread was deleted: nothing more will come
    if (ended.code >= 4400 && ended.code < 4500 && ended.code !== 4409) {
      throw new ClientCliError(`the server closed the thread's stream: ${ended.code} ${ended.reason}`);
    }
    // Dropped, the server restarting (1001), or fallen behind (4409): reopen from the last sequence shown.
    if (ended.opened) attempt = 0;
    const wait = Math.min(10_000, 500 * 2 ** Math.min(attempt, 5));
    note(`── connection closed (${ended.code}${ended.reason ? ` ${ended.reason}` : ''}); reconnecting in ${wait / 1000} s`);
    await new Promise((r) => setTimeout(r, wait));
  }
}

/** The events of a `text/event-stream` body: `event` and `data` (lines joined), one per blank-line-ended block. */
export async function* serverSentEvents(body: AsyncIterable<Uint8Array> | null): AsyncGenerator<{ event: string; data: string }> {
  if (!body) return;
  const decoder = new TextDecoder();
  let buffered = '';
  let event = 'message';
  let data: string[] = [];
  for await (const chunk of body) {
    buffered += decoder.decode(chunk, { stream: true });
    let nl = buffered.indexOf('\n');
    while (nl >= 0) {
      const line = buffered.slice(0, nl).replace(/\r$/, '');
      buffered = buffered.slice(nl + 1);
      if (line === '') {
        if (data.length) yield { event, data: data.join('\n') };
        event = 'message';
        data = [];
      } else if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      nl = buffered.indexOf('\n');
    }
  }
}
