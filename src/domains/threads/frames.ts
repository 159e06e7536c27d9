import { z } from 'zod';

/**
 * The catalogue of live thread frames: every frame of the spec's "Live thread frames" table, by how it travels,
 * as zod schemas discriminated on `type`. It is the only frame type: POST /v1/thread-events validates against
 * its transient part, `appendDurable` takes its durable part, the bus carries `BusFrame` (parsed again where it
 * is received: another replica may run other code), the WebSocket sends `LiveFrame`, runs build theirs from it.
 * See ADR 0011, "The frame catalogue".
 *
 * Extra fields pass through only where the spec leaves the shape open: a durable frame's `payload` ("shape
 * varies by type; shapes: not shown") and a transient frame's type-specific fields ("plus type-specific fields
 * such as delta"). The fields named here are typed all the same. Snapshot and metadata frames are ours: closed.
 */

export const EXECUTION_MODES = ['in_sandbox', 'managed', 'local-desktop'] as const;
export const ExecutionMode = z.enum(EXECUTION_MODES);

/** The Thread record (spec "Thread"); here because the snapshot frame carries it. */
export const Thread = z
  .object({
    id: z.string().describe('`thr_` prefix'),
    orgId: z.string(),
    ownerUserId: z.string().nullable(),
    agentId: z.string().nullable(),
    title: z.string().nullable(),
    executionMode: z.enum(EXECUTION_MODES),
    archived: z.boolean(),
    activeRolloutId: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'Thread' });
export type Thread = z.infer<typeof Thread>;

// ---- durable frames: sequenced, written to the JSONL, replayed ---------------------------------

/** Written to the thread's JSONL with the thread's next sequence, projected into SQL, replayed on reconnect. */
export const DURABLE_TYPES = [
  'run_started',
  'run_completed',
  'user_message',
  'assistant_message',
  'tool_call',
  'tool_result',
  'compaction_started',
  'compaction_completed',
] as const;
export type DurableType = (typeof DURABLE_TYPES)[number];

/** Every status a run record has (runs' `RunResult.status`); `run_completed` carries the final one. */
const RUN_STATUSES = ['registered', 'running', 'completed', 'failed', 'cancelled', 'max_turns'] as const;

/** The payload of each durable frame type. */
export const DurablePayloads = {
  run_started: z.looseObject({
    runId: z.string(),
    agent: z.string(),
    model: z.string().nullable(),
    executionMode: ExecutionMode,
    sandboxId: z.string().nullable(),
    targetDeviceId: z.string().nullable(),
  }),
  run_completed: z.looseObject({
    runId: z.string(),
    status: z.enum(RUN_STATUSES),
    usage: z.record(z.string(), z.number()),
    iterations: z.number().int(),
    error: z.string().nullable(),
  }),
  user_message: z.looseObject({ text: z.string() }),
  /** `messageId` links the message to its `assistant_message_delta` frames, when it was streamed. */
  assistant_message: z.looseObject({
    messageId: z.string().optional(),
    text: z.string(),
    reasoning: z.string().optional(),
    /** The sources and citations the model gave for this message (streamed as `assistant_message_source`). */
    sources: z.array(z.lazy(() => MessageSource)).optional(),
  }),
  tool_call: z.looseObject({ toolCallId: z.string(), name: z.string(), input: z.unknown() }),
  tool_result: z.looseObject({
    toolCallId: z.string(),
    name: z.string(),
    output: z.string(),
    isError: z.boolean(),
    image: z.object({ mediaType: z.string() }).optional(),
  }),
  compaction_started: z.looseObject({ fromRolloutId: z.string(), reason: z.string().nullable() }),
  /** Carries everything its rollout record needs, so a projection rebuilt from the JSONL alone has it. */
  compaction_completed: z.looseObject({
    rolloutId: z.string(),
    fromRolloutId: z.string(),
    position: z.number().int(),
    summary: z.string(),
    summaryMethod: z.enum(['extractive', 'model']),
    summaryModel: z.string().nullable(),
  }),
} as const satisfies Record<DurableType, z.ZodType>;
export type DurablePayload<T extends DurableType> = z.infer<(typeof DurablePayloads)[T]>;

const eventFields = {
  sequence: z.number().int(),
  rolloutId: z.string(),
  threadId: z.string(),
  runId: z.string().nullable(),
};

/**
 * The spec's ThreadEvent record as stored and listed: its `payload` is whatever was written ("shapes: not
 * shown"), so history written by any version reads back. A live durable frame is a `DurableFrame`, one of these.
 */
