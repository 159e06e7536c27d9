/** The live thread frames of the spec ("Live thread frames"), by how they travel. */

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

/** Live only: fanned out to subscribers, never stored or replayed. */
export const TRANSIENT_TYPES = [
  'assistant_message_delta',
  'assistant_thinking_delta',
  'assistant_message_source',
  'tool_call_started',
  'tool_output_delta',
  'tool_call_completed',
] as const;
export type TransientType = (typeof TRANSIENT_TYPES)[number];

/** Thread metadata updates: live only, also delivered to metadata-only (administrator) subscribers. */
export const METADATA_TYPES = ['thread_renamed', 'thread_archived', 'thread_deleted'] as const;
export type MetadataType = (typeof METADATA_TYPES)[number];

export const isDurable = (type: string): type is DurableType => (DURABLE_TYPES as readonly string[]).includes(type);

/** One durable frame as stored (a JSONL line) and as sent: the spec's ThreadEvent plus nothing. */
export interface ThreadEvent {
  sequence: number;
  rolloutId: string;
  threadId: string;
  runId: string | null;
  type: DurableType;
  payload: unknown;
  createdAt: string;
}

/** What travels on the bus channel `thread:<id>` between replicas. */
export type BusFrame =
  | { kind: 'durable'; event: ThreadEvent }
  | { kind: 'transient'; frame: Record<string, unknown> & { type: TransientType } }
  | { kind: 'meta'; frame: Record<string, unknown> & { type: MetadataType } };

export const threadChannel = (threadId: string): string => `thread:${threadId}`;
export const jsonlKey = (orgId: string, threadId: string): string => `threads/${orgId}/${threadId}.jsonl`;
