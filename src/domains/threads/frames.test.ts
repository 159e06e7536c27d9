import { describe, expect, it } from 'vitest';
import {
  BusFrame,
  DurableFrame,
  frameKind,
  LiveFrame,
  MetadataFrame,
  SnapshotFrame,
  TransientFrame,
  transientFrames,
  type FrameType,
} from './frames.js';

/**
 * The spec's "Live thread frames (WebSocket)" table, copied by hand: frame and its Durable column. The catalogue
 * must hold exactly these, so a frame the spec names cannot be missing and one it does not name cannot slip in.
 */
const SPEC_FRAMES: [type: string, durable: boolean][] = [
  ['snapshot', false],
  ['run_started', true],
  ['run_completed', true],
  ['user_message', true],
  ['assistant_message', true],
  ['tool_call', true],
  ['tool_result', true],
  ['assistant_message_delta', false],
  ['assistant_thinking_delta', false],
  ['assistant_message_source', false],
  ['tool_call_started', false],
  ['tool_output_delta', false],
  ['tool_call_completed', false],
  ['compaction_started', true],
  ['compaction_completed', true],
  ['thread_archived', false],
  ['thread_deleted', false],
  ['thread_renamed', false],
];

const typesOf = (union: { options: readonly { shape: { type: { value: string } } }[] }) => union.options.map((o) => o.shape.type.value).sort();

describe('the frame catalogue', () => {
  it('holds every frame type the spec lists, and no other', () => {
    expect(typesOf(LiveFrame)).toEqual(SPEC_FRAMES.map(([t]) => t).sort());
  });

  it('files each frame as the spec says: durable ones are durable, the rest are not', () => {
    for (const [type, durable] of SPEC_FRAMES) expect(frameKind(type as FrameType) === 'durable', type).toBe(durable);
    expect(typesOf(DurableFrame)).toEqual(
      SPEC_FRAMES.filter(([, d]) => d)
        .map(([t]) => t)
        .sort(),
    );
    expect(typesOf(TransientFrame)).toEqual([
      'assistant_message_delta',
      'assistant_message_source',
      'assistant_thinking_delta',
      'tool_call_completed',
      'tool_call_started',
      'tool_output_delta',
    ]);
    expect(typesOf(MetadataFrame)).toEqual(['thread_archived', 'thread_deleted', 'thread_renamed']);
    // The snapshot is per socket: it never travels on the bus.
    expect(typesOf(BusFrame)).not.toContain('snapshot');
  });

  it('types the fields: a frame with a field of the wrong type is refused, naming it', () => {
    const base = { sequence: 1, rolloutId: 'rol_1', threadId: 'thr_1', runId: 'run_1', createdAt: '2026-11-25T00:00:00.000Z' };
    expect(BusFrame.safeParse({ ...base, type: 'user_message', payload: { text: 'hi' } }).success).toBe(true);
    const bad = BusFrame.safeParse({
      ...base,
      type: 'run_completed',
      payload: { runId: 'run_1', status: 'done', usage: {}, iterations: 1, error: null },
    });
    expect(bad.error?.issues.map((i) => i.path.join('.'))).toEqual(['payload.status']);
    expect(
      BusFrame.safeParse({ type: 'thread_renamed', threadId: 'thr_1', title: 7, updatedAt: 'x' }).error?.issues.map((i) => i.path.join('.')),
    ).toEqual(['title']);
    expect(BusFrame.safeParse({ type: 'no_such_frame' }).success).toBe(false);
  });

  it('passes extra fields through only where the spec leaves the shape open', () => {
    const origin = { threadId: 'thr_1', runId: 'run_1', rolloutId: 'rol_1', sequenceNumber: 1 };
    // A transient frame's type-specific fields and a durable payload's fields: open.
    expect(
      TransientFrame.parse({ ...transientFrames.assistantMessageDelta(origin, 'msg_1', 'He'), citation: { url: 'https://example.test' } }),
    ).toMatchObject({ citation: { url: 'https://example.test' } });
    const base = { sequence: 1, rolloutId: 'rol_1', threadId: 'thr_1', runId: null, createdAt: 'x' };
    expect(DurableFrame.parse({ ...base, type: 'user_message', payload: { text: 'hi', attachments: [] } }).payload).toEqual({
      text: 'hi',
      attachments: [],
    });
    // The event record, metadata frames and the snapshot are ours: closed.
    expect(DurableFrame.parse({ ...base, type: 'user_message', payload: { text: 'hi' }, secret: 1 })).not.toHaveProperty('secret');
    expect(MetadataFrame.parse({ type: 'thread_deleted', threadId: 'thr_1', deletedAt: 'x', secret: 1 })).not.toHaveProperty('secret');
    const thread = {
      id: 'thr_1',
      orgId: 'org_1',
      ownerUserId: null,
      agentId: null,
      title: null,
      executionMode: 'managed',
      archived: false,
      activeRolloutId: 'rol_1',
      createdAt: 'x',
      updatedAt: 'x',
    };
    expect(SnapshotFrame.parse({ type: 'snapshot', protocol_version: 1, view: 'metadata', thread, secret: 1 })).not.toHaveProperty('secret');
    expect(SnapshotFrame.safeParse({ type: 'snapshot', protocol_version: 2, view: 'metadata', thread }).success).toBe(false);
  });

  it('builds the transient frames a run emits as valid catalogue frames', () => {
    const origin = { threadId: 'thr_1', runId: 'run_1', rolloutId: 'rol_1', sequenceNumber: 3 };
    const built = [
      transientFrames.assistantMessageDelta(origin, 'msg_1', 'He'),
      transientFrames.assistantThinkingDelta(origin, 'msg_1', 'hmm'),
      transientFrames.toolCallStarted(origin, 'call_1', 'exec_command'),
      transientFrames.toolOutputDelta(origin, 'call_1', 'out'),
      transientFrames.toolCallCompleted(origin, 'call_1', 'exec_command', false),
    ];
    for (const f of built) expect(BusFrame.parse(f)).toEqual(f);
  });
});
