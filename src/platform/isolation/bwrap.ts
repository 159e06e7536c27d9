import fs from 'node:fs/promises';
import { constants as os } from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import type { CgroupInfo } from './cgroups.js';
import type { Spawner } from './spawner.js';
import type { Isolation, Limits, RunResult, RunSpec, WorkDir } from './types.js';
import type { UidSlots } from './uid-slots.js';

const EMPTY = Buffer.alloc(0);

/** Where the tools dir appears inside every run (native/common.h HANGAR_TOOLS_PATH). */
export const TOOLS_PATH = '/.hangar';

/** Copies src to dest (root-owned, `mode`) unless dest already has the same bytes; atomic by rename. */
export async function installCopy(src: string, dest: string, mode = 0o755): Promise<void> {
  const [a, b] = await Promise.all([fs.readFile(src), fs.readFile(dest).catch(() => null)]);
  if (b && a.equals(b)) return;
  const tmp = `${dest}.${process.pid}.tmp`;
  await fs.writeFile(tmp, a, { mode });
  await fs.chmod(tmp, mode);
  await fs.rename(tmp, dest);
}

/** How the bwrap isolation is set up on this host (see index.ts for the defaults). */
export interface BwrapConfig {
  launcherPath: string;
  /**
   * The tools dir: a root-owned tmpfs holding the reaper (`init`) and installed tools, bound read-only at
   * /.hangar in every run. Its ancestors are searchable by the sandbox uids (bwrap binds it as that uid).
   */
  toolsDir: string;
  bwrapPath: string;
  /** Root-owned, mode 0711: work directories are created here. */
  workRoot: string;
  /** The hierarchy and Hangar's subtree in it (cgroups.ts): gives the launcher --cgroup-root and --cgroup-parent. */
  cgroup: CgroupInfo;
  /** tmpfs size of each work directory (its disk limit). */
  workDirBytes: number;
  /** tmpfs size of /tmp inside each sandbox. */
  tmpBytes: number;
  /** Host /etc entries bound read-only into the sandbox (skipped where absent). */
  etc: readonly string[];
  /** Extra host directories bound read-only at the same path (/usr is always bound). */
  readOnlyPaths: readonly string[];
  /** Environment every program starts with; RunSpec.env is laid over it. */
  baseEnv: Readonly<Record<string, string>>;
  /** bwrap supports --disable-userns (0.8+): no nested user namespaces in the sandbox. */
  disableUserns: boolean;
  /** CFS quota per run in percent of one CPU, or null for none. */
  cpuQuotaPct: number | null;
  /** CPU weight per run (1..10000), or null for the kernel's default. */
  cpuWeight: number | null;
  /** Output read and discarded past Limits.outputBytes before the pipe is closed on the program. */
  outputSlackBytes: number;
}

/** The launcher's JSON report (native/launcher.c, cmd_run). */
const LauncherReport = z.object({
  v: z.literal(1),
  error: z.string().nullable(),
  result: z.enum(['exited', 'signaled', 'execfail', 'none']).optional(),
  code: z.number().int().optional(),
  signal: z.number().int().optional(),
  execError: z.string().optional(),
  sandboxExit: z.number().int().optional(),
  sandboxSignal: z.number().int().optional(),
  timeout: z.enum(['wall', 'cpu']).nullable().optional(),
  aborted: z.boolean().optional(),
  oomKills: z.number().optional(),
  memPeakBytes: z.number().optional(),
  cpuNs: z.number().optional(),
  maxRssKb: z.number().optional(),
  wallUs: z.number().optional(),
  stdoutBytes: z.number().optional(),
  stderrBytes: z.number().optional(),
  stdoutCut: z.boolean().optional(),
  stderrCut: z.boolean().optional(),
  /** Runs of kept output in arrival order: +n bytes of stdout, -n bytes of stderr. */
  order: z.array(z.number().int()).optional(),
  /** More runs than the launcher records: the rest is not in `order`. */
  orderLost: z.boolean().optional(),
});
type LauncherReport = z.infer<typeof LauncherReport>;

const SIGNAL_NAMES = new Map<number, string>(Object.entries(os.signals).map(([name, n]) => [n, name]));
const signalName = (n: number) => SIGNAL_NAMES.get(n) ?? `SIG${n}`;

/** Real isolation: bubblewrap in per-run cgroups, started by the native launcher as an unprivileged uid. */
export class BwrapIsolation implements Isolation {
  readonly available = true;
  readonly unavailableReason = null;
  get cgroup(): CgroupInfo {
    return this.cfg.cgroup;
  }
  private readonly workDirs = new Map<string, number>();
  /** Runs in progress per work dir: disposing of a work dir ends them first, so its uid is free when released. */
  private readonly inFlight = new Map<string, Set<{ kill(): void; done: Promise<unknown> }>>();

