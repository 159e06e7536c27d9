/**
 * One try of one workflow step: its input rendered from the run's input and earlier steps' outputs, then run as
 * the run's starter (their scopes decide what a step may do), within the step's timeout.
 */
import type { Ctx } from '../../platform/context.js';
import { AppError } from '../../platform/http/errors.js';
import { EgressError, egressRequest } from '../../platform/http/egress.js';
import { capBytes, renderJson, renderTemplate, TemplateTooLargeError, type TemplateRoots } from '../../platform/template.js';
import { executeCode, sharedExecutor } from '../execute/index.js';
import { startRun } from '../runs/index.js';
import { executeTool } from '../tools/index.js';
import type { Step } from './schemas.js';

/** A step's output, as JSON, is at most this large; more fails the step. */
export const MAX_OUTPUT_BYTES = 1024 * 1024;
/** A rendered prompt, URL, header or body is at most this large. */
const MAX_RENDERED_BYTES = 1024 * 1024;

export interface StepOutcome {
  ok: boolean;
  /** What was rendered and sent (header values left out: they may hold credentials). */
  input: unknown;
  output: unknown;
  error: string | null;
  /** False for a failure trying again cannot mend (a missing agent, a refused scope, a blocked address). */
  retryable: boolean;
}

const fail = (input: unknown, error: string, retryable = true): StepOutcome => ({ ok: false, input, output: null, error, retryable });

/** Refusals that pass by themselves: something else holds the thread or session for now. */
const BUSY = new Set(['THREAD_BUSY', 'session_busy']);

/** A caller mistake (a 4xx other than a timeout, a rate limit or a busy thread) will fail the same way again. */
function fromError(input: unknown, err: unknown): StepOutcome {
  if (err instanceof TemplateTooLargeError) return fail(input, err.message, false);
  if (err instanceof AppError)
    return fail(input, `${err.code}: ${err.message}`, err.status >= 500 || err.status === 408 || err.status === 429 || BUSY.has(err.code));
  if (err instanceof EgressError)
    return fail(input, `${err.code}: ${err.message}`, !['invalid_url', 'invalid_request', 'blocked_address', 'redirect_refused'].includes(err.code));
  return fail(input, (err as Error).message ?? String(err));
}

function parseMaybeJson(text: string): unknown {
  const t = text.trim();
  if (!t || !'{["-0123456789tfn'.includes(t[0]!)) return undefined;
  try {
    return JSON.parse(t);
  } catch {
    return undefined;
  }
}

async function agentStep(
  caller: Ctx,
  step: Extract<Step, { type: 'agent' }>,
  roots: TemplateRoots,
  signal: AbortSignal,
  meta: Record<string, string>,
) {
  const prompt = renderTemplate(step.prompt, roots, MAX_RENDERED_BYTES);
  const input = { agent: step.agent, prompt };
  if (!prompt.trim()) return fail(input, 'the rendered prompt is empty', false);
  const r = await startRun(caller, { agent: step.agent, prompt, stream: false, config: {}, metadata: meta }, { signal });
  const output = { runId: r.runId, threadId: r.threadId, status: r.status, result: r.result ?? null, usage: r.usage };
  if (r.status === 'completed') return { ok: true, input, output, error: null, retryable: false };
  return { ok: false, input, output, error: r.error ?? `the agent run ended ${r.status}`, retryable: true };
}

async function toolStep(caller: Ctx, step: Extract<Step, { type: 'tool' }>, roots: TemplateRoots, signal: AbortSignal) {
  const args = renderJson(step.arguments, roots, MAX_RENDERED_BYTES) as Record<string, unknown>;
  const input = { tool: step.tool, arguments: args };
  const ex = await executeTool(caller, step.tool, { arguments: args }, { via: 'api', signal });
  const output = { executionId: ex.id, output: ex.output, httpStatus: ex.httpStatus };
  if (ex.status === 'completed') return { ok: true, input, output, error: null, retryable: false };
  const code = ex.error?.code ?? 'failed';
  return {
    ok: false,
    input,
    output,
    error: `${code}: ${ex.error?.message ?? 'the tool failed'}`,
    retryable: !['credentials_missing', 'connect_required'].includes(code),
  };
}

