import http from 'node:http';
import type { Readable } from 'node:stream';
import { z } from 'zod';
import { AppError, errors } from '../http/errors.js';

/**
 * The host's side of the in-sandbox agent (native/sandbox-agent, protocol in its PROTOCOL.md): HTTP/1.1
 * over the Unix socket the host created and handed to the container. Keep-alive connections make a
 * command's round trip a fraction of a millisecond.
 *
 * The agent runs inside a sandbox whose user may have found a way to it, so it is untrusted (ADR 0013):
 * every answer is read with a size cap and a deadline and checked for shape. A violation closes that
 * connection, raises 502 `sandbox_agent_error`, and is reported to `onViolation` (the sandbox service then
 * marks the sandbox `error`). Nothing an agent sends can make the server buffer more than the caps.
 */

export interface AgentProcess {
  pid: number;
  cmd: string;
  args: string[] | null;
  cwd: string;
  running: boolean;
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  startedAt: string;
  endedAt: string | null;
  outputBytes: number;
  truncated: boolean;
}

export type OutputEvent =
  | { type: 'stdout' | 'stderr'; data: string; offset: number }
  | { type: 'exit'; exitCode: number | null; signal: string | null; timedOut: boolean; durationMs: number; truncated: boolean };

export interface AgentEntry {
  name: string;
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  mode: string;
  mtime: string;
}

export interface StartProcess {
  cmd?: string;
  args?: string[];
  cwd?: string;
  env?: Record<string, string>;
  /** base64 */
  stdin?: string;
  keepStdin?: boolean;
  timeoutMs?: number;
  /** Runs the process on a new terminal of this size (stdin, stdout, stderr and controlling terminal); stdin stays open. */
  pty?: { cols: number; rows: number };
}

/** What the server accepts from an agent. An honest agent stays far below each. */
export interface AgentLimits {
  /** A JSON answer (a process record, a file entry, ...). */
  jsonBytes: number;
  /** GET /processes and folder listings (hundreds of records with 100 KB commands, tens of thousands of entries). */
  listBytes: number;
  /** The body of an error answer. */
  errorBytes: number;
  /** One NDJSON line of output (the agent sends at most 32 KiB of data, 44 KiB as base64, per line). */
  lineBytes: number;
  /** A whole `follow=0` output answer (the agent keeps 4 MiB per process: ~5.6 MiB of lines). */
  snapshotBytes: number;
  /** Deadline of a call about processes (start, list, get, signal, output headers): answered from memory. */
  callMs: number;
  /** Deadline of a file operation (a recursive delete of a big tree takes a while); a timeout is not a violation. */
  fileMs: number;
  /** Deadline of a stdin write, which waits while the process does not read; a timeout is not a violation. */
  stdinMs: number;
  /** A `follow=1` stream of an agent that sends keepalives: silence this long (while the server waits for data) is a violation. */
  followIdleMs: number;
}

export const AGENT_LIMITS: Readonly<AgentLimits> = Object.freeze({
  jsonBytes: 8 << 20,
  listBytes: 32 << 20,
  errorBytes: 64 << 10,
  lineBytes: 1 << 20,
  snapshotBytes: 64 << 20,
  callMs: 30_000,
  fileMs: 120_000,
  stdinMs: 600_000,
  followIdleMs: 60_000,
});

const Process = z.object({
  pid: z.number().int().positive(),
  cmd: z.string().nullable(),
  args: z.array(z.string()).nullable(),
  cwd: z.string(),
  running: z.boolean(),
  exitCode: z.number().int().nullable(),
  signal: z.string().nullable(),
  timedOut: z.boolean(),
  startedAt: z.string(),
  endedAt: z.string().nullable(),
  outputBytes: z.number().int().nonnegative(),
  truncated: z.boolean(),
});
const Entry = z.object({
  name: z.string(),
  path: z.string(),
  type: z.enum(['file', 'dir', 'symlink', 'other']),
  size: z.number(),
  mode: z.string(),
  mtime: z.string(),
});
const EntryAnswer = z.object({ entry: Entry });
const StatAnswer = z.union([z.object({ entries: z.array(Entry) }), EntryAnswer]);
const Started = z.object({ pid: z.number().int().positive(), startedAt: z.string() });
const Health = z.object({ ok: z.boolean() });
const Line = z.union([
  z.object({ type: z.enum(['stdout', 'stderr']), data: z.string(), offset: z.number().int().nonnegative() }),
  z.object({
    type: z.literal('exit'),
    exitCode: z.number().int().nullable(),
    signal: z.string().nullable(),
    timedOut: z.boolean(),
    durationMs: z.number(),
    truncated: z.boolean(),
  }),
  z.object({ type: z.literal('keepalive') }),
]);

