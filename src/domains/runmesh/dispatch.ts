/**
 * Local-device runs on their way to their node and back (ADR 0029, "Dispatch protocol").
 *
 * A run is queued here (`runmesh_dispatches`) when it is created, and announced on the bus channel of its node;
 * the replica holding that node's WebSocket sends it. Every (re)connection sends the node's runs again until they
 * end, so a device that was away gets them when it comes back. The device accepts a run, calls the model through
 * the platform for it, and publishes its frames through POST /v1/thread-events; its durable frames carry its own
 * counter, so a retried POST is appended once. A sweeper fails runs whose device did not take them, or did not
 * come back, within the dispatch timeout.
 */
import type { WebSocket } from 'ws';
import { z } from 'zod';
import { subscribeParsed } from '../../platform/bus/index.js';
import { exec, orgId, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso } from '../../platform/ids.js';
import { stateKey } from '../../platform/state.js';
import { recordActivity } from '../activity/index.js';
import { runModelStream, type StreamLine } from '../models/index.js';
import {
  acceptDeviceRun,
  appendDeviceFrame,
  devicePayload,
  deviceRun,
  endLocalRun,
  openLocalRun,
  renewDeviceRun,
  type LocalDispatcher,
} from '../runs/index.js';
import { publishTransient, TransientFrame, type DeviceDurableFrame, type ThreadEventFrame, type ThreadEventsResult } from '../threads/index.js';
import { deviceNodeId, requireTargetNode } from './nodes.js';
import { writeAudit } from './repo.js';
import { parseEndpoint } from './wireguard.js';

const nodeChannel = (nodeId: string) => `runmesh.node:${nodeId}`;

const BusMessage = z.discriminatedUnion('type', [
  z.object({ type: z.literal('dispatch'), runId: z.string() }),
  z.object({ type: z.literal('cancel'), runId: z.string(), reason: z.string() }),
]);
type BusMessage = z.infer<typeof BusMessage>;

/** What a device sends on its connection. */
const DeviceMessage = z.discriminatedUnion('type', [
  z.object({ type: z.literal('heartbeat'), endpoints: z.array(z.string().max(300)).max(16).optional() }).strict(),
  z.object({ type: z.literal('accept'), runId: z.string().min(1).max(100) }).strict(),
  z.object({ type: z.literal('reject'), runId: z.string().min(1).max(100), reason: z.string().max(500).optional() }).strict(),
]);

const MAX_ENDPOINTS = 8;

interface Conn {
  nodeId: string;
  send: (message: unknown) => void;
}

/** This process's device connections by node, and the bus subscription of each node it holds one for. */
const MESH_STATE = stateKey('runmesh.dispatch', () => ({
  conns: new Map<string, Set<Conn>>(),
  subscriptions: new Map<string, Promise<() => Promise<void>>>(),
}));

const deadline = (deps: Deps, from = Date.now()) => new Date(from + deps.config.runmesh.dispatchTimeoutSeconds * 1000).toISOString();

/** A context acting as the node's owner for the run's own writes (system work: sweeps, bus deliveries). */
const ownerCtx = (deps: Deps, org: string, userId: string): Ctx =>
  systemCtx(deps, { userId, orgId: org, role: null, scopes: new Set(['agent:run', 'agent:read']), apiKeyId: null });

async function publish(deps: Deps, nodeId: string, message: BusMessage): Promise<void> {
  await deps.bus.publish(nodeChannel(nodeId), message).catch((err) => deps.log.warn({ err, nodeId }, 'could not announce a device run on the bus'));
}

// ---- the dispatcher runs call -------------------------------------------------------------------------

