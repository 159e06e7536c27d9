import { requireScope, type Ctx } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import type { AgentClient, AgentProcess, OutputEvent } from '../../platform/sandboxes/index.js';
import { resolveTemplate } from '../templates/index.js';
import { normalizeSandboxPath } from './paths.js';
import { agentOf, SANDBOX_STATE } from './service.js';
import type { CommandBody } from './schemas.js';

/** stdout and stderr of a waited command are each cut here in the JSON answer (streams are not cut). */
export const OUTPUT_LIMIT = 1024 * 1024;
export const DEFAULT_TIMEOUT_MS = 60_000;

export interface Started {
  agent: AgentClient;
  pid: number;
}

async function templateWorkdir(ctx: Ctx, slug: string, templateId: string): Promise<string | undefined> {
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
