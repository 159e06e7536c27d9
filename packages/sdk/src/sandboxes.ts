import { type Core, unwrap } from './core.js';
import { ConnectionError, HangarError } from './errors.js';
import { readEvents } from './sse.js';
import type { RequestOptions } from './transport.js';
import type { CommandResult, CreateSandboxParams, FileEntry, Page, SandboxInfo } from './types.js';

/** Options of {@link Commands.run}. */
export interface RunCommandOptions extends RequestOptions {
  /** Called with each piece of standard output as the command writes it. */
  onStdout?: (data: string) => void;
  /** Called with each piece of standard error as the command writes it. */
  onStderr?: (data: string) => void;
  /** Working directory (absolute, or relative to /home/user). */
  cwd?: string;
  /** Environment variables of this command (over the sandbox's). */
  env?: Record<string, string>;
  /** Written to the command's standard input, which is then closed. */
  stdin?: string;
  /** The sandbox kills the command after this long (default 60 000 ms); the result then has `timedOut: true`. */
  timeoutMs?: number;
}

/** Commands in a sandbox. `sandbox.commands`. */
export class Commands {
  constructor(
    private readonly core: Core,
    private readonly sandboxId: string,
  ) {}

  /**
   * Runs `cmd` with `/bin/bash -c` as the sandbox user and waits for it to end. The output streams as it comes
   * (to `onStdout`/`onStderr`), and the result has all of it. A command that exits non-zero is not an error: see
   * `exitCode`. Aborting `signal` kills the command.
   * @example
   * ```ts
   * const r = await sbx.commands.run('npm test', { cwd: 'app', onStdout: (d) => process.stdout.write(d) });
   * if (r.exitCode !== 0) console.error(r.stderr);
   * ```
   */
  async run(cmd: string, opts: RunCommandOptions = {}): Promise<CommandResult> {
    const { onStdout, onStderr, cwd, env, stdin, timeoutMs, ...request } = opts;
    const body = { cmd, cwd, env, stdin, timeoutMs };
    const response = await this.core.transport.request('POST', `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/commands`, {
      ...request,
      stream: true,
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify(body),
    });
    let pid = 0;
    let stdout = '';
    let stderr = '';
    for await (const ev of readEvents(response.body, request.signal)) {
      const data = JSON.parse(ev.data) as Record<string, unknown>;
      switch (ev.event) {
        case 'start':
          pid = Number(data.pid);
          break;
        case 'stdout':
          stdout += String(data.data);
          onStdout?.(String(data.data));
          break;
        case 'stderr':
          stderr += String(data.data);
          onStderr?.(String(data.data));
          break;
        case 'exit':
          return {
            pid,
            exitCode: (data.exitCode as number | null) ?? null,
            signal: (data.signal as string | null) ?? null,
            timedOut: Boolean(data.timedOut),
            stdout,
            stderr,
            durationMs: Number(data.durationMs ?? 0),
          };
        case 'error':
          throw new HangarError(String(data.message ?? 'the command failed'), { code: 'sandbox_agent_error', status: 502 });
      }
    }
    throw new ConnectionError('the command’s output stream ended before the command did', { code: 'connection_error' });
  }
}

/** Options of {@link Files.read}. */
export interface ReadFileOptions extends RequestOptions {
  /** `text` (default, UTF-8), `bytes` (a Uint8Array) or `stream` (the body as it downloads). */
  format?: 'text' | 'bytes' | 'stream';
}

/** Files in a sandbox; paths are absolute or relative to /home/user. `sandbox.files`. */
export class Files {
  constructor(
    private readonly core: Core,
    private readonly sandboxId: string,
  ) {}

  private get base() {
    return `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}`;
  }

  /**
   * Writes a file (atomically, creating its folders, replacing what is there): text as UTF-8, or bytes as given.
   * @example `await sbx.files.write('data/in.bin', new Uint8Array([0, 1, 2]))`
   */
  async write(path: string, data: string | Uint8Array | ArrayBuffer | Blob, opts?: RequestOptions): Promise<FileEntry> {
    const body = typeof data === 'string' ? new TextEncoder().encode(data) : data;
    const response = await this.core.transport.request('PUT', `${this.base}/files/content`, {
      ...opts,
      query: { path },
      headers: { 'content-type': 'application/octet-stream' },
      body: body as BodyInit,
    });
    return ((await response.json()) as { data: FileEntry }).data;
  }

  /** Reads a file: as text (default), as bytes, or as a stream. */
  read(path: string, opts?: ReadFileOptions & { format?: 'text' }): Promise<string>;
  read(path: string, opts: ReadFileOptions & { format: 'bytes' }): Promise<Uint8Array>;
  read(path: string, opts: ReadFileOptions & { format: 'stream' }): Promise<ReadableStream<Uint8Array>>;
  async read(path: string, opts: ReadFileOptions = {}): Promise<string | Uint8Array | ReadableStream<Uint8Array>> {
    const { format = 'text', ...request } = opts;
    const response = await this.core.transport.request('GET', `${this.base}/files/content`, {
      ...request,
      query: { path },
      stream: format === 'stream',
    });
    if (format === 'stream') return response.body ?? new ReadableStream({ start: (c) => c.close() });
    const bytes = new Uint8Array(await response.arrayBuffer());
    return format === 'bytes' ? bytes : new TextDecoder().decode(bytes);
  }

