import { z } from 'zod';
import { clientGone } from '../../platform/http/client-gone.js';
import { sendStreamText } from '../../platform/http/ndjson.js';
import type { App } from '../../platform/http/server.js';
import { chatCompletion, chatCompletionStream, listOpenAIModels, openAIErrorType, retrieveOpenAIModel } from './openai-compat.js';
import { ChatCompletion, ChatCompletionRequest, OpenAIErrorBody, OpenAIModel, OpenAIModelList } from './openai-schemas.js';

const tags = ['openai'];
const errorsOf = (...statuses: number[]) => Object.fromEntries(statuses.map((s) => [s, OpenAIErrorBody]));

/**
 * The OpenAI-compatible endpoints (ADR 0042), in a context of their own: their errors are the project's envelope
 * plus OpenAI's `type` and `param` (added as the error leaves, whoever raised it: validation, authentication, the
 * service), so OpenAI's clients raise their own error classes with the message, and Hangar's clients read `code`.
 */
export async function openaiRoutes(app: App) {
  app.addHook('onSend', async (_req, reply, payload) => {
    if (reply.statusCode < 400 || typeof payload !== 'string') return payload;
    return withOpenAIFields(payload, reply.statusCode);
  });

  app.get(
    '/v1/models',
    {
      config: { scope: 'models:use' },
      schema: {
        tags,
        summary: 'Models you can call (OpenAI’s list)',
        description:
          'OpenAI’s `models.list`: the models you can call now with POST /v1/chat/completions, by catalogue id: the platform models whose provider is configured (`owned_by: "hangar"`, metered) and the bring-your-own-key models whose secret you or your organization have (`owned_by: "byok"`). GET /v1/models/available has display names and the models not available yet.',
        response: { 200: OpenAIModelList, ...errorsOf(401, 403, 429, 500) },
      },
    },
    async (req) => ({ object: 'list' as const, data: await listOpenAIModels(req.ctx) }),
  );

  app.get(
    '/v1/models/*',
    {
      config: { scope: 'models:use' },
      schema: {
        tags,
        summary: 'One model you can call (OpenAI’s retrieve)',
        description:
          'OpenAI’s `models.retrieve`. The id may contain `/` (as `byok/…` ids do), plain or percent-encoded. 404 for a model you cannot call now. (`/v1/models/available` is the catalogue listing, not a model.)',
        params: z.object({ '*': z.string().min(1).max(200).describe('The model id') }),
        response: { 200: OpenAIModel, ...errorsOf(400, 401, 403, 404, 429, 500) },
      },
    },
    async (req) => retrieveOpenAIModel(req.ctx, req.params['*']),
  );

  app.post(
    '/v1/chat/completions',
    {
      config: { scope: 'models:use' },
      schema: {
        tags,
        summary: 'Chat completion (OpenAI-compatible)',
        description: [
          'OpenAI’s chat-completions API over the model proxy, for OpenAI’s clients pointed at `<hangar>/v1` with a Hangar API key. ',
          '`model` is an id from GET /v1/models; messages `system`/`developer`, `user`, `assistant` (with `tool_calls`) and `tool` (with `tool_call_id`), text content (a string or text parts); ',
          '`max_completion_tokens`/`max_tokens`, `temperature`, `top_p`, `stop`, `seed`, `tools` (functions; calls are returned, not executed), `tool_choice`. ',
          'Without `stream`, one `chat.completion`; with `stream: true`, server-sent `chat.completion.chunk` events then `data: [DONE]` (a last chunk with `usage` when `stream_options.include_usage`). ',
          'Usage is metered as the model proxy meters it. `n` > 1, JSON response formats, log probabilities and audio are refused with 400; other OpenAI fields are ignored. ',
          'Errors: the error envelope with OpenAI’s `type` and `param`; a failure mid-stream is a last `data: {"error": …}` event.',
        ].join(''),
        body: ChatCompletionRequest,
        produces: ['application/json', 'text/event-stream'],
        response: {
          200: z.union([ChatCompletion, z.string().describe('Server-sent events (`stream: true`)')]),
          ...errorsOf(400, 401, 402, 403, 404, 429, 500, 502, 503, 504),
        },
      },
    },
    async (req, reply) => {
      const gone = clientGone(reply).signal;
      if (!req.body.stream) return chatCompletion(req.ctx, req.body, gone);
      await sendStreamText(reply, await chatCompletionStream(req.ctx, req.body, gone), gone, 'text/event-stream; charset=utf-8');
    },
  );
}

/** An error body of the envelope, with OpenAI's `type` and `param` (the field of its first issue, if any). */
function withOpenAIFields(payload: string, status: number): string {
  let body: { error?: Record<string, unknown> };
  try {
    body = JSON.parse(payload);
  } catch {
    return payload;
  }
  const error = body?.error;
  if (!error || typeof error !== 'object') return payload;
  const issues = error.issues as { path: string }[] | undefined;
  const path = issues?.[0]?.path;
  error.type = openAIErrorType(status);
  error.param = typeof path === 'string' ? path.replace(/^body\.?/, '') || null : null;
  return JSON.stringify(body);
}
