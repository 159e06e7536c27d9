import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { ErrorBody, errorResponses, MetaSchema } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import { executeWhileConnected } from './client-gone.js';
import { ExecuteBody, ExecutionResult, IsolationInfo, Runtime } from './schemas.js';
import { closeSharedExecutor, executeCode, listRuntimes, sharedExecutor } from './service.js';

const tags = ['code execution'];

export async function executeRoutes(app: App, deps: Deps) {
  const executor = await sharedExecutor(deps);
  app.addHook('onClose', () => closeSharedExecutor(deps));

  app.post(
    '/v1/execute',
    {
      config: { scope: 'execute:run' },
      schema: {
        tags,
        summary: 'Run a program in a one-shot sandbox',
        description: [
          'Compiles (where the language needs it) and runs the program in a fresh, isolated sandbox with no network, then deletes it. ',
          'The answer is the result itself, with no envelope; its `X-Execution-Id` header names the `code_execution` whose activity events ',
          '(`code_execution.started`, then `.completed` for exit code 0 or `.failed`) `GET /v1/activity?code_execution_id=` lists. ',
          'A program that fails, times out or exceeds its memory is still a 200: `status` and `message` of each step say what happened. ',
          'Every bad field is a 400 naming it; 429 `rate_limited` (with `Retry-After`) when the organization has as many executions waiting as it may ',
          '(executions are shared fairly between organizations: each runs at most its share at once, and waiting organizations take turns), or every queue place is taken; ',
          '503 `service_unavailable` when this server has no working sandbox. A client that disconnects cancels its execution.',
        ].join(''),
        body: ExecuteBody,
        response: { 200: ExecutionResult, ...errorResponses, 503: ErrorBody },
      },
    },
    async (req, reply) =>
      executeWhileConnected(reply, async (signal) => {
        const { id, result } = await executeCode(req.ctx, executor, req.body, signal);
        reply.header('x-execution-id', id);
        return result;
      }),
  );

  app.get(
    '/v1/runtimes',
    {
      schema: {
        tags,
        summary: 'Installed languages and versions',
        description:
          'One entry per installed version, detected from this server’s toolchains at start-up. A language whose toolchain is missing is absent, and `POST /v1/execute` refuses it with a 400. ' +
          '`meta.isolation` says whether this server has a working sandbox and which cgroup hierarchy (`v1` or `v2`) limits its runs.',
        response: { 200: z.object({ data: z.array(Runtime), meta: MetaSchema.extend({ isolation: IsolationInfo }) }), ...errorResponses },
      },
    },
    async (req) => ({
      data: listRuntimes(executor),
      meta: {
        requestId: req.id,
        isolation: { available: deps.isolation.available, reason: deps.isolation.unavailableReason, cgroup: deps.isolation.cgroup?.version ?? null },
      },
    }),
  );
}
