import { requireScope, type Ctx } from '../../platform/context.js';
import { AppError, ERROR_STATUS, type ErrorCode } from '../../platform/http/errors.js';
import { base62 } from '../../platform/ids.js';
import { parseJson } from './openai-wire.js';
import type { ChatCompletion, ChatCompletionRequest, ChatMessage, OpenAIModel, WireUsage } from './openai-schemas.js';
import type { ProxyBody, ProxyMessage, ProxyResult, Usage } from './schemas.js';
import { availableModels, modelGateway, proxyGenerate, proxyStream, type ProxyCallOptions, type StreamLine } from './service.js';

/**
 * OpenAI's chat-completions and models endpoints over the model proxy (ADR 0042): a request in OpenAI's shape is
 * translated to the proxy's options and made by the proxy's own verbs (`proxyGenerate`, `proxyStream`: the same
 * passthrough or AI SDK call, credits check, metering and error mapping), and the answer is written in OpenAI's
 * shape. Model ids are the catalogue's: a platform model's id, or a bring-your-own-key model's (`byok/…`), which
 * runs on the caller's key here as it does in runs.
 */

const CALL: ProxyCallOptions = { byok: true, names: { messages: 'messages', toolCallId: 'tool_call_id', toolCalls: 'tool_calls' } };

// ---- models -----------------------------------------------------------------------------------------------------

/** `GET /v1/models`: the models the caller can call now, as `/v1/models/available` marks them `available`. */
export async function listOpenAIModels(ctx: Ctx): Promise<OpenAIModel[]> {
  const { platform, byok } = await availableModels(ctx);
  return [
    ...platform.filter((m) => m.available).map((m) => model(m.model, 'hangar')),
    ...byok.filter((m) => m.available).map((m) => model(m.model, 'byok')),
  ];
}

const model = (id: string, owner: OpenAIModel['owned_by']): OpenAIModel => ({ id, object: 'model', created: 0, owned_by: owner });

/** `GET /v1/models/{model}`: one of them, or 404. */
export async function retrieveOpenAIModel(ctx: Ctx, id: string): Promise<OpenAIModel> {
  const found = (await listOpenAIModels(ctx)).find((m) => m.id === id);
  if (!found) throw modelNotFound(id);
  return found;
}

function modelNotFound(id: string): AppError {
  return new AppError('not_found', `model "${id}" is not one you can use; GET /v1/models lists them`, {
    issues: [{ path: 'model', message: 'is not a model you can use' }],
  });
}

// ---- chat completions -------------------------------------------------------------------------------------------

/** `POST /v1/chat/completions` without `stream`: the whole `chat.completion`. */
export async function chatCompletion(ctx: Ctx, req: ChatCompletionRequest, signal: AbortSignal): Promise<ChatCompletion> {
  requireScope(ctx, 'models:use');
  const result = await proxyGenerate(ctx, proxyBodyOf(ctx, req), signal, CALL);
  const message: ChatCompletion['choices'][number]['message'] = {
    role: 'assistant',
    content: result.text === '' && result.toolCalls.length > 0 ? null : result.text,
    refusal: null,
  };
  if (result.reasoning) message.reasoning_content = result.reasoning;
  if (result.toolCalls.length)
    message.tool_calls = result.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: argumentsOf(c.input) } }));
  return {
    id: completionId(),
    object: 'chat.completion',
    created: nowSeconds(),
    model: result.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishOf(result.finishReason) }],
    usage: usageOf(result.usage),
  };
}

/**
 * `POST /v1/chat/completions` with `stream: true`: server-sent `chat.completion.chunk` events, then `data: [DONE]`.
 * Errors found before the first byte are ordinary JSON errors; a failure after ends the stream with an `error`
 * event (what OpenAI's clients raise) and no `[DONE]`.
 */
export async function chatCompletionStream(ctx: Ctx, req: ChatCompletionRequest, signal: AbortSignal): Promise<AsyncGenerator<string>> {
  requireScope(ctx, 'models:use');
  const lines = await proxyStream(ctx, proxyBodyOf(ctx, req), signal, CALL);
  return sseOf(lines, req.stream_options?.include_usage === true, ctx.requestId);
}

