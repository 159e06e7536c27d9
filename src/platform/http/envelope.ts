import type { FastifyRequest } from 'fastify';
import { z } from 'zod';

export interface Meta {
  requestId: string;
  hasMore?: boolean;
  nextCursor?: string | null;
}

/** `{ data, meta: { requestId } }`, the success envelope. */
export function ok<T>(req: FastifyRequest, data: T): { data: T; meta: Meta } {
  return { data, meta: { requestId: req.id } };
}

/** A list page: `{ data, meta: { requestId, hasMore, nextCursor } }`. */
export function page<T>(req: FastifyRequest, data: T, p: { hasMore: boolean; nextCursor: string | null }) {
  return { data, meta: { requestId: req.id, hasMore: p.hasMore, nextCursor: p.nextCursor } };
}

/**
 * A list page whose items are JSON text already, joined with commas (rows the database wrote as JSON): the bytes
 * `page(req, { [key]: items }, p)` serializes to, without building the items.
 */
export function pageJson(req: FastifyRequest, key: string, itemsJson: string, p: { hasMore: boolean; nextCursor: string | null }): string {
  const cursor = p.nextCursor === null ? 'null' : JSON.stringify(p.nextCursor);
  return `{"data":{${JSON.stringify(key)}:[${itemsJson}]},"meta":{"requestId":${JSON.stringify(req.id)},"hasMore":${p.hasMore},"nextCursor":${cursor}}}`;
}

export const MetaSchema = z.object({ requestId: z.string() });
export const PageMetaSchema = z.object({ requestId: z.string(), hasMore: z.boolean(), nextCursor: z.string().nullable() });

export const envelope = <T extends z.ZodType>(data: T) => z.object({ data, meta: MetaSchema });
export const pageEnvelope = <T extends z.ZodType>(data: T) => z.object({ data, meta: PageMetaSchema });

export const ErrorBody = z
  .object({
    error: z.object({
      code: z.string(),
      message: z.string(),
      requestId: z.string().optional(),
      issues: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
      state: z.string().optional().describe('The current state of the resource, on a 409 `invalid_state`'),
      activeRunId: z.string().optional().describe('The run active on the thread, on a 409 `THREAD_BUSY`'),
      balanceCents: z.number().int().optional().describe('The credit balance, on a 402 `insufficient_credits`'),
      availableCents: z.number().int().optional().describe('The balance less pending charges, on a 402 `insufficient_credits`'),
      heldBy: z.string().optional().describe('What holds the session (run, compaction, fork, write, delete), on a 409 `session_busy`'),
      minimumTokens: z.number().int().optional().describe('The smallest target a compaction can reach, on a 400 for `targetTokens`'),
    }),
  })
  .meta({ id: 'Error' });

/** Every error status a route may answer, spread into its response schema. */
export const errorResponses = {
  400: ErrorBody,
  401: ErrorBody,
  403: ErrorBody,
  404: ErrorBody,
  409: ErrorBody,
  413: ErrorBody,
  429: ErrorBody,
  500: ErrorBody,
} as const;