  constructor(
    private readonly cfg: BwrapConfig,
    private readonly slots: UidSlots,
    /** Starts the launcher from a small resident process (spawner.ts), off Hangar's event loop. */
    private readonly spawner: Spawner,
  ) {}

  /** A fresh tmpfs (size-limited, mode 0700) owned by a uid no other live work directory has. */
  async createWorkDir(): Promise<WorkDir> {
    const dirOf = (uid: number) => path.join(this.cfg.workRoot, String(uid));
    const uid = await this.slots.claim(dirOf);
    const dir = dirOf(uid);
    try {
      try {
        await this.launcher(['workdir-create', dir, String(uid), String(uid), String(this.cfg.workDirBytes)]);
      } catch {
        // Left over from a process that died without its lock (e.g. the lock directory was wiped): retry once.
        await this.removeDir(dir);
        await this.launcher(['workdir-create', dir, String(uid), String(uid), String(this.cfg.workDirBytes)]);
      }
    } catch (err) {
      await this.slots.release(uid);
      throw err;
    }
    this.workDirs.set(dir, uid);
    let disposed: Promise<void> | null = null;
    return {
      path: dir,
      uid,
      gid: uid,
      dispose: () =>
        (disposed ??= (async () => {
          this.workDirs.delete(dir);
          const running = [...(this.inFlight.get(dir) ?? [])];
          for (const r of running) r.kill();
          await Promise.all(running.map((r) => r.done));
          try {
            await this.removeDir(dir);
          } finally {
            await this.slots.release(uid);
          }
        })()),
    };
  }

  /** Unmounts and removes a work directory (also a dead process's). */
  async removeDir(dir: string): Promise<void> {
    await this.launcher(['workdir-remove', dir]);
  }

  async run(spec: RunSpec): Promise<RunResult> {
    const uid = this.workDirs.get(path.resolve(spec.workDir));
    if (uid === undefined) {
      throw new Error(`${spec.workDir} is not a live work directory of this isolation (use createWorkDir())`);
    }
    checkSpec(spec);
    const { limits } = spec;
    const started = Date.now();
    if (spec.signal?.aborted) return abortedBeforeStart();

    const env = { ...this.cfg.baseEnv, ...spec.env };
    const args = [
      'run',
      '--uid',
      String(uid),
      '--gid',
      String(uid),
      '--workdir',
      path.resolve(spec.workDir),
      '--tools',
      this.cfg.toolsDir,
      '--bwrap',
      this.cfg.bwrapPath,
      '--cgroup-root',
      this.cfg.cgroup.launcherRoot,
      '--cgroup-parent',
      this.cfg.cgroup.parent,
      '--wall-ms',
      String(limits.wallMs),
      '--cpu-ms',
      String(limits.cpuMs),
      '--memory',
      String(limits.memoryBytes),
      '--pids',
      String(limits.pids),
      '--fsize',
      String(limits.fileSizeBytes),
      '--nofile',
      String(limits.openFiles),
      '--tmp-bytes',
      String(this.cfg.tmpBytes),
      '--output-bytes',
      String(limits.outputBytes),
      '--output-slack',
      String(this.cfg.outputSlackBytes),
      ...(this.cfg.disableUserns ? ['--disable-userns'] : []),
      ...(this.cfg.cpuQuotaPct ? ['--cpu-quota-pct', String(this.cfg.cpuQuotaPct)] : []),
      ...(this.cfg.cpuWeight ? ['--cpu-weight', String(this.cfg.cpuWeight)] : []),
      ...this.cfg.etc.flatMap((e) => ['--etc', e]),
      ...this.cfg.readOnlyPaths.flatMap((p) => ['--ro', p]),
      ...Object.entries(env).flatMap(([k, v]) => ['--env', `${k}=${v}`]),
      '--',
      ...spec.argv,
    ];

    const dir = path.resolve(spec.workDir);
    // fd 3 carries the launcher's report; fds 0-2 are the program's stdio, relayed by the launcher.
    const child = this.spawner.spawn({
      file: this.cfg.launcherPath,
      args,
      stdin: spec.stdin ?? '',
      // The report carries the output order (up to 16384 runs): room for it.
      caps: [limits.outputBytes, limits.outputBytes, 512 * 1024],
    });
    let aborted = false;
    const onAbort = () => {
      aborted = true;
      child.kill('SIGTERM'); // the launcher kills the whole tree through the freezer and still reports
    };
    spec.signal?.addEventListener('abort', onAbort, { once: true });
    // If the launcher itself ever hangs (it should not), end it and sweep the cgroups it leaves.
    let backstopFired = false;
    const backstop = setTimeout(() => {
      backstopFired = true;
      child.kill('SIGKILL');
    }, limits.wallMs + 30_000);
    backstop.unref();
    const handle = { kill: () => child.kill('SIGTERM'), done: child.done as Promise<unknown> };
    const done = child.done.then((r): RunResult => {
      clearTimeout(backstop);
      if (backstopFired) void this.sweep();
      spec.signal?.removeEventListener('abort', onAbort);
      const [out = EMPTY, err = EMPTY, report = EMPTY] = r.outputs;
      const base = {
        stdout: out.toString('utf8'),
        stderr: err.toString('utf8'),
        stdoutTruncated: r.truncated[0] ?? false,
        stderrTruncated: r.truncated[1] ?? false,
        wallMs: Date.now() - started,
        cpuMs: 0,
        memoryKb: 0,
      };
      if (r.error) {
        return { ...base, code: null, signal: null, status: 'error', message: `cannot start the launcher: ${r.error}` };
      }
      let parsed: LauncherReport | null = null;
      try {
        parsed = LauncherReport.parse(JSON.parse(report.toString('utf8').trim().split('\n').pop() || 'null'));
      } catch {
        parsed = null;
      }
      if (!parsed) {
        const how = r.signal ? `was killed by ${r.signal}` : `exited with code ${r.code}`;
        return {
          ...base,
          code: null,
          signal: aborted ? 'SIGKILL' : null,
          status: aborted ? 'aborted' : 'error',
          message: `the launcher ${how} without a report`,
        };
      }
      return { ...toRunResult(parsed, base, spec, aborted), output: interleave(out, err, parsed) };
    });
    let runs = this.inFlight.get(dir);
    if (!runs) {
      runs = new Set();
      this.inFlight.set(dir, runs);
    }
    runs.add(handle);
    try {
      return await done;
    } finally {
      runs.delete(handle);
      if (runs.size === 0 && this.inFlight.get(dir) === runs) this.inFlight.delete(dir);
    }
  }

