import type { FastifyError } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import type { App } from '../../platform/http/server.js';
import { toAppError } from '../../platform/http/server.js';
import {
  PistonError,
  PistonExecuteBody,
  PistonRequestError,
  PistonResult,
  PistonRuntime,
  pistonRuntimes,
  toExecuteRequest,
  toPistonResult,
} from './piston.js';
import { executeWhileConnected } from './client-gone.js';
import { closeSharedExecutor, executeCode, sharedExecutor } from './service.js';

const tags = ['code execution (Piston-compatible)'];
const errors = Object.fromEntries([400, 401, 402, 403, 413, 415, 429, 503].map((s) => [s, PistonError.describe('`{ message }`, as Piston answers')]));

/** `files.0.content` (a field path of Hangar's) as Piston writes it: `files[0].content`. */
const pistonPath = (p: string) => p.replace(/^body\.?/, '').replace(/\.(\d+)(?=\.|$)/g, '[$1]');

/** Any error on these routes as Piston's body, `{ message }` (with Hangar's status and headers, e.g. `Retry-After`). */
function pistonMessage(err: FastifyError | Error): { status: number; message: string; headers?: Record<string, string> } {
  if (err instanceof PistonRequestError) return { status: 400, message: err.message };
  if (hasZodFastifySchemaValidationErrors(err)) {
    // The first problem, in Piston's words (the schema's messages), in the order Piston checks the fields.
    const first = err.validation[0]!;
    const index = /^\/files\/(\d+)\//.exec(first.instancePath)?.[1];
    return { status: 400, message: (first.message ?? 'invalid request').replace('files[]', `files[${index ?? 0}]`) };
  }
  const app = toAppError(err);
  const issue = app.details?.issues?.length === 1 ? app.details.issues[0] : undefined;
  const message = issue ? `${pistonPath(issue.path)}: ${issue.message}` : app.message;
  return { status: app.status, message, headers: app.headers };
}

/**
 * Piston's API v2 (engineer-man/piston) over Hangar's code execution (ADR 0043): `POST /api/v2/execute` and
 * `GET /api/v2/runtimes` in its shapes, so a Piston client changes only its URL and adds an API key. They run
 * through `executeCode`, like `POST /v1/execute`: the same scope, pool, metering and activity events.
 */
export async function pistonRoutes(app: App, deps: Deps) {
  const executor = await sharedExecutor(deps);
  app.addHook('onClose', () => closeSharedExecutor(deps));

  await app.register(async (piston: App) => {
    piston.setErrorHandler((err: FastifyError, req, reply) => {
      const { status, message, headers } = pistonMessage(err);
      if (status >= 500) req.log.error({ err }, 'request failed');
      if (headers) reply.headers(headers);
      return reply.status(status).type('application/json').serializer(JSON.stringify).send({ message });
    });

    piston.post(
      '/api/v2/execute',
      {
        config: { scope: 'execute:run' },
        schema: {
          tags,
          summary: 'Run a program (Piston API v2)',
          description: [
            'Piston’s `POST /api/v2/execute`: the same request (`language`, `version`, `files`, `stdin`, `args`, the timeouts, CPU times and memory limits) and answer ',
            '(`language`, `version`, `compile` for compiled languages, `run`, each with `stdout`, `stderr`, `output`, `code`, `signal`, `message`, `status`, ',
            '`cpu_time`, `wall_time`, `memory`), run like `POST /v1/execute` (scope `execute:run`, its pool, metering and activity events; ',
            'the execution id is in `X-Execution-Id`). A limit of -1 is this server’s maximum. `output` interleaves stdout and stderr in the order they were written ',
            '(two writes closer together than the sandbox notices are shown stdout first). Errors are `{ message }`: 400 for what Piston refuses ',
            '(`<language>-<version> runtime is unknown`, a missing or mistyped field, a limit above the maximum) and for what Hangar refuses besides (file names).',
          ].join(''),
          body: PistonExecuteBody,
          response: { 200: PistonResult, ...errors },
        },
      },
      async (req, reply) => {
        const { request, options } = toExecuteRequest(executor, req.body);
        return executeWhileConnected(reply, async (signal) => {
          const { id, result, output } = await executeCode(req.ctx, executor, request, signal, options);
          reply.header('x-execution-id', id);
          return toPistonResult(result, output);
        });
      },
    );

    piston.get(
      '/api/v2/runtimes',
      {
        schema: {
          tags,
          summary: 'Installed languages and versions (Piston API v2)',
          description:
            'Piston’s `GET /api/v2/runtimes`: a bare array, one entry per installed version, with the aliases `POST /api/v2/execute` accepts (Piston’s, such as `py3`, `node-js`, `mono-csharp`, and Hangar’s) and `runtime` where Piston names one.',
          response: { 200: z.array(PistonRuntime), ...errors },
        },
      },
      async () => pistonRuntimes(executor),
    );
  });
}
