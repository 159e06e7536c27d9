import { z } from 'zod';
import type { Ctx, Deps } from '../../platform/context.js';
import { envelope, ErrorBody, errorResponses, ok, page, pageEnvelope } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import type { ActivityRegistry } from '../activity/index.js';
import { addBlocks, deleteBlock, getBlock, listBlocks, updateBlock } from './blocks.js';
import { compactSession } from './compact.js';
import { findSession } from './repo.js';
import {
  BatchBody,
  Block,
  BlockInput,
  BlockParams,
  BlocksQuery,
  CompactBody,
  Compaction,
  CreateSessionBody,
  Fork,
  ForkBody,
  Session,
  SessionParams,
  SessionSummary,
  SessionsQuery,
  UpdateBlockBody,
  UpdateSessionBody,
} from './schemas.js';
import { createSession, deleteSession, forkSession, getSession, listSessions, updateSession } from './service.js';

const tags = ['context sessions'];
const Deleted = z.object({ deleted: z.literal(true) });

/** Activity filters on `context_session` resources: the caller's own sessions. */
export function registerSessionActivity(registry: ActivityRegistry): void {
  registry.resource('context_session', async (ctx: Ctx, id: string) => (await findSession(ctx, id))?.created_by_user_id === ctx.principal.userId);
}