  private readonly tools = new Map<string, Promise<string>>();

  async installTool(name: string, hostPath: string, mode = 0o755): Promise<string> {
    if (!/^[a-z0-9][a-z0-9._-]*$/.test(name) || name === 'init') throw new TypeError(`bad tool name ${JSON.stringify(name)}`);
    const key = `${name}\0${hostPath}\0${mode}`;
    let p = this.tools.get(key);
    if (!p) {
      p = installCopy(hostPath, path.join(this.cfg.toolsDir, name), mode).then(() => `${TOOLS_PATH}/${name}`);
      p.catch(() => this.tools.delete(key));
      this.tools.set(key, p);
    }
    return p;
  }

  /** Removes the cgroups of launchers that are gone. */
  async sweep(): Promise<void> {
    await this.spawner
      .exec(this.cfg.launcherPath, ['sweep', '--cgroup-root', this.cfg.cgroup.launcherRoot, '--cgroup-parent', this.cfg.cgroup.parent])
      .catch(() => undefined);
  }

  private async launcher(args: string[]): Promise<void> {
    await this.spawner.exec(this.cfg.launcherPath, args);
  }
}

/** Maps the launcher's report to the contract's RunResult. */
export function toRunResult(
  r: LauncherReport,
  base: Pick<RunResult, 'stdout' | 'stderr' | 'stdoutTruncated' | 'stderrTruncated' | 'wallMs' | 'cpuMs' | 'memoryKb'>,
  spec: Pick<RunSpec, 'argv' | 'limits'>,
  abortedByCaller: boolean,
): RunResult {
  const { limits } = spec;
  const res: RunResult = {
    ...base,
    stdoutTruncated: base.stdoutTruncated || (r.stdoutBytes ?? 0) > limits.outputBytes,
    stderrTruncated: base.stderrTruncated || (r.stderrBytes ?? 0) > limits.outputBytes,
    wallMs: r.wallUs !== undefined ? Math.round(r.wallUs / 1000) : base.wallMs,
    cpuMs: Math.round((r.cpuNs ?? 0) / 1e6),
    // The reaper's getrusage peak RSS of the program's processes; when the run was killed from outside
    // the reaper died with it, and the cgroup's peak charge (RSS + page cache) is the best figure left.
    memoryKb: r.maxRssKb || Math.round((r.memPeakBytes ?? 0) / 1024),
    code: null,
    signal: null,
    status: 'ok',
    message: null,
  };
  if (r.error) return { ...res, status: 'error', message: r.error };
  const mib = (n: number) => `${Math.round((n / 1024 / 1024) * 10) / 10} MiB`;
  const killed = { code: null, signal: 'SIGKILL' };
  if (r.aborted || (abortedByCaller && r.result === 'none')) {
    return { ...res, ...killed, status: 'aborted', message: 'aborted by the caller' };
  }
  if (r.timeout === 'wall') {
    return { ...res, ...killed, status: 'timeout', message: `wall-clock limit of ${limits.wallMs} ms exceeded` };
  }
  if (r.timeout === 'cpu') {
    return { ...res, ...killed, status: 'timeout', message: `CPU time limit of ${limits.cpuMs} ms exceeded` };
  }
  const oom = (r.oomKills ?? 0) > 0;
  const oomMessage = `memory limit of ${mib(limits.memoryBytes)} exceeded: killed by the out-of-memory killer`;
  switch (r.result) {
    case 'exited':
      if (oom) return { ...res, code: r.code ?? null, status: 'oom', message: oomMessage };
      return { ...res, code: r.code ?? null };
    case 'signaled': {
      const signal = signalName(r.signal ?? 0);
      if (oom) return { ...res, signal, status: 'oom', message: oomMessage };
      if (signal === 'SIGXCPU') return { ...res, signal, status: 'timeout', message: `CPU time limit of ${limits.cpuMs} ms exceeded` };
      if (signal === 'SIGXFSZ') return { ...res, signal, status: 'signaled', message: `file size limit of ${limits.fileSizeBytes} bytes exceeded` };
      if (signal === 'SIGPIPE' && (r.stdoutCut || r.stderrCut)) {
        return { ...res, signal, status: 'signaled', message: `output limit exceeded: stopped reading after ${limits.outputBytes} bytes (+ slack)` };
      }
      return { ...res, signal, status: 'signaled', message: `killed by ${signal}` };
    }
    case 'execfail':
      return { ...res, status: 'error', message: `cannot execute ${spec.argv[0]}: ${r.execError ?? 'unknown error'}` };
    default: {
      // bwrap itself failed (its message is on stderr) before the program ran.
      const detail = base.stderr.trim().split('\n').pop() ?? '';
      const how = r.sandboxSignal !== undefined ? `was killed by ${signalName(r.sandboxSignal)}` : `exited with code ${r.sandboxExit}`;
      return { ...res, status: 'error', message: `the sandbox failed to start (bwrap ${how})${detail ? `: ${detail}` : ''}` };
    }
  }
}

