import type { components, SnapshotFrame, ThreadFrame } from '@hangar/sdk';

export type Thread = components['schemas']['Thread'];
export type ThreadEvent = components['schemas']['ThreadEvent'];

/** An assistant message still streaming in (its deltas), before its durable `assistant_message` arrives. */
export interface LiveMessage {
  messageId: string;
  runId: string | null;
  text: string;
  reasoning: string;
}

/** A tool call running now (its transient frames), before its durable `tool_result` arrives. */
export interface LiveTool {
  toolCallId: string;
  runId: string | null;
  name: string;
  output: string;
  completed: boolean;
  isError: boolean;
}

export type Connection = 'connecting' | 'live' | 'reconnecting' | 'closed' | 'deleted';

/** What the thread view shows: the durable history by sequence, and what is streaming in now. */
export interface ThreadState {
  thread: Thread | null;
  /** Durable events, oldest first, one per sequence. */
  events: ThreadEvent[];
  live: LiveMessage[];
  tools: LiveTool[];
  activeRunId: string | null;
  connection: Connection;
}

export const initialState: ThreadState = { thread: null, events: [], live: [], tools: [], activeRunId: null, connection: 'connecting' };

export type Action =
  | { type: 'history'; thread: Thread; events: ThreadEvent[] }
  | { type: 'frame'; frame: ThreadFrame }
  | { type: 'connection'; connection: Connection }
  | { type: 'run-started'; runId: string };

/** Adds durable events to the history, keeping it ordered by sequence without duplicates. */
function mergeEvents(have: ThreadEvent[], add: ThreadEvent[]): ThreadEvent[] {
  if (add.length === 0) return have;
  const bySeq = new Map(have.map((e) => [e.sequence, e]));
  for (const e of add) bySeq.set(e.sequence, e);
  return [...bySeq.values()].sort((a, b) => a.sequence - b.sequence);
}

const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const rec = (v: unknown): Record<string, unknown> => (v && typeof v === 'object' ? (v as Record<string, unknown>) : {});

/** The live items a durable event settles: the message it records, the tool call it ends, or everything of its run. */
function settle(s: ThreadState, e: ThreadEvent): Pick<ThreadState, 'live' | 'tools' | 'activeRunId'> {
  const p = rec(e.payload);
  let { live, tools, activeRunId } = s;
  if (e.type === 'assistant_message') {
    const messageId = str(p.messageId);
    live = messageId ? live.filter((m) => m.messageId !== messageId) : live.filter((m) => m.runId !== e.runId);
  } else if (e.type === 'tool_result') {
    tools = tools.filter((t) => t.toolCallId !== str(p.toolCallId));
  } else if (e.type === 'run_started') {
    activeRunId = str(p.runId) ?? e.runId;
  } else if (e.type === 'run_completed') {
    const runId = str(p.runId) ?? e.runId;
    live = live.filter((m) => m.runId !== runId);
    tools = tools.filter((t) => t.runId !== runId);
    if (activeRunId === runId) activeRunId = null;
  }
  return { live, tools, activeRunId };
}

function isDurable(f: ThreadFrame): f is ThreadFrame & ThreadEvent {
  return typeof f.sequence === 'number' && typeof f.type === 'string' && 'payload' in f;
}

export function reduce(s: ThreadState, a: Action): ThreadState {
  switch (a.type) {
    case 'history':
      return { ...s, thread: a.thread, events: mergeEvents(s.events, a.events) };
    case 'connection':
      return { ...s, connection: a.connection };
    case 'run-started':
      return s.activeRunId ? s : { ...s, activeRunId: a.runId };
    case 'frame':
      return onFrame(s, a.frame);
  }
}

