/**
 * Starts processes through `hangar-spawner` (native/spawner.c), a small resident C process, instead of from
 * Hangar itself.
 *
 * Node's `spawn()` returns only once the child has exec'd: libuv forks the whole Node process and waits on a
 * close-on-exec pipe. On the 2-core VM that wait is ~6 ms even from an idle Node and more from a loaded
 * Hangar, and no request is served meanwhile; a fork of the spawner costs a fraction of a millisecond and
 * blocks nothing of Hangar's. Each code execution starts the launcher three times (work dir create, run,
 * remove): ADR 0009, Performance. The wire format is described in native/spawner.c.
 *
 * The spawner is started on first use and again after it dies (the runs it had in flight end with an error);
 * it dies with Hangar (its parent-death signal) and exits when its stdin closes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { constants } from 'node:os';

export interface Spawned {
  /** Exit code, or null when a signal ended the process. */
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The kept bytes of each output fd (fd 1, 2, 3, ...). */
  outputs: Buffer[];
  /** Whether more than the cap was written to each output fd. */
  truncated: boolean[];
  /** Why the process could not be started (or the spawner died), else null. */
  error: string | null;
}

export interface SpawnRequest {
  file: string;
  args: string[];
  stdin?: string | Buffer;
  /** One entry per output fd after stdin (1, 2, 3, ... at most 4): how many bytes of it to keep. */
  caps: number[];
}

export interface SpawnHandle {
  done: Promise<Spawned>;
  kill(signal?: NodeJS.Signals): void;
}

const SPAWN = 1;
const KILL = 2;
const DONE = 1;

interface Pending {
  resolve(r: Spawned): void;
  /** The spawner process the request went to. */
  proc: ChildProcess;
}

const SIGNALS = new Map<number, NodeJS.Signals>(Object.entries(constants.signals).map(([name, n]) => [n, name as NodeJS.Signals]));

export class Spawner {
  private proc: ChildProcess | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();

  constructor(private readonly path: string) {}

  /** Starts `file` with `args` (empty environment) and collects its output fds. */
  spawn(req: SpawnRequest): SpawnHandle {
    const id = this.nextId++ >>> 0;
    if (req.caps.length > 4) throw new TypeError('at most 4 output fds');
    let proc: ChildProcess;
    try {
      proc = this.process();
    } catch (err) {
      return { done: Promise.resolve(failed(`cannot start ${this.path}: ${(err as Error).message}`, req.caps.length)), kill: () => undefined };
    }
    const done = new Promise<Spawned>((resolve) => this.pending.set(id, { resolve, proc }));
    if (this.pending.size === 1) ref(proc, true);
    proc.stdin?.write(encodeSpawn(id, req));
    return {
      done,
      kill: (signal = 'SIGTERM') => {
        if (!this.pending.has(id) || !proc.stdin?.writable) return;
        const n = (SIGNALS_BY_NAME.get(signal) ?? 15) | 0;
        const b = Buffer.alloc(16);
        b.writeUInt32LE(12, 0);
        b.writeUInt32LE(KILL, 4);
        b.writeUInt32LE(id, 8);
        b.writeInt32LE(n, 12);
        proc.stdin.write(b);
      },
    };
  }

  /** Like execFile: resolves with stdout and stderr on exit code 0, rejects with stderr (or the reason) otherwise. */
  async exec(file: string, args: string[], maxBytes = 1024 * 1024): Promise<{ stdout: string; stderr: string }> {
    const r = await this.spawn({ file, args, caps: [maxBytes, maxBytes] }).done;
    const stdout = r.outputs[0]?.toString('utf8') ?? '';
    const stderr = r.outputs[1]?.toString('utf8') ?? '';
    if (r.error || r.code !== 0) {
      const how = r.error ?? (r.signal ? `killed by ${r.signal}` : `exited with code ${r.code}`);
      throw Object.assign(new Error(stderr.trim() || `${file} ${args[0] ?? ''}: ${how}`), { stdout, stderr });
    }
    return { stdout, stderr };
  }

  /** Stops the spawner (its children get SIGTERM). */
  close(): void {
    const proc = this.proc;
    this.proc = null;
    proc?.stdin?.end();
  }

