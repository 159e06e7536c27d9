import http from 'node:http';
import type { Readable } from 'node:stream';
import { AppError, errors } from '../http/errors.js';

/**
 * The host's side of the in-sandbox agent (native/sandbox-agent, protocol in its PROTOCOL.md): HTTP/1.1
 * over the Unix socket the host created and handed to the container. Keep-alive connections make a
 * command's round trip a fraction of a millisecond.
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
}

const CODE_FOR_STATUS: Record<number, (m: string) => AppError> = {
  400: (m) => errors.invalid(m),
  403: (m) => errors.forbidden(m),
  404: (m) => new AppError('not_found', m),
  409: (m) => errors.conflict(m),
  413: (m) => errors.tooLarge(m),
};

export class AgentClient {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

  constructor(readonly socketPath: string) {}

  close(): void {
    this.agent.destroy();
  }

  health(timeoutMs = 2000): Promise<{ ok: boolean }> {
    return this.json('GET', '/health', undefined, timeoutMs);
  }

  startProcess(body: StartProcess): Promise<{ pid: number; startedAt: string }> {
    return this.json('POST', '/processes', body);
  }

  async listProcesses(): Promise<AgentProcess[]> {
    return (await this.json<{ processes: AgentProcess[] }>('GET', '/processes')).processes;
  }

  getProcess(pid: number): Promise<AgentProcess> {
    return this.json('GET', `/processes/${pid}`);
  }

  async sendStdin(pid: number, data: string, eof: boolean): Promise<void> {
    await this.json('POST', `/processes/${pid}/stdin`, { data, eof });
  }

  async signal(pid: number, signal: string): Promise<void> {
    await this.json('POST', `/processes/${pid}/signal`, { signal });
  }

  /** The process's output from `after` (byte offset), then live until it exits when `follow`. Ends with an `exit` event once it has exited. */
  async *output(pid: number, opts: { follow: boolean; after?: number; signal?: AbortSignal }): AsyncGenerator<OutputEvent> {
    const qs = `follow=${opts.follow ? 1 : 0}${opts.after ? `&after=${opts.after}` : ''}`;
    const res = await this.request('GET', `/processes/${pid}/output?${qs}`, undefined, { signal: opts.signal });
    if (res.statusCode !== 200) throw await this.failure(res);
    let buffered = '';
    try {
      for await (const chunk of res) {
        buffered += (chunk as Buffer).toString('utf8');
        let nl: number;
        while ((nl = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, nl);
          buffered = buffered.slice(nl + 1);
          if (line.trim()) yield JSON.parse(line) as OutputEvent;
        }
      }
    } finally {
      res.destroy();
    }
  }

  /** A folder's entries, or the entry itself when `path` is a file. */
  stat(path: string): Promise<{ entries: AgentEntry[] } | { entry: AgentEntry }> {
    return this.json('GET', `/files?path=${encodeURIComponent(path)}`);
  }

  /** The file's bytes as a stream with its length. */
  async read(path: string): Promise<{ stream: Readable; size: number }> {
    const res = await this.request('GET', `/files/content?path=${encodeURIComponent(path)}`);
    if (res.statusCode !== 200) throw await this.failure(res);
    return { stream: res, size: Number(res.headers['content-length'] ?? 0) };
  }

  async write(path: string, body: Readable | Buffer): Promise<AgentEntry> {
    const res = await this.request('PUT', `/files/content?path=${encodeURIComponent(path)}`, body, { raw: true });
    return (await this.parse<{ entry: AgentEntry }>(res)).entry;
  }

  async mkdir(path: string): Promise<AgentEntry> {
    return (await this.json<{ entry: AgentEntry }>('POST', '/files/mkdir', { path, parents: true })).entry;
  }

  async remove(path: string, recursive: boolean): Promise<void> {
    await this.json('DELETE', `/files?path=${encodeURIComponent(path)}${recursive ? '&recursive=1' : ''}`);
  }

  async move(from: string, to: string): Promise<AgentEntry> {
    return (await this.json<{ entry: AgentEntry }>('POST', '/files/move', { from, to })).entry;
  }

  private async json<T>(method: string, path: string, body?: unknown, timeoutMs?: number): Promise<T> {
    const res = await this.request(method, path, body === undefined ? undefined : Buffer.from(JSON.stringify(body)), { timeoutMs });
    return this.parse<T>(res);
  }

  private async parse<T>(res: http.IncomingMessage): Promise<T> {
    if ((res.statusCode ?? 500) >= 300) throw await this.failure(res);
    const text = await readAll(res);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  private async failure(res: http.IncomingMessage): Promise<AppError> {
    const text = await readAll(res).catch(() => '');
    let message = `sandbox agent answered ${res.statusCode}`;
    try {
      const parsed = JSON.parse(text) as { error?: { message?: string } };
      if (parsed.error?.message) message = parsed.error.message;
    } catch {
      /* not JSON: keep the status line */
    }
    const make = CODE_FOR_STATUS[res.statusCode ?? 500];
    return make ? make(message) : new AppError('internal', `sandbox agent failed: ${message}`);
  }

  private request(
    method: string,
    path: string,
    body?: Buffer | Readable,
    opts: { timeoutMs?: number; signal?: AbortSignal; raw?: boolean } = {},
  ): Promise<http.IncomingMessage> {
    return new Promise((resolve, reject) => {
      const headers: http.OutgoingHttpHeaders = {};
      if (Buffer.isBuffer(body)) {
        headers['content-length'] = body.length;
        headers['content-type'] = opts.raw ? 'application/octet-stream' : 'application/json';
      } else if (body) headers['content-type'] = 'application/octet-stream';
      const req = http.request({ socketPath: this.socketPath, path, method, headers, agent: this.agent, signal: opts.signal }, resolve);
      req.on('error', (err: NodeJS.ErrnoException) => {
        if (err.name === 'AbortError') return reject(err);
        reject(errors.unavailable(`the sandbox's agent is not reachable (${err.code ?? err.message})`));
      });
      if (opts.timeoutMs) req.setTimeout(opts.timeoutMs, () => req.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })));
      if (!body) req.end();
      else if (Buffer.isBuffer(body)) req.end(body);
      else {
        body.on('error', (err) => req.destroy(err));
        body.pipe(req);
      }
    });
  }
}

async function readAll(res: http.IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
