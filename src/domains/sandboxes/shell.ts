import { constants } from 'node:os';
import type { WebSocket } from 'ws';
import { requireScope, type Ctx } from '../../platform/context.js';
import type { AppError } from '../../platform/http/errors.js';
import type { AgentClient } from '../../platform/sandboxes/index.js';
import { stateKey } from '../../platform/state.js';
import { templateWorkdir } from './commands.js';
import { ShellControl, type ShellQuery } from './schemas.js';
import { agentOf } from './service.js';

/**
 * `GET /v1/sandboxes/{id}/shell` (ADR 0046): an interactive terminal in a running sandbox, over a WebSocket. The
 * shell is a process the sandbox's agent starts on a pseudo-terminal of its own (`pty` in the agent's start request),
 * as the sandbox user, in the template's working directory, with the sandbox's environment: the same process a
 * command is, so the agent's limits and the host's distrust of the agent (ADR 0013) apply unchanged. Binary frames
 * carry terminal bytes both ways; the only text frame from the client is `{"type":"resize",...}`; the server's
 * last frame is `{"type":"exit",...}`, then a normal close.
 */

export interface ShellLimits {
  /** The session ends after this long without input or output. */
  idleMs: number;
  /** The agent kills the shell after this long, whatever it is doing (its `timeoutMs`). */
  maxMs: number;
  /** Input waiting for the shell above which the socket stops reading (the shell is not reading its terminal). */
  inputHighWater: number;
  /** Output the client has not taken above which the server stops reading the shell's output. */
  outputHighWater: number;
  /** Ping period; a client that misses a pong by the next one is gone. */
  heartbeatMs: number;
  /** After a hang-up (the client left), how long before the shell's process group is killed. */
  hangupGraceMs: number;
}

export const SHELL_LIMITS: Readonly<ShellLimits> = Object.freeze({
  idleMs: 30 * 60_000,
  maxMs: 12 * 3_600_000,
  inputHighWater: 256 * 1024,
  outputHighWater: 1024 * 1024,
  heartbeatMs: 25_000,
  hangupGraceMs: 2_000,
});

/** This app's shell limits (the defaults above; a test shortens them on its own app). */
export const SHELL_LIMITS_STATE = stateKey('sandbox-shell-limits', (): ShellLimits => ({ ...SHELL_LIMITS }));

/** Close codes after the upgrade (4000–4999 are the application's); errors before it are HTTP answers. */
export const SHELL_CLOSE = { normal: 1000, failed: 1011, unauthenticated: 4401, idle: 4408 } as const;

/** How often activity on a shell marks the sandbox used (its idle timeout, ADR 0010). */
const TOUCH_EVERY_MS = 10_000;

/** The checks a shell needs before the upgrade, so that they are HTTP answers (403, 404, 409 `invalid_state`, 503). */
export async function checkShell(ctx: Ctx, id: string): Promise<void> {
  requireScope(ctx, 'sandbox:write');
  await agentOf(ctx, id);
}

/** Starts the shell process on a new terminal in a running sandbox. */
async function startShell(ctx: Ctx, id: string, q: ShellQuery, limits: ShellLimits): Promise<{ agent: AgentClient; pid: number }> {
  requireScope(ctx, 'sandbox:write');
  const { agent, row } = await agentOf(ctx, id);
  const { pid } = await agent.startProcess({
    ...(q.command ? { cmd: q.command } : { args: ['bash'] }),
    cwd: await templateWorkdir(ctx, row.template_slug, row.template_id),
    env: { TERM: q.term ?? 'xterm-256color' },
    pty: { cols: q.cols, rows: q.rows },
    timeoutMs: limits.maxMs,
  });
  return { agent, pid };
}

/** The exit code a shell reports: its status, or 128 + the signal's number when a signal ended it (as shells do). */
function exitCode(ev: { exitCode: number | null; signal: string | null }): number | null {
  if (ev.exitCode !== null) return ev.exitCode;
  const n = ev.signal ? (constants.signals as Record<string, number | undefined>)[ev.signal] : undefined;
  return n === undefined ? null : 128 + n;
}

function closeReason(reason: string): string {
  let out = reason.slice(0, 123);
  while (Buffer.byteLength(out) > 123) out = out.slice(0, -1);
  return out;
}

function toBuffer(data: Buffer | ArrayBuffer | Buffer[]): Buffer {
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.isBuffer(data) ? data : Buffer.from(data);
}

/**
 * Runs one shell session on an open WebSocket: starts the shell, relays bytes both ways (input in order, one agent
 * write at a time, output with backpressure), applies resizes, ends the session at the shell's exit (an `exit`
 * frame and a normal close), after `idleMs` without traffic, when the credential is revoked, or when the client
 * goes (the shell then gets a hang-up, then SIGKILL). Never throws: failures are an `error` frame and close 1011.
 */
