import multipart from '@fastify/multipart';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { Readable } from 'node:stream';
import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { AppError } from '../../platform/http/errors.js';
import { envelope, errorResponses, ok, page } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import { ActivityPage, ActivityQuery, type ActivityRegistry } from '../activity/index.js';
import {
  DeleteQuery,
  DeleteResult,
  FileParams,
  ListFilesQuery,
  MakeFolderBody,
  MoveBody,
  StorageUsage,
  Workspace,
  WorkspaceFileEntry,
  WorkspaceParams,
} from './schemas.js';
import {
  canSeeWorkspaceActivity,
  deleteEntry,
  getWorkspace,
  listFolder,
  listWorkspaces,
  makeFolder,
  moveEntry,
  openFile,
  storageUsage,
  writeFile,
  workspaceActivity,
  writeFormFiles,
} from './service.js';

/** The storage domain's activity check (buildApp registers it). */
export function registerStorageActivity(registry: ActivityRegistry): void {
  registry.resource('workspace', canSeeWorkspaceActivity);
}

const tags = ['workspace files'];

/** `bytes=a-b`, `bytes=a-`, `bytes=-n`; a multi-range or malformed header is ignored (full body), as RFC 9110 allows. */
function parseRange(header: string | undefined, size: number): { start: number; end: number } | 'unsatisfiable' | null {
  const m = header?.match(/^bytes=(\d*)-(\d*)$/);
  if (!m || (m[1] === '' && m[2] === '')) return null;
  let start: number;
  let end: number;
  if (m[1] === '') {
    const suffix = Number(m[2]);
    if (suffix === 0) return 'unsatisfiable';
    start = Math.max(0, size - suffix);
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
    if (m[2] !== '' && Number(m[2]) < start) return null;
  }
  if (start >= size || size === 0) return 'unsatisfiable';
  return { start, end };
}

