import websocket from '@fastify/websocket';
import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { redactedRequestLog } from '../../platform/http/redact.js';
import { envelope, errorResponses, ok, page, pageEnvelope } from '../../platform/http/envelope.js';
import { errors } from '../../platform/http/errors.js';
import type { App } from '../../platform/http/server.js';
import { ActivityPage, ActivityQuery, listActivity, type ActivityRegistry } from '../activity/index.js';
import { ThreadHub } from './hub.js';
import {
  CompactBody,
  CompactResult,
  CreateThreadBody,
  EventsQuery,
  GetThreadQuery,
  ListThreadsQuery,
  PatchThreadBody,
  Rollout,
  Thread,
  ThreadEventSchema,
  ThreadEventsBody,
  ThreadEventsResult,
  ThreadParams,
} from './schemas.js';
import { compactThread } from './compaction.js';
import {
  canSeeThread,
  createThread,
  deleteThread,
  getThread,
  listEvents,
  listRollouts,
  listThreads,
  publishThreadEvent,
  updateThread,
} from './service.js';
import { serveSocket } from './socket.js';

/** The threads domain's activity check (buildApp registers it). */
export function registerThreadActivity(registry: ActivityRegistry): void {
  registry.resource('thread', canSeeThread);
}

const tags = ['threads'];
/** Headers replicas use among themselves; never accepted from clients on the public frame route. */
export const INTERNAL_HEADER_PREFIX = 'x-hangar-internal-';
const FRAME_LIMIT_BYTES = 64 * 1024;