export async function serveShell(ctx: Ctx, id: string, q: ShellQuery, socket: WebSocket): Promise<void> {
  const { deps } = ctx;
  const limits = deps.state.get(SHELL_LIMITS_STATE);
  let ended = false;
  const sendJson = (frame: Record<string, unknown>) => {
    if (socket.readyState === socket.OPEN) socket.send(JSON.stringify(frame));
  };
  const close = (code: number, reason: string) => {
    if (socket.readyState === socket.OPEN || socket.readyState === socket.CONNECTING) socket.close(code, closeReason(reason));
  };
  const fail = (err: unknown) => {
    const e = err as Partial<AppError>;
    sendJson({ type: 'error', code: e.code ?? 'internal_error', message: e.message ?? 'the shell failed' });
    close(SHELL_CLOSE.failed, e.message ?? 'the shell failed');
  };

  // Messages that arrive while the shell starts are kept, in order.
  const early: Array<[Buffer, boolean]> = [];
  let earlyBytes = 0;
  let onMessage = (data: Buffer, binary: boolean) => {
    early.push([data, binary]);
    earlyBytes += data.length;
    if (earlyBytes > limits.inputHighWater) socket.pause(); // resumed by the first write to the shell
  };
  socket.on('message', (data, binary) => onMessage(toBuffer(data as Buffer), binary));
  let clientGone = false;
  const untrack = deps.live.track(ctx.principal, (code, reason) => {
    clientGone = true;
    close(code === 4401 ? SHELL_CLOSE.unauthenticated : code, reason);
  });
  socket.once('close', () => {
    clientGone = true;
    untrack();
  });

  let session: { agent: AgentClient; pid: number };
  try {
    session = await startShell(ctx, id, q, limits);
  } catch (err) {
    return fail(err);
  }
  const { agent, pid } = session;
  const follow = new AbortController();
  let lastTraffic = Date.now();
  let lastTouch = Date.now();
  const traffic = () => {
    const now = Date.now();
    lastTraffic = now;
    if (now - lastTouch < TOUCH_EVERY_MS) return;
    lastTouch = now;
    // Marks the sandbox used (its idle timeout) and re-checks that it still runs and is still the caller's.
    agentOf(ctx, id).catch((err) => {
      if (!ended) fail(err);
    });
  };

  /** The client left or the session must end: stop relaying and hang the shell up, then kill what is left. */
  const hangUp = () => {
    if (ended) return;
    ended = true;
    follow.abort();
    void agent.signal(pid, 'SIGHUP').catch(() => undefined);
    setTimeout(() => {
      agent
        .getProcess(pid)
        .then((p) => (p.running ? agent.signal(pid, 'SIGKILL') : undefined))
        .catch(() => undefined);
    }, limits.hangupGraceMs).unref();
  };

  // ---- input: binary frames in order, one write in flight; the socket pauses while too much waits ----
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let writing = false;
  const pump = async () => {
    if (writing) return;
    writing = true;
    try {
      while (pending.length > 0 && !ended) {
        const data = Buffer.concat(pending);
        pending = [];
        pendingBytes = 0;
        socket.resume();
        await agent.sendStdin(pid, data.toString('base64'), false);
      }
    } catch (err) {
      // 409: the shell exited (its exit frame follows from the output); anything else ends the session.
      if ((err as AppError).status !== 409 && !ended) {
        fail(err);
        hangUp();
      }
    } finally {
      writing = false;
    }
  };
  onMessage = (data, binary) => {
    if (ended) return;
    traffic();
    if (binary) {
      if (data.length === 0) return;
      pending.push(data);
      pendingBytes += data.length;
      if (pendingBytes > limits.inputHighWater) socket.pause();
      void pump();
      return;
    }
    let control: ShellControl;
    try {
      control = ShellControl.parse(JSON.parse(data.toString('utf8')));
    } catch {
      sendJson({
        type: 'error',
        code: 'invalid_request',
        message: 'text frames are control messages: {"type":"resize","cols":1-1000,"rows":1-1000}; send input as binary frames',
      });
      return;
    }
    agent.resize(pid, control.cols, control.rows).catch((err) => {
      if ((err as AppError).status !== 409) sendJson({ type: 'error', code: (err as AppError).code, message: (err as Error).message });
    });
  };
  for (const [data, binary] of early.splice(0)) onMessage(data, binary);
  if (earlyBytes > limits.inputHighWater && pending.length === 0) socket.resume();

  // ---- liveness: pings, the idle limit ----
  let alive = true;
  const timer = setInterval(
    () => {
      if (Date.now() - lastTraffic > limits.idleMs) {
        sendJson({ type: 'error', code: 'idle_timeout', message: `no input or output for ${Math.round(limits.idleMs / 1000)} s` });
        close(SHELL_CLOSE.idle, 'idle timeout');
        hangUp();
        return;
      }
      if (!alive) {
        socket.terminate();
        return;
      }
      alive = false;
      socket.ping();
    },
    Math.min(limits.heartbeatMs, Math.max(1000, limits.idleMs / 4)),
  );
  socket.on('pong', () => {
    alive = true;
  });
  socket.once('close', () => {
    clearInterval(timer);
    hangUp();
  });
  if (clientGone) hangUp();

  // ---- output: terminal bytes as binary frames, then the exit frame and a normal close ----
  try {
    for await (const ev of agent.output(pid, { follow: true, signal: follow.signal })) {
      if (ev.type === 'exit') {
        ended = true;
        sendJson({ type: 'exit', code: exitCode(ev), signal: ev.signal, timedOut: ev.timedOut });
        close(SHELL_CLOSE.normal, ev.timedOut ? 'the shell reached its time limit' : 'the shell exited');
        break;
      }
      traffic();
      if (socket.readyState !== socket.OPEN) break;
      socket.send(Buffer.from(ev.data, 'base64'));
      while (socket.bufferedAmount > limits.outputHighWater && socket.readyState === socket.OPEN && !follow.signal.aborted) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    }
  } catch (err) {
    if (!ended && !follow.signal.aborted) {
      fail(err);
      hangUp();
    }
  } finally {
    clearInterval(timer);
  }
}
