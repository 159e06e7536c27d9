import type { CgroupInfo } from './cgroups.js';

/**
 * The contract between code execution (src/domains/execute) and the isolation layer.
 * One `IsolatedRun` is one process tree in fresh namespaces, as an unprivileged uid, in its own cgroup,
 * with no network, seeing only read-only toolchains and its own writable work directory.
 */

export interface Limits {
  /** Wall-clock limit; the whole process tree is killed (SIGKILL) when it passes. */
  wallMs: number;
  /** CPU-time limit (user+sys of the whole tree). */
  cpuMs: number;
  /** Memory limit of the cgroup (RSS + page cache + swap). */
  memoryBytes: number;
  /** Most processes/threads alive at once (cgroup pids.max). */
  pids: number;
  /** Largest file the program may write (RLIMIT_FSIZE). */
  fileSizeBytes: number;
  /** Most open file descriptors (RLIMIT_NOFILE). */
  openFiles: number;
  /** stdout and stderr are each cut at this many bytes; the rest is discarded and `truncated` says so. */
  outputBytes: number;
}

export interface RunSpec {
  /** Program and arguments as seen inside the sandbox (absolute path or resolved on PATH inside). */
  argv: string[];
  /** Host directory mounted read-write at `/box` and used as the working directory. */
  workDir: string;
  stdin?: string | Buffer;
  env?: Record<string, string>;
  limits: Limits;
  /** Aborting kills the whole process tree at once (client disconnected). */
  signal?: AbortSignal;
}

export type RunStatus =
  | 'ok' // exited by itself (any exit code)
  | 'signaled' // killed by a signal it did not get from a limit (e.g. its own SIGSEGV)
  | 'timeout' // wall-clock or CPU limit: killed with SIGKILL
  | 'oom' // killed by the kernel's OOM killer inside its cgroup
  | 'aborted' // the caller aborted (client went away)
  | 'error'; // the sandbox itself could not start (message says why)

export interface RunResult {
  stdout: string;
  stderr: string;
  /** Exit code when it exited by itself, else null. */
  code: number | null;
  /** Signal name (e.g. `SIGKILL`, `SIGSEGV`) when a signal ended it, else null. */
  signal: string | null;
  status: RunStatus;
  /** Human-readable reason for any status but `ok`. */
  message: string | null;
  /**
   * stdout and stderr interleaved in the order the sandbox read them (runs of each as they arrived; two writes
   * closer together than the sandbox's wake-up show stdout's first). Absent where the layer cannot tell
   * (a run that did not report): stdout then stderr is the best there is.
   */
  output?: string;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  /** Wall-clock time of the program. */
  wallMs: number;
  /** CPU time (user + sys) of the whole tree. */
  cpuMs: number;
  /** Peak resident memory of the program (not the launcher's), in KiB. */
  memoryKb: number;
}

/**
 * A per-execution work directory (mounted at `/box` inside the sandbox). Files the host writes into it are
 * owned by the host user (root): the program can read them and delete them, and must chown them to
 * `uid`/`gid` first if it has to modify them in place.
 */
export interface WorkDir {
  path: string;
  /** Deletes the directory with everything in it; idempotent. */
  dispose(): Promise<void>;
  /** Host uid/gid the sandbox runs as in this directory (set by the real implementation). */
  readonly uid?: number;
  readonly gid?: number;
}

/** Prepares per-execution work directories and runs programs in them. */
export interface Isolation {
  /** Whether real isolation is available on this host, and if not, why. */
  readonly available: boolean;
  readonly unavailableReason: string | null;
  /** The cgroup hierarchy runs are limited through (v1 or v2) and Hangar's subtree in it; null when unavailable. */
  readonly cgroup: CgroupInfo | null;
  /** A fresh, empty work directory owned by the sandbox user; `dispose` deletes it with everything in it. */
  createWorkDir(): Promise<WorkDir>;
  run(spec: RunSpec): Promise<RunResult>;
  /**
   * Makes a host file visible read-only to every run, as `/.hangar/<name>` (the returned path): a tool a
   * compile step runs, such as esbuild. Copied (root-owned) into the host-wide tools directory, so the
   * sandbox uid needs no access to where it came from. Idempotent.
   */
  installTool(name: string, hostPath: string, mode?: number): Promise<string>;
}