export const meshDispatcher: LocalDispatcher = {
  async check(ctx, nodeId) {
    if (!nodeId) throw errors.invalidField('agent', 'a local-desktop agent needs targetDeviceId: the node it runs on');
    const node = await requireTargetNode(ctx, nodeId);
    if (node.owner_user_id !== ctx.principal.userId) {
      throw errors.forbidden(`node ${nodeId} is another member's machine: only its owner can start runs on it`);
    }
  },

  async dispatch(ctx, run) {
    const now = nowIso();
    await withTx(ctx, async (tx) => {
      await exec(tx)
        .insertInto('runmesh_dispatches')
        .values({
          run_id: run.runId,
          org_id: run.orgId,
          node_id: run.nodeId,
          thread_id: run.threadId,
          state: 'queued',
          attempts: 0,
          device_seq: 0,
          deadline_at: deadline(ctx.deps),
          delivered_at: null,
          accepted_at: null,
          created_at: now,
          updated_at: now,
        })
        .execute();
      await recordActivity(tx, {
        resourceType: 'runmesh_device',
        resourceId: run.nodeId,
        runmeshNodeId: run.nodeId,
        agentRunId: run.runId,
        threadId: run.threadId,
        eventType: 'runmesh.run.dispatched',
        status: 'started',
        title: 'Run queued for its device',
      });
    });
    await publish(ctx.deps, run.nodeId, { type: 'dispatch', runId: run.runId });
  },

  async ended(deps, run, reason) {
    await deps.db.kysely
      .updateTable('runmesh_dispatches')
      .set({ state: 'done', updated_at: nowIso() })
      .where('run_id', '=', run.runId)
      .where('org_id', '=', run.orgId)
      .execute();
    await publish(deps, run.nodeId, { type: 'cancel', runId: run.runId, reason });
  },

  timeoutSeconds: (deps) => deps.config.runmesh.dispatchTimeoutSeconds,

  async tracked(deps, run) {
    const d = await deps.db.kysely
      .selectFrom('runmesh_dispatches')
      .select('run_id')
      .where('run_id', '=', run.runId)
      .where('org_id', '=', run.orgId)
      .executeTakeFirst();
    return Boolean(d);
  },
};

// ---- the device's connection --------------------------------------------------------------------------

async function sendRun(ctx: Ctx, conn: Conn, runId: string): Promise<void> {
  const { deps } = ctx;
  const d = await deps.db.kysely
    .selectFrom('runmesh_dispatches')
    .selectAll()
    .where('run_id', '=', runId)
    .where('org_id', '=', orgId(ctx))
    .where('node_id', '=', conn.nodeId)
    .executeTakeFirst();
  if (!d || d.state === 'done') return;
  let row: Awaited<ReturnType<typeof deviceRun>>;
  try {
    row = await deviceRun(ctx, conn.nodeId, runId);
  } catch (err) {
    if (err instanceof AppError) {
      await markDone(deps, runId);
      return;
    }
    throw err;
  }
  let payload: Awaited<ReturnType<typeof devicePayload>>;
  try {
    payload = await devicePayload(ctx, row);
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    // Its agent was deleted meanwhile: the run cannot be described to the device, so it ends here, saying why.
    await failDispatch(deps, d, `the run could not be sent to its device: ${err.message}`);
    return;
  }
  conn.send({ type: 'run', run: { ...payload, resume: d.state === 'accepted' } });
  if (d.state === 'queued') {
    await deps.db.kysely
      .updateTable('runmesh_dispatches')
      .set({ state: 'delivered', attempts: d.attempts + 1, delivered_at: nowIso(), updated_at: nowIso() })
      .where('run_id', '=', runId)
      .where('state', '=', 'queued')
      .execute();
  }
}

const markDone = (deps: Deps, runId: string) =>
  deps.db.kysely.updateTable('runmesh_dispatches').set({ state: 'done', updated_at: nowIso() }).where('run_id', '=', runId).execute();

async function ensureSubscribed(ctx: Ctx, nodeId: string): Promise<void> {
  const { deps } = ctx;
  const state = deps.state.get(MESH_STATE);
  if (!state.subscriptions.has(nodeId)) {
    const principal = ctx.principal;
    state.subscriptions.set(
      nodeId,
      subscribeParsed(
        deps.bus,
        nodeChannel(nodeId),
        BusMessage,
        (m) => {
          const conns = state.conns.get(nodeId);
          if (!conns?.size) return;
          if (m.type === 'cancel') for (const c of conns) c.send({ type: 'cancel', runId: m.runId, reason: m.reason });
          else {
            const c = ownerCtx(deps, principal.orgId!, principal.userId);
            for (const conn of conns)
              void sendRun(c, conn, m.runId).catch((err) => deps.log.warn({ err, runId: m.runId }, 'could not send a run to its device'));
          }
        },
        () => undefined,
      ),
    );
  }
  await state.subscriptions.get(nodeId);
}

async function connectionAudit(ctx: Ctx, nodeId: string, event: 'device.connected' | 'device.disconnected'): Promise<void> {
  await withTx(ctx, async (tx) => {
    await writeAudit(exec(tx), orgId(ctx), { nodeId, actor: 'device', actorUserId: ctx.principal.userId, event });
    await recordActivity(tx, {
      resourceType: 'runmesh_device',
      resourceId: nodeId,
      runmeshNodeId: nodeId,
      eventType: `runmesh.${event}`,
      status: 'completed',
      title: event === 'device.connected' ? 'Device connected' : 'Device disconnected',
    });
  });
}

