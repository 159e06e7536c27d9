import { z } from 'zod';

export const ExecuteFile = z.object({
  name: z
    .string()
    .max(255)
    .optional()
    .describe(
      'File name in the work directory, no path separators or `..`. Default: `main.py`, `Main.java`, ... for the first file, `file<N>.<ext>` for others',
    ),
  content: z.string().describe('File contents (UTF-8 text, or base64 with `encoding`)'),
  encoding: z.enum(['utf8', 'base64']).optional().describe('How `content` is encoded; default `utf8`'),
});
export type ExecuteFile = z.infer<typeof ExecuteFile>;

export const ExecuteBody = z.object({
  language: z
    .string()
    .min(1)
    .max(64)
    .describe(
      'python, javascript, typescript, bash, c, c++, go, ruby, rust, java, csharp, or an alias (py, js, ts, sh, cpp, golang, rs, cs, ...); see GET /v1/runtimes',
    ),
  version: z
    .string()
    .min(1)
    .max(64)
    .default('*')
    .describe('`*` (latest installed), an exact installed version, or a semver range such as `3.11` or `>=17 <21`'),
  code: z.string().optional().describe('The program, for a single file; give `code` or `files`, not both'),
  files: z
    .array(ExecuteFile)
    .max(100)
    .optional()
    .describe('The program as files; the first is the entry point, the others sit beside it in the work directory'),
  stdin: z.string().optional().describe('Standard input of the run step'),
  args: z.array(z.string().max(4096)).max(100).optional().describe('Command-line arguments of the program'),
  run_timeout: z
    .number()
    .int()
    .positive()
    .default(5000)
    .describe('Wall-clock limit of the run step, ms (server maximum: HANGAR_EXECUTE_MAX_RUN_TIMEOUT_MS)'),
  compile_timeout: z
    .number()
    .int()
    .positive()
    .default(10000)
    .describe('Wall-clock limit of the compile step, ms; compiled languages only (server maximum: HANGAR_EXECUTE_MAX_COMPILE_TIMEOUT_MS)'),
  run_memory_limit: z
    .number()
    .int()
    .positive()
    .optional()
    .describe('Memory limit of the run step, bytes (default HANGAR_EXECUTE_RUN_MEMORY_BYTES, at most HANGAR_EXECUTE_MAX_MEMORY_BYTES)'),
  compile_memory_limit: z
    .number()
    .int()
    .positive()
    .optional()
    .describe('Memory limit of the compile step, bytes (default HANGAR_EXECUTE_COMPILE_MEMORY_BYTES, at most HANGAR_EXECUTE_MAX_MEMORY_BYTES)'),
});
export type ExecuteBody = z.infer<typeof ExecuteBody>;

export const STAGE_STATUSES = ['exited', 'signaled', 'timeout', 'memory_limit', 'skipped'] as const;
export type StageStatus = (typeof STAGE_STATUSES)[number];

export const ExecutionStage = z
  .object({
    stdout: z.string(),
    stderr: z.string(),
    code: z.number().int().nullable().describe('Exit code when the program exited by itself, else null'),
    signal: z.string().nullable().describe('Signal that ended it (`SIGKILL`, `SIGSEGV`, ...), null when none'),
    status: z
      .enum(STAGE_STATUSES)
      .describe(
        '`exited` (any exit code), `signaled` (a signal not sent by a limit), `timeout` (wall-clock or CPU limit), `memory_limit` (killed for memory), `skipped` (the run step after a failed compile)',
      ),
    message: z.string().nullable().describe('Why, for any status but `exited`, and when output was cut'),
    stdout_truncated: z.boolean().describe('stdout was longer than the output limit; the rest was discarded'),
    stderr_truncated: z.boolean(),
    time_ms: z.number().int().describe('Wall-clock time'),
    cpu_time_ms: z.number().int().describe('CPU time of the whole process tree'),
    memory_kb: z.number().int().describe('Peak resident memory of the step; 0 when not measured (a skipped run)'),
  })
  .meta({ id: 'ExecutionStage' });
export type ExecutionStage = z.infer<typeof ExecutionStage>;

export const ExecutionResult = z
  .object({
    language: z.string().describe('Canonical language name'),
    version: z.string().describe('Exact version that ran'),
    compile: ExecutionStage.optional().describe('Present for languages with a compile step: c, c++, go, rust, java, csharp, typescript'),
    run: ExecutionStage,
  })
  .meta({ id: 'ExecutionResult' });
export type ExecutionResult = z.infer<typeof ExecutionResult>;

export const Runtime = z
  .object({
    language: z.string(),
    version: z.string(),
    aliases: z.array(z.string()),
    runtime: z.string().describe('What runs the program, e.g. `cpython`, `node`, `gcc`, `mono`'),
    compiled: z.boolean().describe('Whether responses carry a `compile` step'),
  })
  .meta({ id: 'Runtime' });
export type Runtime = z.infer<typeof Runtime>;

export const IsolationInfo = z
  .object({
    available: z.boolean().describe('Whether this server can run code in a sandbox at all'),
    reason: z.string().nullable().describe('Why not, when `available` is false'),
    cgroup: z
      .enum(['v1', 'v2'])
      .nullable()
      .describe(
        'The cgroup hierarchy runs are limited through (`v2`: the unified hierarchy, in a subtree Hangar delegates to itself); null when unavailable',
      ),
  })
  .meta({ id: 'IsolationInfo' });
export type IsolationInfo = z.infer<typeof IsolationInfo>;
