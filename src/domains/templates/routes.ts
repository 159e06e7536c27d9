import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { envelope, ErrorBody, errorResponses, ok } from '../../platform/http/envelope.js';
import { openEventStream, wantsEventStream } from '../../platform/http/sse.js';
import type { App } from '../../platform/http/server.js';
import { openBuildLog, readBuildLog } from './logs.js';
import { DOCKERFILE_INSTRUCTIONS } from './plan.js';
import { CreateTemplateBody, Template, TemplateCreated, TemplateParams } from './schemas.js';
import { deleteTemplate, getTemplate, listTemplates, submitTemplate } from './service.js';

const tags = ['templates'];

export async function templateRoutes(app: App, _deps: Deps) {
  app.get(
    '/v1/templates',
    {
      config: { scope: 'templates:read' },
      schema: {
        tags,
        summary: 'List templates',
        description: 'The system templates (base-ubuntu, desktop-ubuntu) and the organization’s own.',
        response: { 200: envelope(z.array(Template)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listTemplates(req.ctx)),
  );

  app.post(
    '/v1/templates',
    {
      config: { scope: 'templates:write' },
      schema: {
        tags,
        summary: 'Build a custom template',
        description: [
          'Either the builder fields (`os`, `runtimes`, `apt`, `npm`, `pip`, `env`) or a `dockerfile`. ',
          `Supported Dockerfile instructions: ${DOCKERFILE_INSTRUCTIONS.join(', ')} (FROM names a template slug such as base-ubuntu); any other is refused with its line number. `,
          'The build runs as root in a build container with network (Debian’s mirror and the npm registry must be reachable) on top of the parent template; ',
          'status moves pending → building → ready or failed, with `progress` 0–100 and the log at GET /v1/templates/{slug}/logs. ',
          'Only this server’s own OS can be built (base-ubuntu’s `os`); other `os` values are refused with the reason. Slugs are unique per organization and cannot shadow a system template. ',
          'The build’s writable layer has a size limit (the server’s HANGAR_TEMPLATE_BUILD_DISK_MB): a step that writes past it fails with ENOSPC and the build ends failed. ',
          '507 `insufficient_storage` while the server’s disk is below its free-space floor.',
        ].join(''),
        body: CreateTemplateBody,
        response: { 201: envelope(TemplateCreated), ...errorResponses, 503: ErrorBody, 507: ErrorBody },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await submitTemplate(req.ctx, req.body))),
  );

  app.get(
    '/v1/templates/:slug',
    {
      config: { scope: 'templates:read' },
      schema: { tags, summary: 'Get a template', params: TemplateParams, response: { 200: envelope(Template), ...errorResponses } },
    },
    async (req) => ok(req, await getTemplate(req.ctx, req.params.slug)),
  );

  app.delete(
    '/v1/templates/:slug',
    {
      config: { scope: 'templates:write' },
      schema: {
        tags,
        summary: 'Delete a custom template',
        description:
          'Refused (409) while it builds, while a sandbox that is not destroyed uses it, or while another template is built on it. System templates cannot be deleted (403).',
        params: TemplateParams,
        response: { 204: z.null(), ...errorResponses },
      },
    },
    async (req, reply) => {
      await deleteTemplate(req.ctx, req.params.slug);
      return reply.status(204).send(null);
    },
  );

  app.get(
    '/v1/templates/:slug/logs',
    {
      config: { scope: 'templates:read' },
      schema: {
        tags,
        summary: 'Build log',
        description: [
          'With `Accept: text/event-stream`: the log so far as `log` events (`{ n, line }`), then live `log` and `progress` events while the build runs, ',
          'and a final `status` event (`{ status, progress, error }`) once it is ready or failed; then the stream ends. ',
          'Otherwise the log so far as text/plain.',
        ].join(''),
        params: TemplateParams,
        response: { 200: z.string().describe('text/plain or text/event-stream'), ...errorResponses },
      },
    },
    async (req, reply) => {
      if (!wantsEventStream(req)) return reply.type('text/plain; charset=utf-8').send(await readBuildLog(req.ctx, req.params.slug));
      const log = await openBuildLog(req.ctx, req.params.slug);
      const stream = openEventStream(reply);
      await log.follow((e) => {
        if (e.type === 'log') stream.send('log', { n: e.n, line: e.line }, e.n);
        else if (e.type === 'progress') stream.send('progress', { progress: e.progress, step: e.step, steps: e.steps });
        else stream.send('status', { status: e.status, progress: e.progress, error: e.error });
      }, stream.signal);
      stream.end();
    },
  );
}
