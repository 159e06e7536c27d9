/**
 * Starts benchmark servers as child processes, all the same way: `node --import tsx <script>`, an IPC
 * channel, the same environment. A child answers `{ type: 'start', options }` with
 * `{ type: 'listening', port, info }` once it listens on 127.0.0.1:<ephemeral port>.
 * Children are killed when the parent stops, however it stops.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const SERVERS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'servers');

/** Node flags every server child gets, so targets differ only in what they serve. */
export const CHILD_NODE_FLAGS = ['--import', 'tsx'] as const;

export interface ServerChild<Info = unknown> {
  name: string;
  port: number;
  url: string;
  info: Info;
  process: ChildProcess;
  /** CPU time (user + system, µs) the child has used so far. */
  cpuMicros(): Promise<number>;
  /** Starts the V8 CPU profiler inside the child (no extra node flags needed). */
  startProfile(intervalUs?: number): Promise<void>;
  /** Stops it and writes the `.cpuprofile` (Chrome DevTools format) to `file`. */
  stopProfile(file: string): Promise<string>;
  stop(): Promise<void>;
}

const live = new Set<ChildProcess>();
let hooked = false;

/** SIGTERM lets a child tear down (close, delete its temp data dir); children also stop when the IPC channel closes. */
function killAll(signal: NodeJS.Signals = 'SIGTERM') {
  for (const c of live) if (c.exitCode === null && c.signalCode === null) c.kill(signal);
}

function hookExit() {
  if (hooked) return;
  hooked = true;
  process.on('exit', () => killAll());
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(sig, () => {
      killAll();
      process.exit(130);
    });
  }
}

type Msg = { type: string; id?: number; [k: string]: unknown };

export interface StartOptions {
  /** Extra node flags (e.g. `--cpu-prof`); breaks like-for-like comparison, so only for profiling. */
  extraNodeFlags?: string[];
  /** Sent to the child with the start message. */
  options?: unknown;
  /** How long the child may take to seed and listen. */
  timeoutMs?: number;
}

export async function startServer<Info = unknown>(name: string, script: string, opts: StartOptions = {}): Promise<ServerChild<Info>> {
  hookExit();
  const child = spawn(process.execPath, [...CHILD_NODE_FLAGS, ...(opts.extraNodeFlags ?? []), path.join(SERVERS_DIR, script)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    serialization: 'advanced',
    env: { ...process.env, LOG_LEVEL: 'silent', HANGAR_VALIDATE_RESPONSES: undefined },
  });
  live.add(child);
  child.once('exit', () => live.delete(child));

  let nextId = 1;
  const pending = new Map<number, (m: Msg) => void>();
  child.on('message', (m: Msg) => {
    if (m.id !== undefined && pending.has(m.id)) {
      pending.get(m.id)!(m);
      pending.delete(m.id);
    }
  });
  const request = (type: string, extra: Record<string, unknown> = {}, timeoutMs = 10_000) =>
    new Promise<Msg>((resolve, reject) => {
      const id = nextId++;
      const timer = setTimeout(() => {
        pending.delete(id);
        reject(new Error(`${name}: no answer to "${type}" within ${timeoutMs} ms`));
      }, timeoutMs);
      const onExit = (code: number | null, signal: string | null) => {
        clearTimeout(timer);
        reject(new Error(`${name}: exited (${signal ?? code}) before answering "${type}"`));
      };
      child.once('exit', onExit);
      pending.set(id, (m) => {
        clearTimeout(timer);
        child.off('exit', onExit);
        if (m.type === 'error') reject(new Error(`${name}: ${m.message}`));
        else resolve(m);
      });
      child.send({ type, id, ...extra });
    });

  let started: Msg;
  try {
    started = await request('start', { options: opts.options }, opts.timeoutMs ?? 120_000);
  } catch (err) {
    child.kill('SIGTERM');
    throw err;
  }
  const port = started.port as number;
  return {
    name,
    port,
    url: `http://127.0.0.1:${port}`,
    info: (started.info ?? {}) as Info,
    process: child,
    async cpuMicros() {
      const m = await request('cpu');
      return m.micros as number;
    },
    async startProfile(intervalUs = 100) {
      await request('profile-start', { intervalUs });
    },
    async stopProfile(file: string) {
      await request('profile-stop', { file }, 60_000);
      return file;
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * The child side: waits for `start`, runs `setup` (which listens and returns the port), answers
 * `cpu` queries, and on SIGTERM or loss of the parent runs `teardown` and exits.
 */
/**
 * Starts V8's sampling profiler on this process; the returned function stops it and writes the profile (with the
 * inline source maps tsx emits, so reports can name source lines) to `file`.
 */
export async function startProfiler(intervalUs: number): Promise<(file: string) => Promise<void>> {
  const session = new Session();
  session.connect();
  const sourceMaps: Record<string, string> = {};
  const onScript = (e: { params: { url: string; sourceMapURL?: string } }) => {
    if (e.params.url.startsWith('file://') && e.params.sourceMapURL?.startsWith('data:')) sourceMaps[e.params.url] = e.params.sourceMapURL;
  };
  session.on('Debugger.scriptParsed', onScript);
  await session.post('Debugger.enable');
  await session.post('Debugger.disable');
  session.off('Debugger.scriptParsed', onScript);
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: intervalUs });
  await session.post('Profiler.start');
  return async (file) => {
    const { profile } = await session.post('Profiler.stop');
    writeFileSync(file, JSON.stringify({ ...profile, $sourceMaps: sourceMaps }));
    session.disconnect();
  };
}

export function serveChild(setup: (options: any) => Promise<{ port: number; info?: Record<string, unknown> }>, teardown: () => Promise<void>) {
  let stopping = false;
  let stopProfiler: ((file: string) => Promise<void>) | undefined;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    setTimeout(() => process.exit(1), 5000).unref();
    try {
      await teardown();
    } finally {
      process.exit(0);
    }
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  process.on('disconnect', stop);
  process.on('message', async (m: Msg) => {
    if (m.type === 'start') {
      try {
        const { port, info } = await setup(m.options);
        process.send!({ type: 'listening', id: m.id, port, info });
      } catch (err) {
        process.send!({ type: 'error', id: m.id, message: (err as Error).stack ?? String(err) });
      }
    } else if (m.type === 'cpu') {
      const u = process.cpuUsage();
      process.send!({ type: 'cpu', id: m.id, micros: u.user + u.system });
    } else if (m.type === 'profile-start') {
      try {
        stopProfiler = await startProfiler(m.intervalUs as number);
        process.send!({ type: 'ok', id: m.id });
      } catch (err) {
        process.send!({ type: 'error', id: m.id, message: String(err) });
      }
    } else if (m.type === 'profile-stop') {
      try {
        await stopProfiler!(m.file as string);
        stopProfiler = undefined;
        process.send!({ type: 'ok', id: m.id });
      } catch (err) {
        process.send!({ type: 'error', id: m.id, message: String(err) });
      }
    }
  });
}
