import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { clientGone } from '../../platform/http/client-gone.js';
import { sendNdjsonText } from '../../platform/http/ndjson.js';
import { envelope, ErrorBody, errorResponses, ok } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import { openaiRoutes } from './openai-routes.js';
import { AvailableModels, ProxyBody, ProxyResult } from './schemas.js';
import { availableModels, closeModelGateway, modelGateway, proxyGenerate, proxyStream } from './service.js';

const tags = ['models'];
const proxyErrors = { ...errorResponses, 502: ErrorBody, 503: ErrorBody, 504: ErrorBody };

export async function modelRoutes(app: App, deps: Deps) {
  modelGateway(deps); // a bad models file stops start-up with a ConfigError naming it
  app.addHook('onClose', () => closeModelGateway(deps));
  // OpenAI's chat-completions and models endpoints (ADR 0042), in their own context for their error fields.
  await app.register(openaiRoutes);

  app.get(
    '/v1/models/available',
    {
      config: { scope: 'models:use' },
      schema: {
        tags,
        summary: 'Models you can use',
        description:
          'Platform models (on the platform’s provider; `available` when that provider is configured) and bring-your-own-key models (`available` when you or your organization have the secret named by `requiresSecret`).',
        response: { 200: envelope(AvailableModels), ...errorResponses },
      },
    },
    async (req) => ok(req, await availableModels(req.ctx)),
  );

  app.post(
    '/v1/model-proxy',
    {
      config: { scope: 'models:use' },
      schema: {
        tags,
        summary: 'Call a platform model',
        description: [
          '`model` (a platform model), `options` (provider-neutral: `messages` of `{ role, content }`, `system`, `maxTokens`, `temperature`, `topP`, `stop`, `seed`, `tools`, `toolChoice`), ',
          '`tier` (only `platform`). Answers the whole result: `text`, `reasoning`, `toolCalls` (returned, not executed), `finishReason`, `usage`. Usage is metered for billing. ',
          'Provider failures: 502 `provider_error` (also when the provider refuses the platform’s credentials), 504 `provider_timeout`, 429 when the provider rate-limits, ',
          '400 when it rejects the request; 503 when the model’s provider is not configured. A client that disconnects cancels the upstream request.',
        ].join(''),
        body: ProxyBody,
        response: { 200: envelope(ProxyResult), ...proxyErrors },
      },
    },
    async (req, reply) => {
      // The upstream request is cancelled when the client leaves.
      return ok(req, await proxyGenerate(req.ctx, req.body, clientGone(reply).signal));
    },
  );

  app.post(
    '/v1/model-proxy/stream',
    {
      config: { scope: 'models:use' },
      schema: {
        tags,
        summary: 'Stream a platform model call (NDJSON)',
        description: [
          'Same body as /v1/model-proxy. `Content-Type: application/x-ndjson`, one JSON object per line: `start` (`model`), `text-delta` and `reasoning-delta` (`text`), ',
          '`tool-call` (`id`, `name`, `input`), then `finish` (`finishReason`, `usage`) — or an `error` line (`error: { code, message }`) if the provider fails mid-stream. ',
          'Errors found before streaming starts are ordinary JSON errors. A client that disconnects cancels the upstream request.',
        ].join(''),
        body: ProxyBody,
        produces: ['application/x-ndjson'],
        response: { 200: z.string().describe('NDJSON lines'), ...proxyErrors },
      },
    },
    async (req, reply) => {
      const gone = clientGone(reply).signal;
      await sendNdjsonText(reply, await proxyStream(req.ctx, req.body, gone), gone);
    },
  );
}
