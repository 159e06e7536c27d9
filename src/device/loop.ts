import { randomUUID } from 'node:crypto';
import { ApiError, type DeviceApi } from './api.js';
import { runTool, type ToolHost, type ToolOutcome, type ToolPlace, toolResultPart, toolSpecs } from '../platform/agent-tools.js';

/** A run the server dispatched to this device (ADR 0029, "Dispatch protocol"). */
export interface DeviceRun {
  runId: string;
  threadId: string;
  rolloutId: string;
  agent: {
    slug: string;
    instructions: string | null;
    tools: string[];
    config: { maxTurns?: number; maxTokens?: number; temperature?: number };
  };
  /** AI SDK ModelMessages: the thread's history, the new user message last. */
  messages: unknown[];
}

export type RunStatus = 'completed' | 'failed' | 'max_turns';

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  totalTokens: number;
  cachedInputTokens: number;
  reasoningTokens: number;
}

/** How a run ended on this device: finished (run_completed posted), or stopped (cancelled / no longer ours: nothing posted). */
export type RunEnd =
  | { kind: 'finished'; status: RunStatus; iterations: number; error: string | null; usage: Usage }
  | { kind: 'stopped'; reason: string };

export interface LoopDeps {
  api: DeviceApi;
  host: ToolHost;
  /** The workspace folder (the tools' home). */
  home: string;
  /** Scratch directory for apply_patch. */
  tmp: string;
  /** Aborted on a `cancel` message or when the device stops: the run posts nothing more. */
  signal: AbortSignal;
  /** Kills a process the run started (the run's processes are killed when it is stopped). */
  kill?: (pid: number) => void;
  /** Transient deltas of one message are posted at most this often (default 50 ms). */
  coalesceMs?: number;
}

const DEFAULT_MAX_TURNS = 20;

type ModelEvent =
  | { type: 'start'; model?: string }
  | { type: 'text-delta'; text: string }
  | { type: 'reasoning-delta'; text: string }
  | { type: 'tool-call'; id: string; name: string; input: unknown }
  | { type: 'finish'; finishReason?: string; usage?: Partial<Usage> }
  | { type: 'error'; error: { code?: string; message?: string } };

/** The run is no longer this device's (409), or it was cancelled: stop without posting anything else. */
class Stopped extends Error {}

export const devicePlace = (home: string): ToolPlace => ({
  where: `on the user's computer, in the workspace folder ${home}`,
  home,
  imagesIn: 'on the user\u2019s computer (inside the workspace folder)',
});

/**
 * Runs one dispatched run to its end: model turns through `POST /v1/runmesh/runs/{id}/model`, tools on the host,
 * frames into the thread with `POST /v1/thread-events` (durable ones numbered 1, 2, 3… by this device, so a retry
 * after a lost answer is appended once), and `run_completed` last. A `cancel` (the signal) or a 409 stops it with
 * nothing more posted.
 */