export async function storageRoutes(app: App, deps: Deps) {
  app.get(
    '/v1/workspaces',
    {
      config: { scope: 'storage:read' },
      schema: {
        tags,
        summary: 'List workspaces',
        description: 'Project workspaces of the organization and the caller’s own Personal workspace.',
        response: { 200: envelope(z.array(Workspace)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listWorkspaces(req.ctx)),
  );

  app.get(
    '/v1/workspaces/:id',
    {
      config: { scope: 'storage:read' },
      schema: { tags, summary: 'Get a workspace', params: WorkspaceParams, response: { 200: envelope(Workspace), ...errorResponses } },
    },
    async (req) => ok(req, await getWorkspace(req.ctx, req.params.id)),
  );

  app.get(
    '/v1/storage/usage',
    {
      config: { scope: 'storage:read' },
      schema: { tags, summary: 'Storage used by the organization and its quota', response: { 200: envelope(StorageUsage), ...errorResponses } },
    },
    async (req) => ok(req, await storageUsage(req.ctx)),
  );

  app.get(
    '/v1/workspaces/:id/files',
    {
      config: { scope: 'storage:read' },
      schema: {
        tags,
        summary: 'List a folder',
        description: 'The entries of the workspace root, or of the folder named by `path`: folders first, then files, by name.',
        params: WorkspaceParams,
        querystring: ListFilesQuery,
        response: { 200: envelope(z.array(WorkspaceFileEntry)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listFolder(req.ctx, req.params.id, req.query.path ?? '')),
  );

  app.get(
    '/v1/workspaces/:id/files/*',
    {
      config: { scope: 'storage:read' },
      schema: {
        tags,
        summary: 'Download a file',
        description:
          'The file’s bytes with its `Content-Type`, `Content-Length`, `ETag` and `Last-Modified`. Supports a single `Range: bytes=...` (206, or 416 when unsatisfiable). HEAD returns the headers only.',
        params: FileParams,
        produces: ['application/octet-stream'],
        response: { 200: z.any().describe('File bytes'), 206: z.any().describe('The requested range'), 416: errorResponses[400], ...errorResponses },
      },
    },
    async (req, reply) => {
      const file = await openFile(req.ctx, req.params.id, req.params['*']);
      const { size } = file.entry;
      reply.header('accept-ranges', 'bytes');
      reply.header('last-modified', new Date(file.entry.mtime).toUTCString());
      if (file.sha256) reply.header('etag', `"${file.sha256}"`);
      reply.type(file.entry.mimeType);
      // Never let a browser run an uploaded HTML or SVG file in the API's origin.
      reply.header('x-content-type-options', 'nosniff');
      reply.header('content-security-policy', "sandbox; default-src 'none'");
      // HEAD: Fastify recomputes Content-Length from a string body (0); an empty stream keeps ours.
      const body = async (r?: { start: number; end: number }) => (req.method === 'HEAD' ? Readable.from([]) : await file.read(r));
      const range = parseRange(req.headers.range, size);
      if (range === 'unsatisfiable') {
        reply.header('content-range', `bytes */${size}`);
        throw new AppError('range_not_satisfiable', `range is outside the file's ${size} bytes`);
      }
      if (range) {
        reply.status(206).header('content-range', `bytes ${range.start}-${range.end}/${size}`);
        reply.header('content-length', range.end - range.start + 1);
        return reply.send(await body(range));
      }
      reply.header('content-length', size);
      return reply.send(size === 0 ? '' : await body());
    },
  );

  // Raw uploads: every Content-Type is the file's own, so this context reads the body stream itself.
  await app.register(async (rawCtx) => {
    const raw = rawCtx.withTypeProvider<ZodTypeProvider>();
    raw.removeAllContentTypeParsers();
    raw.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));
    raw.put(
      '/v1/workspaces/:id/files/*',
      {
        config: { scope: 'storage:write' },
        schema: {
          tags,
          summary: 'Upload a file (raw body)',
          description:
            'Writes the request body to the path, creating parent folders and replacing an existing file. The `Content-Type` header becomes the file’s type (guessed from the name when absent or generic). 201 when created, 200 when replaced; 413 over the upload limit or the organization’s quota.',
          params: FileParams,
          consumes: ['*/*'],
          response: { 200: envelope(WorkspaceFileEntry), 201: envelope(WorkspaceFileEntry), ...errorResponses },
        },
      },
      async (req, reply) => {
        const length = req.headers['content-length'];
        try {
          // An iterator leaves the request open when the write gives up: a destroyed request stops
          // reading its socket, and a keep-alive connection then hangs instead of getting the 413.
          const result = await writeFile(req.ctx, req.params.id, req.params['*'], req.raw.iterator({ destroyOnReturn: false }), {
            contentType: req.headers['content-type'],
            contentLength: length !== undefined ? Number(length) : undefined,
          });
          return reply.status(result.created ? 201 : 200).send(ok(req, result.entry));
        } catch (err) {
          req.raw.resume(); // discard the unread rest of a refused body
          throw err;
        }
      },
    );
  });

  await app.register(async (formCtx) => {
    const form = formCtx.withTypeProvider<ZodTypeProvider>();
    // busboy cuts a part at fileSize and ends its stream normally, so the cut file would be stored before
    // the 413; one byte of slack lets writeFile's own limit refuse it instead.
    await form.register(multipart, { limits: { fileSize: deps.config.uploadLimitBytes + 1, files: 100, fields: 10 } });
    form.post(
      '/v1/workspaces/:id/files',
      {
        config: { scope: 'storage:write' },
        schema: {
          tags,
          summary: 'Upload files (multipart/form-data)',
          description:
            'Each file part is stored under the folder given by an optional `path` field (sent before the files), named by the part’s filename. Answers 201 with the written entries.',
          params: WorkspaceParams,
          consumes: ['multipart/form-data'],
          response: { 201: envelope(z.array(WorkspaceFileEntry)), ...errorResponses },
        },
      },
      async (req, reply) => {
        if (!req.isMultipart()) throw new AppError('unsupported_media_type', 'send multipart/form-data, or PUT the raw bytes to /files/{path}');
        const written = await writeFormFiles(req.ctx, req.params.id, req.parts());
        return reply.status(201).send(ok(req, written));
      },
    );
  });

  app.post(
    '/v1/workspaces/:id/folders',
    {
      config: { scope: 'storage:write' },
      schema: {
        tags,
        summary: 'Make a folder',
        description: 'Creates the folder and any missing parents. 201 when created, 200 when it already existed.',
        params: WorkspaceParams,
        body: MakeFolderBody,
        response: { 200: envelope(WorkspaceFileEntry), 201: envelope(WorkspaceFileEntry), ...errorResponses },
      },
    },
    async (req, reply) => {
      const result = await makeFolder(req.ctx, req.params.id, req.body.path);
      return reply.status(result.created ? 201 : 200).send(ok(req, result.entry));
    },
  );

  app.post(
    '/v1/workspaces/:id/move',
    {
      config: { scope: 'storage:write' },
      schema: {
        tags,
        summary: 'Move or rename a file or folder',
        description: 'A folder moves with everything in it. An existing target is a 409 unless `overwrite` is true and both are files.',
        params: WorkspaceParams,
        body: MoveBody,
        response: { 200: envelope(WorkspaceFileEntry), ...errorResponses },
      },
    },
    async (req) => ok(req, await moveEntry(req.ctx, req.params.id, req.body)),
  );

  app.delete(
    '/v1/workspaces/:id/files/*',
    {
      config: { scope: 'storage:write' },
      schema: {
        tags,
        summary: 'Delete a file or folder',
        description: 'A folder that is not empty needs `recursive=true`.',
        params: FileParams,
        querystring: DeleteQuery,
        response: { 200: envelope(DeleteResult), ...errorResponses },
      },
    },
    async (req) => ok(req, await deleteEntry(req.ctx, req.params.id, req.params['*'], req.query.recursive)),
  );

  app.get(
    '/v1/workspaces/:id/activity',
    {
      config: { scope: 'activity:read' },
      schema: {
        tags,
        summary: 'Activity of a workspace',
        description: 'Every activity event of the workspace, for anyone who can access it; accepts the query of GET /v1/activity.',
        params: WorkspaceParams,
        querystring: ActivityQuery.omit({ workspace_id: true }),
        response: { 200: ActivityPage, ...errorResponses },
      },
    },
    async (req) => {
      const result = await workspaceActivity(req.ctx, req.params.id, req.query);
      return page(req, { events: result.events }, result);
    },
  );
}
