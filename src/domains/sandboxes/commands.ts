import { requireScope, type Ctx } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import { AGENT_LIMITS, type AgentClient, type AgentProcess, type OutputEvent } from '../../platform/sandboxes/index.js';
import { resolveTemplate } from '../templates/index.js';
import { normalizeSandboxPath } from './paths.js';
import { agentOf, SANDBOX_STATE } from './service.js';
import type { CommandBody, CommandResult, OutputQuery, ProcessOutput, StdinBody } from './schemas.js';

/** stdout and stderr of a waited command are each cut here in the JSON answer (streams are not cut). */
export const OUTPUT_LIMIT = 1024 * 1024;
export const DEFAULT_TIMEOUT_MS = 60_000;

export interface Started {
  agent: AgentClient;
  pid: number;
}

/** The template's WORKDIR (cached per template), where commands without a `cwd` run. */
export async function templateWorkdir(ctx: Ctx, slug: string, templateId: string): Promise<string | undefined> {
  const { workdirs } = ctx.deps.state.get(SANDBOX_STATE);
  if (!workdirs.has(templateId)) workdirs.set(templateId, (await resolveTemplate(ctx, slug, templateId)).workdir ?? undefined);
  return workdirs.get(templateId);
}

/** Starts a command in a running sandbox; without `cwd` it runs in the template's WORKDIR, else the agent's default (home). */
export async function startCommand(ctx: Ctx, id: string, body: CommandBody): Promise<Started> {
  requireScope(ctx, 'sandbox:write');
  const { agent, row } = await agentOf(ctx, id);
  if (body.keepStdin && !body.background) throw errors.invalidField('keepStdin', 'applies to background commands only');
  if (body.keepStdin && body.stdin !== undefined)
    throw errors.invalidField('stdin', 'give stdin with POST /processes/{pid}/stdin when keepStdin is true');
  const { pid } = await agent.startProcess({
    cmd: body.cmd,
    cwd: body.cwd === undefined ? await templateWorkdir(ctx, row.template_slug, row.template_id) : normalizeSandboxPath(body.cwd, 'cwd'),
    env: body.env,
    stdin: body.stdin === undefined ? undefined : Buffer.from(body.stdin).toString('base64'),
    keepStdin: body.keepStdin,
    timeoutMs: body.timeoutMs ?? (body.background ? 0 : DEFAULT_TIMEOUT_MS),
  });
  return { agent, pid };
}

/** Collects a process's output until it exits, each stream cut at OUTPUT_LIMIT. */
export async function collect(events: AsyncIterable<OutputEvent>) {
  const out = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
  const size = { stdout: 0, stderr: 0 };
  const cut = { stdout: false, stderr: false };
  let nextOffset = 0;
  let exit: Extract<OutputEvent, { type: 'exit' }> | null = null;
  for await (const ev of events) {
    if (ev.type === 'exit') {
      exit = ev;
      continue;
    }
    const data = Buffer.from(ev.data, 'base64');
    nextOffset = ev.offset + data.length;
    const room = OUTPUT_LIMIT - size[ev.type];
    if (room <= 0) {
      cut[ev.type] = true;
      continue;
    }
    if (data.length > room) cut[ev.type] = true;
    const part = data.subarray(0, room);
    out[ev.type].push(part);
    size[ev.type] += part.length;
  }
  return {
    stdout: Buffer.concat(out.stdout).toString('utf8'),
    stderr: Buffer.concat(out.stderr).toString('utf8'),
    stdoutTruncated: cut.stdout,
    stderrTruncated: cut.stderr,
    exit,
    nextOffset,
  };
}

export function toProcess(p: AgentProcess) {
  return {
    pid: p.pid,
    cmd: p.cmd || (p.args ?? []).join(' '),
    cwd: p.cwd,
    running: p.running,
    exitCode: p.exitCode,
    signal: p.signal,
    timedOut: p.timedOut,
    startedAt: p.startedAt,
    endedAt: p.endedAt,
    outputBytes: p.outputBytes,
    truncated: p.truncated,
  };
}

/** Starts a background command and answers its process at once; it keeps running when the client leaves. */
export async function startBackgroundCommand(ctx: Ctx, id: string, body: CommandBody): Promise<ReturnType<typeof toProcess>> {
  requireScope(ctx, 'sandbox:write');
  const { agent, pid } = await startCommand(ctx, id, { ...body, background: true });
  return toProcess(await agent.getProcess(pid));
}

/** Ties a waited command to its client: when `gone` aborts, following stops and the command is killed. */
function followUntilGone(agent: AgentClient, pid: number, gone: AbortSignal, opts: { deadlineMs?: number } = {}) {
  const controller = new AbortController();
  const leave = () => {
    controller.abort();
    void agent.signal(pid, 'SIGKILL').catch(() => undefined);
  };
  if (gone.aborted) leave();
  else gone.addEventListener('abort', leave, { once: true });
  return { events: agent.output(pid, { follow: true, signal: controller.signal, deadlineMs: opts.deadlineMs }), signal: controller.signal };
}