/**
 * GET /v1/runmesh/connect (a device's credential): the device's one connection. Marks it online, sends its runs,
 * takes heartbeats (endpoints), accepts and rejects; closes with 4401 when its credential is revoked.
 */
export async function serveDevice(ctx: Ctx, socket: WebSocket): Promise<void> {
  const { deps } = ctx;
  const nodeId = deviceNodeId(ctx);
  const org = orgId(ctx);
  const replica = deps.config.sandboxes.nodeId;
  const state = deps.state.get(MESH_STATE);
  const conn: Conn = {
    nodeId,
    send: (message) => {
      if (socket.readyState === socket.OPEN) socket.send(JSON.stringify(message));
    },
  };
  let closed = false;
  let silence: NodeJS.Timeout | null = null;
  const heartbeatMs = deps.config.runmesh.heartbeatSeconds * 1000;
  // A device that stops talking (a dead network path) is closed after three missed beats.
  const arm = () => {
    if (silence) clearTimeout(silence);
    silence = setTimeout(() => socket.terminate(), 3 * heartbeatMs);
    silence.unref();
  };
  const untrack = deps.live.track(ctx.principal, (code, reason) => socket.close(code, reason));
  let queue = Promise.resolve();
  const serial = (work: () => Promise<void>) => {
    queue = queue.then(work).catch((err) => deps.log.warn({ err, nodeId }, 'a device message failed'));
  };

  socket.on('message', (data, isBinary) => {
    arm();
    if (isBinary) return socket.close(4400, 'messages are JSON text');
    let message: z.infer<typeof DeviceMessage>;
    try {
      message = DeviceMessage.parse(JSON.parse(String(data)));
    } catch {
      conn.send({ type: 'error', message: 'not a device message: heartbeat, accept or reject' });
      return;
    }
    serial(() => onMessage(ctx, conn, message));
  });
  socket.on('close', () => {
    closed = true;
    if (silence) clearTimeout(silence);
    untrack();
    const conns = state.conns.get(nodeId);
    conns?.delete(conn);
    serial(async () => {
      if (conns && conns.size === 0) {
        state.conns.delete(nodeId);
        const sub = state.subscriptions.get(nodeId);
        state.subscriptions.delete(nodeId);
        await (await sub)?.().catch(() => undefined);
        await deps.db.kysely
          .updateTable('runmesh_nodes')
          .set({ connected: 0, updated_at: nowIso() })
          .where('id', '=', nodeId)
          .where('connected_via', '=', replica)
          .execute();
        // Its runs in progress wait for it from now on.
        await deps.db.kysely
          .updateTable('runmesh_dispatches')
          .set({ deadline_at: deadline(deps), updated_at: nowIso() })
          .where('node_id', '=', nodeId)
          .where('state', '=', 'accepted')
          .execute();
        await connectionAudit(ctx, nodeId, 'device.disconnected').catch(() => undefined);
      }
    });
  });

  const set = state.conns.get(nodeId) ?? new Set<Conn>();
  state.conns.set(nodeId, set);
  set.add(conn);
  arm();
  await ensureSubscribed(ctx, nodeId);
  if (closed) return;
  await deps.db.kysely
    .updateTable('runmesh_nodes')
    .set({ connected: 1, connected_via: replica, last_seen_at: nowIso(), updated_at: nowIso() })
    .where('id', '=', nodeId)
    .where('org_id', '=', org)
    .execute();
  await connectionAudit(ctx, nodeId, 'device.connected');
  conn.send({ type: 'hello', nodeId, heartbeatSeconds: deps.config.runmesh.heartbeatSeconds });
  const waiting = await deps.db.kysely
    .selectFrom('runmesh_dispatches')
    .select('run_id')
    .where('node_id', '=', nodeId)
    .where('org_id', '=', org)
    .where('state', '!=', 'done')
    .orderBy('created_at')
    .execute();
  for (const d of waiting) serial(() => sendRun(ownerCtx(deps, org, ctx.principal.userId), conn, d.run_id));
}

