import type { components, paths } from './generated/openapi.js';

type Schemas = components['schemas'];
/** The JSON body an operation takes. */
type JsonBody<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends { requestBody?: { content: { 'application/json': infer B } } }
  ? B
  : never;

/** A sandbox's record (`GET /v1/sandboxes/{id}`). */
export type SandboxInfo = Schemas['Sandbox'];
/** What `sandboxes.create` takes (`POST /v1/sandboxes`). */
export type CreateSandboxParams = JsonBody<'/v1/sandboxes', 'post'>;
/** An entry of a sandbox's file system. */
export type FileEntry = Schemas['SandboxFileEntry'];
/** A finished command (`POST /v1/sandboxes/{id}/commands`). */
export type CommandResult = Omit<Schemas['CommandResult'], 'stdoutTruncated' | 'stderrTruncated'>;
/** What `execute` takes (`POST /v1/execute`). */
export type ExecuteParams = JsonBody<'/v1/execute', 'post'>;
/** The result of `execute`: each step's output, exit code and status. */
export type ExecutionResult = Schemas['ExecutionResult'];
/** An agent. */
export type Agent = Schemas['Agent'];
/** What `agents.create` takes. */
export type CreateAgentParams = JsonBody<'/v1/agents', 'post'>;
/** What `agents.update` takes: the fields to change. */
export type UpdateAgentParams = JsonBody<'/v1/agents/{slug}', 'patch'>;
/** What `runs.create` and `runs.stream` take (`stream` is set for you). */
export type RunParams = Omit<JsonBody<'/v1/run', 'post'>, 'stream'>;
/** A run's record and result. */
export type RunResult = Schemas['AgentRunResult'];
/** A thread. */
export type Thread = Schemas['Thread'];
/** A thread's durable event, as `GET /v1/threads/{threadId}/events` lists it. */
export type ThreadEvent = Schemas['ThreadEvent'];
/** What `threads.create` takes. */
export type CreateThreadParams = JsonBody<'/v1/threads', 'post'>;

/**
 * A live frame of a thread or a run stream: `type` names it (`run_started`, `user_message`,
 * `assistant_message_delta`, `tool_call`, `run_completed`, `snapshot`, `thread_renamed`...). Durable frames carry
 * `sequence` and `payload`; transient ones (deltas) carry their fields (`delta`...) at the top level.
 */
export interface ThreadFrame {
  type: string;
  /** Durable frames: their place in the thread. */
  sequence?: number;
  threadId?: string;
  runId?: string | null;
  rolloutId?: string;
  payload?: unknown;
  /** `assistant_message_delta` and the other delta frames. */
  delta?: string;
  [field: string]: unknown;
}

/** The first frame of a thread's WebSocket (and of each reconnection). */
export interface SnapshotFrame extends ThreadFrame {
  type: 'snapshot';
  protocol_version: number;
  view: 'owner' | 'metadata';
  thread: Thread;
  /** The highest durable sequence at the time of the snapshot. */
  lastSequence?: number;
  activeRunId?: string | null;
  /** Without `last_sequence`: the active rollout's most recent durable events. */
  events?: ThreadEvent[];
  /** The client was too far behind to replay: this snapshot starts over. */
  resync?: boolean;
}

/** One page of a list, and where the next starts. */
export interface Page<T> {
  data: T[];
  hasMore: boolean;
  /** Pass as `cursor` to get the next page; null on the last. */
  nextCursor: string | null;
}