export async function runDeviceRun(run: DeviceRun, deps: LoopDeps): Promise<RunEnd> {
  const { api, signal } = deps;
  const { runId, threadId, rolloutId } = run;
  const maxTurns = positive(run.agent.config?.maxTurns) ?? DEFAULT_MAX_TURNS;
  const specs = toolSpecs(run.agent.tools ?? [], devicePlace(deps.home));
  const offered = new Set(specs.map((t) => t.name));
  const messages: unknown[] = [...run.messages];
  const usage: Usage = { inputTokens: 0, outputTokens: 0, totalTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 };
  const pids = new Set<number>();
  let seq = 0;

  const check = () => {
    if (signal.aborted) throw new Stopped(String(signal.reason ?? 'cancelled'));
  };
  const post = async (frame: Record<string, unknown>) => {
    check();
    try {
      return await api.call<{ accepted: boolean; duplicate: boolean; sequence: number }>('POST', '/v1/thread-events', { threadId, frame }, signal);
    } catch (err) {
      if (err instanceof ApiError && err.status === 409) throw new Stopped('the run is no longer this device\u2019s');
      if (signal.aborted) throw new Stopped(String(signal.reason ?? 'cancelled'));
      throw err;
    }
  };
  /** A durable frame: the next counter, kept across retries (DeviceApi retries network errors and 5xx). */
  // A durable frame whose answer never came (after retries): the server may hold it, so its counter is not
  // reused for another frame; it is sent again (same counter, a duplicate at worst) before the next one.
  let unsent: Record<string, unknown> | null = null;
  const durable = async (type: string, payload: Record<string, unknown>) => {
    if (unsent) {
      await post(unsent);
      unsent = null;
      seq += 1;
    }
    const frame = { type, runId, rolloutId, sequenceNumber: seq + 1, payload };
    try {
      await post(frame);
    } catch (err) {
      if (!(err instanceof Stopped)) unsent = frame;
      throw err;
    }
    seq += 1;
  };
  /** A live frame: best effort (a lost one is only a missed animation), but a 409 still stops the run. */
  const live = async (frame: Record<string, unknown>) => {
    try {
      await post({ ...frame, runId, rolloutId, sequenceNumber: Math.max(1, seq) });
    } catch (err) {
      if (err instanceof Stopped) throw err;
    }
  };
  const coalescer = new Coalescer(live, deps.coalesceMs ?? 50);

  let iterations = 0;
  try {
    for (let turn = 1; turn <= maxTurns; turn++) {
      check();
      iterations = turn;
      const messageId = `msg_${randomUUID().replace(/-/g, '')}`;
      let text = '';
      let reasoning = '';
      const calls: Array<{ id: string; name: string; input: unknown }> = [];
      let failure: string | null = null;
      try {
        for await (const ev of api.ndjson<ModelEvent>(
          `/v1/runmesh/runs/${encodeURIComponent(runId)}/model`,
          {
            messages,
            tools: specs,
            ...(run.agent.instructions ? { system: run.agent.instructions } : {}),
            ...(positive(run.agent.config?.maxTokens) ? { maxTokens: run.agent.config.maxTokens } : {}),
            ...(typeof run.agent.config?.temperature === 'number' ? { temperature: run.agent.config.temperature } : {}),
          },
          signal,
        )) {
          check();
          if (ev.type === 'text-delta') {
            text += ev.text;
            coalescer.add('assistant_message_delta', messageId, ev.text);
          } else if (ev.type === 'reasoning-delta') {
            reasoning += ev.text;
            coalescer.add('assistant_thinking_delta', messageId, ev.text);
          } else if (ev.type === 'tool-call') calls.push({ id: ev.id, name: ev.name, input: ev.input });
          else if (ev.type === 'finish') addUsage(usage, ev.usage);
          else if (ev.type === 'error') failure = ev.error?.message ?? ev.error?.code ?? 'the model failed';
        }
      } catch (err) {
        if (err instanceof ApiError && err.status === 409) throw new Stopped('the run is no longer this device\u2019s');
        check();
        failure = (err as Error).message;
      }
      await coalescer.flush();
      if (text || reasoning) await durable('assistant_message', { messageId, text, ...(reasoning ? { reasoning } : {}) });
      if (failure !== null) return await finish('failed', failure);
      const content: unknown[] = [];
      if (text) content.push({ type: 'text', text });
      for (const c of calls) content.push({ type: 'tool-call', toolCallId: c.id, toolName: c.name, input: c.input });
      if (content.length) messages.push({ role: 'assistant', content });
      if (!calls.length) return await finish('completed', null);

      const results: unknown[] = [];
      for (const c of calls) {
        await durable('tool_call', { toolCallId: c.id, name: c.name, input: c.input });
        await live({ type: 'tool_call_started', toolCallId: c.id, name: c.name });
        const outcome: ToolOutcome = offered.has(c.name)
          ? await runTool(c.name, c.input, {
              host: deps.host,
              home: deps.home,
              tmp: deps.tmp,
              pids,
              signal,
              onOutput: (chunk) => coalescer.add('tool_output_delta', c.id, chunk),
            })
          : { output: `tool ${c.name} is not available to this agent`, isError: true };
        check();
        await coalescer.flush();
        await live({ type: 'tool_call_completed', toolCallId: c.id, name: c.name, isError: outcome.isError });
        await durable('tool_result', {
          toolCallId: c.id,
          name: c.name,
          output: outcome.output,
          isError: outcome.isError,
          ...(outcome.image ? { image: { mediaType: outcome.image.mediaType } } : {}),
        });
        results.push(toolResultPart(c, outcome));
      }
      messages.push({ role: 'tool', content: results });
    }
    return await finish('max_turns', null);
  } catch (err) {
    if (err instanceof Stopped) {
      for (const pid of pids) deps.kill?.(pid);
      return { kind: 'stopped', reason: err.message };
    }
    // Anything else (the server unreachable after retries, a bug): report it as the run's failure if we still can.
    try {
      await coalescer.flush();
      return await finish('failed', (err as Error).message);
    } catch (again) {
      for (const pid of pids) deps.kill?.(pid);
      return { kind: 'stopped', reason: `cannot report the run: ${(again as Error).message}` };
    }
  } finally {
    coalescer.stop();
  }

  async function finish(status: RunStatus, error: string | null): Promise<RunEnd> {
    await durable('run_completed', { runId, status, usage, iterations, error });
    return { kind: 'finished', status, iterations, error, usage };
  }
}

const positive = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? Math.floor(v) : undefined);

function addUsage(total: Usage, u: Partial<Usage> | undefined) {
  if (!u) return;
  for (const k of Object.keys(total) as (keyof Usage)[]) {
    const v = u[k];
    if (typeof v === 'number' && Number.isFinite(v)) total[k] += v;
  }
}

type DeltaType = 'assistant_message_delta' | 'assistant_thinking_delta' | 'tool_output_delta';

/**
 * Gathers the live deltas of each message (or tool call) and posts them at most once per `ms`, in order: a
 * model streaming a token at a time makes a POST every 50 ms, not one per token.
 */
class Coalescer {
  private pending = new Map<string, { type: DeltaType; id: string; text: string }>();
  private timer: NodeJS.Timeout | null = null;
  private chain: Promise<void> = Promise.resolve();
  private failure: unknown = null;

  constructor(
    private readonly send: (frame: Record<string, unknown>) => Promise<void>,
    private readonly ms: number,
  ) {}

  add(type: DeltaType, id: string, text: string) {
    if (!text) return;
    const key = `${type}:${id}`;
    const p = this.pending.get(key);
    if (p) p.text += text;
    else this.pending.set(key, { type, id, text });
    this.timer ??= setTimeout(() => {
      this.timer = null;
      void this.drain();
    }, this.ms);
  }

  private drain(): Promise<void> {
    const batch = [...this.pending.values()];
    this.pending.clear();
    for (const d of batch) {
      const frame =
        d.type === 'tool_output_delta' ? { type: d.type, toolCallId: d.id, delta: d.text } : { type: d.type, messageId: d.id, delta: d.text };
      this.chain = this.chain
        .then(() => this.send(frame))
        .catch((err) => {
          this.failure ??= err;
        });
    }
    return this.chain;
  }

  /** Sends what is pending now and waits for every send; throws what a send threw (a Stopped). */
  async flush() {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.drain();
    if (this.failure) throw this.failure;
  }

  stop() {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.pending.clear();
  }
}
