/**
 * Piston compatibility (engineer-man/piston, API v2; ADR 0043): its request and answer shapes over the one
 * execution path of `POST /v1/execute`. A Piston request is checked the way Piston checks it (its order and
 * its messages), its language and version are resolved as Piston resolves them (the name or an alias, then the
 * newest installed version that satisfies the semver range), and it runs as the equivalent Hangar request;
 * each step's result is then told in Piston's words (`status` RE/SG/TO/OL/EL, `output`, `cpu_time`...).
 */
import semver from 'semver';
import { z } from 'zod';
import type { ExecuteConfig } from '../../config.js';
import { findLanguage, type Language, type Toolchain } from './languages.js';
import type { ExecuteBody, ExecutionStage } from './schemas.js';
import type { ExecuteOptions, Executor, StepOutputs } from './service.js';

/** Piston's defaults where a request leaves a limit out (its `config.js`): 3 s to run, 10 s to compile. */
export const PISTON_DEFAULTS = { run_timeout: 3000, compile_timeout: 10000 } as const;

// ---- wire format -------------------------------------------------------------------------------

const str = (message: string) => z.string({ error: message });
/** A limit as Piston takes it: any number (0 or absent: the default; -1: no limit, here the server's maximum). */
const limit = (name: string) =>
  z
    .union([z.number({ error: `If specified, ${name} must be a number` }), z.null(), z.literal(false), z.literal('')], {
      error: `If specified, ${name} must be a number`,
    })
    .optional();

export const PistonFile = z.object(
  {
    name: z
      .string({ error: 'files[].name must be a string' })
      .max(255)
      .optional()
      .describe('File name; default Hangar’s entry name for the first file'),
    content: z.string({ error: 'files[].content is required as a string' }).describe('File contents, encoded as `encoding` says'),
    encoding: z.string().optional().describe('`utf8` (default), `base64` or `hex`; anything else is taken as `utf8`, as Piston does'),
  },
  { error: 'files is required as an array of objects' },
);

export const PistonExecuteBody = z
  .object(
    {
      language: str('language is required as a string')
        .min(1, { error: 'language is required as a string' })
        .max(256, { error: 'language must be at most 256 characters' })
        .describe('A language or one of its aliases, as GET /api/v2/runtimes lists them'),
      version: str('version is required as a string')
        .min(1, { error: 'version is required as a string' })
        .max(256, { error: 'version must be at most 256 characters' })
        .describe('An exact installed version or a semver range (`3.11`, `>=17`, `*`)'),
      files: z
        .array(PistonFile, { error: 'files is required as an array' })
        .max(100, { error: 'files must hold at most 100 files' })
        .describe('The program; the first (utf8) file is the entry point'),
      stdin: z.string({ error: 'If specified, stdin must be a string' }).nullish().describe('Standard input; a final newline is added if missing'),
      args: z
        .array(z.string({ error: 'args must be an array of strings' }).max(4096), { error: 'If specified, args must be an array' })
        .max(100, { error: 'args must hold at most 100 arguments' })
        .nullish(),
      compile_timeout: limit('compile_timeout').describe('Wall-clock limit of the compile step, ms (default 10000; -1: the server maximum)'),
      run_timeout: limit('run_timeout').describe('Wall-clock limit of the run step, ms (default 3000; -1: the server maximum)'),
      compile_cpu_time: limit('compile_cpu_time').describe('CPU-time limit of the compile step, ms (default twice its wall-clock limit)'),
      run_cpu_time: limit('run_cpu_time').describe('CPU-time limit of the run step, ms (default twice its wall-clock limit)'),
      compile_memory_limit: limit('compile_memory_limit').describe('Memory limit of the compile step, bytes (-1: the server maximum)'),
      run_memory_limit: limit('run_memory_limit').describe('Memory limit of the run step, bytes (-1: the server maximum)'),
    },
    { error: 'the request body must be a JSON object' },
  )
  .meta({ id: 'PistonExecuteRequest' });
export type PistonExecuteBody = z.infer<typeof PistonExecuteBody>;

export const PistonStage = z
  .object({
    stdout: z.string(),
    stderr: z.string(),
    output: z.string().describe('stdout and stderr interleaved in the order the program wrote them'),
    code: z.number().int().nullable(),
    signal: z.string().nullable(),
    message: z.string().nullable(),
    status: z
      .enum(['RE', 'SG', 'TO', 'OL', 'EL'])
      .nullable()
      .describe(
        'null: exit code 0; `RE` other exit code; `SG` killed by a signal (or at the memory limit); `TO` wall-clock or CPU limit; `OL`/`EL` stdout/stderr longer than the output limit (cut)',
      ),
    cpu_time: z.number().describe('ms'),
    wall_time: z.number().describe('ms'),
    memory: z.number().nullable().describe('Peak memory, bytes'),
  })
  .meta({ id: 'PistonStage' });
export type PistonStage = z.infer<typeof PistonStage>;

