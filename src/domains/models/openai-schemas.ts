import { z } from 'zod';
import { ErrorBody } from '../../platform/http/envelope.js';

/**
 * The OpenAI-compatible endpoints' wire format (ADR 0042): OpenAI's own field names. Fields of OpenAI's request
 * that change nothing here are ignored as OpenAI ignores unknown ones; fields whose meaning Hangar cannot honour
 * (more than one choice, JSON modes, log probabilities, audio, the old `functions`) are refused with a 400 naming them.
 */

const ToolName = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'letters, digits, "_" and "-", at most 64');

/** A content part: text is what Hangar's proxy carries; any other kind is refused by name. */
const Part = z.object({ type: z.string(), text: z.unknown().optional() }).superRefine((p, ctx) => {
  if (p.type !== 'text') ctx.addIssue({ code: 'custom', message: `only text content parts are supported (got "${p.type}")`, path: ['type'] });
  else if (typeof p.text !== 'string') ctx.addIssue({ code: 'custom', message: 'a text part needs `text` (a string)', path: ['text'] });
});

const Content = z.union([z.string(), z.array(Part).min(1).max(1000)]);

const AssistantToolCall = z.object({
  id: z.string().min(1).max(200),
  type: z.literal('function').optional(),
  function: z.object({ name: ToolName, arguments: z.string().describe('The input, as JSON text') }),
});

export const ChatMessage = z.discriminatedUnion('role', [
  z.object({ role: z.enum(['system', 'developer']), content: Content, name: z.string().optional() }),
  z.object({ role: z.literal('user'), content: Content, name: z.string().optional() }),
  z.object({
    role: z.literal('assistant'),
    content: Content.nullish(),
    tool_calls: z.array(AssistantToolCall).max(128).nullish(),
    name: z.string().optional(),
    refusal: z.string().nullish(),
  }),
  z.object({ role: z.literal('tool'), content: Content, tool_call_id: z.string().min(1).max(200) }),
]);
export type ChatMessage = z.infer<typeof ChatMessage>;

const Tokens = z.number().int().positive().max(1_000_000);

export const ChatCompletionRequest = z
  .object({
    model: z.string().min(1).max(200).describe('A model id from GET /v1/models'),
    messages: z.array(ChatMessage).min(1).max(1000),
    max_tokens: Tokens.nullish(),
    max_completion_tokens: Tokens.nullish().describe('Wins over `max_tokens` when both are given'),
    temperature: z.number().min(0).max(2).nullish(),
    top_p: z.number().gt(0).max(1).nullish(),
    stop: z.union([z.string().min(1), z.array(z.string().min(1)).max(4)]).nullish(),
    seed: z.number().int().nullish(),
    tools: z
      .array(
        z.object({
          type: z.literal('function', { error: 'only `function` tools are supported' }),
          function: z.object({
            name: ToolName,
            description: z.string().max(4000).optional(),
            parameters: z.record(z.string(), z.unknown()).optional(),
            strict: z.boolean().nullish(),
          }),
        }),
      )
      .max(128)
      .nullish(),
    tool_choice: z
      .union([
        z.enum(['auto', 'none', 'required']),
        z.object({ type: z.literal('function'), function: z.object({ name: z.string().min(1).max(64) }) }),
      ])
      .nullish(),
    stream: z.boolean().nullish(),
    stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
    n: z.number().int().min(1).max(1, 'only one choice (n=1) is supported; make another request for another').nullish(),
    response_format: z
      .object({ type: z.string() })
      .refine((f) => f.type === 'text', 'only `{ "type": "text" }` is supported; JSON modes are not available through Hangar')
      .nullish(),
    logprobs: z
      .boolean()
      .nullish()
      .refine((v) => !v, 'log probabilities are not available through Hangar'),
    modalities: z
      .array(z.string())
      .nullish()
      .refine((m) => !m || m.every((x) => x === 'text'), 'only the `text` modality is supported'),
    audio: z
      .unknown()
      .refine((v) => v == null, 'audio output is not available through Hangar')
      .optional(),
    functions: z
      .unknown()
      .refine((v) => v == null, 'the deprecated `functions` are not supported; use `tools`')
      .optional(),
    function_call: z
      .unknown()
      .refine((v) => v == null, 'the deprecated `function_call` is not supported; use `tool_choice`')
      .optional(),
  })
  .describe('OpenAI’s chat-completions request; other OpenAI fields (user, metadata, store, penalties, …) are ignored');
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

const WireUsage = z.object({
  prompt_tokens: z.number().int(),
  completion_tokens: z.number().int(),
  total_tokens: z.number().int(),
  prompt_tokens_details: z.object({ cached_tokens: z.number().int() }),
  completion_tokens_details: z.object({ reasoning_tokens: z.number().int() }),
});
export type WireUsage = z.infer<typeof WireUsage>;

export const OPENAI_FINISH = ['stop', 'length', 'tool_calls', 'content_filter'] as const;

const WireToolCall = z.object({
  id: z.string(),
  type: z.literal('function'),
  function: z.object({ name: z.string(), arguments: z.string() }),
});

export const ChatCompletion = z
  .object({
    id: z.string().describe('`chatcmpl-…`'),
    object: z.literal('chat.completion'),
    created: z.number().int().describe('Unix seconds'),
    model: z.string(),
    choices: z.array(
      z.object({
        index: z.number().int(),
        message: z.object({
          role: z.literal('assistant'),
          content: z.string().nullable(),
          refusal: z.null(),
          reasoning_content: z.string().optional().describe('The model’s reasoning, when the provider returns it'),
          tool_calls: z.array(WireToolCall).optional(),
        }),
        logprobs: z.null(),
        finish_reason: z.enum(OPENAI_FINISH),
      }),
    ),
    usage: WireUsage,
  })
  .meta({ id: 'OpenAIChatCompletion' });
export type ChatCompletion = z.infer<typeof ChatCompletion>;

export const OpenAIModel = z
  .object({
    id: z.string().describe('The catalogue id, as `model` takes it'),
    object: z.literal('model'),
    created: z.number().int().describe('Always 0: the catalogue does not say when a model was made'),
    owned_by: z.enum(['hangar', 'byok']).describe('`hangar`: a platform model (metered); `byok`: on your own key'),
  })
  .meta({ id: 'OpenAIModel' });
export type OpenAIModel = z.infer<typeof OpenAIModel>;

export const OpenAIModelList = z.object({ object: z.literal('list'), data: z.array(OpenAIModel) }).meta({ id: 'OpenAIModelList' });

/** The project's error envelope with OpenAI's `type` and `param`, so both kinds of client read it. */
export const OpenAIErrorBody = z
  .object({
    error: ErrorBody.shape.error.extend({
      type: z.string().describe('OpenAI’s error type: invalid_request_error, authentication_error, permission_error, …'),
      param: z.string().nullable().describe('The request field at fault, when one is'),
    }),
  })
  .meta({ id: 'OpenAIError' });
