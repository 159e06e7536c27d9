import { chown, lstat, mkdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import semver from 'semver';
import { ConfigError, type ExecuteConfig } from '../../config.js';
import { orgId, requireScope, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { prefixedId } from '../../platform/ids.js';
import type { Isolation, Limits, RunResult, WorkDir } from '../../platform/isolation/types.js';
import { recordActivity } from '../activity/index.js';
import { recordUsage, requireCredits, settleAfterCommit } from '../billing/index.js';
import {
  BUILD_DIR_NAME,
  findLanguage,
  LANGUAGES,
  PlanError,
  type Language,
  type Plan,
  type SourceFile,
  type Step,
  type Toolchain,
} from './languages.js';
import { CancelledError, Pool, type Slot } from './pool.js';
import type { ExecuteBody, ExecutionResult, ExecutionStage, Runtime } from './schemas.js';
import { WorkDirs } from './workdirs.js';
import { hasControlChar } from '../../platform/text.js';
import { stateKey } from '../../platform/state.js';

const MIB = 1024 * 1024;
/** Open files per sandbox: enough for compilers and JVMs, few enough to stop descriptor exhaustion. */
const OPEN_FILES = 256;

/** What code execution needs at request time: the sandbox, the limits, the pool and what is installed. */
export interface Executor {
  isolation: Isolation;
  config: ExecuteConfig;
  pool: Pool;
  /** Offered languages with at least one installed toolchain, newest first. */
  installed: ReadonlyMap<Language, Toolchain[]>;
  workDirs: WorkDirs;
  /** Deletes ready and used work directories; the app calls it on close. */
  close(): Promise<void>;
}

let detection: Promise<Map<Language, Toolchain[]>> | undefined;

/** Every language's installed toolchains, detected once per process (the host does not change under it). */
export function detectInstalled(): Promise<Map<Language, Toolchain[]>> {
  detection ??= Promise.all(LANGUAGES.map(async (lang) => [lang, await lang.detect().catch(() => [])] as const)).then((pairs) => new Map(pairs));
  return detection;
}

/**
 * Detects the installed toolchains, installs the tools their steps run in the sandbox (a language whose
 * tools cannot be installed is not offered) and sets up the pool; called once when the routes are registered.
 */
export async function createExecutor(deps: Pick<Deps, 'config' | 'isolation' | 'log'>): Promise<Executor> {
  const config = deps.config.execute;
  let offered: readonly Language[] = LANGUAGES;
  if (config.languages) {
    offered = config.languages.map((name) => {
      const lang = findLanguage(name);
      if (lang) return lang;
      throw new ConfigError('HANGAR_EXECUTE_LANGUAGES', `unknown language "${name}"; known: ${LANGUAGES.map((l) => l.name).join(', ')}`);
    });
  }
  const all = await detectInstalled();
  const installed = new Map<Language, Toolchain[]>();
  for (const lang of LANGUAGES) {
    const found = all.get(lang) ?? [];
    if (offered.includes(lang) && found.length > 0) installed.set(lang, found);
  }
  if (deps.isolation.available) {
    for (const lang of installed.keys()) {
      const tools = lang.tools?.() ?? [];
      try {
        if (lang.tools && tools.length === 0) throw new Error('its tools are not installed');
        await Promise.all(tools.map((t) => deps.isolation.installTool(t.name, t.hostPath, t.mode)));
      } catch (err) {
        deps.log.warn({ err, language: lang.name }, 'not offering a language: its tools cannot be installed in the sandbox');
        installed.delete(lang);
      }
    }
  }
  const workDirs = new WorkDirs(deps.isolation, config.concurrency, deps.log);
  const pool = new Pool({ concurrency: config.concurrency, queue: config.queue, orgConcurrency: config.orgConcurrency, orgQueue: config.orgQueue });
  return { isolation: deps.isolation, config, pool, installed, workDirs, close: () => workDirs.close() };
}

const EXECUTORS = stateKey('execute.executors', () => new WeakMap<Isolation, Promise<Executor>>());

/**
 * The process's one executor for its sandbox layer (its pool is what keeps code execution fair between
 * organizations, so the execute routes and workflows' code steps share it). The execute routes close it with the app
 * (closeSharedExecutor), so an app built again on the same collaborators gets a fresh one.
 */
export function sharedExecutor(deps: Pick<Deps, 'config' | 'isolation' | 'log' | 'state'>): Promise<Executor> {
  const executors = deps.state.get(EXECUTORS);
  let executor = executors.get(deps.isolation);
  if (!executor) {
    executor = createExecutor(deps);
    executors.set(deps.isolation, executor);
    executor.catch(() => executors.delete(deps.isolation));
  }
  return executor;
}

export async function closeSharedExecutor(deps: Pick<Deps, 'isolation' | 'state'>): Promise<void> {
  const executors = deps.state.get(EXECUTORS);
  const executor = executors.get(deps.isolation);
  if (!executor) return;
  executors.delete(deps.isolation);
  await (await executor).close();
}

/** The installed languages and versions, in the registry's order, newest version first. */
export function listRuntimes(executor: Executor): Runtime[] {
  return [...executor.installed].flatMap(([lang, toolchains]) =>
    toolchains.map((tc) => ({ language: lang.name, version: tc.version, aliases: lang.aliases, runtime: lang.runtime, compiled: lang.compiled })),
  );
}

// ---- validation --------------------------------------------------------------------------------

function resolveLanguage(executor: Executor, name: string): { lang: Language; toolchains: Toolchain[] } {
  const lang = findLanguage(name);
  if (!lang) {
    const known = LANGUAGES.map((l) => l.name).join(', ');
    throw errors.invalidField(
      'body.language',
      `unknown language "${name}"; supported: ${known} (GET /v1/runtimes lists what this server has installed)`,
    );
  }
  const toolchains = executor.installed.get(lang);
  if (!toolchains) {
    const shown = lang.name === name ? lang.name : `"${name}" (${lang.name})`;
    throw errors.invalidField('body.language', `${shown} is not installed on this server; GET /v1/runtimes lists the languages that are`);
  }
  return { lang, toolchains };
}

function selectVersion(lang: Language, toolchains: Toolchain[], requested: string): Toolchain {
  const wanted = requested.trim();
  if (wanted === '*' || wanted === 'latest') return toolchains[0]!;
  const exact = toolchains.find((t) => t.version === wanted);
  if (exact) return exact;
  if (!semver.validRange(wanted)) throw errors.invalidField('body.version', `"${requested}" is not a version or a semver range`);
  const best = semver.maxSatisfying(
    toolchains.map((t) => t.semver),
    wanted,
  );
  const tc = best && toolchains.find((t) => t.semver === best);
  if (!tc) {
    const versions = toolchains.map((t) => t.version).join(', ');
    throw errors.invalidField('body.version', `no installed ${lang.name} matches "${requested}"; installed: ${versions}`);
  }
  return tc;
}

const BASE64 = /^[A-Za-z0-9+/\s]*={0,2}\s*$/;

/** The request's files with their final names; the entry first. Each refusal names the field. */
function sourceFiles(lang: Language, body: ExecuteBody): SourceFile[] {
  if (body.code !== undefined && body.files !== undefined) {
    throw errors.invalidField('body.files', 'give either code or files, not both');
  }
  if (body.code !== undefined) return [{ name: lang.defaultEntry, content: Buffer.from(body.code) }];
  if (!body.files || body.files.length === 0) throw errors.invalidField('body.code', 'give the program as code, or as files (at least one)');
  const seen = new Map<string, number>();
  return body.files.map((f, i) => {
    const field = `body.files.${i}.name`;
    const name = f.name ?? (i === 0 ? lang.defaultEntry : `file${i}${lang.extensions[0]}`);
    if (name.length === 0) throw errors.invalidField(field, 'must not be empty');
    if (name.includes('/') || name.includes('\\')) {
      throw errors.invalidField(field, `"${name}" must not contain path separators; files sit side by side`);
    }
    if (name === '.' || name.includes('..')) throw errors.invalidField(field, `"${name}" must not contain ".."`);
    if (hasControlChar(name)) throw errors.invalidField(field, 'must not contain control characters');
    if (Buffer.byteLength(name) > 255) throw errors.invalidField(field, 'must be at most 255 bytes');
    if (name === BUILD_DIR_NAME) throw errors.invalidField(field, `"${name}" is reserved for build outputs`);
    const other = seen.get(name);
    if (other !== undefined) throw errors.invalidField(field, `"${name}" is already the name of files.${other}`);
    seen.set(name, i);
    if (f.encoding === 'base64') {
      if (!BASE64.test(f.content)) throw errors.invalidField(`body.files.${i}.content`, 'is not valid base64');
      return { name, content: Buffer.from(f.content, 'base64') };
    }
    return { name, content: Buffer.from(f.content) };
  });
}

function checkLimits(config: ExecuteConfig, body: ExecuteBody): { runMemoryBytes: number; compileMemoryBytes: number } {
  if (body.run_timeout > config.maxRunTimeoutMs) {
    throw errors.invalidField('body.run_timeout', `must be at most ${config.maxRunTimeoutMs} ms on this server`);
  }
  if (body.compile_timeout > config.maxCompileTimeoutMs) {
    throw errors.invalidField('body.compile_timeout', `must be at most ${config.maxCompileTimeoutMs} ms on this server`);
  }
  const memory = (field: 'run_memory_limit' | 'compile_memory_limit', fallback: number) => {
    const value = body[field] ?? fallback;
    if (value < MIB) throw errors.invalidField(`body.${field}`, `must be at least ${MIB} bytes`);
    if (value > config.maxMemoryBytes) throw errors.invalidField(`body.${field}`, `must be at most ${config.maxMemoryBytes} bytes on this server`);
    return value;
  };
  return {
    runMemoryBytes: memory('run_memory_limit', config.runMemoryBytes),
    compileMemoryBytes: memory('compile_memory_limit', config.compileMemoryBytes),
  };
}

// ---- results -----------------------------------------------------------------------------------

const SKIPPED: ExecutionStage = {
  stdout: '',
  stderr: '',
  code: null,
  signal: null,
  status: 'skipped',
  message: 'not run: the compile step failed',
  stdout_truncated: false,
  stderr_truncated: false,
  time_ms: 0,
  cpu_time_ms: 0,
  memory_kb: 0,
};

const STATUS = { ok: 'exited', signaled: 'signaled', timeout: 'timeout', oom: 'memory_limit' } as const;
/** Signals with two names: report the one people know (SIGIOT is SIGABRT's old name on Linux). */
const SIGNAL_NAMES: Record<string, string> = { SIGIOT: 'SIGABRT', SIGPOLL: 'SIGIO', SIGCLD: 'SIGCHLD', SIGUNUSED: 'SIGSYS' };

function toStage(r: RunResult, outputLimit: number): ExecutionStage {
  const notes = [r.status === 'ok' ? null : r.message];
  if (r.stdoutTruncated) notes.push(`stdout was cut at ${outputLimit} bytes`);
  if (r.stderrTruncated) notes.push(`stderr was cut at ${outputLimit} bytes`);
  const message = notes.filter(Boolean).join('; ');
  return {
    stdout: r.stdout,
    stderr: r.stderr,
    code: r.code,
    signal: r.signal && (SIGNAL_NAMES[r.signal] ?? r.signal),
    status: STATUS[r.status as keyof typeof STATUS] ?? 'signaled',
    message: message || null,
    stdout_truncated: r.stdoutTruncated,
    stderr_truncated: r.stderrTruncated,
    time_ms: Math.round(r.wallMs),
    cpu_time_ms: Math.round(r.cpuMs),
    memory_kb: Math.round(r.memoryKb),
  };
}

const succeeded = (s: ExecutionStage) => s.status === 'exited' && s.code === 0;

type Outcome = 'exited' | 'compile_failed' | 'signaled' | 'timeout' | 'memory_limit' | 'cancelled' | 'sandbox_error';

function outcomeText(stage: ExecutionStage): string {
  switch (stage.status) {
    case 'exited':
      return `exit code ${stage.code} in ${stage.time_ms} ms`;
    case 'signaled':
      return `killed by ${stage.signal} after ${stage.time_ms} ms`;
    case 'timeout':
      return `timed out after ${stage.time_ms} ms`;
    case 'memory_limit':
      return 'killed at the memory limit';
    default:
      return stage.status;
  }
}

// ---- execution ---------------------------------------------------------------------------------

/** Places the files (and the build-output dir) in the fresh work dir, owned by the sandbox user so the program may change them. */
async function writeFiles(work: WorkDir, files: SourceFile[], withBuildDir: boolean): Promise<void> {
  const owner = work.uid !== undefined && work.gid !== undefined ? { uid: work.uid, gid: work.gid } : await stat(work.path);
  const paths: string[] = [];
  if (withBuildDir) {
    const dir = path.join(work.path, BUILD_DIR_NAME);
    await mkdir(dir, { mode: 0o755 });
    paths.push(dir);
  }
  await Promise.all(
    files.map(async (f) => {
      const file = path.join(work.path, f.name);
      await writeFile(file, f.content, { mode: 0o644, flag: 'wx' });
      paths.push(file);
    }),
  );
  if (process.getuid?.() === 0 && owner.uid !== 0) await Promise.all(paths.map((p) => chown(p, owner.uid, owner.gid)));
}

interface Prepared {
  lang: Language;
  tc: Toolchain;
  plan: Plan;
  runMemoryBytes: number;
  compileMemoryBytes: number;
}

/** Validates a request and works out what to run; every refusal is a 400 naming the field. */
export async function prepareExecution(executor: Executor, body: ExecuteBody): Promise<Prepared> {
  const { lang, toolchains } = resolveLanguage(executor, body.language);
  const tc = selectVersion(lang, toolchains, body.version);
  const files = sourceFiles(lang, body);
  const memory = checkLimits(executor.config, body);
  const args = body.args ?? [];
  args.forEach((a, i) => {
    if (a.includes('\0')) throw errors.invalidField(`body.args.${i}`, 'must not contain NUL characters');
  });
  try {
    return { lang, tc, plan: lang.plan(tc, { files, args, ...memory }), ...memory };
  } catch (err) {
    if (err instanceof PlanError) throw errors.invalidField(err.field, err.message);
    throw err;
  }
}

const limitsFor = (config: ExecuteConfig, wallMs: number, memoryBytes: number): Limits => ({
  wallMs,
  cpuMs: 2 * wallMs, // across threads: a parallel compiler or a JVM's JIT threads are not cut short
  memoryBytes,
  pids: config.maxProcesses,
  fileSizeBytes: config.fileSizeBytes,
  openFiles: OPEN_FILES,
  outputBytes: config.outputLimitBytes,
});

/** Limits a caller sets beyond the request body (the Piston-compatible route's CPU times). */
export interface ExecuteOptions {
  /** CPU-time limit of each step, ms; default twice its wall-clock limit. */
  cpuMs?: { compile?: number; run?: number };
}

/** stdout and stderr of each step interleaved in the order they were written (as far as the sandbox can tell). */
export interface StepOutputs {
  compile?: string;
  run: string;
}

/** The compile step (if any) then the run step, in one fresh work directory deleted afterwards. */
async function runPlan(executor: Executor, prepared: Prepared, body: ExecuteBody, signal?: AbortSignal, options: ExecuteOptions = {}) {
  const { isolation, config } = executor;
  const { plan } = prepared;
  const work = await executor.workDirs.take();
  const output: StepOutputs = { run: '' };
  try {
    await writeFiles(work, plan.files, plan.compile !== undefined);
    const step = async (s: Step, limits: Limits, stdin?: string) => {
      const r = await isolation.run({ argv: s.argv, env: s.env, workDir: work.path, stdin, limits, signal });
      if (r.status === 'aborted') throw new CancelledError();
      if (r.status === 'error') throw new SandboxError(r.message ?? 'the sandbox could not start');
      return { stage: toStage(r, config.outputLimitBytes), output: r.output ?? r.stdout + r.stderr };
    };
    const stepLimits = (wallMs: number, memoryBytes: number, cpuMs?: number) => {
      const l = limitsFor(config, wallMs, memoryBytes);
      return cpuMs === undefined ? l : { ...l, cpuMs };
    };
    let compile: ExecutionStage | undefined;
    if (plan.compile) {
      const c = await step(plan.compile, stepLimits(body.compile_timeout, prepared.compileMemoryBytes, options.cpuMs?.compile));
      compile = c.stage;
      output.compile = c.output;
      if (plan.compileStderr) {
        compile = { ...compile, stderr: plan.compileStderr(compile.stderr) };
        output.compile = compile.stdout + compile.stderr; // the rewritten messages: the order is lost with them
      }
    }
    if (compile && !succeeded(compile)) return { compile, run: SKIPPED, output };
    let runStep = plan.run;
    if (plan.runIfProduced) {
      const produced = await lstat(path.join(work.path, plan.runIfProduced.file)).then(
        (s) => s.isFile(),
        () => false,
      );
      if (produced) runStep = plan.runIfProduced.run;
    }
    const run = await step(runStep, stepLimits(body.run_timeout, prepared.runMemoryBytes, options.cpuMs?.run), body.stdin ?? '');
    output.run = run.output;
    return { compile, run: run.stage, output };
  } finally {
    executor.workDirs.discard(work);
  }
}

/**
 * Runs a program once in the sandbox. Records `code_execution.started` once admitted, then `.completed`
 * (exit code 0) or `.failed`. Aborting `signal` (the client left) kills the sandbox and rejects with
 * CancelledError.
 */
export async function executeCode(
  ctx: Ctx,
  executor: Executor,
  body: ExecuteBody,
  signal?: AbortSignal,
  options?: ExecuteOptions,
): Promise<{ id: string; result: ExecutionResult; output: StepOutputs }> {
  requireScope(ctx, 'execute:run');
  const prepared = await prepareExecution(executor, body);
  const { lang, tc } = prepared;
  await requireCredits(ctx, orgId(ctx), 'code execution');
  if (!executor.isolation.available) {
    const reason = executor.isolation.unavailableReason ?? 'no sandbox';
    throw new AppError('service_unavailable', `code execution is unavailable on this server: ${reason}`);
  }
  const ticket = executor.pool.enter(orgId(ctx), signal);
  ticket.catch(() => undefined); // awaited below; this keeps an early rejection from counting as unhandled
  const id = prefixedId('cex');
  const subject = `${lang.name} ${tc.version}`;
  type Event = 'started' | 'completed' | 'failed';
  /** One activity event; with `cpuSeconds` (a program that ran) also its usage event, charged after the commit. */
  const record = async (
    event: Event,
    summary: string,
    metadata: Record<string, unknown> = {},
    severity?: 'warning' | 'error',
    cpuSeconds?: number,
  ) => {
    const usageId = await withTx(ctx, async (tx) => {
      await recordActivity(tx, {
        resourceType: 'code_execution',
        resourceId: id,
        codeExecutionId: id,
        eventType: `code_execution.${event}`,
        status: event,
        title: `Code execution ${event}`,
        summary: `${subject}${summary ? `: ${summary}` : ''}`,
        severity,
        metadata: { language: lang.name, version: tc.version, ...metadata },
      });
      if (cpuSeconds === undefined) return null;
      return recordUsage(tx, {
        kind: 'code_execution',
        orgId: orgId(tx),
        userId: ctx.principal.userId,
        sourceId: id,
        language: lang.name,
        cpuSeconds,
        metadata: { version: tc.version },
      });
    });
    await settleAfterCommit(ctx.deps, [usageId]);
    if (event !== 'started') executionCounter(ctx.deps).inc({ language: lang.name, result: event, outcome: String(metadata.outcome ?? 'exited') });
  };
  const fail = (outcome: Outcome, summary: string, severity: 'warning' | 'error', metadata: Record<string, unknown> = {}, cpuSeconds?: number) =>
    record('failed', summary, { outcome, ...metadata }, severity, cpuSeconds);

  let slot: Slot;
  try {
    await record('started', '');
    slot = await ticket;
  } catch (err) {
    ticket.then(
      (s) => s.release(),
      () => undefined,
    );
    if (err instanceof CancelledError) await fail('cancelled', 'cancelled while waiting: the client went away', 'warning');
    throw err;
  }

  let compile: ExecutionStage | undefined;
  let run = SKIPPED;
  let output: StepOutputs = { run: '' };
  try {
    ({ compile, run, output } = await runPlan(executor, prepared, body, signal, options));
  } catch (err) {
    if (err instanceof CancelledError) {
      await fail('cancelled', 'cancelled: the client went away', 'warning');
      throw err;
    }
    const message = err instanceof SandboxError ? err.message : 'internal error';
    await fail('sandbox_error', `sandbox error: ${message}`, 'error');
    if (!(err instanceof SandboxError)) throw err;
    ctx.deps.log.error({ executionId: id, err: message }, 'the sandbox failed');
    throw new AppError('service_unavailable', `the sandbox could not run the program: ${message}`, undefined, { 'x-execution-id': id });
  } finally {
    slot.release();
  }

  // Key order as the spec lists the fields: language, version, compile (compiled languages), run.
  const result: ExecutionResult =
    lang.compiled && compile ? { language: lang.name, version: tc.version, compile, run } : { language: lang.name, version: tc.version, run };
  // The CPU the program used, compile step included, is what is charged.
  const cpuSeconds = ((compile?.cpu_time_ms ?? 0) + run.cpu_time_ms) / 1000;
  if (compile && !succeeded(compile)) {
    const outcome = compile.status === 'exited' ? 'compile_failed' : (compile.status as Outcome);
    await fail(
      outcome,
      `compile step ${outcomeText(compile)}`,
      'warning',
      { compileExitCode: compile.code, compileStatus: compile.status },
      cpuSeconds,
    );
  } else {
    const metadata = { exitCode: run.code, signal: run.signal, timeMs: run.time_ms, memoryKb: run.memory_kb };
    if (succeeded(run)) await record('completed', outcomeText(run), { outcome: 'exited', ...metadata }, undefined, cpuSeconds);
    else await fail(run.status as Outcome, outcomeText(run), 'warning', metadata, cpuSeconds);
  }
  return { id, result, output };
}

class SandboxError extends Error {}

const executionCounter = (deps: Deps) =>
  deps.metrics.counter(
    'hangar_executions_total',
    'Code executions finished, by language, result (completed: exit code 0; failed) and outcome (exited, compile_failed, timeout, ...)',
    ['language', 'result', 'outcome'],
  );

/** Gauges of the execution pool (ADR 0040), registered by app.ts. */
export function registerExecuteMetrics(deps: Deps): void {
  executionCounter(deps);
  deps.metrics.gauge('hangar_execute_pool', 'Code executions running in a sandbox and waiting for a slot', ['state'], async () => {
    const executor = await deps.state.get(EXECUTORS).get(deps.isolation);
    if (!executor) return [];
    return [
      [{ state: 'running' }, executor.pool.running],
      [{ state: 'queued' }, executor.pool.queued],
    ];
  });
}
