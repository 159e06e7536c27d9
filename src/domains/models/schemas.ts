import { z } from 'zod';

export const AvailableModels = z
  .object({
    platform: z.array(z.object({ model: z.string(), displayName: z.string(), available: z.boolean() })),
    byok: z.array(z.object({ model: z.string(), displayName: z.string(), requiresSecret: z.string(), available: z.boolean() })),
  })
  .meta({ id: 'AvailableModels' });

const TextPart = z.object({ type: z.literal('text'), text: z.string() }).strict();
const Content = z.union([z.string(), z.array(TextPart).min(1)]);
const ToolName = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'letters, digits, "_" and "-", at most 64');
const ToolCallId = z.string().min(1).max(200);

/** A tool call the model made, sent back in an assistant message (as a result's `toolCalls` hold them). */
const ProxyToolCallIn = z
  .object({ id: ToolCallId, name: ToolName, input: z.unknown().optional().describe('The call’s input (any JSON; default {})') })
  .strict();

export const ProxyMessage = z
  .discriminatedUnion('role', [
    z.object({ role: z.enum(['system', 'user']), content: Content }).strict(),
    z
      .object({
        role: z.literal('assistant'),
        content: Content.optional().describe('Default: no text (an assistant turn of tool calls only)'),
        toolCalls: z.array(ProxyToolCallIn).min(1).max(128).optional().describe('The tool calls the model made in this turn'),
      })
      .strict(),
    z
      .object({
        role: z.literal('tool'),
        toolCallId: ToolCallId.describe('The `id` of the call this answers, from an earlier assistant message'),
        content: Content.describe('The tool’s result, as text'),
      })
      .strict(),
  ])
  .describe('`system`, `user`, `assistant` (text, and the `toolCalls` it made) or `tool` (the result of one call)');
export type ProxyMessage = z.infer<typeof ProxyMessage>;

export const ProxyTool = z
  .object({
    name: ToolName,
    description: z.string().max(4000).optional(),
    parameters: z.record(z.string(), z.unknown()).default({ type: 'object', properties: {} }).describe('JSON Schema of the input'),
  })
  .strict();

export const ProxyOptions = z
  .object({
    messages: z.array(ProxyMessage).min(1).max(1000),
    system: z.string().max(200_000).optional(),
    maxTokens: z.number().int().positive().max(1_000_000).optional(),
    temperature: z.number().min(0).max(2).optional(),
    topP: z.number().gt(0).max(1).optional(),
    stop: z.array(z.string().min(1)).max(4).optional(),
    seed: z.number().int().optional(),
    tools: z.array(ProxyTool).max(128).optional().describe('Tools the model may call; calls are returned, not executed'),
    toolChoice: z.union([z.enum(['auto', 'none', 'required']), z.object({ tool: z.string() }).strict()]).optional(),
  })
  .strict()
  .describe('Provider-neutral generation options');

export const ProxyBody = z
  .object({
    model: z.string().min(1).max(200),
    options: ProxyOptions,
    tier: z.string().default('platform').describe('Only `platform` is accepted'),
  })
  .strict();
export type ProxyBody = z.infer<typeof ProxyBody>;

export const Usage = z
  .object({
    inputTokens: z.number().int(),
    outputTokens: z.number().int(),
    totalTokens: z.number().int(),
    cachedInputTokens: z.number().int(),
    reasoningTokens: z.number().int(),
  })
  .meta({ id: 'ModelUsage' });
export type Usage = z.infer<typeof Usage>;

export const FINISH_REASONS = ['stop', 'length', 'content-filter', 'tool-calls', 'error', 'other', 'unknown'] as const;

export const ToolCall = z.object({ id: z.string(), name: z.string(), input: z.unknown() }).meta({ id: 'ModelToolCall' });

export const ProxyResult = z
  .object({
    model: z.string(),
    text: z.string(),
    reasoning: z.string().describe('The model’s reasoning text, when the provider returns it'),
    toolCalls: z.array(ToolCall),
    finishReason: z.enum(FINISH_REASONS),
    usage: Usage,
  })
  .meta({ id: 'ModelProxyResult' });
export type ProxyResult = z.infer<typeof ProxyResult>;