async function onMessage(ctx: Ctx, conn: Conn, message: z.infer<typeof DeviceMessage>): Promise<void> {
  const { deps } = ctx;
  const now = nowIso();
  if (message.type === 'heartbeat') {
    const endpoints = (message.endpoints ?? [])
      .map(parseEndpoint)
      .filter((e): e is string => e !== null)
      .slice(0, MAX_ENDPOINTS);
    await deps.db.kysely
      .updateTable('runmesh_nodes')
      .set({ last_seen_at: now, endpoints: JSON.stringify(endpoints), connected: 1, connected_via: deps.config.sandboxes.nodeId, updated_at: now })
      .where('id', '=', conn.nodeId)
      .where('org_id', '=', orgId(ctx))
      .where('status', '=', 'active')
      .execute();
    // The node is here: its accepted runs keep their thread and their time.
    const held = await deps.db.kysely
      .updateTable('runmesh_dispatches')
      .set({ deadline_at: deadline(deps), updated_at: now })
      .where('node_id', '=', conn.nodeId)
      .where('state', '=', 'accepted')
      .returning(['run_id', 'thread_id'])
      .execute();
    for (const h of held) await renewDeviceRun(deps, { id: h.run_id, thread_id: h.thread_id });
    return;
  }
  const runCtx = ownerCtx(deps, orgId(ctx), ctx.principal.userId);
  if (message.type === 'reject') {
    const row = await deviceRun(runCtx, conn.nodeId, message.runId).catch(() => null);
    if (row) await endLocalRun(deps, row, { status: 'failed', error: `the device did not run it: ${message.reason ?? 'refused'}` });
    return;
  }
  // accept: of two connections of one node, the first takes the run; the other is told to drop it.
  const took = await deps.db.kysely
    .updateTable('runmesh_dispatches')
    .set({ state: 'accepted', accepted_at: now, deadline_at: deadline(deps), updated_at: now })
    .where('run_id', '=', message.runId)
    .where('node_id', '=', conn.nodeId)
    .where('state', 'in', ['queued', 'delivered'])
    .executeTakeFirst();
  const row = await deviceRun(runCtx, conn.nodeId, message.runId).catch(() => null);
  if (Number(took.numUpdatedRows) !== 1 || !row || !(await acceptDeviceRun(runCtx, row))) {
    conn.send({ type: 'cancel', runId: message.runId, reason: row ? 'the run was already taken' : 'the run has ended' });
    return;
  }
  await renewDeviceRun(deps, row);
}

// ---- what the device sends over HTTP --------------------------------------------------------------------

/** The device's run that it accepted, for its frames and model calls: 404 for another's, 409 once ended or not taken. */
async function heldRun(ctx: Ctx, runId: string) {
  const nodeId = deviceNodeId(ctx);
  const runCtx = ownerCtx(ctx.deps, orgId(ctx), ctx.principal.userId);
  const row = await deviceRun(runCtx, nodeId, runId);
  const d = await exec(ctx)
    .selectFrom('runmesh_dispatches')
    .selectAll()
    .where('run_id', '=', runId)
    .where('org_id', '=', orgId(ctx))
    .where('node_id', '=', nodeId)
    .executeTakeFirst();
  if (d?.state !== 'accepted') throw errors.invalidState(`run ${runId} was not accepted by this device`, d?.state ?? 'unknown');
  return { row, dispatch: d, runCtx };
}

/** POST /v1/thread-events from a device: its run's transient frames, and its durable ones by its own counter. */
export async function deviceFrame(ctx: Ctx, threadId: string, frame: ThreadEventFrame): Promise<ThreadEventsResult> {
  const { row, dispatch, runCtx } = await heldRun(ctx, frame.runId);
  if (row.thread_id !== threadId) throw errors.invalidField('threadId', `run ${row.id} is on another thread`);
  if (!('payload' in frame)) {
    await publishTransient(runCtx, threadId, TransientFrame.parse(frame));
    return { accepted: true };
  }
  const durable = frame as DeviceDurableFrame;
  const seq = durable.sequenceNumber;
  if (seq <= dispatch.device_seq) return { accepted: true, duplicate: true };
  if (seq !== dispatch.device_seq + 1) {
    throw errors.conflict(`frame.sequenceNumber ${seq} skips ahead: the next durable frame of run ${row.id} is ${dispatch.device_seq + 1}`);
  }
  // The counter is claimed first (of two racing retries, one appends), and given back if the append fails.
  const claim = await ctx.deps.db.kysely
    .updateTable('runmesh_dispatches')
    .set({ device_seq: seq, updated_at: nowIso() })
    .where('run_id', '=', row.id)
    .where('device_seq', '=', seq - 1)
    .executeTakeFirst();
  if (Number(claim.numUpdatedRows) !== 1) return { accepted: true, duplicate: true };
  try {
    if (durable.type === 'run_completed') {
      const p = durable.payload;
      const status = p.status === 'completed' || p.status === 'max_turns' ? p.status : 'failed';
      const result = await endLocalRun(ctx.deps, row, {
        status,
        error: status === 'failed' ? (p.error ?? 'the device reported a failure') : (p.error ?? null),
        iterations: p.iterations,
      });
      await markDone(ctx.deps, row.id);
      if (!result) throw errors.invalidState(`run ${row.id} has already ended`, 'ended');
      return { accepted: true, duplicate: false };
    }
    const event = await appendDeviceFrame(runCtx, row, { type: durable.type, payload: durable.payload } as Parameters<typeof appendDeviceFrame>[2]);
    if (durable.type === 'tool_result' || durable.type === 'assistant_message') {
      await ctx.deps.db.kysely
        .updateTable('runmesh_dispatches')
        .set({ deadline_at: deadline(ctx.deps), updated_at: nowIso() })
        .where('run_id', '=', row.id)
        .execute();
    }
    return { accepted: true, duplicate: false, sequence: event.sequence };
  } catch (err) {
    await ctx.deps.db.kysely
      .updateTable('runmesh_dispatches')
      .set({ device_seq: seq - 1 })
      .where('run_id', '=', row.id)
      .where('device_seq', '=', seq)
      .execute()
      .catch(() => undefined);
    throw err;
  }
}

