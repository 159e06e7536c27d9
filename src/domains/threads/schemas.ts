import { z } from 'zod';
import { jsonDepth } from '../../platform/http/json-depth.js';
import { limitParam, queryBool } from '../../platform/http/pagination.js';
import { DurablePayloads, EXECUTION_MODES, Thread, ThreadEvent, TRANSIENT_TYPES, TransientFrame } from './frames.js';

export { EXECUTION_MODES, Thread } from './frames.js';

export const Rollout = z
  .object({
    id: z.string().describe('`rol_` prefix'),
    threadId: z.string(),
    position: z.number().int().describe('0 for the thread’s first rollout, then one more per compaction'),
    kind: z.enum(['initial', 'compaction']),
    status: z.enum(['active', 'closed']),
    fromRolloutId: z.string().nullable().describe('The rollout this one compacted'),
    summary: z.string().nullable().describe('Summary of the previous rollout this one opens with'),
    summaryMethod: z
      .enum(['extractive', 'model'])
      .nullable()
      .describe('How the summary was made: `model` (the thread’s agent model) or `extractive` (deterministic, from the messages)'),
    summaryModel: z.string().nullable(),
    eventCount: z.number().int(),
    firstSequence: z.number().int().nullable(),
    lastSequence: z.number().int().nullable(),
    createdAt: z.string(),
    closedAt: z.string().nullable(),
  })
  .meta({ id: 'ThreadRollout' });
export type Rollout = z.infer<typeof Rollout>;

/** The catalogue's ThreadEvent, named for the API document. */
export const ThreadEventSchema = ThreadEvent.meta({ id: 'ThreadEvent' });

export const ThreadParams = z.object({ threadId: z.string().min(1).max(100) });

export const ListThreadsQuery = z.object({
  limit: limitParam(50, 100),
  cursor: z.string().optional(),
  archived: queryBool.default(false).describe('Include archived threads'),
  q: z
    .string()
    .trim()
    .min(1)
    .max(200)
    .optional()
    .describe('Search (beyond the spec): threads whose title contains this text (case-insensitive), or whose id is exactly it'),
});

export const GetThreadQuery = z.object({ include: z.enum(['all_rollouts']).optional() });

export const EventsQuery = z.object({
  limit: limitParam(100, 500),
  cursor: z.string().optional(),
  rollout_id: z.string().min(1).max(100).optional().describe('Only this rollout’s events (default: the active rollout)'),
  include: z.enum(['all_rollouts']).optional().describe('Every rollout’s events'),
});

export const CreateThreadBody = z
  .object({
    title: z.string().min(1).max(500).optional(),
    executionMode: z.enum(EXECUTION_MODES).default('managed'),
    agentId: z.string().min(1).max(100).optional(),
    metadata: z.record(z.string().max(64), z.string().max(1024)).optional(),
  })
  .strict();

export const PatchThreadBody = z
  .object({
    title: z.string().min(1).max(500).nullable().optional().describe('New title (null clears it); emits `thread_renamed`'),
    archived: z.boolean().optional().describe('Archive (true) or unarchive (false); emits `thread_archived`'),
  })
  .strict()
  .refine((b) => b.title !== undefined || b.archived !== undefined, 'give `title` and/or `archived`');

export const CompactBody = z.object({ reason: z.string().max(500).optional().describe('Recorded in `compaction_started`') }).strict();

export const CompactResult = z.object({ thread: Thread, rollout: Rollout, events: z.array(ThreadEventSchema) }).meta({ id: 'CompactionResult' });

/** How deep a frame's JSON may nest; serialising 10,000 levels overflowed the stack (a 500). */
export const MAX_FRAME_DEPTH = 64;

/** A transient frame from a local-device client: the catalogue's transient part, no deeper than MAX_FRAME_DEPTH. */
export const TransientFrameBody = TransientFrame.superRefine((frame, ctx) => {
  if (jsonDepth(frame, MAX_FRAME_DEPTH) > MAX_FRAME_DEPTH) {
    ctx.addIssue({ code: 'custom', message: `is nested too deep: at most ${MAX_FRAME_DEPTH} levels of objects and arrays` });
  }
});

/** The durable frames a local-device run's device publishes (ADR 0029): `sequenceNumber` is the device's own counter for the run. */
export const DEVICE_DURABLE_TYPES = ['assistant_message', 'tool_call', 'tool_result', 'run_completed'] as const;
const deviceDurable = <T extends (typeof DEVICE_DURABLE_TYPES)[number]>(type: T) =>
  z.object({
    type: z.literal(type),
    threadId: z.string().optional(),
    runId: z.string().min(1).max(100),
    rolloutId: z.string().min(1).max(100),
    messageId: z.string().min(1).max(200).optional(),
    sequenceNumber: z.number().int().positive().describe('The device’s own counter of durable frames for the run: 1, 2, 3…'),
    payload: DurablePayloads[type],
  });
export const DeviceDurableFrame = z.discriminatedUnion('type', [
  deviceDurable('assistant_message'),
  deviceDurable('tool_call'),
  deviceDurable('tool_result'),
  deviceDurable('run_completed'),
]);
export type DeviceDurableFrame = z.infer<typeof DeviceDurableFrame>;

/** What POST /v1/thread-events takes: a transient frame (anyone), or a durable one of a device's own run. */
export const ThreadEventFrame = z
  .discriminatedUnion('type', [...TransientFrame.options, ...DeviceDurableFrame.options], {
    error: (issue) =>
      issue.code === 'invalid_union'
        ? `must be a transient frame type (${TRANSIENT_TYPES.join(', ')}), or, from a local-device run's device, one of ${DEVICE_DURABLE_TYPES.join(', ')}`
        : undefined,
  })
  .superRefine((frame, ctx) => {
    if (jsonDepth(frame, MAX_FRAME_DEPTH) > MAX_FRAME_DEPTH) {
      ctx.addIssue({ code: 'custom', message: `is nested too deep: at most ${MAX_FRAME_DEPTH} levels of objects and arrays` });
    }
  });
export type ThreadEventFrame = z.infer<typeof ThreadEventFrame>;

export const ThreadEventsBody = z.object({ threadId: z.string().min(1).max(100), frame: ThreadEventFrame }).strict();

export const ThreadEventsResult = z.object({
  accepted: z.literal(true),
  duplicate: z.boolean().optional().describe('A device’s durable frame it had sent before (a retry): nothing appended'),
  sequence: z.number().int().optional().describe('The thread sequence a device’s durable frame was given'),
});
export type ThreadEventsResult = z.infer<typeof ThreadEventsResult>;