export async function sessionRoutes(app: App, _deps: Deps) {
  app.post(
    '/v1/aip/sessions',
    {
      config: { scope: 'sessions:write' },
      schema: {
        tags,
        summary: 'Create a context session',
        description: [
          '`name`, optional `defaultAgent` (its model sets `metrics.maxTokens`, the tokenizer and who writes summaries), `tags`. ',
          'With `fromSession` the new session starts with copies of that session’s blocks: those with a tag in `includeByTag` (all without it), ',
          'and its pinned blocks unless `includePinned` is false. Sessions are their creator’s: other members get 404.',
        ].join(''),
        body: CreateSessionBody,
        response: { 201: envelope(Session), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createSession(req.ctx, req.body))),
  );

  app.get(
    '/v1/aip/sessions',
    {
      config: { scope: 'sessions:read' },
      schema: {
        tags,
        summary: 'List your context sessions',
        description: 'Newest first; `tag` keeps sessions with that tag. `meta.hasMore` and `meta.nextCursor` page on.',
        querystring: SessionsQuery,
        response: { 200: pageEnvelope(z.array(SessionSummary)), ...errorResponses },
      },
    },
    async (req) => {
      const r = await listSessions(req.ctx, req.query);
      return page(req, r.items, r);
    },
  );

  app.get(
    '/v1/aip/sessions/:sessionId',
    {
      config: { scope: 'sessions:read' },
      schema: {
        tags,
        summary: 'Get a context session',
        description: '`blocks`: every block id in context order; `pinnedBlocks`: the pinned ones. Read a block with GET …/blocks/{blockId}.',
        params: SessionParams,
        response: { 200: envelope(Session), ...errorResponses },
      },
    },
    async (req) => ok(req, await getSession(req.ctx, req.params.sessionId)),
  );

  app.patch(
    '/v1/aip/sessions/:sessionId',
    {
      config: { scope: 'sessions:write' },
      schema: {
        tags,
        summary: 'Rename or retag a context session',
        params: SessionParams,
        body: UpdateSessionBody,
        response: { 200: envelope(Session), ...errorResponses },
      },
    },
    async (req) => ok(req, await updateSession(req.ctx, req.params.sessionId, req.body)),
  );

  app.delete(
    '/v1/aip/sessions/:sessionId',
    {
      config: { scope: 'sessions:write' },
      schema: {
        tags,
        summary: 'Delete a context session',
        description: 'Every block goes with it. Waits for a run using the session to finish (409 `session_busy` after HANGAR_SESSIONS_LOCK_WAIT_MS).',
        params: SessionParams,
        response: { 200: envelope(Deleted), ...errorResponses },
      },
    },
    async (req) => ok(req, await deleteSession(req.ctx, req.params.sessionId)),
  );

  app.post(
    '/v1/aip/sessions/:sessionId/fork',
    {
      config: { scope: 'sessions:write' },
      schema: {
        tags,
        summary: 'Fork a context session',
        description: [
          'A new session (same default agent and tags) with copies of the chosen blocks: a block with a tag in `excludeByTag` never; a pinned block when `includePinned`; ',
          'a summary block only when `includeSummaries`; with `includeByTag`, only blocks carrying one of its tags. Later changes to either session do not reach the other.',
        ].join(''),
        params: SessionParams,
        body: ForkBody,
        response: { 201: envelope(Fork), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await forkSession(req.ctx, req.params.sessionId, req.body))),
  );

  app.post(
    '/v1/aip/sessions/:sessionId/compact',
    {
      config: { scope: 'sessions:write' },
      schema: {
        tags,
        summary: 'Compact a context session',
        description: [
          'Older blocks are replaced by `summary` blocks until the session fits `targetTokens` (default half the window). Pinned blocks (`preservePinned`, default true) ',
          'and the `preserveRecent` (default 5) most recent others are kept. `summarizer`: `model` (the default agent’s model, metered), `extractive` (deterministic), ',
          '`auto` (default: the model when usable). A target below what the kept blocks need is 400 with `minimumTokens`. A session that already fits is left as it is.',
        ].join(''),
        params: SessionParams,
        body: CompactBody,
        response: { 200: envelope(Compaction), ...errorResponses, 402: ErrorBody, 502: ErrorBody, 503: ErrorBody, 504: ErrorBody },
      },
    },
    async (req) => ok(req, await compactSession(req.ctx, req.params.sessionId, req.body)),
  );

  // ---- blocks ----

  app.post(
    '/v1/aip/sessions/:sessionId/blocks',
    {
      config: { scope: 'sessions:write' },
      schema: {
        tags,
        summary: 'Add a block',
        description:
          '`kind` (instruction, document, message, tool_result, summary, note; default document), `content`, `tags`, `pinned`, `source`. Added at the end; its `tokens` are counted with the session’s tokenizer. Content over HANGAR_SESSIONS_MAX_BLOCK_BYTES is 413.',
        params: SessionParams,
        body: BlockInput,
        response: { 201: envelope(Block), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, (await addBlocks(req.ctx, req.params.sessionId, [req.body]))[0]!)),
  );

  app.post(
    '/v1/aip/sessions/:sessionId/blocks/batch',
    {
      config: { scope: 'sessions:write' },
      schema: {
        tags,
        summary: 'Add blocks',
        description: '`{ blocks: [...] }` (up to 1,000), added at the end in order, all or none; one activity event for the batch.',
        params: SessionParams,
        body: BatchBody,
        response: { 201: envelope(z.array(Block)), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await addBlocks(req.ctx, req.params.sessionId, req.body.blocks))),
  );

  app.get(
    '/v1/aip/sessions/:sessionId/blocks',
    {
      config: { scope: 'sessions:read' },
      schema: {
        tags,
        summary: 'List blocks',
        description: 'In context order, with content; filter by `tag`, `kind`, `pinned`.',
        params: SessionParams,
        querystring: BlocksQuery,
        response: { 200: pageEnvelope(z.array(Block)), ...errorResponses },
      },
    },
    async (req) => {
      const r = await listBlocks(req.ctx, req.params.sessionId, req.query);
      return page(req, r.items, r);
    },
  );

  app.get(
    '/v1/aip/sessions/:sessionId/blocks/:blockId',
    {
      config: { scope: 'sessions:read' },
      schema: { tags, summary: 'Get a block', params: BlockParams, response: { 200: envelope(Block), ...errorResponses } },
    },
    async (req) => ok(req, await getBlock(req.ctx, req.params.sessionId, req.params.blockId)),
  );

  app.patch(
    '/v1/aip/sessions/:sessionId/blocks/:blockId',
    {
      config: { scope: 'sessions:write' },
      schema: {
        tags,
        summary: 'Change a block',
        description: '`content` (recounted), `tags`, `pinned` (pin or unpin), `kind`.',
        params: BlockParams,
        body: UpdateBlockBody,
        response: { 200: envelope(Block), ...errorResponses },
      },
    },
    async (req) => ok(req, await updateBlock(req.ctx, req.params.sessionId, req.params.blockId, req.body)),
  );

  app.delete(
    '/v1/aip/sessions/:sessionId/blocks/:blockId',
    {
      config: { scope: 'sessions:write' },
      schema: { tags, summary: 'Delete a block', params: BlockParams, response: { 200: envelope(Deleted), ...errorResponses } },
    },
    async (req) => ok(req, await deleteBlock(req.ctx, req.params.sessionId, req.params.blockId)),
  );
}