export const DeviceModelBody = z
  .object({
    messages: z.array(z.record(z.string(), z.unknown())).min(1).max(2000),
    tools: z
      .array(
        z
          .object({
            name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/),
            description: z.string().max(4000).optional(),
            parameters: z.record(z.string(), z.unknown()),
          })
          .strict(),
      )
      .max(64)
      .default([]),
    system: z.string().max(200_000).optional(),
    maxTokens: z.number().int().positive().max(1_000_000).optional(),
    temperature: z.number().min(0).max(2).optional(),
  })
  .strict();
export type DeviceModelBody = z.infer<typeof DeviceModelBody>;

/** POST /v1/runmesh/runs/{runId}/model: a model call of the device's run, with the run's agent's model, metered against the run. */
export async function deviceModel(ctx: Ctx, runId: string, body: DeviceModelBody, signal: AbortSignal): Promise<AsyncGenerator<StreamLine>> {
  const { row, runCtx } = await heldRun(ctx, runId);
  if (!row.model) throw errors.invalidState(`run ${runId} has no model`, row.status);
  const { modelMessageSchema } = await import('ai');
  const messages = z.array(modelMessageSchema).safeParse(body.messages);
  if (!messages.success) throw errors.invalidField('messages', `are not model messages: ${messages.error.issues[0]?.message ?? 'invalid'}`);
  await renewDeviceRun(ctx.deps, row);
  return runModelStream(
    runCtx,
    {
      modelId: row.model,
      runId,
      messages: messages.data,
      system: body.system,
      tools: body.tools,
      maxTokens: body.maxTokens,
      temperature: body.temperature,
    },
    signal,
  );
}

// ---- ends ------------------------------------------------------------------------------------------------

/** Fails every run of a node that has not ended (its node was revoked). */
export async function failNodeRuns(deps: Deps, nodeId: string, reason: string): Promise<number> {
  const open = await deps.db.kysely.selectFrom('runmesh_dispatches').selectAll().where('node_id', '=', nodeId).where('state', '!=', 'done').execute();
  let n = 0;
  for (const d of open) if (await failDispatch(deps, d, reason)) n++;
  return n;
}

async function failDispatch(deps: Deps, d: { run_id: string; org_id: string }, reason: string): Promise<boolean> {
  await markDone(deps, d.run_id);
  const row = await openLocalRun(deps, d.org_id, d.run_id);
  if (!row) return false;
  return (await endLocalRun(deps, row, { status: 'failed', error: reason })) !== null;
}

/**
 * The sweeper: a run its device did not accept by its deadline, or whose device went away with it and did not come
 * back in time, fails with the reason; so does a dispatch whose run ended some other way (kept tidy).
 */
export async function sweepDispatches(deps: Deps): Promise<number> {
  const now = nowIso();
  const due = await deps.db.kysely
    .selectFrom('runmesh_dispatches as d')
    .innerJoin('runmesh_nodes as n', 'n.id', 'd.node_id')
    .select(['d.run_id', 'd.org_id', 'd.state', 'n.connected'])
    .where('d.state', '!=', 'done')
    .where('d.deadline_at', '<=', now)
    .limit(200)
    .execute();
  const seconds = deps.config.runmesh.dispatchTimeoutSeconds;
  let n = 0;
  for (const d of due) {
    // A connected device holding an accepted run renews its deadline with each heartbeat; past it, it is gone.
    const reason =
      d.state === 'accepted'
        ? `the device did not come back within ${seconds} s`
        : `the device did not take the run within ${seconds} s (is \`hangar device run\` running on it?)`;
    if (await failDispatch(deps, d, reason)) n++;
  }
  return n;
}