export async function threadRoutes(app: App, deps: Deps) {
  const hub = new ThreadHub(deps);
  deps.metrics.gauge(
    'hangar_websocket_subscribers',
    'Thread WebSocket subscriptions open in this process, and the threads they watch',
    ['kind'],
    async () => [
      [{ kind: 'subscribers' }, hub.subscribers],
      [{ kind: 'threads' }, hub.watched],
    ],
  );
  // preClose, before the WebSocket plugin's own (which closes every socket without a code): subscribers get 1001 and a reason.
  app.addHook('preClose', () => hub.close());
  await app.register(websocket, { options: { maxPayload: 64 * 1024 } });

  app.post(
    '/v1/threads',
    {
      config: { scope: 'agent:run' },
      schema: {
        tags,
        summary: 'Open a thread',
        description: 'A thread before its first run, owned by the caller, with an empty first rollout (its `activeRolloutId`).',
        body: CreateThreadBody,
        response: { 201: envelope(Thread), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createThread(req.ctx, req.body))),
  );

  app.get(
    '/v1/threads',
    {
      config: { scope: 'agent:read' },
      schema: {
        tags,
        summary: 'List your threads',
        description: 'The caller’s threads, most recently updated first; archived ones only with `archived=true`.',
        querystring: ListThreadsQuery,
        response: { 200: pageEnvelope(z.array(Thread)), ...errorResponses },
      },
    },
    async (req) => {
      const p = await listThreads(req.ctx, req.query);
      return page(req, p.items, p);
    },
  );

  app.get(
    '/v1/threads/:threadId',
    {
      config: { scope: 'agent:read' },
      schema: {
        tags,
        summary: 'Get a thread',
        description: 'Its owner sees it; an organization admin sees any thread’s metadata. `include=all_rollouts` adds its rollouts (owner only).',
        params: ThreadParams,
        querystring: GetThreadQuery,
        response: { 200: envelope(Thread.extend({ rollouts: z.array(Rollout).optional() })), ...errorResponses },
      },
    },
    async (req) => {
      const { thread, view } = await getThread(req.ctx, req.params.threadId);
      if (req.query.include === 'all_rollouts' && view === 'owner') return ok(req, { ...thread, rollouts: await listRollouts(req.ctx, thread.id) });
      return ok(req, thread);
    },
  );

  app.patch(
    '/v1/threads/:threadId',
    {
      config: { scope: 'agent:run' },
      schema: {
        tags,
        summary: 'Rename, archive or unarchive a thread',
        description: 'Emits `thread_renamed` and/or `thread_archived` to live subscribers. Owner only.',
        params: ThreadParams,
        body: PatchThreadBody,
        response: { 200: envelope(Thread), ...errorResponses },
      },
    },
    async (req) => ok(req, await updateThread(req.ctx, req.params.threadId, req.body)),
  );

  app.delete(
    '/v1/threads/:threadId',
    {
      config: { scope: 'agent:run' },
      schema: {
        tags,
        summary: 'Delete a thread',
        description:
          'Deletes its events, rollouts and JSONL; emits `thread_deleted` and closes live subscribers (code 4410). A run active on the thread is cancelled first (its `run_completed` says `cancelled`); 409 THREAD_BUSY while a compaction holds the thread. Owner or organization admin.',
        params: ThreadParams,
        response: { 204: z.null(), ...errorResponses },
      },
    },
    async (req, reply) => {
      await deleteThread(req.ctx, req.params.threadId);
      return reply.status(204).send(null);
    },
  );

  app.route({
    method: 'GET',
    url: '/v1/threads/:threadId/events',
    config: { scope: 'agent:read', wsAuth: 'query' },
    // The query carries the credential (a browser's WebSocket cannot send headers): never in the request log.
    logSerializers: redactedRequestLog,
    schema: {
      tags,
      summary: 'Durable events of a thread (and its live WebSocket)',
      description: [
        'HTTP: durable events oldest first, `limit` 1–500 (default 100), opaque `cursor`; the active rollout’s unless `rollout_id` or `include=all_rollouts`. Owner only. ',
        'WebSocket (same path, `Upgrade: websocket`): query `api_key` or `token` (exactly one; `org_id` optional), optional `last_sequence`. ',
        'First frame `snapshot` (`protocol_version: 1`; for the owner with `thread`, `lastSequence`, `activeRunId` and, without `last_sequence`, the active rollout’s latest events; ',
        'for an organization admin who does not own it `view: "metadata"`, and then only `thread_*` frames). With `last_sequence` every durable frame after it follows before any live frame. ',
        'Then live frames in order: durable ones carry `sequence`; transient ones are never replayed and are dropped first for a slow reader. ',
        'Close codes: 4400 bad query, 4401 bad credential, 4403 missing scope, 4404 unknown thread, 4410 thread deleted, 4409 fell behind (the reason says `last_sequence=N`: reconnect with it). Heartbeat: ping every 25 s.',
      ].join(''),
      params: ThreadParams,
      querystring: EventsQuery,
      response: {
        200: z.object({
          data: z.object({ thread: Thread, events: z.array(ThreadEventSchema) }),
          hasMore: z.boolean(),
          nextCursor: z.string().nullable(),
        }),
        ...errorResponses,
      },
    },
    handler: async (req) => {
      const r = await listEvents(req.ctx, req.params.threadId, req.query);
      return { data: { thread: r.thread, events: r.events }, hasMore: r.hasMore, nextCursor: r.nextCursor };
    },
    wsHandler: (socket, req) => {
      serveSocket(deps, hub, app.authenticate, socket, req).catch((err) => {
        deps.log.warn({ err }, 'thread socket failed');
        socket.close(1011, 'internal error');
      });
    },
  });

  app.get(
    '/v1/threads/:threadId/rollouts',
    {
      config: { scope: 'agent:read' },
      schema: {
        tags,
        summary: 'Rollouts of a thread',
        description: 'Oldest first: the first rollout, then one per compaction, each with the summary it opened with and how it was made.',
        params: ThreadParams,
        response: { 200: envelope(z.array(Rollout)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listRollouts(req.ctx, req.params.threadId)),
  );

  app.post(
    '/v1/threads/:threadId/compact',
    {
      config: { scope: 'agent:run' },
      schema: {
        tags,
        summary: 'Compact a thread',
        description: [
          'Closes the active rollout and opens a new one with a summary of it: durable `compaction_started` (in the old rollout), then `compaction_completed` ',
          '(the new rollout’s first event, carrying `summary` and `summaryMethod`). The summary is extractive (deterministic, from the messages) until the thread’s agent has a model. ',
          '409 THREAD_BUSY while a run is active. Owner only.',
        ].join(''),
        params: ThreadParams,
        body: CompactBody.nullish(),
        response: { 200: envelope(CompactResult), ...errorResponses },
      },
    },
    async (req) => ok(req, await compactThread(req.ctx, req.params.threadId, req.body ?? {})),
  );

  app.get(
    '/v1/threads/:threadId/activity',
    {
      config: { scope: 'activity:read' },
      schema: {
        tags,
        summary: 'Activity of a thread',
        description:
          'Its events (thread.renamed, .archived, .unarchived, .compacted, .deleted, and later runs’); accepts the query of GET /v1/activity.',
        params: ThreadParams,
        querystring: ActivityQuery.omit({ thread_id: true }),
        response: { 200: ActivityPage, ...errorResponses },
      },
    },
    async (req) => {
      await getThread(req.ctx, req.params.threadId);
      const result = await listActivity(req.ctx, { ...req.query, thread_id: req.params.threadId }, { resourceAuthorized: true });
      return page(req, { events: result.events }, result);
    },
  );

  app.post(
    '/v1/thread-events',
    {
      config: { scope: ['agent:run', 'runmesh:device'] },
      bodyLimit: FRAME_LIMIT_BYTES,
      schema: {
        tags,
        summary: 'Publish a frame (local-device clients)',
        description: [
          '`{ threadId, frame }` with `frame.type` one of the transient types, `runId`, `rolloutId` (a rollout of the thread), a positive `sequenceNumber`, and its own fields (e.g. `delta`). ',
          'Fanned out to live subscribers only: not stored, not replayed, thread timestamps unchanged. A durable type is a 400; a body over 64 KiB a 413; ',
          `requests carrying internal service headers (\`X-Hangar-Internal-*\`) are refused (403). Owner of the thread only. `,
          'A linked device (its `hgd_` credential) also publishes the durable frames of the local-device run it holds (`assistant_message`, `tool_call`, `tool_result`, `run_completed`, ',
          'with `payload`), numbered by `sequenceNumber` 1, 2, 3… per run: 200 with the thread `sequence` it was given; a repeat is `duplicate: true` and appends nothing; a gap is 409; ',
          'a run that ended (cancelled, revoked, timed out) is 409 (ADR 0029).',
        ].join(''),
        body: ThreadEventsBody,
        response: { 200: envelope(ThreadEventsResult), 202: envelope(ThreadEventsResult), ...errorResponses },
      },
      preValidation: async (req) => {
        const internal = Object.keys(req.headers).find((h) => h.toLowerCase().startsWith(INTERNAL_HEADER_PREFIX));
        if (internal) throw errors.forbidden(`internal service header ${internal} is not accepted on this route`);
      },
    },
    async (req, reply) => {
      const { threadId, frame } = req.body;
      const result = await publishThreadEvent(req.ctx, threadId, frame);
      // A durable frame (a device's) was written when this answers: 200; a transient one was fanned out: 202.
      return reply.status('payload' in frame ? 200 : 202).send(ok(req, result));
    },
  );
}