export const PistonResult = z
  .object({
    language: z.string(),
    version: z.string(),
    compile: PistonStage.optional().describe('Compiled languages only'),
    run: PistonStage.describe('When the compile step failed, the compile step again (as Piston answers)'),
  })
  .meta({ id: 'PistonExecuteResult' });
export type PistonResult = z.infer<typeof PistonResult>;

export const PistonRuntime = z
  .object({
    language: z.string(),
    version: z.string(),
    aliases: z.array(z.string()),
    runtime: z.string().optional().describe('What runs the language, where Piston names one (node, gcc, mono)'),
  })
  .meta({ id: 'PistonRuntime' });
export type PistonRuntime = z.infer<typeof PistonRuntime>;

export const PistonError = z.object({ message: z.string() }).meta({ id: 'PistonError' });

// ---- languages ---------------------------------------------------------------------------------

/**
 * Piston's names for each of Hangar's languages: the aliases of its packages (node's javascript, mono's
 * csharp, ...; `deno`, `deno-ts` and `deno-js` too, though here Node runs them) and the `runtime` it reports for
 * languages one package provides. Hangar's own aliases are accepted as well.
 */
const PISTON_NAMES: Record<string, { aliases: (tc: Toolchain) => string[]; runtime?: string }> = {
  python: { aliases: (tc) => ['py', 'py3', 'python3', `python${tc.semver.split('.').slice(0, 2).join('.')}`] },
  javascript: { aliases: () => ['node-javascript', 'node-js', 'javascript', 'js', 'deno-js'], runtime: 'node' },
  typescript: { aliases: () => ['ts', 'node-ts', 'tsc', 'typescript5', 'ts5', 'deno', 'deno-ts'] },
  bash: { aliases: () => ['sh'] },
  c: { aliases: () => ['gcc'], runtime: 'gcc' },
  'c++': { aliases: () => ['cpp', 'g++'], runtime: 'gcc' },
  go: { aliases: () => ['go', 'golang'] },
  ruby: { aliases: (tc) => [`ruby${semver.major(tc.semver)}`, 'rb'] },
  rust: { aliases: () => ['rs'] },
  java: { aliases: () => [] },
  csharp: { aliases: () => ['mono', 'mono-csharp', 'mono-c#', 'mono-cs', 'c#', 'cs'], runtime: 'mono' },
};

function aliasesOf(lang: Language, tc: Toolchain): string[] {
  const piston = PISTON_NAMES[lang.name]?.aliases(tc) ?? [];
  return [...new Set([...piston, ...lang.aliases])];
}

/** GET /api/v2/runtimes: one entry per installed version, as Piston lists its runtimes. */
export function pistonRuntimes(executor: Executor): PistonRuntime[] {
  return [...executor.installed].flatMap(([lang, toolchains]) =>
    toolchains.map((tc) => {
      const runtime = PISTON_NAMES[lang.name]?.runtime;
      return { language: lang.name, version: tc.version, aliases: aliasesOf(lang, tc), ...(runtime ? { runtime } : {}) };
    }),
  );
}

/** A request Piston would refuse: its 400 `{ message }`. */
export class PistonRequestError extends Error {}

/**
 * The newest installed runtime whose language or alias is `name` and whose version satisfies `range` (or is it
 * exactly), as Piston's `get_latest_runtime_matching_language_version`; Hangar's own names (any case) are
 * tried after Piston's exact ones.
 */
export function resolvePistonRuntime(executor: Executor, name: string, range: string): { lang: Language; tc: Toolchain } | null {
  const all = [...executor.installed].flatMap(([lang, tcs]) => tcs.map((tc) => ({ lang, tc })));
  let named = all.filter(({ lang, tc }) => lang.name === name || aliasesOf(lang, tc).includes(name));
  if (named.length === 0) {
    const lang = findLanguage(name);
    named = all.filter((r) => r.lang === lang);
  }
  const matches = named.filter(({ tc }) => tc.version === range || semver.satisfies(tc.semver, range));
  matches.sort((a, b) => semver.rcompare(a.tc.semver, b.tc.semver));
  return matches[0] ?? null;
}

// ---- requests ----------------------------------------------------------------------------------

type LimitName = 'compile_timeout' | 'run_timeout' | 'compile_cpu_time' | 'run_cpu_time' | 'compile_memory_limit' | 'run_memory_limit';

/**
 * One limit as Piston reads it: absent, null or 0 is the default; -1 is "no limit", here the server's maximum;
 * another negative value, or more than the maximum, is refused with Piston's words.
 */
function limitValue(body: PistonExecuteBody, name: LimitName, max: number): number | undefined {
  const value = body[name];
  if (value === undefined || value === null || value === false || value === '' || value === 0) return undefined;
  if (value === -1) return max;
  if (value > max) throw new PistonRequestError(`${name} cannot exceed the configured limit of ${max}`);
  if (value < 0) throw new PistonRequestError(`${name} must be non-negative`);
  return Math.ceil(value);
}

