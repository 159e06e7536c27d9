import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { envelope, ErrorBody, errorResponses, ok, page, pageEnvelope } from '../../platform/http/envelope.js';
import { clientGone } from '../../platform/http/client-gone.js';
import { openEventStream, wantsEventStream, type EventStream } from '../../platform/http/sse.js';
import type { OutputEvent } from '../../platform/sandboxes/index.js';
import type { App } from '../../platform/http/server.js';
import { ActivityPage, ActivityQuery, type ActivityRegistry } from '../activity/index.js';
import { sandboxActivity } from './activity.js';
import { forwardSandboxRequests } from './forward.js';
import {
  getProcess,
  listProcesses,
  openProcessOutput,
  readProcessOutput,
  runCommand,
  signalProcess,
  startBackgroundCommand,
  startStreamedCommand,
  writeStdin,
} from './commands.js';
import { makeFolder, movePath, readFile, removePath, statPath, uploadFile } from './files.js';
import {
  CommandBody,
  CommandResult,
  CreateSandboxBody,
  DeleteFileQuery,
  FileEntry,
  FolderBody,
  KillBody,
  ListSandboxesQuery,
  MoveFileBody,
  OutputQuery,
  PathQuery,
  Process,
  ProcessOutput,
  ProcessParams,
  Sandbox,
  SandboxParams,
  StdinBody,
} from './schemas.js';
import { canSeeSandbox, createSandbox, destroySandbox, getSandbox, listSandboxes, pauseSandbox, resumeSandbox, sandboxHidden } from './service.js';

/** The sandboxes domain's activity checks (buildApp registers them). */
export function registerSandboxActivity(registry: ActivityRegistry): void {
  registry.resource('sandbox', canSeeSandbox);
  registry.hiddenFilter('sandbox_id', 'sandbox', sandboxHidden);
}

const tags = ['sandboxes'];
/** 503: the runtime or the agent is unavailable; 502 `sandbox_agent_error`: the agent answered out of protocol. */
const withUnavailable = { ...errorResponses, 502: ErrorBody, 503: ErrorBody };
/** Creating and resuming also answer 507 `insufficient_storage` below the host's free-disk floor. */
const withStorage = { ...withUnavailable, 507: ErrorBody };

/** Relays a process's output as SSE events (`stdout`, `stderr`, `exit`; `error` if the agent fails) and ends the stream. */
async function relayOutput(stream: EventStream, events: AsyncIterable<OutputEvent>, signal: AbortSignal): Promise<void> {
  try {
    for await (const ev of events) {
      if (ev.type === 'exit') stream.send('exit', { exitCode: ev.exitCode, signal: ev.signal, timedOut: ev.timedOut, durationMs: ev.durationMs });
      else stream.send(ev.type, { data: Buffer.from(ev.data, 'base64').toString('utf8'), offset: ev.offset });
    }
  } catch (err) {
    if (!signal.aborted) stream.send('error', { message: (err as Error).message });
  }
  stream.end();
}

/** The sandboxes' routes, in a scope of their own whose hooks forward requests to the sandbox's node (forward.ts). */
export async function sandboxRoutes(app: App, deps: Deps) {
  await app.register(async (scope) => {
    const routes = scope as unknown as App; // a child of `app`: the same server, logger and type provider
    forwardSandboxRequests(routes, deps);
    await sandboxRouteTable(routes);
  });
}

