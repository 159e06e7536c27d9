import { execFile } from 'node:child_process';
import { constants } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { BwrapIsolation, installCopy, type BwrapConfig } from './bwrap.js';
import { CgroupUnavailable, cgroupSetup } from './cgroups.js';
import { Spawner } from './spawner.js';
import type { Isolation, RunResult } from './types.js';
import { UidSlots } from './uid-slots.js';

export type { CgroupInfo } from './cgroups.js';
export { cgroupSetup } from './cgroups.js';
export type { Isolation, Limits, RunResult, RunSpec, RunStatus, WorkDir } from './types.js';

const execFileP = promisify(execFile);

export interface IsolationOptions {
  /** Where work directories are created; made root-owned 0711. Default /var/lib/hangar/exec. */
  workRoot?: string;
  /** Where sandbox uids are claimed, shared by every Hangar process on the host. Default /run/hangar/uids. */
  lockDir?: string;
  /**
   * The tools dir (a tmpfs, mounted once per boot, shared by every Hangar process on the host) holding the
   * reaper and the tools compile steps run, bound read-only at /.hangar in every run. Default /run/hangar-tools.
   */
  toolsDir?: string;
  /** Sandbox uids are uidBase .. uidBase + uidCount - 1 (gid = uid); none may be a host account. */
  uidBase?: number;
  uidCount?: number;
  /** Disk limit of each work directory (its tmpfs size). Default 256 MiB. */
  workDirBytes?: number;
  /** Size of /tmp inside each sandbox. Default 256 MiB. Both tmpfs count against the memory limit when written by the program. */
  tmpBytes?: number;
  /** Host /etc entries bound read-only into the sandbox. */
  etc?: readonly string[];
  /** Extra host directories bound read-only at the same path (/usr, /bin, /lib... always are). */
  readOnlyPaths?: readonly string[];
  /** CFS quota per run, in percent of one CPU (100 = one core); null for none. Default null. */
  cpuQuotaPct?: number | null;
  /** CPU weight of each run among its siblings, 1..10000 (cgroup v2 cpu.weight; v1 cpu.shares = weight x 10.24); null: the kernel's default (100). */
  cpuWeight?: number | null;
  /** Output read and dropped past Limits.outputBytes before the program's pipe is closed. Default 8 MiB. */
  outputSlackBytes?: number;
  bwrapPath?: string;
  /** Directory holding hangar-launcher and hangar-reaper. Default native/build of this package. */
  nativeDir?: string;
  /** Where the cgroup hierarchy is mounted. Default /sys/fs/cgroup. */
  cgroupRoot?: string;
  /** Name of Hangar's subtree (v1: below each controller's mount; v2: below Hangar's own cgroup). Default hangar. */
  cgroupParent?: string;
  /** Run /bin/true in a sandbox before declaring isolation available. Default true. */
  selfTest?: boolean;
}

const MIB = 1024 * 1024;
const NATIVE_DIR = fileURLToPath(new URL('../../../native/build/', import.meta.url));

/** What the runtimes of the language registry need from the host's /etc, read-only. */
export const DEFAULT_ETC: readonly string[] = ['ld.so.cache', 'alternatives', 'java-17-openjdk', 'mono', 'ssl/certs', 'ssl/openssl.cnf'];

export const DEFAULT_ENV: Readonly<Record<string, string>> = Object.freeze({
  PATH: '/usr/local/bin:/usr/bin:/bin',
  HOME: '/tmp',
  TMPDIR: '/tmp',
  LANG: 'C.UTF-8',
  USER: 'sandbox',
  LOGNAME: 'sandbox',
});

class Unavailable extends Error {}

const cache = new Map<string, Promise<Isolation>>();

/**
 * The isolation layer for this host: bubblewrap in per-run cgroups as an unprivileged uid when everything
 * it needs is present and a sandboxed /bin/true works, else an object that says why not and refuses to
 * run anything (code is never run unisolated). Memoized per options within the process.
 */
