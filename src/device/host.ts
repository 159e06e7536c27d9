import { type ChildProcess, spawn } from 'node:child_process';
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { ToolHost, ToolHostEvent } from '../platform/agent-tools.js';

/** Past this much buffered output per process the rest is dropped (the tools cut what the model sees anyway). */
const MAX_BUFFERED_BYTES = 8 * 1024 * 1024;

export class WorkspaceError extends Error {}

interface Proc {
  child: ChildProcess;
  events: ToolHostEvent[];
  bytes: number;
  exited: boolean;
  timer: NodeJS.Timeout | null;
  timedOut: boolean;
  /** Woken on every new event. */
  waiters: Set<() => void>;
}

const inside = (root: string, p: string) => p === root || p.startsWith(root.endsWith(path.sep) ? root : root + path.sep);

/**
 * A ToolHost over this machine: `bash -lc` in the workspace folder, as the user who runs `hangar device run`.
 * Working directories must resolve inside the workspace and files are read and written only inside it (after
 * following symlinks), or inside the host's own scratch directory (apply_patch's patch files). Each process runs
 * in its own process group, so a timeout or `dispose()` kills what it started too.
 */
export class WorkspaceHost implements ToolHost {
  private readonly procs = new Map<number, Proc>();

  private constructor(
    /** The workspace folder, symlinks resolved. */
    readonly workspace: string,
    /** A private scratch directory (removed by dispose). */
    readonly tmp: string,
  ) {}

