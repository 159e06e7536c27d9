import { z } from 'zod';
import { limitParam, queryBool } from '../../platform/http/pagination.js';

export const SANDBOX_STATES = ['starting', 'running', 'paused', 'stopped', 'error', 'destroyed'] as const;

/** Env values, command lines and paths become C strings (execve, runc's config): a NUL cannot be carried, so it is a 400. */
const noNul = (s: z.ZodString) => s.refine((v) => !v.includes('\u0000'), 'must not contain NUL');

const EnvMap = z
  .record(
    z
      .string()
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'names are letters, digits and "_", not starting with a digit')
      .max(256),
    noNul(z.string().max(32_768)),
  )
  .refine((m) => Object.keys(m).length <= 200, 'at most 200 variables');

export const SandboxName = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/, 'must be 1 to 63 letters, digits, ".", "_" or "-", starting with a letter or digit');

export const CreateSandboxBody = z
  .object({
    template: z
      .string()
      .min(1)
      .max(64)
      .default('base-ubuntu')
      .describe('Template slug (a system template or one of the organization’s). Default `base-ubuntu`.'),
    name: SandboxName.optional().describe('Display name and hostname; default derived from the id.'),
    env: EnvMap.optional().describe('Environment variables of every command (over the template’s). Values are never returned.'),
    metadata: z
      .record(z.string().max(64), z.string().max(1024))
      .refine((m) => Object.keys(m).length <= 50, 'at most 50 keys')
      .optional()
      .describe('Your own key/value strings, returned as given.'),
    cpu: z
      .number()
      .min(0.1)
      .max(1024)
      .multipleOf(0.01)
      .optional()
      .describe('CPU cores: at least 0.1, in steps of 0.01 (a CFS quota of cpu × 100 ms per 100 ms), up to the server maximum.'),
    memoryMb: z
      .number()
      .int()
      .min(64)
      .max(1024 * 1024)
      .optional()
      .describe('Memory limit in MiB, up to the server maximum.'),
    diskMb: z
      .number()
      .int()
      .min(64)
      .max(16 * 1024 * 1024)
      .optional()
      .describe(
        'Size of the sandbox’s disk in MiB (everything it writes: home, /tmp, /usr, installed packages); writing past it fails with ENOSPC inside. Default and maximum are the server’s.',
      ),
    idleTimeoutSeconds: z
      .number()
      .int()
      .min(0)
      .max(30 * 86_400)
      .optional()
      .describe('Seconds without API use (commands, files) after which the sandbox pauses itself; 0 = never. Up to the server maximum.'),
    network: z.boolean().default(true).describe('Outbound internet access. The host, its loopback and other sandboxes are never reachable.'),
  })
  .strict();
export type CreateSandboxBody = z.infer<typeof CreateSandboxBody>;

export const Sandbox = z
  .object({
    id: z.string().describe('`sbx_` prefix'),
    name: z.string(),
    ownerUserId: z
      .string()
      .describe('The user who created it (for a thread’s sandbox, the thread’s owner): the only one who reaches its files, processes and commands'),
    template: z.string().describe('Template slug'),
    templateId: z.string(),
    state: z.enum(SANDBOX_STATES),
    cpu: z.number(),
    memoryMb: z.number().int(),
    diskMb: z.number().int().describe('Size of the sandbox’s disk, MiB'),
    network: z.boolean(),
    idleTimeoutSeconds: z.number().int(),
    envKeys: z.array(z.string()).describe('Names of the variables set at creation (values are never returned)'),
    metadata: z.record(z.string(), z.string()),
    error: z.string().nullable().describe('Why the sandbox is in state `error`'),
    nodeId: z.string().describe('The Hangar host the sandbox lives on'),
    usage: z.object({
      runningSeconds: z.number().describe('Seconds spent running (settled + the current interval)'),
      diskBytes: z
        .number()
        .int()
        .nullable()
        .describe('Bytes in use on the sandbox’s disk (of `diskMb`), while it is running or paused; null otherwise'),
    }),
    createdAt: z.string(),
    updatedAt: z.string(),
    lastActiveAt: z.string(),
    destroyedAt: z.string().nullable(),
  })
  .meta({ id: 'Sandbox' });
export type Sandbox = z.infer<typeof Sandbox>;

export const SandboxParams = z.object({ id: z.string().min(1).max(100) });
export const ProcessParams = z.object({ id: z.string().min(1).max(100), pid: z.coerce.number().int().positive() });

export const ListSandboxesQuery = z.object({
  limit: limitParam(50, 100),
  cursor: z.string().optional(),
  state: z.enum(SANDBOX_STATES).optional().describe('Only sandboxes in this state (destroyed ones are listed only when asked for).'),
});

