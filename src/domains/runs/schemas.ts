import { z } from 'zod';
import { EXECUTION_MODES } from '../threads/index.js';

export const RUN_STATUSES = ['registered', 'running', 'completed', 'failed', 'cancelled', 'max_turns'] as const;

export const RunBody = z
  .object({
    agent: z.string().min(1).max(100).describe('Agent slug'),
    prompt: z.string().min(1).max(1_000_000).optional(),
    messages: z
      .array(
        z
          .object({
            content: z.string().max(1_000_000).default(''),
            parts: z.array(z.object({ type: z.literal('text'), text: z.string() }).strict()).default([]),
          })
          .strict(),
      )
      .max(100)
      .optional()
      .describe('User messages (their `content`, or their text `parts`); with `prompt`, the prompt comes last'),
    stream: z.boolean().default(false),
    threadId: z.string().min(1).max(100).optional().describe('Continue this thread; without it a new thread is opened'),
    config: z
      .object({
        maxTokens: z.number().int().min(1).max(1_000_000).optional(),
        maxTurns: z.number().int().min(1).max(200).optional(),
        temperature: z.number().min(0).max(2).optional(),
      })
      .strict()
      .default({}),
    metadata: z.record(z.string(), z.unknown()).default({}),
    sessionId: z
      .string()
      .min(1)
      .max(100)
      .optional()
      .describe(
        'A context session of yours (`sess_…`): its blocks (pinned first) are the model context before the thread’s messages, and the answer is added back as a block',
      ),
    sessionOptions: z
      .object({
        includeToolResults: z.boolean().default(false).describe('Add each tool result back as a `tool_result` block too'),
        onOverflow: z
          .enum(['compact', 'fail'])
          .default('compact')
          .describe(
            'A session over the run’s window: `compact` it first (to HANGAR_SESSIONS_RUN_COMPACT_PCT of the window), or `fail` with 409 invalid_state',
          ),
      })
      .strict()
      .optional(),
  })
  .strict();
export type RunBody = z.infer<typeof RunBody>;

export const RunUsage = z.object({
  promptTokens: z.number().int(),
  completionTokens: z.number().int(),
  totalTokens: z.number().int(),
  inputTokens: z.number().int(),
  outputTokens: z.number().int(),
  cachedInputTokens: z.number().int(),
  reasoningTokens: z.number().int(),
});
export type RunUsage = z.infer<typeof RunUsage>;

export const RunResult = z
  .object({
    runId: z.string(),
    agent: z.string(),
    sandboxId: z.string().nullable(),
    threadId: z.string(),
    rolloutId: z.string().nullable(),
    targetDeviceId: z.string().nullable(),
    executionMode: z.enum(EXECUTION_MODES),
    model: z.string().nullable(),
    status: z.enum(RUN_STATUSES),
    result: z.unknown().describe('The final assistant text (null when there is none)'),
    error: z.string().nullable(),
    usage: RunUsage,
    iterations: z.number().int().describe('Model turns taken'),
    createdAt: z.string(),
    finishedAt: z.string().nullable(),
  })
  .meta({ id: 'AgentRunResult' });
export type RunResult = z.infer<typeof RunResult>;

export const RunParams = z.object({ runId: z.string().min(1).max(100) });
