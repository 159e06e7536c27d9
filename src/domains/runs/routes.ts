import type { Deps } from '../../platform/context.js';
import { clientGone } from '../../platform/http/client-gone.js';
import { envelope, ErrorBody, errorResponses, ok } from '../../platform/http/envelope.js';
import { openEventStream } from '../../platform/http/sse.js';
import type { App } from '../../platform/http/server.js';
import { forwardRunRequests } from './forward.js';
import { RunBody, RunParams, RunResult } from './schemas.js';
import { cancelRun, getRun, startRun } from './service.js';

const tags = ['agent runs'];
const runErrors = { ...errorResponses, 502: ErrorBody, 503: ErrorBody, 504: ErrorBody };

/** The runs' routes, in a scope whose hooks send a run to the node of its thread's sandbox (forward.ts). */
export async function runRoutes(app: App, deps: Deps) {
  await app.register(async (scope) => {
    const routes = scope as unknown as App; // a child of `app`: the same server, logger and type provider
    forwardRunRequests(routes, deps);
    await runRouteTable(routes);
  });
}

async function runRouteTable(app: App) {
  app.post(
    '/v1/run',
    {
      config: { scope: 'agent:run' },
      schema: {
        tags,
        summary: 'Run an agent',
        description: [
          '`agent` (slug), `prompt` and/or `messages`, optional `threadId` (else a new thread is opened), `config` (`maxTokens`, `maxTurns`, `temperature` over the agent’s), `metadata`. ',
          '`managed` agents think with their model; `in_sandbox` agents also act through their tools (exec_command, write_stdin, apply_patch, view_image) in the thread’s sandbox, made from the agent’s template on first use; ',
          '`local-desktop` agents run on their `targetDeviceId` node (yours, active) through the device mesh: non-streaming answers the `registered` run at once; `stream: true` streams the device’s frames until `run_completed` (ADR 0029). ',
          'Non-streaming: `{ data: <run result> }` once the run ends (status completed, failed, cancelled or max_turns). `stream: true`: Server-Sent Events, one event per thread frame, named by its type ',
          '(`run_started`, `user_message`, `assistant_message_delta`, `assistant_thinking_delta`, `assistant_message`, `tool_call`, `tool_call_started`, `tool_output_delta`, `tool_call_completed`, `tool_result`, `run_completed`: ',
          'durable ones carry `sequence` as in the thread), then a final `result` event with the run result. 409 THREAD_BUSY (with `activeRunId`) when the thread has an active run. A client that disconnects cancels the run.',
        ].join(''),
        body: RunBody,
        response: { 200: envelope(RunResult), ...runErrors },
      },
    },
    async (req, reply) => {
      // For a stream too: a client gone before its first frame (e.g. while the sandbox is made) must cancel the run.
      const gone = clientGone(reply).signal;
      if (req.body.stream) {
        // Validation errors (unknown agent, busy thread...) must still be JSON errors: open the stream on the first frame.
        let stream: ReturnType<typeof openEventStream> | null = null;
        const open = () => {
          stream ??= openEventStream(reply);
          return stream;
        };
        const result = await startRun(req.ctx, req.body, { signal: gone, emit: (frame) => open().send(frame.type, frame) });
        const s = open();
        s.send('result', result);
        s.end();
        return;
      }
      return ok(req, await startRun(req.ctx, req.body, { signal: gone }));
    },
  );

  app.get(
    '/v1/runs/:runId',
    {
      config: { scope: 'agent:read' },
      schema: {
        tags,
        summary: 'Get a run',
        description: 'Your own runs.',
        params: RunParams,
        response: { 200: envelope(RunResult), ...errorResponses },
      },
    },
    async (req) => ok(req, await getRun(req.ctx, req.params.runId)),
  );

  app.post(
    '/v1/runs/:runId/cancel',
    {
      config: { scope: 'agent:run' },
      schema: {
        tags,
        summary: 'Cancel a run',
        description: [
          'Stops a running run at its next step (the model stream or tool is aborted); it ends `cancelled`. A local-device run (registered or running) ends `cancelled` at once and its device is told. 409 `invalid_state` (with `state`) when it is not running. ',
          'A run whose server stopped mid-run is not running: it is finished as `failed` ("the server stopped while this run was in progress"), at that server’s restart or once its thread lock lapses, and cancel answers 409 for it. ',
          '503 when another replica is running it: cancel it there.',
        ].join(''),
        params: RunParams,
        response: { 200: envelope(RunResult), ...runErrors },
      },
    },
    async (req) => ok(req, await cancelRun(req.ctx, req.params.runId)),
  );
}