export function createIsolation(opts: IsolationOptions = {}): Promise<Isolation> {
  const key = JSON.stringify(opts);
  let p = cache.get(key);
  if (!p) {
    p = create(opts).catch((err: unknown) => {
      const reason = err instanceof Unavailable ? err.message : `isolation setup failed: ${(err as Error).message}`;
      return unavailableIsolation(reason);
    });
    cache.set(key, p);
  }
  return p;
}

/** An Isolation that runs nothing and says why. */
export function unavailableIsolation(reason: string): Isolation {
  const fail = () => Promise.reject(new Error(`code execution is unavailable: ${reason}`));
  return { available: false, unavailableReason: reason, cgroup: null, createWorkDir: fail, run: fail, installTool: fail };
}

async function create(opts: IsolationOptions): Promise<Isolation> {
  if (process.platform !== 'linux') throw new Unavailable('code execution needs Linux (bubblewrap and cgroups)');
  const uid = process.getuid?.();
  if (uid !== 0) {
    throw new Unavailable(
      `Hangar must run as root to isolate code execution (it creates cgroups and mounts work directories, ` +
        `and runs every program as its own unprivileged uid); it runs as uid ${uid}`,
    );
  }
  const nativeDir = opts.nativeDir ?? NATIVE_DIR;
  const launcherPath = path.join(nativeDir, 'hangar-launcher');
  const builtReaper = path.join(nativeDir, 'hangar-reaper');
  const spawnerPath = path.join(nativeDir, 'hangar-spawner');
  const bwrapPath = opts.bwrapPath ?? '/usr/bin/bwrap';
  const cgroupRoot = opts.cgroupRoot ?? '/sys/fs/cgroup';
  const cgroupParent = opts.cgroupParent ?? 'hangar';
  const workRoot = path.resolve(opts.workRoot ?? '/var/lib/hangar/exec');
  const lockDir = path.resolve(opts.lockDir ?? '/run/hangar/uids');
  const toolsDir = path.resolve(opts.toolsDir ?? '/run/hangar-tools');
  const uidBase = opts.uidBase ?? 60000;
  const uidCount = opts.uidCount ?? 1024;
  if (opts.cpuWeight != null && !(Number.isInteger(opts.cpuWeight) && opts.cpuWeight >= 1 && opts.cpuWeight <= 10000)) {
    throw new Unavailable(`bad CPU weight ${opts.cpuWeight}: it must be an integer within 1..10000`);
  }
  if (!Number.isInteger(uidBase) || !Number.isInteger(uidCount) || uidBase < 1000 || uidCount < 1 || uidBase + uidCount > 65534) {
    throw new Unavailable(`bad sandbox uid range ${uidBase}+${uidCount}: it must lie within 1000..65533`);
  }

  if (!(await canAccess(bwrapPath, constants.X_OK))) {
    throw new Unavailable(`bubblewrap is not installed (no ${bwrapPath}): run \`bash scripts/setup.sh\` as root or \`apt-get install bubblewrap\``);
  }
  for (const p of [launcherPath, builtReaper, spawnerPath]) {
    if (!(await canAccess(p, constants.X_OK))) {
      throw new Unavailable(`the native isolation helpers are not built (no ${p}): run \`bash scripts/setup.sh\``);
    }
  }
  // cgroup v2 when the hierarchy is unified and Hangar can delegate memory, pids and cpu to its subtree, else v1.
  const cgroup = await cgroupSetup(cgroupRoot, cgroupParent).catch((err: unknown) => {
    if (err instanceof CgroupUnavailable) throw new Unavailable(err.message);
    throw err;
  });
  const help = await execFileP(bwrapPath, ['--help']).then(
    (r) => r.stdout,
    () => '',
  );
  for (const option of ['--die-with-parent', '--as-pid-1', '--perms', '--size']) {
    if (!help.includes(option)) throw new Unavailable(`${bwrapPath} is too old (no ${option}); bubblewrap 0.8 or later is needed`);
  }

  // The work root must be traversable by the sandbox uids (bwrap binds the work dir as that uid) and
  // writable by root alone. The reaper (and later the tools) is copied into the tools dir, because the
  // package may live under a 0700 path, and that dir is a tmpfs of its own so that no host path shows in
  // a run's /proc/self/mountinfo.
  await fs.mkdir(workRoot, { recursive: true, mode: 0o711 });
  const rootStat = await fs.lstat(workRoot);
  if (!rootStat.isDirectory() || rootStat.uid !== 0 || rootStat.mode & 0o022) {
    throw new Unavailable(`the work root ${workRoot} must be a directory owned by root and writable by root alone`);
  }
  await fs.chmod(workRoot, 0o711);
  await checkTraversable(workRoot);
  await fs.mkdir(path.dirname(toolsDir), { recursive: true, mode: 0o755 });
  try {
    await execFileP(launcherPath, ['tools-mount', toolsDir], { env: {} });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Unavailable(`cannot mount the tools dir ${toolsDir}: ${(e.stderr || e.message).trim()}`);
  }
  await checkTraversable(toolsDir, 'tools dir');
  await installCopy(builtReaper, path.join(toolsDir, 'init'));

  const cfg: BwrapConfig = {
    launcherPath,
    toolsDir,
    bwrapPath,
    workRoot,
    cgroup,
    workDirBytes: opts.workDirBytes ?? 256 * MIB,
    tmpBytes: opts.tmpBytes ?? 256 * MIB,
    etc: opts.etc ?? DEFAULT_ETC,
    readOnlyPaths: opts.readOnlyPaths ?? [],
    baseEnv: DEFAULT_ENV,
    disableUserns: help.includes('--disable-userns'),
    cpuQuotaPct: opts.cpuQuotaPct ?? null,
    cpuWeight: opts.cpuWeight ?? null,
    outputSlackBytes: opts.outputSlackBytes ?? 8 * MIB,
  };
  let isolation: BwrapIsolation | undefined;
  const slots = new UidSlots(lockDir, uidBase, uidCount, (dir) => isolation!.removeDir(dir));
  isolation = new BwrapIsolation(cfg, slots, new Spawner(spawnerPath));

  // Clean up after processes that died: their run cgroups, uid locks and work dirs.
  await isolation.sweep();
  await slots.init();
  await slots.sweep();

  if (opts.selfTest ?? true) {
    const r = await selfTest(isolation);
    if (r.status !== 'ok' || r.code !== 0) {
      const detail = [r.message, r.stderr.trim()].filter(Boolean).join(': ');
      throw new Unavailable(`a sandboxed /bin/true failed (${r.status}${detail ? `: ${detail}` : ''})`);
    }
  }
  return isolation;
}

async function selfTest(isolation: Isolation): Promise<RunResult> {
  const work = await isolation.createWorkDir();
  try {
    return await isolation.run({
      argv: ['/bin/true'],
      workDir: work.path,
      limits: { wallMs: 10_000, cpuMs: 10_000, memoryBytes: 64 * MIB, pids: 16, fileSizeBytes: MIB, openFiles: 64, outputBytes: 4096 },
    });
  } finally {
    await work.dispose();
  }
}

async function canAccess(p: string, mode: number): Promise<boolean> {
  return fs.access(p, mode).then(
    () => true,
    () => false,
  );
}

/** Every ancestor of dir must let others search it, or bwrap (running as the sandbox uid) cannot bind it. */
async function checkTraversable(dir: string, what = 'work root'): Promise<void> {
  for (let d = dir; ; d = path.dirname(d)) {
    const st = await fs.stat(d);
    if (!(st.mode & 0o001)) {
      throw new Unavailable(
        `the ${what} ${dir} is not reachable by the sandbox users: ${d} is mode ${(st.mode & 0o777).toString(8)}; choose a ${what} outside it`,
      );
    }
    if (d === path.dirname(d)) return;
  }
}