export const ThreadEvent = z.object({ ...eventFields, type: z.enum(DURABLE_TYPES), payload: z.unknown(), createdAt: z.string() });
export type ThreadEvent = z.infer<typeof ThreadEvent>;

const durable = <T extends DurableType>(type: T) =>
  z.object({ ...eventFields, type: z.literal(type), payload: DurablePayloads[type], createdAt: z.string() });

/** A durable frame as published and sent live: a ThreadEvent whose payload has its type's shape. */
export const DurableFrame = z.discriminatedUnion('type', [
  durable('run_started'),
  durable('run_completed'),
  durable('user_message'),
  durable('assistant_message'),
  durable('tool_call'),
  durable('tool_result'),
  durable('compaction_started'),
  durable('compaction_completed'),
]);
export type DurableFrame = z.infer<typeof DurableFrame>;

const input = <T extends DurableType>(type: T) =>
  z.object({ type: z.literal(type), payload: DurablePayloads[type], runId: z.string().nullable().optional(), rolloutId: z.string().optional() });

/** What a writer hands `appendDurable`: the sequence, thread and time are the writer's. `rolloutId` defaults to the active rollout. */
export const DurableInput = z.discriminatedUnion('type', [
  input('run_started'),
  input('run_completed'),
  input('user_message'),
  input('assistant_message'),
  input('tool_call'),
  input('tool_result'),
  input('compaction_started'),
  input('compaction_completed'),
]);
export type DurableInput = z.infer<typeof DurableInput>;

// ---- transient frames: live only, never stored or replayed -------------------------------------

export const TRANSIENT_TYPES = [
  'assistant_message_delta',
  'assistant_thinking_delta',
  'assistant_message_source',
  'tool_call_started',
  'tool_output_delta',
  'tool_call_completed',
] as const;
export type TransientType = (typeof TRANSIENT_TYPES)[number];

/** Fields every transient frame has (spec: POST /v1/thread-events, rule 1). `threadId` is set by the server. */
const transientFields = {
  threadId: z.string().optional(),
  runId: z.string().min(1).max(100),
  rolloutId: z.string().min(1).max(100),
  messageId: z.string().min(1).max(200).optional(),
  /** The durable sequence the frame follows. */
  sequenceNumber: z.number().int().positive(),
};
/** Type-specific fields are optional: a local-device client sends what it has (the spec names only `delta`). */
const transient = <T extends TransientType, S extends z.ZodRawShape>(type: T, shape: S) =>
  z.looseObject({ type: z.literal(type), ...transientFields, ...shape });

export const TransientFrame = z.discriminatedUnion(
  'type',
  [
    transient('assistant_message_delta', { delta: z.string().optional() }),
    transient('assistant_thinking_delta', { delta: z.string().optional() }),
    transient('assistant_message_source', { delta: z.string().optional(), source: z.unknown().optional() }),
    transient('tool_call_started', { toolCallId: z.string().optional(), name: z.string().optional(), delta: z.string().optional() }),
    transient('tool_output_delta', { toolCallId: z.string().optional(), delta: z.string().optional() }),
    transient('tool_call_completed', {
      toolCallId: z.string().optional(),
      name: z.string().optional(),
      isError: z.boolean().optional(),
      delta: z.string().optional(),
    }),
  ],
  {
    error: (issue) =>
      issue.code === 'invalid_union'
        ? `must be a transient frame type (${TRANSIENT_TYPES.join(', ')}); durable frames are written by runs, not through this route`
        : undefined,
  },
);
export type TransientFrame = z.infer<typeof TransientFrame>;

/** The run a transient frame belongs to and the durable sequence it follows. */
export interface TransientOrigin {
  threadId: string;
  runId: string;
  rolloutId: string;
  sequenceNumber: number;
}

/**
 * A source or citation a model gave: a web page (`url`) or a document the prompt held (`document`), with the text
 * it cites when the provider says.
 */
export const MessageSource = z.looseObject({
  sourceType: z.enum(['url', 'document']),
  id: z.string(),
  url: z.string().optional(),
  title: z.string().optional(),
  mediaType: z.string().optional(),
  filename: z.string().optional(),
  citedText: z.string().optional(),
});
export type MessageSource = z.infer<typeof MessageSource>;