/**
 * stdout and stderr as one text in the order the launcher read them (its `order` runs); whatever the runs do not
 * cover (past the runs it records) follows, stdout first. Decoded once, so a character is split only where the
 * program itself switched streams in the middle of it.
 */
export function interleave(stdout: Buffer, stderr: Buffer, report: Pick<LauncherReport, 'order'>): string {
  const parts: Buffer[] = [];
  let o = 0;
  let e = 0;
  for (const run of report.order ?? []) {
    if (run > 0) {
      parts.push(stdout.subarray(o, o + run));
      o += run;
    } else {
      parts.push(stderr.subarray(e, e - run));
      e -= run;
    }
  }
  if (o < stdout.length) parts.push(stdout.subarray(o));
  if (e < stderr.length) parts.push(stderr.subarray(e));
  return Buffer.concat(parts).toString('utf8');
}

function abortedBeforeStart(): RunResult {
  return {
    stdout: '',
    stderr: '',
    output: '',
    code: null,
    signal: null,
    status: 'aborted',
    message: 'aborted by the caller before the program started',
    stdoutTruncated: false,
    stderrTruncated: false,
    wallMs: 0,
    cpuMs: 0,
    memoryKb: 0,
  };
}

function checkSpec(spec: RunSpec): void {
  if (!Array.isArray(spec.argv) || spec.argv.length === 0 || spec.argv.some((a) => typeof a !== 'string' || a.includes('\0'))) {
    throw new TypeError('argv must be a non-empty array of strings without NUL bytes');
  }
  const positive: (keyof Limits)[] = ['wallMs', 'cpuMs', 'memoryBytes', 'pids', 'fileSizeBytes', 'openFiles', 'outputBytes'];
  for (const k of positive) {
    const v = spec.limits[k];
    if (!Number.isSafeInteger(v) || v <= 0) throw new TypeError(`limits.${k} must be a positive integer, got ${v}`);
  }
  for (const [k, v] of Object.entries(spec.env ?? {})) {
    if (!k || k.includes('=') || k.includes('\0') || typeof v !== 'string' || v.includes('\0')) {
      throw new TypeError(`invalid environment variable ${JSON.stringify(k)}`);
    }
  }
}