/** Piston's stdin: a final newline is added when missing (an empty stdin becomes "\n"), as its job does. */
export const pistonStdin = (stdin: string | null | undefined) => {
  const s = stdin ?? '';
  return s.endsWith('\n') ? s : `${s}\n`;
};

/**
 * The Hangar request a Piston request stands for, with the CPU limits it sets; throws PistonRequestError
 * (a 400) for what Piston refuses. Hangar's own checks (file names, memory floor...) follow in the service.
 */
export function toExecuteRequest(executor: Executor, body: PistonExecuteBody): { request: ExecuteBody; options: ExecuteOptions } {
  const resolved = resolvePistonRuntime(executor, body.language, body.version);
  if (!resolved) throw new PistonRequestError(`${body.language}-${body.version} runtime is unknown`);
  const encodingOf = (e: string | undefined) => (e === 'base64' || e === 'hex' ? e : 'utf8');
  // Piston runs the first utf8 file; the others are data beside it.
  const entry = body.files.findIndex((f) => encodingOf(f.encoding) === 'utf8');
  if (entry < 0) throw new PistonRequestError('files must include at least one utf8 encoded file');
  const ordered = [body.files[entry]!, ...body.files.filter((_, i) => i !== entry)];
  const files = ordered.map((f) => {
    const encoding = encodingOf(f.encoding);
    const content = encoding === 'hex' ? Buffer.from(f.content, 'hex').toString('base64') : f.content;
    return { ...(f.name ? { name: f.name } : {}), content, encoding: encoding === 'utf8' ? ('utf8' as const) : ('base64' as const) };
  });
  const config: ExecuteConfig = executor.config;
  const runTimeout = limitValue(body, 'run_timeout', config.maxRunTimeoutMs);
  const compileTimeout = limitValue(body, 'compile_timeout', config.maxCompileTimeoutMs);
  const runCpu = limitValue(body, 'run_cpu_time', 2 * config.maxRunTimeoutMs);
  const compileCpu = limitValue(body, 'compile_cpu_time', 2 * config.maxCompileTimeoutMs);
  const runMemory = limitValue(body, 'run_memory_limit', config.maxMemoryBytes);
  const compileMemory = limitValue(body, 'compile_memory_limit', config.maxMemoryBytes);
  const request: ExecuteBody = {
    language: resolved.lang.name,
    version: resolved.tc.version,
    files,
    stdin: pistonStdin(body.stdin),
    args: body.args ?? [],
    run_timeout: runTimeout ?? Math.min(PISTON_DEFAULTS.run_timeout, config.maxRunTimeoutMs),
    compile_timeout: compileTimeout ?? Math.min(PISTON_DEFAULTS.compile_timeout, config.maxCompileTimeoutMs),
    ...(runMemory !== undefined ? { run_memory_limit: runMemory } : {}),
    ...(compileMemory !== undefined ? { compile_memory_limit: compileMemory } : {}),
  };
  const cpuMs = { ...(runCpu !== undefined ? { run: runCpu } : {}), ...(compileCpu !== undefined ? { compile: compileCpu } : {}) };
  return { request, options: Object.keys(cpuMs).length ? { cpuMs } : {} };
}

// ---- answers -----------------------------------------------------------------------------------

/** One step as Piston reports it (isolate's status letters; `OL`/`EL` before the rest, as Piston checks them first). */
export function toPistonStage(stage: ExecutionStage, output: string): PistonStage {
  let status: PistonStage['status'] = null;
  let message = stage.message;
  if (stage.stdout_truncated) {
    status = 'OL';
    message = 'stdout length exceeded';
  } else if (stage.stderr_truncated) {
    status = 'EL';
    message = 'stderr length exceeded';
  } else if (stage.status === 'timeout') {
    status = 'TO';
  } else if (stage.status === 'signaled' || (stage.status === 'memory_limit' && stage.signal)) {
    status = 'SG';
  } else if (stage.code !== 0) {
    status = 'RE';
    message ??= `Exited with error status ${stage.code}`;
  }
  return {
    stdout: stage.stdout,
    stderr: stage.stderr,
    output,
    code: stage.code,
    signal: stage.signal,
    message,
    status,
    cpu_time: stage.cpu_time_ms,
    wall_time: stage.time_ms,
    memory: stage.memory_kb > 0 ? stage.memory_kb * 1024 : null,
  };
}

/** The whole answer; a failed compile step is `run` too, as Piston answers when the run step never started. */
export function toPistonResult(
  result: { language: string; version: string; compile?: ExecutionStage; run: ExecutionStage },
  output: StepOutputs,
): PistonResult {
  const compile = result.compile && toPistonStage(result.compile, output.compile ?? result.compile.stdout + result.compile.stderr);
  const run = result.run.status === 'skipped' && compile ? compile : toPistonStage(result.run, output.run);
  return { language: result.language, version: result.version, ...(compile ? { compile } : {}), run };
}