/** Typed constructors for the transient frames a run emits. */
export const transientFrames = {
  /** A source of the message `messageId`, or one a tool call found (`toolCallId`) for the message to come. */
  assistantMessageSource: (o: TransientOrigin, of: { messageId: string } | { toolCallId: string }, source: MessageSource): TransientFrame => ({
    type: 'assistant_message_source',
    ...o,
    ...of,
    source,
  }),
  assistantMessageDelta: (o: TransientOrigin, messageId: string, delta: string): TransientFrame => ({
    type: 'assistant_message_delta',
    ...o,
    messageId,
    delta,
  }),
  assistantThinkingDelta: (o: TransientOrigin, messageId: string, delta: string): TransientFrame => ({
    type: 'assistant_thinking_delta',
    ...o,
    messageId,
    delta,
  }),
  toolCallStarted: (o: TransientOrigin, toolCallId: string, name: string): TransientFrame => ({ type: 'tool_call_started', ...o, toolCallId, name }),
  toolOutputDelta: (o: TransientOrigin, toolCallId: string, delta: string): TransientFrame => ({
    type: 'tool_output_delta',
    ...o,
    toolCallId,
    delta,
  }),
  toolCallCompleted: (o: TransientOrigin, toolCallId: string, name: string, isError: boolean): TransientFrame => ({
    type: 'tool_call_completed',
    ...o,
    toolCallId,
    name,
    isError,
  }),
};

// ---- metadata frames: live only, also sent to metadata-only (administrator) subscribers ---------

export const METADATA_TYPES = ['thread_renamed', 'thread_archived', 'thread_deleted'] as const;
export type MetadataType = (typeof METADATA_TYPES)[number];

export const MetadataFrame = z.discriminatedUnion('type', [
  z.object({ type: z.literal('thread_renamed'), threadId: z.string(), title: z.string().nullable(), updatedAt: z.string() }),
  z.object({ type: z.literal('thread_archived'), threadId: z.string(), archived: z.boolean(), updatedAt: z.string() }),
  z.object({ type: z.literal('thread_deleted'), threadId: z.string(), deletedAt: z.string() }),
]);
export type MetadataFrame = z.infer<typeof MetadataFrame>;

// ---- the snapshot: the first frame on every socket ---------------------------------------------

export const PROTOCOL_VERSION = 1;

/** The owner's has the thread's state (and, without `last_sequence`, its latest events); an administrator's only the record. */
export const SnapshotFrame = z.object({
  type: z.literal('snapshot'),
  protocol_version: z.literal(PROTOCOL_VERSION),
  view: z.enum(['owner', 'metadata']),
  thread: Thread,
  lastSequence: z.number().int().optional(),
  activeRunId: z.string().nullable().optional(),
  events: z.array(ThreadEvent).optional(),
  resync: z.literal(true).optional(),
});
export type SnapshotFrame = z.infer<typeof SnapshotFrame>;

// ---- how they travel ---------------------------------------------------------------------------

/** What travels on the bus channel `thread:<id>` between replicas: every frame but the (per-socket) snapshot. */
export const BusFrame = z.discriminatedUnion('type', [...DurableFrame.options, ...TransientFrame.options, ...MetadataFrame.options]);
export type BusFrame = z.infer<typeof BusFrame>;

/** Every frame a WebSocket subscriber can receive. */
export const LiveFrame = z.discriminatedUnion('type', [...BusFrame.options, SnapshotFrame]);
export type LiveFrame = z.infer<typeof LiveFrame>;
export type FrameType = LiveFrame['type'];

/** Durable frames are sequenced and replayed; transient ones are dropped first for a slow reader; metadata ones (and the snapshot) reach every view. */
export type FrameKind = 'durable' | 'transient' | 'meta';

const KINDS: Record<FrameType, FrameKind> = {
  run_started: 'durable',
  run_completed: 'durable',
  user_message: 'durable',
  assistant_message: 'durable',
  tool_call: 'durable',
  tool_result: 'durable',
  compaction_started: 'durable',
  compaction_completed: 'durable',
  assistant_message_delta: 'transient',
  assistant_thinking_delta: 'transient',
  assistant_message_source: 'transient',
  tool_call_started: 'transient',
  tool_output_delta: 'transient',
  tool_call_completed: 'transient',
  thread_renamed: 'meta',
  thread_archived: 'meta',
  thread_deleted: 'meta',
  snapshot: 'meta',
};

export const frameKind = (type: FrameType): FrameKind => KINDS[type];

export const isDurable = (frame: LiveFrame | ThreadEvent): frame is DurableFrame | ThreadEvent => KINDS[frame.type] === 'durable';

export const threadChannel = (threadId: string): string => `thread:${threadId}`;
export const jsonlKey = (orgId: string, threadId: string): string => `threads/${orgId}/${threadId}.jsonl`;