  static async open(workspace: string): Promise<WorkspaceHost> {
    let real: string;
    try {
      real = await fs.realpath(workspace);
    } catch {
      throw new WorkspaceError(`the workspace ${workspace} does not exist`);
    }
    if (!(await fs.stat(real)).isDirectory()) throw new WorkspaceError(`the workspace ${workspace} is not a directory`);
    const tmp = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'hangar-device-')));
    return new WorkspaceHost(real, tmp);
  }

  private roots() {
    return [this.workspace, this.tmp];
  }

  /** An absolute path for `p` (relative to the workspace), refused when it resolves outside the allowed roots. */
  private async resolveFile(p: string): Promise<string> {
    const abs = path.resolve(this.workspace, p);
    // The nearest existing ancestor, symlinks resolved, then the rest of the path on top of it.
    let dir = path.dirname(abs);
    const rest: string[] = [path.basename(abs)];
    let realDir: string | null = null;
    while (realDir === null) {
      try {
        realDir = await fs.realpath(dir);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || dir === path.dirname(dir)) throw err;
        rest.unshift(path.basename(dir));
        dir = path.dirname(dir);
      }
    }
    let target = path.join(realDir, ...rest);
    try {
      target = await fs.realpath(target); // an existing file (or a symlink) must itself stay inside
    } catch {}
    if (!this.roots().some((r) => inside(r, target))) throw new WorkspaceError(`${p} is outside the workspace ${this.workspace}`);
    return target;
  }

  private async resolveCwd(cwd: string | undefined): Promise<string> {
    if (!cwd) return this.workspace;
    let real: string;
    try {
      real = await fs.realpath(path.resolve(this.workspace, cwd));
    } catch {
      throw new WorkspaceError(`the directory ${cwd} does not exist`);
    }
    if (!inside(this.workspace, real)) throw new WorkspaceError(`${cwd} is outside the workspace ${this.workspace}`);
    return real;
  }

  async startProcess(body: { cmd: string; cwd?: string; keepStdin?: boolean; timeoutMs?: number }): Promise<{ pid: number }> {
    const cwd = await this.resolveCwd(body.cwd);
    // Not a login shell: `hangar device run` already has the user's environment, and a login shell re-reads their
    // profile for every command (slow, and profile hooks such as a version manager's rehash race each other's locks
    // when commands run side by side).
    const child = spawn('bash', ['-c', body.cmd], {
      cwd,
      detached: true, // its own process group, killed as a whole
      stdio: [body.keepStdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
      env: { ...process.env, HANGAR_WORKSPACE: this.workspace },
    });
    const pid = await new Promise<number>((resolve, reject) => {
      child.once('spawn', () => resolve(child.pid!));
      child.once('error', reject);
    });
    const proc: Proc = { child, events: [], bytes: 0, exited: false, timer: null, timedOut: false, waiters: new Set() };
    this.procs.set(pid, proc);
    const push = (ev: ToolHostEvent) => {
      proc.events.push(ev);
      for (const w of proc.waiters) w();
    };
    const onData = (type: 'stdout' | 'stderr') => (chunk: Buffer) => {
      if (proc.bytes >= MAX_BUFFERED_BYTES) return;
      const part = chunk.subarray(0, MAX_BUFFERED_BYTES - proc.bytes);
      proc.bytes += part.length;
      push({ type, data: part.toString('base64') });
    };
    child.stdout!.on('data', onData('stdout'));
    child.stderr!.on('data', onData('stderr'));
    child.stdin?.on('error', () => {}); // writing to a process that exited
    child.once('close', (code, signal) => {
      if (proc.timer) clearTimeout(proc.timer);
      proc.exited = true;
      push({ type: 'exit', exitCode: code, signal: proc.timedOut ? null : signal, timedOut: proc.timedOut });
    });
    if (body.timeoutMs && body.timeoutMs > 0) {
      proc.timer = setTimeout(() => {
        proc.timedOut = true;
        killGroup(pid);
      }, body.timeoutMs);
    }
    return { pid };
  }

  async *output(pid: number, opts: { follow: boolean; signal?: AbortSignal }): AsyncGenerator<ToolHostEvent> {
    const proc = this.procs.get(pid);
    if (!proc) throw new WorkspaceError(`no process ${pid}`);
    let i = 0;
    for (;;) {
      while (i < proc.events.length) {
        const ev = proc.events[i++]!;
        yield ev;
        if (ev.type === 'exit') return;
      }
      if (!opts.follow || opts.signal?.aborted) return;
      await new Promise<void>((resolve) => {
        const wake = () => {
          proc.waiters.delete(wake);
          opts.signal?.removeEventListener('abort', wake);
          resolve();
        };
        proc.waiters.add(wake);
        opts.signal?.addEventListener('abort', wake, { once: true });
      });
    }
  }

  async sendStdin(pid: number, data: string, eof: boolean): Promise<void> {
    const proc = this.procs.get(pid);
    if (!proc) throw new WorkspaceError(`no process ${pid}`);
    const stdin = proc.child.stdin;
    if (!stdin || proc.exited || stdin.destroyed) throw new WorkspaceError(`process ${pid} does not take input`);
    await new Promise<void>((resolve, reject) => stdin.write(Buffer.from(data, 'base64'), (err) => (err ? reject(err) : resolve())));
    if (eof) stdin.end();
  }

  async write(p: string, body: Buffer): Promise<void> {
    const target = await this.resolveFile(p);
    await fs.mkdir(path.dirname(target), { recursive: true });
    await fs.writeFile(target, body);
  }

  async read(p: string): Promise<{ stream: ReturnType<typeof createReadStream>; size: number }> {
    const target = await this.resolveFile(p);
    const st = await fs.stat(target);
    if (!st.isFile()) throw new WorkspaceError(`${p} is not a file`);
    return { stream: createReadStream(target), size: st.size };
  }

  /** Kills one process (and its group). */
  kill(pid: number): void {
    const proc = this.procs.get(pid);
    if (proc && !proc.exited) killGroup(pid);
  }

  /** Kills every process this host started and removes its scratch directory. */
  async dispose(): Promise<void> {
    const waits: Promise<void>[] = [];
    for (const [pid, proc] of this.procs) {
      if (proc.timer) clearTimeout(proc.timer);
      if (proc.exited) continue;
      waits.push(new Promise<void>((resolve) => proc.child.once('close', () => resolve())));
      killGroup(pid);
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(waits), new Promise((r) => (timer = setTimeout(r, 2000)))]);
    clearTimeout(timer);
    await fs.rm(this.tmp, { recursive: true, force: true });
  }
}

function killGroup(pid: number) {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {}
  }
}