async function codeStep(caller: Ctx, step: Extract<Step, { type: 'code' }>, roots: TemplateRoots, signal: AbortSignal) {
  const stdin = renderTemplate(step.stdin, roots, MAX_RENDERED_BYTES);
  const input = { language: step.language, version: step.version, stdin };
  const executor = await sharedExecutor(caller.deps);
  const { id, result } = await executeCode(
    caller,
    executor,
    { language: step.language, version: step.version, code: step.code, stdin, run_timeout: 5000, compile_timeout: 10000 },
    signal,
  );
  const run = result.run;
  const output = {
    executionId: id,
    language: result.language,
    version: result.version,
    exitCode: run.code,
    status: run.status,
    stdout: run.stdout,
    stderr: run.stderr,
    /** stdout parsed, when it is JSON (later steps read steps.<name>.output.json.<path>). */
    json: parseMaybeJson(run.stdout) ?? null,
  };
  if (result.compile && (result.compile.status !== 'exited' || result.compile.code !== 0))
    return {
      ok: false,
      input,
      output,
      error: `the program did not compile: ${capBytes(result.compile.stderr || result.compile.message || '', 2000)}`,
      retryable: false,
    };
  if (run.status === 'exited' && run.code === 0) return { ok: true, input, output, error: null, retryable: false };
  const why = run.status === 'exited' ? `exited with code ${run.code}` : (run.message ?? run.status);
  return { ok: false, input, output, error: `the program ${why}: ${capBytes(run.stderr, 2000)}`, retryable: true };
}

async function httpStep(caller: Ctx, step: Extract<Step, { type: 'http' }>, roots: TemplateRoots, signal: AbortSignal) {
  const url = renderTemplate(step.url, roots, 8192);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(step.headers)) headers[k] = renderTemplate(v, roots, 8192);
  let body: string | undefined;
  if (step.body !== undefined && step.method !== 'GET' && step.method !== 'HEAD') {
    if (typeof step.body === 'string') body = renderTemplate(step.body, roots, MAX_RENDERED_BYTES);
    else {
      body = JSON.stringify(renderJson(step.body, roots, MAX_RENDERED_BYTES));
      if (!Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
    }
  }
  const input = { method: step.method, url, headers: Object.keys(headers), ...(body !== undefined ? { body: capBytes(body, 64 * 1024) } : {}) };
  const { tools } = caller.deps.config;
  const res = await egressRequest(
    { allowPrivateNetworks: tools.allowPrivateNetworks, timeoutMs: step.timeoutSeconds * 1000, maxResponseBytes: MAX_OUTPUT_BYTES / 2 },
    { method: step.method, url, headers, ...(body !== undefined ? { body } : {}), signal },
  );
  const text = res.body.toString('utf8');
  const isJson = /\bjson\b/i.test(res.headers['content-type'] ?? '');
  const parsed = isJson ? parseMaybeJson(text) : undefined;
  const output = { status: res.status, headers: res.headers, body: parsed !== undefined ? parsed : text };
  if (res.status >= 200 && res.status < 300) return { ok: true, input, output, error: null, retryable: false };
  return {
    ok: false,
    input,
    output,
    error: `the server answered ${res.status}`,
    retryable: res.status >= 500 || res.status === 408 || res.status === 429,
  };
}

/** Runs one try of `step`; never throws (a thrown error is a failed try). */
export async function runStepOnce(
  caller: Ctx,
  step: Step,
  roots: TemplateRoots,
  signal: AbortSignal,
  meta: { workflowRunId: string; step: string },
): Promise<StepOutcome> {
  try {
    switch (step.type) {
      case 'agent':
        return await agentStep(caller, step, roots, signal, meta);
      case 'tool':
        return await toolStep(caller, step, roots, signal);
      case 'code':
        return await codeStep(caller, step, roots, signal);
      case 'http':
        return await httpStep(caller, step, roots, signal);
    }
  } catch (err) {
    if (signal.aborted) return fail(null, signal.reason instanceof Error ? signal.reason.message : 'the step was stopped');
    return fromError(null, err);
  }
}