async function* sseOf(ndjson: AsyncGenerator<string>, includeUsage: boolean, requestId: string): AsyncGenerator<string> {
  const id = completionId();
  const created = nowSeconds();
  let model = '';
  let toolIndex = 0;
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
    event({
      id,
      object: 'chat.completion.chunk',
      created,
      model,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
      ...(includeUsage ? { usage: null } : {}),
    });
  for await (const piece of ndjson) {
    let out = '';
    for (const text of piece.split('\n')) {
      if (!text) continue;
      const line = JSON.parse(text) as StreamLine;
      switch (line.type) {
        case 'start':
          model = line.model;
          out += chunk({ role: 'assistant', content: '' });
          break;
        case 'text-delta':
          out += chunk({ content: line.text });
          break;
        case 'reasoning-delta':
          out += chunk({ reasoning_content: line.text });
          break;
        case 'tool-call':
          out += chunk({
            tool_calls: [{ index: toolIndex++, id: line.id, type: 'function', function: { name: line.name, arguments: argumentsOf(line.input) } }],
          });
          break;
        case 'finish':
          out += chunk({}, finishOf(line.finishReason as ProxyResult['finishReason']));
          if (includeUsage) out += event({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: usageOf(line.usage) });
          out += 'data: [DONE]\n\n';
          break;
        case 'error': {
          const status = ERROR_STATUS[line.error.code as ErrorCode] ?? 500;
          out += event({ error: { ...line.error, requestId, type: openAIErrorType(status), param: null } });
          break;
        }
      }
    }
    if (out) yield out;
  }
}

const event = (data: unknown) => `data: ${JSON.stringify(data)}\n\n`;
const completionId = () => `chatcmpl-${base62(24)}`;
const nowSeconds = () => Math.floor(Date.now() / 1000);

/** A tool call's input as OpenAI's `arguments`: JSON text (arguments that were not JSON come back as they were). */
const argumentsOf = (input: unknown): string => (typeof input === 'string' ? input : JSON.stringify(input ?? {}));

function finishOf(reason: ProxyResult['finishReason']): ChatCompletion['choices'][number]['finish_reason'] {
  if (reason === 'tool-calls') return 'tool_calls';
  if (reason === 'length') return 'length';
  if (reason === 'content-filter') return 'content_filter';
  return 'stop';
}

function usageOf(u: Usage): WireUsage {
  return {
    prompt_tokens: u.inputTokens,
    completion_tokens: u.outputTokens,
    total_tokens: u.totalTokens,
    prompt_tokens_details: { cached_tokens: u.cachedInputTokens },
    completion_tokens_details: { reasoning_tokens: u.reasoningTokens },
  };
}

/** OpenAI's request as the proxy's body. A model id the catalogue does not have is a 404, as OpenAI answers it. */
function proxyBodyOf(ctx: Ctx, req: ChatCompletionRequest): ProxyBody {
  if (!modelGateway(ctx.deps).catalogue.some((m) => m.id === req.model)) throw modelNotFound(req.model);
  const tools = req.tools?.map((t) => ({
    name: t.function.name,
    description: t.function.description,
    parameters: t.function.parameters ?? { type: 'object', properties: {} },
  }));
  const choice = req.tool_choice;
  const maxTokens = req.max_completion_tokens ?? req.max_tokens;
  const options: ProxyBody['options'] = { messages: req.messages.map(messageOf) };
  if (maxTokens != null) options.maxTokens = maxTokens;
  if (req.temperature != null) options.temperature = req.temperature;
  if (req.top_p != null) options.topP = req.top_p;
  if (req.stop != null) options.stop = typeof req.stop === 'string' ? [req.stop] : req.stop;
  if (req.seed != null) options.seed = req.seed;
  if (tools?.length) options.tools = tools;
  if (choice != null) options.toolChoice = typeof choice === 'string' ? choice : { tool: choice.function.name };
  // `tier` is the proxy's billing tier field, which only takes `platform`; a BYOK model is let through by `CALL.byok`.
  return { model: req.model, tier: 'platform', options };
}

const textParts = (content: Exclude<ChatMessage['content'], null | undefined>) =>
  typeof content === 'string' ? content : content.map((p) => ({ type: 'text' as const, text: p.text as string }));

function messageOf(m: ChatMessage): ProxyMessage {
  switch (m.role) {
    case 'system':
    case 'developer':
      return { role: 'system', content: textParts(m.content) };
    case 'user':
      return { role: 'user', content: textParts(m.content) };
    case 'tool':
      return { role: 'tool', toolCallId: m.tool_call_id, content: textParts(m.content) };
    case 'assistant': {
      const out: ProxyMessage = { role: 'assistant' };
      if (m.content != null) out.content = textParts(m.content);
      if (m.tool_calls?.length) out.toolCalls = m.tool_calls.map((c) => ({ id: c.id, name: c.function.name, input: inputOf(c.function.arguments) }));
      return out;
    }
  }
}

/** `arguments` as the proxy's input: parsed JSON; nothing is `{}`; text that is not JSON stays as it is. */
function inputOf(args: string): unknown {
  if (args.trim() === '') return {};
  try {
    return parseJson(args);
  } catch {
    return args;
  }
}

/** OpenAI's error `type` for a status: what its clients and SDKs branch on. */
export function openAIErrorType(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 402) return 'insufficient_quota';
  if (status === 403) return 'permission_error';
  if (status === 429) return 'rate_limit_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}