export const CommandBody = z
  .object({
    cmd: noNul(z.string().min(1).max(100_000)).describe('Shell command, run by `/bin/bash -c` as the sandbox user'),
    cwd: noNul(z.string().min(1).max(4096))
      .optional()
      .describe('Working directory (absolute, or relative to /home/user); default the template’s, else /home/user'),
    env: EnvMap.optional(),
    stdin: z
      .string()
      .max(10 * 1024 * 1024)
      .optional()
      .describe('Written to the command’s standard input, which is then closed'),
    timeoutMs: z
      .number()
      .int()
      .min(1)
      .max(24 * 3600_000)
      .optional()
      .describe('Kill the command (SIGKILL to its process group) after this long. Default 60 000 for a waited command; none for background ones.'),
    background: z.boolean().default(false).describe('Start and return at once with the pid; read its output from /processes/{pid}/output.'),
    keepStdin: z.boolean().default(false).describe('Background only: keep stdin open for POST /processes/{pid}/stdin'),
  })
  .strict();
export type CommandBody = z.infer<typeof CommandBody>;

export const CommandResult = z
  .object({
    pid: z.number().int(),
    exitCode: z.number().int().nullable().describe('null when a signal ended it'),
    signal: z.string().nullable(),
    timedOut: z.boolean(),
    stdout: z.string(),
    stderr: z.string(),
    stdoutTruncated: z.boolean(),
    stderrTruncated: z.boolean(),
    durationMs: z.number().int(),
  })
  .meta({ id: 'CommandResult' });
export type CommandResult = z.infer<typeof CommandResult>;

export const Process = z
  .object({
    pid: z.number().int(),
    cmd: z.string(),
    cwd: z.string(),
    running: z.boolean(),
    exitCode: z.number().int().nullable(),
    signal: z.string().nullable(),
    timedOut: z.boolean(),
    startedAt: z.string(),
    endedAt: z.string().nullable(),
    outputBytes: z.number().int(),
    truncated: z.boolean().describe('The oldest output was dropped (the sandbox keeps the last 4 MiB per process)'),
  })
  .meta({ id: 'SandboxProcess' });

export const StdinBody = z
  .object({
    data: z
      .string()
      .max(10 * 1024 * 1024)
      .default(''),
    encoding: z.enum(['utf8', 'base64']).default('utf8'),
    eof: z.boolean().default(false).describe('Close stdin after writing'),
  })
  .strict();
export type StdinBody = z.infer<typeof StdinBody>;

export const KillBody = z
  .object({ signal: z.enum(['SIGTERM', 'SIGKILL', 'SIGINT', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2']).default('SIGKILL') })
  .strict();

export const ShellQuery = z.object({
  cols: z.coerce.number().int().min(1).max(1000).default(80).describe('Terminal width in columns (1–1000, default 80)'),
  rows: z.coerce.number().int().min(1).max(1000).default(24).describe('Terminal height in rows (1–1000, default 24)'),
  command: noNul(z.string().min(1).max(8192)).optional().describe('Run this with `/bin/bash -c` on the terminal instead of an interactive bash'),
  term: z
    .string()
    .regex(/^[A-Za-z0-9._+-]{1,64}$/, 'a terminal type such as xterm-256color')
    .optional()
    .describe('TERM for the shell (default xterm-256color)'),
});
export type ShellQuery = z.infer<typeof ShellQuery>;

/** A text frame from the client of a shell: its only control message (input is binary frames). */
export const ShellControl = z.object({
  type: z.literal('resize'),
  cols: z.number().int().min(1).max(1000),
  rows: z.number().int().min(1).max(1000),
});
export type ShellControl = z.infer<typeof ShellControl>;

export const OutputQuery = z.object({
  follow: queryBool.default(false).describe('With `Accept: text/event-stream`: keep streaming until the process exits'),
  after: z.coerce.number().int().min(0).default(0).describe('Skip output before this byte offset (the `offset` of events already seen)'),
});
export type OutputQuery = z.infer<typeof OutputQuery>;

export const ProcessOutput = z
  .object({
    stdout: z.string(),
    stderr: z.string(),
    running: z.boolean(),
    exitCode: z.number().int().nullable(),
    signal: z.string().nullable(),
    timedOut: z.boolean(),
    truncated: z.boolean(),
    nextOffset: z.number().int().describe('Pass as `after` to read only newer output'),
  })
  .meta({ id: 'ProcessOutput' });
export type ProcessOutput = z.infer<typeof ProcessOutput>;

export const FileEntry = z
  .object({
    name: z.string(),
    path: z.string().describe('Absolute path inside the sandbox'),
    type: z.enum(['file', 'dir', 'symlink', 'other']),
    size: z.number().int(),
    mode: z.string().describe('Permission bits, octal'),
    mtime: z.string(),
  })
  .meta({ id: 'SandboxFileEntry' });

export const PathQuery = z.object({
  path: z.string().min(1).max(4096).describe('Absolute, or relative to /home/user; no "..", backslashes or control characters'),
});
export const DeleteFileQuery = PathQuery.extend({ recursive: queryBool.default(false) });
export const FolderBody = z.object({ path: z.string().min(1).max(4096) }).strict();
export const MoveFileBody = z.object({ from: z.string().min(1).max(4096), to: z.string().min(1).max(4096) }).strict();