  private settle(id: number, r: Spawned): void {
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    // The spawner keeps Hangar alive only while something waits on it.
    if (![...this.pending.values()].some((q) => q.proc === p.proc)) ref(p.proc, false);
    p.resolve(r);
  }

  private process(): ChildProcess {
    if (this.proc) return this.proc;
    const proc = spawn(this.path, [], { stdio: ['pipe', 'pipe', 'inherit'], env: {} });
    this.proc = proc;
    let buf: Buffer = Buffer.alloc(0);
    proc.stdout?.on('data', (chunk: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      let off = 0;
      while (buf.length - off >= 4) {
        const len = buf.readUInt32LE(off);
        if (buf.length - off - 4 < len) break;
        this.onAnswer(buf.subarray(off + 4, off + 4 + len));
        off += 4 + len;
      }
      buf = off === buf.length ? Buffer.alloc(0) : Buffer.from(buf.subarray(off));
    });
    proc.stdin?.on('error', () => undefined); // it died: 'exit' below ends what was in flight
    const gone = (why: string) => {
      if (this.proc === proc) this.proc = null;
      for (const [id, p] of [...this.pending]) if (p.proc === proc) this.settle(id, failed(`the spawner ${why}`, 0));
    };
    proc.on('error', (err) => gone(`failed: ${err.message}`));
    proc.on('exit', (code, signal) => gone(signal ? `was killed by ${signal}` : `exited with code ${code}`));
    ref(proc, false);
    return proc;
  }

  private onAnswer(f: Buffer): void {
    if (f.length < 20 || f.readUInt32LE(0) !== DONE) return;
    const id = f.readUInt32LE(4);
    const kind = f.readInt32LE(8);
    const value = f.readInt32LE(12);
    const nout = f.readUInt32LE(16);
    let off = 20;
    const outputs: Buffer[] = [];
    const truncated: boolean[] = [];
    for (let i = 0; i < nout; i++) {
      truncated.push(f[off] === 1);
      const n = f.readUInt32LE(off + 1);
      outputs.push(Buffer.from(f.subarray(off + 5, off + 5 + n)));
      off += 5 + n;
    }
    const message = f.subarray(off).toString('utf8');
    this.settle(id, {
      code: kind === 0 ? value : null,
      signal: kind === 1 ? (SIGNALS.get(value) ?? null) : null,
      outputs,
      truncated,
      error: kind === 2 ? message || `errno ${value}` : null,
    });
  }
}

const SIGNALS_BY_NAME = new Map<string, number>([...SIGNALS].map(([n, name]) => [name, n]));

function encodeSpawn(id: number, req: SpawnRequest): Buffer {
  const argv = Buffer.from([req.file, ...req.args].map((a) => `${a}\0`).join(''), 'utf8');
  const stdin = typeof req.stdin === 'string' ? Buffer.from(req.stdin, 'utf8') : (req.stdin ?? Buffer.alloc(0));
  const head = Buffer.alloc(12 + 4 + 8 * req.caps.length + 4);
  head.writeUInt32LE(head.length - 4 + argv.length + stdin.length, 0);
  head.writeUInt32LE(SPAWN, 4);
  head.writeUInt32LE(id, 8);
  head.writeUInt32LE(req.caps.length, 12);
  for (const [i, cap] of req.caps.entries()) head.writeBigUInt64LE(BigInt(cap), 16 + 8 * i);
  head.writeUInt32LE(1 + req.args.length, 16 + 8 * req.caps.length);
  return Buffer.concat([head, argv, stdin]);
}

/** Whether the spawner (its process and pipes) keeps Node's event loop alive. */
function ref(proc: ChildProcess, on: boolean): void {
  for (const h of [proc, proc.stdin, proc.stdout] as ({ ref?(): void; unref?(): void } | null)[]) {
    if (on) h?.ref?.();
    else h?.unref?.();
  }
}

function failed(error: string, fds: number): Spawned {
  return { code: null, signal: null, outputs: Array.from({ length: fds }, () => Buffer.alloc(0)), truncated: Array(fds).fill(false), error };
}