const CODE_FOR_STATUS: Record<number, (m: string) => AppError> = {
  400: (m) => errors.invalid(m),
  403: (m) => errors.forbidden(m),
  404: (m) => new AppError('not_found', m),
  409: (m) => errors.conflict(m),
  413: (m) => errors.tooLarge(m),
};

/** How a call is bounded: its deadline, and whether running past it means the agent misbehaves. */
interface Bound {
  ms: number;
  /** A timeout is a violation (calls the agent answers from memory), else a plain 503. */
  strict: boolean;
}

export class AgentClient {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  private readonly limits: AgentLimits;
  /** Told about each violation with its reason (the sandbox service marks the sandbox `error`). */
  onViolation: ((reason: string) => void) | null = null;

  constructor(
    readonly socketPath: string,
    limits: Partial<AgentLimits> = {},
  ) {
    this.limits = { ...AGENT_LIMITS, ...limits };
  }

  close(): void {
    this.agent.destroy();
  }

  async health(timeoutMs = 2000): Promise<{ ok: boolean }> {
    return this.json('GET', '/health', Health, { ms: timeoutMs, strict: true });
  }

  /** Sets the base environment of every command (once, before any process: a pooled sandbox being claimed; ADR 0023). */
  async setBaseEnv(env: Record<string, string>): Promise<void> {
    await this.json('PUT', '/env', null, this.call(), { env });
  }

  startProcess(body: StartProcess): Promise<{ pid: number; startedAt: string }> {
    return this.json('POST', '/processes', Started, this.call(), body);
  }

  async listProcesses(): Promise<AgentProcess[]> {
    const answer = await this.json('GET', '/processes', z.object({ processes: z.array(Process) }), this.call(), undefined, this.limits.listBytes);
    return answer.processes as AgentProcess[];
  }

  async getProcess(pid: number): Promise<AgentProcess> {
    return (await this.json('GET', `/processes/${pid}`, Process, this.call())) as AgentProcess;
  }

  async sendStdin(pid: number, data: string, eof: boolean): Promise<void> {
    await this.json('POST', `/processes/${pid}/stdin`, null, { ms: this.limits.stdinMs, strict: false }, { data, eof });
  }

  /** Sets the terminal size of a process started with `pty` (409 when it has none or has exited). */
  async resize(pid: number, cols: number, rows: number): Promise<void> {
    await this.json('POST', `/processes/${pid}/resize`, null, this.call(), { cols, rows });
  }

  async signal(pid: number, signal: string): Promise<void> {
    await this.json('POST', `/processes/${pid}/signal`, null, this.call(), { signal });
  }