function onFrame(s: ThreadState, f: ThreadFrame): ThreadState {
  if (f.type === 'snapshot') {
    const snap = f as SnapshotFrame;
    const events = snap.resync ? (snap.events ?? []) : mergeEvents(s.events, snap.events ?? []);
    return {
      ...s,
      thread: snap.thread ?? s.thread,
      events,
      live: snap.resync ? [] : s.live,
      tools: snap.resync ? [] : s.tools,
      activeRunId: snap.activeRunId !== undefined ? snap.activeRunId : s.activeRunId,
      connection: 'live',
    };
  }
  if (isDurable(f)) {
    const e: ThreadEvent = {
      sequence: f.sequence,
      rolloutId: f.rolloutId,
      threadId: f.threadId,
      runId: f.runId ?? null,
      type: f.type,
      payload: f.payload,
      createdAt: f.createdAt,
    };
    return { ...s, events: mergeEvents(s.events, [e]), ...settle(s, e) };
  }
  const runId = str(f.runId);
  const delta = str(f.delta) ?? '';
  switch (f.type) {
    case 'assistant_message_delta':
    case 'assistant_thinking_delta': {
      const messageId = str(f.messageId) ?? `run:${runId}`;
      // A message already recorded durably (a late delta) is not streamed again.
      if (s.events.some((e) => e.type === 'assistant_message' && rec(e.payload).messageId === messageId)) return s;
      const field = f.type === 'assistant_message_delta' ? 'text' : 'reasoning';
      const existing = s.live.find((m) => m.messageId === messageId);
      const live = existing
        ? s.live.map((m) => (m.messageId === messageId ? { ...m, [field]: m[field] + delta } : m))
        : [...s.live, { messageId, runId, text: '', reasoning: '', [field]: delta }];
      return { ...s, live, activeRunId: s.activeRunId ?? runId };
    }
    case 'tool_call_started':
    case 'tool_output_delta':
    case 'tool_call_completed': {
      const toolCallId = str(f.toolCallId);
      if (!toolCallId) return s;
      if (s.events.some((e) => e.type === 'tool_result' && rec(e.payload).toolCallId === toolCallId)) return s;
      const existing = s.tools.find((t) => t.toolCallId === toolCallId);
      const base: LiveTool = existing ?? { toolCallId, runId, name: str(f.name) ?? 'tool', output: '', completed: false, isError: false };
      const next: LiveTool = {
        ...base,
        name: str(f.name) ?? base.name,
        output: f.type === 'tool_output_delta' ? base.output + delta : base.output,
        completed: base.completed || f.type === 'tool_call_completed',
        isError: f.type === 'tool_call_completed' ? f.isError === true : base.isError,
      };
      return { ...s, tools: existing ? s.tools.map((t) => (t.toolCallId === toolCallId ? next : t)) : [...s.tools, next] };
    }
    case 'thread_renamed':
      return s.thread ? { ...s, thread: { ...s.thread, title: str(f.title), updatedAt: str(f.updatedAt) ?? s.thread.updatedAt } } : s;
    case 'thread_archived':
      return s.thread ? { ...s, thread: { ...s.thread, archived: f.archived === true, updatedAt: str(f.updatedAt) ?? s.thread.updatedAt } } : s;
    case 'thread_deleted':
      return { ...s, connection: 'deleted', activeRunId: null, live: [], tools: [] };
    default:
      return s;
  }
}

/** The status of the thread's latest run: from the active run, else the last `run_completed`. */
export function lastRunStatus(s: ThreadState): { runId: string; status: string; error: string | null } | null {
  if (s.activeRunId) return { runId: s.activeRunId, status: 'running', error: null };
  for (let i = s.events.length - 1; i >= 0; i--) {
    const e = s.events[i]!;
    if (e.type === 'run_completed') {
      const p = rec(e.payload);
      return { runId: str(p.runId) ?? e.runId ?? '', status: str(p.status) ?? 'completed', error: str(p.error) };
    }
    if (e.type === 'run_started') return null; // started, not completed, and the server says no run is active
  }
  return null;
}

export { rec, str };