/**
 * Starts a waited command whose output the caller streams: `follow(gone)` yields it until the exit, and the
 * command is killed when `gone` aborts (the client disconnected).
 */
export async function startStreamedCommand(
  ctx: Ctx,
  id: string,
  body: CommandBody,
): Promise<{ pid: number; follow(gone: AbortSignal): { events: AsyncIterable<OutputEvent>; signal: AbortSignal } }> {
  requireScope(ctx, 'sandbox:write');
  const { agent, pid } = await startCommand(ctx, id, { ...body, background: false });
  return { pid, follow: (gone) => followUntilGone(agent, pid, gone) };
}

/**
 * Runs a waited command to its end and answers its output (each stream cut at OUTPUT_LIMIT); the command is
 * killed when `gone` aborts (the client disconnected) and by the agent at its timeout.
 */
export async function runCommand(ctx: Ctx, id: string, body: CommandBody, gone: AbortSignal): Promise<CommandResult> {
  requireScope(ctx, 'sandbox:write');
  const { agent, pid } = await startCommand(ctx, id, { ...body, background: false });
  const started = Date.now();
  // The agent kills the command at its timeout; an agent still streaming well after that misbehaves.
  const timeoutMs = body.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const r = await collect(followUntilGone(agent, pid, gone, { deadlineMs: timeoutMs + AGENT_LIMITS.callMs }).events);
  return {
    pid,
    exitCode: r.exit?.exitCode ?? null,
    signal: r.exit?.signal ?? null,
    timedOut: r.exit?.timedOut ?? false,
    stdout: r.stdout,
    stderr: r.stderr,
    stdoutTruncated: r.stdoutTruncated || (r.exit?.truncated ?? false),
    stderrTruncated: r.stderrTruncated || (r.exit?.truncated ?? false),
    durationMs: r.exit?.durationMs ?? Date.now() - started,
  };
}

/** The processes started through the API: running ones first, then the most recent finished ones. */
export async function listProcesses(ctx: Ctx, id: string): Promise<ReturnType<typeof toProcess>[]> {
  requireScope(ctx, 'sandbox:read');
  const { agent } = await agentOf(ctx, id);
  return (await agent.listProcesses()).map(toProcess);
}

export async function getProcess(ctx: Ctx, id: string, pid: number): Promise<ReturnType<typeof toProcess>> {
  requireScope(ctx, 'sandbox:read');
  const { agent } = await agentOf(ctx, id);
  return toProcess(await agent.getProcess(pid));
}

/** Writes to a background process's stdin (text or base64); `eof` closes it. */
export async function writeStdin(ctx: Ctx, id: string, pid: number, body: StdinBody): Promise<void> {
  requireScope(ctx, 'sandbox:write');
  const { agent } = await agentOf(ctx, id);
  const data = body.encoding === 'base64' ? body.data : Buffer.from(body.data).toString('base64');
  await agent.sendStdin(pid, data, body.eof);
}

/** Sends a signal (default SIGKILL) to a process's whole process group. */
export async function signalProcess(ctx: Ctx, id: string, pid: number, signal = 'SIGKILL'): Promise<void> {
  requireScope(ctx, 'sandbox:write');
  const { agent } = await agentOf(ctx, id);
  await agent.signal(pid, signal);
}

/**
 * A process's output since byte `after`, for a stream: 404 before anything starts when the process is unknown;
 * `follow(gone)` yields its output (live until its exit with `follow`) and stops when `gone` aborts.
 */
export async function openProcessOutput(
  ctx: Ctx,
  id: string,
  pid: number,
  q: OutputQuery,
): Promise<{ follow(gone: AbortSignal): { events: AsyncIterable<OutputEvent>; signal: AbortSignal } }> {
  requireScope(ctx, 'sandbox:read');
  const { agent } = await agentOf(ctx, id);
  await agent.getProcess(pid);
  return {
    follow(gone) {
      const controller = new AbortController();
      if (gone.aborted) controller.abort();
      else gone.addEventListener('abort', () => controller.abort(), { once: true });
      return { events: agent.output(pid, { follow: q.follow, after: q.after, signal: controller.signal }), signal: controller.signal };
    },
  };
}

/** A process's output since byte `after` as one answer, with `nextOffset` to read on from. */
export async function readProcessOutput(ctx: Ctx, id: string, pid: number, after: number): Promise<ProcessOutput> {
  requireScope(ctx, 'sandbox:read');
  const { agent } = await agentOf(ctx, id);
  await agent.getProcess(pid);
  const r = await collect(agent.output(pid, { follow: false, after }));
  const info = await agent.getProcess(pid);
  return {
    stdout: r.stdout,
    stderr: r.stderr,
    running: info.running,
    exitCode: info.exitCode,
    signal: info.signal,
    timedOut: info.timedOut,
    truncated: info.truncated || r.stdoutTruncated || r.stderrTruncated,
    nextOffset: Math.max(r.nextOffset, after),
  };
}