  /** The entries of a folder, sorted by name (for a file: its own entry). Default: /home/user. */
  async list(path = '.', opts?: RequestOptions): Promise<FileEntry[]> {
    const { data } = await unwrap(
      this.core.api.GET('/v1/sandboxes/{id}/files', { params: { path: { id: this.sandboxId }, query: { path } }, ...this.core.init(opts) }),
    );
    return 'entries' in data ? data.entries : [data.entry];
  }

  /** Makes a folder and its parents. */
  async makeDir(path: string, opts?: RequestOptions): Promise<FileEntry> {
    return (
      await unwrap(
        this.core.api.POST('/v1/sandboxes/{id}/folders', { params: { path: { id: this.sandboxId } }, body: { path }, ...this.core.init(opts) }),
      )
    ).data;
  }

  /** Deletes a file, or a folder (one with entries only with `recursive: true`). */
  async remove(path: string, opts: RequestOptions & { recursive?: boolean } = {}): Promise<void> {
    const { recursive, ...request } = opts;
    await unwrap(
      this.core.api.DELETE('/v1/sandboxes/{id}/files', {
        params: { path: { id: this.sandboxId }, query: { path, ...(recursive ? { recursive: 'true' as const } : {}) } },
        ...this.core.init(request),
      }),
    );
  }
}

/**
 * A sandbox: a persistent isolated machine to run commands in and keep files on. `hangar.sandboxes.create()`,
 * `get()` and `connect()` answer one.
 */
export class Sandbox {
  /** Its commands. */
  readonly commands: Commands;
  /** Its files. */
  readonly files: Files;

  constructor(
    private readonly core: Core,
    /** Its record as last seen (refreshed by {@link Sandbox.refresh}, pause and resume). */
    public info: SandboxInfo,
  ) {
    this.commands = new Commands(core, info.id);
    this.files = new Files(core, info.id);
  }

  /** Its id (`sbx_` prefix). */
  get id(): string {
    return this.info.id;
  }

  /** Its state as last seen: starting, running, paused, stopped, error or destroyed. */
  get state(): SandboxInfo['state'] {
    return this.info.state;
  }

  private get path() {
    return { params: { path: { id: this.info.id } } };
  }

  /** Reads its record again. */
  async refresh(opts?: RequestOptions): Promise<SandboxInfo> {
    this.info = (await unwrap(this.core.api.GET('/v1/sandboxes/{id}', { ...this.path, ...this.core.init(opts) }))).data;
    return this.info;
  }

  /** Freezes its processes, keeping memory and files (runtime metering stops). */
  async pause(opts?: RequestOptions): Promise<SandboxInfo> {
    this.info = (await unwrap(this.core.api.POST('/v1/sandboxes/{id}/pause', { ...this.path, ...this.core.init(opts) }))).data;
    return this.info;
  }

  /** Continues a paused sandbox (or starts a stopped one again over its files). */
  async resume(opts?: RequestOptions): Promise<SandboxInfo> {
    this.info = (await unwrap(this.core.api.POST('/v1/sandboxes/{id}/resume', { ...this.path, ...this.core.init(opts) }))).data;
    return this.info;
  }

  /** Kills its processes and deletes it (its record stays, state `destroyed`). */
  async destroy(opts?: RequestOptions): Promise<void> {
    await unwrap(this.core.api.DELETE('/v1/sandboxes/{id}', { ...this.path, ...this.core.init(opts) }));
    this.info = { ...this.info, state: 'destroyed' };
  }
}

/** Sandboxes. `hangar.sandboxes`. */
export class Sandboxes {
  constructor(private readonly core: Core) {}

  /**
   * Starts a sandbox from a ready template (default `base-ubuntu`) and answers once it can run commands.
   * @example
   * ```ts
   * const sbx = await hangar.sandboxes.create({ template: 'base-ubuntu' });
   * await sbx.commands.run('echo hi', { onStdout: console.log });
   * ```
   */
  async create(params: CreateSandboxParams = {}, opts?: RequestOptions): Promise<Sandbox> {
    const { data } = await unwrap(this.core.api.POST('/v1/sandboxes', { body: params, ...this.core.init(opts) }));
    return new Sandbox(this.core, data);
  }

  /** The sandbox with this id, as it is (`NotFoundError` when there is none). */
  async get(id: string, opts?: RequestOptions): Promise<Sandbox> {
    const { data } = await unwrap(this.core.api.GET('/v1/sandboxes/{id}', { params: { path: { id } }, ...this.core.init(opts) }));
    return new Sandbox(this.core, data);
  }

  /** The sandbox with this id, ready to use: a paused or stopped one is resumed first. */
  async connect(id: string, opts?: RequestOptions): Promise<Sandbox> {
    const sandbox = await this.get(id, opts);
    if (sandbox.state === 'paused' || sandbox.state === 'stopped') await sandbox.resume(opts);
    return sandbox;
  }

  /** A page of sandboxes, newest first (destroyed ones only with `state: 'destroyed'`). */
  async list(query: { limit?: number; cursor?: string; state?: SandboxInfo['state'] } = {}, opts?: RequestOptions): Promise<Page<SandboxInfo>> {
    const { data, meta } = await unwrap(this.core.api.GET('/v1/sandboxes', { params: { query }, ...this.core.init(opts) }));
    return { data, hasMore: meta.hasMore, nextCursor: meta.nextCursor };
  }
}