async function sandboxRouteTable(app: App) {
  app.post(
    '/v1/sandboxes',
    {
      config: { scope: 'sandbox:write' },
      schema: {
        tags,
        summary: 'Create a sandbox',
        description: [
          'Starts a persistent sandbox from a ready template and answers once it can run commands (state `running`). ',
          'Each sandbox is an OCI container run by runc: own namespaces, an unprivileged user (`user`, home /home/user), no capabilities, cgroup limits; ',
          'its root filesystem is the template’s read-only layers under its own writable layer, kept across pause, resume and restarts of Hangar. ',
          'States: starting → running ⇄ paused; stopped (its container is gone, e.g. after a host reboot: resume starts it again); ',
          'error (it failed to start; or its agent broke the protocol, then its container is stopped with its files kept and resume starts it again; `error` says which); destroyed. ',
          'A request its agent answers out of protocol (too large, not JSON, past its deadline) is 502 `sandbox_agent_error` and the sandbox becomes `error`. ',
          '404 unknown template, 409 `invalid_state` template not ready, 429 `limit_exceeded` at the organization’s maximum of running sandboxes, ',
          '400 for limits over the server maxima, 503 when this server cannot run sandboxes (or networking, when `network` is true), ',
          '507 `insufficient_storage` while the server’s disk is below its free-space floor. ',
          'Each sandbox has a disk of `diskMb` of its own (its writable layer): writing past it fails with ENOSPC inside, and `usage.diskBytes` shows what is used.',
        ].join(''),
        body: CreateSandboxBody,
        response: { 201: envelope(Sandbox), ...withStorage },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createSandbox(req.ctx, req.body))),
  );

  app.get(
    '/v1/sandboxes',
    {
      config: { scope: 'sandbox:read' },
      schema: {
        tags,
        summary: 'List sandboxes',
        description: 'Newest first; destroyed sandboxes only with `state=destroyed`.',
        querystring: ListSandboxesQuery,
        response: { 200: pageEnvelope(z.array(Sandbox)), ...errorResponses },
      },
    },
    async (req) => {
      const p = await listSandboxes(req.ctx, req.query);
      return page(req, p.items, p);
    },
  );

  app.get(
    '/v1/sandboxes/:id',
    {
      config: { scope: 'sandbox:read' },
      schema: { tags, summary: 'Get a sandbox', params: SandboxParams, response: { 200: envelope(Sandbox), ...errorResponses } },
    },
    async (req) => ok(req, await getSandbox(req.ctx, req.params.id)),
  );

  app.post(
    '/v1/sandboxes/:id/pause',
    {
      config: { scope: 'sandbox:write' },
      schema: {
        tags,
        summary: 'Pause a sandbox',
        description:
          'Freezes every process (cgroup freezer); memory and files are kept and runtime metering stops. 409 `invalid_state` unless running.',
        params: SandboxParams,
        response: { 200: envelope(Sandbox), ...withUnavailable },
      },
    },
    async (req) => ok(req, await pauseSandbox(req.ctx, req.params.id)),
  );

  app.post(
    '/v1/sandboxes/:id/resume',
    {
      config: { scope: 'sandbox:write' },
      schema: {
        tags,
        summary: 'Resume a sandbox',
        description:
          'A paused sandbox continues where it stopped (state `running`); a stopped one, or one in state `error` because its agent misbehaved, starts again over its kept files (its processes were gone). 409 `invalid_state` otherwise (an `error` sandbox that never started can only be destroyed); 429 at the running limit; 507 `insufficient_storage` while the server’s disk is below its free-space floor.',
        params: SandboxParams,
        response: { 200: envelope(Sandbox), ...withStorage },
      },
    },
    async (req) => ok(req, await resumeSandbox(req.ctx, req.params.id)),
  );

  app.delete(
    '/v1/sandboxes/:id',
    {
      config: { scope: 'sandbox:write' },
      schema: {
        tags,
        summary: 'Destroy a sandbox',
        description:
          'Kills its processes and deletes its container and writable layer. The record stays (state `destroyed`) for its activity and usage.',
        params: SandboxParams,
        response: { 204: z.null(), ...withUnavailable },
      },
    },
    async (req, reply) => {
      await destroySandbox(req.ctx, req.params.id);
      return reply.status(204).send(null);
    },
  );

  app.get(
    '/v1/sandboxes/:id/activity',
    {
      config: { scope: 'activity:read' },
      schema: {
        tags,
        summary: 'Activity of a sandbox',
        description: 'Its events (sandbox.created, .paused, .resumed, .stopped, .destroyed, .failed); accepts the query of GET /v1/activity.',
        params: SandboxParams,
        querystring: ActivityQuery.omit({ sandbox_id: true }),
        response: { 200: ActivityPage, ...errorResponses },
      },
    },
    async (req) => {
      const result = await sandboxActivity(req.ctx, req.params.id, req.query);
      return page(req, { events: result.events }, result);
    },
  );

  // ---- commands and processes ----

  app.post(
    '/v1/sandboxes/:id/commands',
    {
      config: { scope: 'sandbox:write' },
      schema: {
        tags,
        summary: 'Run a command',
        description: [
          'Runs `cmd` with `/bin/bash -c` as the sandbox user and waits: the answer has its stdout, stderr (each cut at 1 MiB in JSON) and exit code. ',
          'With `Accept: text/event-stream` the output is streamed instead: `start` (`{ pid }`), `stdout`/`stderr` (`{ data, offset }`), then `exit`. ',
          'A waited command is killed when the client disconnects, and after `timeoutMs` (default 60 s). With `background: true` the answer is 201 with the process at once; ',
          'it keeps running (also across client disconnects) and its output is read from /processes/{pid}/output. 409 `invalid_state` unless the sandbox is running.',
        ].join(''),
        params: SandboxParams,
        body: CommandBody,
        response: { 200: envelope(CommandResult), 201: envelope(Process), ...withUnavailable },
      },
    },
    async (req, reply) => {
      if (req.body.background) return reply.status(201).send(ok(req, await startBackgroundCommand(req.ctx, req.params.id, req.body)));
      if (wantsEventStream(req)) {
        const command = await startStreamedCommand(req.ctx, req.params.id, req.body);
        const stream = openEventStream(reply);
        const { events, signal } = command.follow(stream.signal);
        stream.send('start', { pid: command.pid });
        await relayOutput(stream, events, signal);
        return;
      }
      const gone = clientGone(reply);
      try {
        return ok(req, await runCommand(req.ctx, req.params.id, req.body, gone.signal));
      } finally {
        gone.release();
      }
    },
  );

  app.get(
    '/v1/sandboxes/:id/processes',
    {
      config: { scope: 'sandbox:read' },
      schema: {
        tags,
        summary: 'List processes started through the API',
        description: 'Running ones first, then the most recent finished ones (the sandbox keeps the last 200).',
        params: SandboxParams,
        response: { 200: envelope(z.array(Process)), ...withUnavailable },
      },
    },
    async (req) => ok(req, await listProcesses(req.ctx, req.params.id)),
  );

  app.get(
    '/v1/sandboxes/:id/processes/:pid',
    {
      config: { scope: 'sandbox:read' },
      schema: { tags, summary: 'Get a process', params: ProcessParams, response: { 200: envelope(Process), ...withUnavailable } },
    },
    async (req) => ok(req, await getProcess(req.ctx, req.params.id, req.params.pid)),
  );

  app.post(
    '/v1/sandboxes/:id/processes/:pid/stdin',
    {
      config: { scope: 'sandbox:write' },
      schema: {
        tags,
        summary: 'Write to a process’s stdin',
        description: 'For background commands started with `keepStdin: true`; `eof` closes stdin. 409 when its stdin is closed or it has exited.',
        params: ProcessParams,
        body: StdinBody,
        response: { 204: z.null(), ...withUnavailable },
      },
    },
    async (req, reply) => {
      await writeStdin(req.ctx, req.params.id, req.params.pid, req.body);
      return reply.status(204).send(null);
    },
  );

  app.post(
    '/v1/sandboxes/:id/processes/:pid/kill',
    {
      config: { scope: 'sandbox:write' },
      schema: {
        tags,
        summary: 'Signal a process',
        description: 'Sends the signal (default SIGKILL) to the process’s whole process group. 409 when it has exited.',
        params: ProcessParams,
        body: KillBody.nullish(),
        response: { 204: z.null(), ...withUnavailable },
      },
    },
    async (req, reply) => {
      await signalProcess(req.ctx, req.params.id, req.params.pid, req.body?.signal);
      return reply.status(204).send(null);
    },
  );

  app.get(
    '/v1/sandboxes/:id/processes/:pid/output',
    {
      config: { scope: 'sandbox:read' },
      schema: {
        tags,
        summary: 'A process’s output (reconnect)',
        description: [
          'Its output since byte `after` (the sandbox keeps the last 4 MiB per process). ',
          'With `Accept: text/event-stream`: `stdout`/`stderr` events (`{ data, offset }`), and with `follow=true` live ones until an `exit` event. ',
          'Otherwise JSON with `nextOffset` to pass as `after` next time.',
        ].join(''),
        params: ProcessParams,
        querystring: OutputQuery,
        response: { 200: envelope(ProcessOutput), ...withUnavailable },
      },
    },
    async (req, reply) => {
      const { id, pid } = req.params;
      if (!wantsEventStream(req)) return ok(req, await readProcessOutput(req.ctx, id, pid, req.query.after));
      const output = await openProcessOutput(req.ctx, id, pid, req.query); // 404 before any stream starts
      const stream = openEventStream(reply);
      const { events, signal } = output.follow(stream.signal);
      await relayOutput(stream, events, signal);
    },
  );

  // ---- files ----

  app.get(
    '/v1/sandboxes/:id/files',
    {
      config: { scope: 'sandbox:read' },
      schema: {
        tags,
        summary: 'List a folder or describe a file',
        description: 'A folder answers `{ entries }` sorted by name; a file `{ entry }`. Paths are absolute or relative to /home/user.',
        params: SandboxParams,
        querystring: PathQuery,
        response: { 200: envelope(z.union([z.object({ entries: z.array(FileEntry) }), z.object({ entry: FileEntry })])), ...withUnavailable },
      },
    },
    async (req) => ok(req, await statPath(req.ctx, req.params.id, req.query.path)),
  );

  app.get(
    '/v1/sandboxes/:id/files/content',
    {
      config: { scope: 'sandbox:read' },
      schema: {
        tags,
        summary: 'Download a file',
        params: SandboxParams,
        querystring: PathQuery,
        produces: ['application/octet-stream'],
        response: { 200: z.any().describe('File bytes'), ...withUnavailable },
      },
    },
    async (req, reply) => {
      const file = await readFile(req.ctx, req.params.id, req.query.path);
      reply.type('application/octet-stream').header('content-length', file.size);
      reply.header('x-content-type-options', 'nosniff');
      return reply.send(file.stream);
    },
  );

  await app.register(async (rawCtx) => {
    const raw = rawCtx.withTypeProvider<ZodTypeProvider>();
    raw.removeAllContentTypeParsers();
    raw.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));
    raw.put(
      '/v1/sandboxes/:id/files/content',
      {
        config: { scope: 'sandbox:write' },
        schema: {
          tags,
          summary: 'Upload a file (raw body)',
          description: 'Writes the body to the path (atomically, creating parent folders, replacing a file). 413 over the upload limit.',
          params: SandboxParams,
          querystring: PathQuery,
          consumes: ['*/*'],
          response: { 200: envelope(FileEntry), ...withUnavailable },
        },
      },
      async (req) => {
        const length = req.headers['content-length'];
        try {
          return ok(req, await uploadFile(req.ctx, req.params.id, req.query.path, req.raw, length !== undefined ? Number(length) : undefined));
        } catch (err) {
          req.raw.resume(); // discard the unread rest of a refused body
          throw err;
        }
      },
    );
  });

  app.post(
    '/v1/sandboxes/:id/folders',
    {
      config: { scope: 'sandbox:write' },
      schema: {
        tags,
        summary: 'Make a folder (with its parents)',
        params: SandboxParams,
        body: FolderBody,
        response: { 201: envelope(FileEntry), ...withUnavailable },
      },
    },
    async (req, reply) => {
      return reply.status(201).send(ok(req, await makeFolder(req.ctx, req.params.id, req.body.path)));
    },
  );

  app.post(
    '/v1/sandboxes/:id/move',
    {
      config: { scope: 'sandbox:write' },
      schema: {
        tags,
        summary: 'Move or rename a file or folder',
        description: '409 when the target exists.',
        params: SandboxParams,
        body: MoveFileBody,
        response: { 200: envelope(FileEntry), ...withUnavailable },
      },
    },
    async (req) => ok(req, await movePath(req.ctx, req.params.id, req.body.from, req.body.to)),
  );

  app.delete(
    '/v1/sandboxes/:id/files',
    {
      config: { scope: 'sandbox:write' },
      schema: {
        tags,
        summary: 'Delete a file or folder',
        description: 'A folder with entries needs `recursive=true` (else 409).',
        params: SandboxParams,
        querystring: DeleteFileQuery,
        response: { 204: z.null(), ...withUnavailable },
      },
    },
    async (req, reply) => {
      await removePath(req.ctx, req.params.id, req.query.path, req.query.recursive);
      return reply.status(204).send(null);
    },
  );
}
