import { z } from 'zod';
import { limitParam, queryBool } from '../../platform/http/pagination.js';

const Id = z.string().min(1).max(100);
export const Tag = z
  .string()
  .trim()
  .min(1)
  .max(100)
  .regex(/^[^"\\\p{Cc}]+$/u, 'must not contain quotes, backslashes or control characters');
export const Tags = z.array(Tag).max(50).describe('Up to 50 tags of 1 to 100 characters');
const TagFilter = z.array(Tag).max(50);

export const BLOCK_KINDS = ['instruction', 'document', 'message', 'tool_result', 'summary', 'note'] as const;
export const BlockKind = z.enum(BLOCK_KINDS);
export type BlockKind = z.infer<typeof BlockKind>;

export const SessionParams = z.object({ sessionId: Id });
export const BlockParams = z.object({ sessionId: Id, blockId: Id });

export const Metrics = z
  .object({
    totalTokens: z.number().int().describe('The tokens of all blocks, counted with the session’s tokenizer'),
    maxTokens: z.number().int().describe('The window: the default agent’s model context window, else the server’s default'),
    tokensRemainingPct: z.number().describe('Share of the window still free, 0 to 100'),
    compactionCount: z.number().int(),
    blockCount: z.number().int(),
    invocationCount: z.number().int().describe('Runs that used the session'),
  })
  .meta({ id: 'ContextSessionMetrics' });
export type Metrics = z.infer<typeof Metrics>;

export const SessionSummary = z
  .object({
    id: z.string(),
    name: z.string(),
    defaultAgent: z.string().nullable(),
    tags: z.array(z.string()),
    forkedFrom: z.string().optional(),
    tokenizer: z.string().describe('The encoding block tokens are counted with (o200k_base, cl100k_base)'),
    metrics: Metrics,
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'ContextSessionSummary' });
export type SessionSummary = z.infer<typeof SessionSummary>;

export const Session = SessionSummary.extend({
  blocks: z.array(z.string()).describe('Every block id, in context order'),
  pinnedBlocks: z.array(z.string()).describe('The pinned block ids, in context order'),
}).meta({ id: 'ContextSession' });
export type Session = z.infer<typeof Session>;

export const Block = z
  .object({
    id: z.string(),
    sessionId: z.string(),
    kind: BlockKind,
    content: z.string(),
    tags: z.array(z.string()),
    pinned: z.boolean(),
    tokens: z.number().int().describe('Counted with the session’s tokenizer'),
    source: z
      .record(z.string(), z.unknown())
      .nullable()
      .describe('Where it came from: a run and thread, a forked block, the blocks a summary replaced'),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'ContextBlock' });
export type Block = z.infer<typeof Block>;

export const CreateSessionBody = z
  .object({
    name: z.string().trim().min(1).max(200),
    defaultAgent: z
      .string()
      .trim()
      .min(1)
      .max(100)
      .optional()
      .describe('Agent slug: its model sets the window and the tokenizer, and writes summaries'),
    tags: Tags.default([]),
    fromSession: Id.optional().describe('Start with copies of this session’s blocks'),
    includeByTag: TagFilter.optional().describe(
      'With fromSession: only blocks with one of these tags (pinned blocks too, unless includePinned is false)',
    ),
    includePinned: z.boolean().default(true).describe('With fromSession: copy its pinned blocks whatever their tags'),
  })
  .strict();
export type CreateSessionBody = z.infer<typeof CreateSessionBody>;

export const UpdateSessionBody = z.object({ name: z.string().trim().min(1).max(200).optional(), tags: Tags.optional() }).strict();
export type UpdateSessionBody = z.infer<typeof UpdateSessionBody>;

export const SessionsQuery = z
  .object({
    limit: limitParam(20, 100),
    cursor: z.string().max(500).optional(),
    tag: Tag.optional().describe('Only sessions with this tag'),
  })
  .strict();
export type SessionsQuery = z.infer<typeof SessionsQuery>;

export const ForkBody = z
  .object({
    name: z.string().trim().min(1).max(200),
    includeByTag: TagFilter.optional().describe('Only blocks with one of these tags (pinned blocks follow includePinned whatever their tags)'),
    excludeByTag: TagFilter.optional().describe('Never blocks with one of these tags, pinned ones included'),
    includePinned: z.boolean().default(true),
    includeSummaries: z.boolean().default(true),
  })
  .strict();
export type ForkBody = z.infer<typeof ForkBody>;

export const Fork = z
  .object({ id: z.string(), name: z.string(), forkedFrom: z.string(), metrics: Metrics, createdAt: z.string() })
  .meta({ id: 'ContextSessionFork' });
export type Fork = z.infer<typeof Fork>;

export const SUMMARIZERS = ['auto', 'model', 'extractive'] as const;

export const CompactBody = z
  .object({
    targetTokens: z.number().int().min(0).max(100_000_000).optional().describe('Default: half the window'),
    preservePinned: z.boolean().default(true),
    preserveRecent: z.number().int().min(0).max(10_000).default(5).describe('The most recent blocks kept as they are'),
    summarizer: z
      .enum(SUMMARIZERS)
      .default('auto')
      .describe(
        '`model`: the default agent’s model writes the summaries (metered); `extractive`: a deterministic extract; `auto`: the model when one is usable',
      ),
  })
  .strict();
export type CompactBody = z.infer<typeof CompactBody>;

export const Compaction = z
  .object({
    previousTokens: z.number().int(),
    newTokens: z.number().int(),
    blocksCompacted: z.number().int(),
    summariesCreated: z.number().int(),
    summarizer: z.enum(['model', 'extractive', 'none']),
  })
  .meta({ id: 'ContextSessionCompaction' });
export type Compaction = z.infer<typeof Compaction>;

/** Content is capped in bytes by the service (413), not here (a 400). */
const Content = z.string().min(1).max(10_000_000);
const Source = z
  .record(z.string().max(100), z.union([z.string().max(1000), z.number(), z.boolean(), z.null()]))
  .refine((s) => Object.keys(s).length <= 20, 'at most 20 keys');

export const BlockInput = z
  .object({
    kind: BlockKind.default('document'),
    content: Content,
    tags: Tags.default([]),
    pinned: z.boolean().default(false),
    source: Source.optional().describe('Where it came from (flat JSON object of up to 20 keys)'),
  })
  .strict();
export type BlockInput = z.infer<typeof BlockInput>;

export const BatchBody = z.object({ blocks: z.array(BlockInput).min(1).max(1000) }).strict();
export type BatchBody = z.infer<typeof BatchBody>;

export const UpdateBlockBody = z
  .object({ content: Content.optional(), tags: Tags.optional(), pinned: z.boolean().optional(), kind: BlockKind.optional() })
  .strict();
export type UpdateBlockBody = z.infer<typeof UpdateBlockBody>;

export const BlocksQuery = z
  .object({
    limit: limitParam(100, 1000),
    cursor: z.string().max(500).optional(),
    tag: Tag.optional(),
    kind: BlockKind.optional(),
    pinned: queryBool.optional(),
  })
  .strict();
export type BlocksQuery = z.infer<typeof BlocksQuery>;