  /**
   * The process's output from `after` (byte offset), then live until it exits when `follow`. Ends with an
   * `exit` event once it has exited. Lines are capped; a snapshot (`follow` false) is capped in size and
   * time; a follow stream has no end in time (a process may run for days) but, from an agent that sends
   * keepalives, an idle timeout counted only while the server waits for data (a slow reader downstream
   * never trips it).
   */
  async *output(pid: number, opts: { follow: boolean; after?: number; signal?: AbortSignal; deadlineMs?: number }): AsyncGenerator<OutputEvent> {
    const qs = `follow=${opts.follow ? 1 : 0}${opts.after ? `&after=${opts.after}` : ''}`;
    const what = `GET /processes/${pid}/output`;
    const res = await this.open('GET', `/processes/${pid}/output?${qs}`, this.call(), { signal: opts.signal });
    if (res.statusCode !== 200) throw await this.failure(res, this.call());
    const keepalive = Number(res.headers['x-hangar-keepalive']);
    const idleMs = opts.follow ? (keepalive > 0 ? Math.max(this.limits.followIdleMs, keepalive * 4000) : null) : null;
    // A snapshot must end within callMs; a follow stream only when the caller knows when (a waited command's timeout).
    const limitMs = opts.follow ? (opts.deadlineMs ?? null) : this.limits.callMs;
    const until = limitMs === null ? null : Date.now() + limitMs;
    const chunks = res[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
    let buffered = '';
    let total = 0;
    try {
      for (;;) {
        const wait = until !== null ? Math.min(until - Date.now(), idleMs ?? Infinity) : idleMs;
        const next = await this.within(chunks.next(), wait, () =>
          this.violation(
            until !== null && Date.now() >= until - 5
              ? `${what} did not end within ${limitMs} ms`
              : `${what} sent nothing for ${idleMs} ms (keepalives stopped)`,
          ),
        );
        if (next.done) break;
        total += next.value.length;
        if (!opts.follow && total > this.limits.snapshotBytes) throw this.violation(`${what} sent more than ${this.limits.snapshotBytes} bytes`);
        buffered += next.value.toString('latin1');
        for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
          const line = buffered.slice(0, nl);
          buffered = buffered.slice(nl + 1);
          if (!line.trim()) continue;
          const ev = this.parseLine(line, what);
          if (ev.type !== 'keepalive') yield ev as OutputEvent;
        }
        if (buffered.length > this.limits.lineBytes) throw this.violation(`${what} sent a line longer than ${this.limits.lineBytes} bytes`);
      }
      if (buffered.trim()) this.parseLine(buffered, what); // a cut last line is a violation too
    } catch (err) {
      if (opts.signal?.aborted) throw Object.assign(new Error('aborted'), { name: 'AbortError' });
      if (err instanceof AppError) throw err;
      throw errors.unavailable(`the sandbox's agent stopped answering (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    } finally {
      res.destroy();
    }
  }

  /** A folder's entries, or the entry itself when `path` is a file. */
  stat(path: string): Promise<{ entries: AgentEntry[] } | { entry: AgentEntry }> {
    return this.json('GET', `/files?path=${encodeURIComponent(path)}`, StatAnswer, this.file(), undefined, this.limits.listBytes);
  }

  /** The file's bytes as a stream with its length (the body is framed by that length: an agent cannot send more). */
  async read(path: string): Promise<{ stream: Readable; size: number }> {
    const res = await this.open('GET', `/files/content?path=${encodeURIComponent(path)}`, this.file());
    if (res.statusCode !== 200) throw await this.failure(res, this.file());
    const size = Number(res.headers['content-length']);
    if (res.headers['content-length'] === undefined || !Number.isSafeInteger(size) || size < 0 || res.headers['transfer-encoding']) {
      res.destroy();
      throw this.violation('GET /files/content answered without a Content-Length');
    }
    return { stream: res, size };
  }

  async write(path: string, body: Readable | Buffer): Promise<AgentEntry> {
    return (await this.json('PUT', `/files/content?path=${encodeURIComponent(path)}`, EntryAnswer, this.file(), body)).entry;
  }

  async mkdir(path: string): Promise<AgentEntry> {
    return (await this.json('POST', '/files/mkdir', EntryAnswer, this.file(), { path, parents: true })).entry;
  }

  async remove(path: string, recursive: boolean): Promise<void> {
    await this.json('DELETE', `/files?path=${encodeURIComponent(path)}${recursive ? '&recursive=1' : ''}`, null, this.file());
  }

  async move(from: string, to: string): Promise<AgentEntry> {
    return (await this.json('POST', '/files/move', EntryAnswer, this.file(), { from, to })).entry;
  }

  /** The agent's own log (kept in its memory, the last 64 KiB). */
  async log(): Promise<string> {
    const { res, body } = await this.exchange('GET', '/log', this.call(), undefined, this.limits.errorBytes * 2);
    if ((res.statusCode ?? 500) !== 200) throw this.fromStatus(res, body);
    return body.toString('utf8');
  }

  private call(): Bound {
    return { ms: this.limits.callMs, strict: true };
  }

  private file(): Bound {
    return { ms: this.limits.fileMs, strict: false };
  }

  private violation(reason: string): AppError {
    try {
      this.onViolation?.(reason);
    } catch {
      /* the listener's own failure is not the caller's */
    }
    return new AppError('sandbox_agent_error', `the sandbox's agent misbehaved: ${reason}`);
  }

  private timeout(what: string, bound: Bound): AppError {
    if (bound.strict) return this.violation(`${what} got no complete answer within ${bound.ms} ms`);
    return errors.unavailable(`the sandbox's agent did not answer ${what} within ${Math.round(bound.ms / 1000)} s`);
  }

  private parseLine(line: string, what: string): z.infer<typeof Line> {
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      throw this.violation(`${what} sent a line that is not JSON`);
    }
    const parsed = Line.safeParse(value);
    if (!parsed.success) throw this.violation(`${what} sent a line that is not an output event`);
    return parsed.data;
  }

  /** Races a promise against a timeout (none when `ms` is null); a late rejection is swallowed. */
  private within<T>(p: Promise<T>, ms: number | null, onTimeout: () => AppError): Promise<T> {
    if (ms === null) return p;
    p.catch(() => undefined);
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(onTimeout()), Math.max(0, ms));
      p.then(
        (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        (err) => {
          clearTimeout(timer);
          reject(err);
        },
      );
    });
  }

  private async json<T>(
    method: string,
    path: string,
    schema: z.ZodType<T> | null,
    bound: Bound,
    body?: unknown,
    limit = this.limits.jsonBytes,
  ): Promise<T> {
    const payload = body === undefined ? undefined : Buffer.isBuffer(body) || isReadable(body) ? body : Buffer.from(JSON.stringify(body));
    const { res, body: answer } = await this.exchange(
      method,
      path,
      bound,
      payload,
      limit,
      payload !== undefined && !Buffer.isBuffer(body) && !isReadable(body) ? 'json' : 'raw',
    );
    if ((res.statusCode ?? 500) >= 300) throw this.fromStatus(res, answer);
    if (!schema) return undefined as T;
    let value: unknown;
    try {
      value = JSON.parse(answer.toString('utf8'));
    } catch {
      throw this.violation(`${method} ${path.split('?')[0]} answered ${res.statusCode} with a body that is not JSON`);
    }
    const parsed = schema.safeParse(value);
    if (!parsed.success) throw this.violation(`${method} ${path.split('?')[0]} answered ${res.statusCode} with an unexpected body`);
    return parsed.data;
  }

  /** Sends a request and reads its whole answer: at most `limit` bytes (an error answer: errorBytes), within the bound's deadline. */
  private exchange(
    method: string,
    path: string,
    bound: Bound,
    body: Buffer | Readable | undefined,
    limit: number,
    kind: 'json' | 'raw' = 'json',
  ): Promise<{ res: http.IncomingMessage; body: Buffer }> {
    const what = `${method} ${path.split('?')[0]}`;
    return new Promise((resolve, reject) => {
      let settled = false;
      let timer: NodeJS.Timeout | undefined;
      const fail = (err: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        req.destroy();
        reject(err);
      };
      const req = this.send(method, path, body, kind, (res) => {
        const cap = (res.statusCode ?? 500) >= 300 ? this.limits.errorBytes : limit;
        const declared = Number(res.headers['content-length']);
        if (declared > cap) return fail(this.violation(`${what} announced ${declared} bytes, more than the ${cap} allowed`));
        const parts: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > cap) return fail(this.violation(`${what} answered more than ${cap} bytes`));
          parts.push(c);
        });
        res.on('end', () => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          resolve({ res, body: Buffer.concat(parts) });
        });
        res.on('error', (err) => fail(this.transportError(err)));
        res.on('aborted', () => fail(errors.unavailable(`the sandbox's agent hung up during ${what}`)));
      });
      req.on('error', (err) => fail(this.transportError(err)));
      // The deadline counts from the moment the request is sent (an upload's own time is the client's).
      const arm = () => {
        if (!settled) timer = setTimeout(() => fail(this.timeout(what, bound)), bound.ms);
      };
      if (isReadable(body)) req.on('finish', arm);
      else arm();
    });
  }

  /** Sends a request and resolves with its response once the headers are in (within the bound's deadline); the body is the caller's to read. */
  private open(method: string, path: string, bound: Bound, opts: { signal?: AbortSignal } = {}): Promise<http.IncomingMessage> {
    const what = `${method} ${path.split('?')[0]}`;
    return new Promise((resolve, reject) => {
      let settled = false;
      const timer = setTimeout(() => fail(this.timeout(what, bound)), bound.ms);
      const fail = (err: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        req.destroy();
        reject(err);
      };
      const req = this.send(
        method,
        path,
        undefined,
        'json',
        (res) => {
          if (settled) return res.destroy();
          settled = true;
          clearTimeout(timer);
          resolve(res);
        },
        opts.signal,
      );
      req.on('error', (err: NodeJS.ErrnoException) => (err.name === 'AbortError' ? fail(err) : fail(this.transportError(err))));
    });
  }

  private send(
    method: string,
    path: string,
    body: Buffer | Readable | undefined,
    kind: 'json' | 'raw',
    onResponse: (res: http.IncomingMessage) => void,
    signal?: AbortSignal,
  ): http.ClientRequest {
    const headers: http.OutgoingHttpHeaders = {};
    if (Buffer.isBuffer(body)) {
      headers['content-length'] = body.length;
      headers['content-type'] = kind === 'json' ? 'application/json' : 'application/octet-stream';
    } else if (body) headers['content-type'] = 'application/octet-stream';
    const req = http.request({ socketPath: this.socketPath, path, method, headers, agent: this.agent, signal }, onResponse);
    if (!body) req.end();
    else if (Buffer.isBuffer(body)) req.end(body);
    else {
      body.on('error', (err) => req.destroy(err));
      body.pipe(req);
    }
    return req;
  }

  /** A socket error: the agent is gone (503), or it broke HTTP itself (a violation). */
  private transportError(err: NodeJS.ErrnoException): Error {
    if (err instanceof AppError || err.name === 'AbortError') return err;
    if (typeof err.code === 'string' && err.code.startsWith('HPE_')) return this.violation(`it broke HTTP (${err.code})`);
    return errors.unavailable(`the sandbox's agent is not reachable (${err.code ?? err.message})`);
  }

  private async failure(res: http.IncomingMessage, bound: Bound): Promise<AppError> {
    const what = `answer ${res.statusCode}`;
    const parts: Buffer[] = [];
    let size = 0;
    try {
      const chunks = res[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
      const until = Date.now() + bound.ms;
      for (;;) {
        const next = await this.within(chunks.next(), until - Date.now(), () => this.timeout(what, bound));
        if (next.done) break;
        size += next.value.length;
        if (size > this.limits.errorBytes) throw this.violation(`an error answer was longer than ${this.limits.errorBytes} bytes`);
        parts.push(next.value);
      }
    } catch (err) {
      res.destroy();
      if (err instanceof AppError) return err;
    }
    return this.fromStatus(res, Buffer.concat(parts));
  }

  private fromStatus(res: http.IncomingMessage, body: Buffer): AppError {
    let message = `sandbox agent answered ${res.statusCode}`;
    try {
      const parsed = JSON.parse(body.toString('utf8')) as { error?: { message?: unknown } };
      if (typeof parsed.error?.message === 'string') message = parsed.error.message.slice(0, 4096);
    } catch {
      /* not JSON: keep the status line */
    }
    const make = CODE_FOR_STATUS[res.statusCode ?? 500];
    return make ? make(message) : new AppError('internal', `sandbox agent failed: ${message}`);
  }
}

function isReadable(v: unknown): v is Readable {
  return typeof (v as Readable | null)?.pipe === 'function';
}
