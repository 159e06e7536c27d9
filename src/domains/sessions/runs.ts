/**
 * A run on a context session (POST /v1/run with `sessionId`): the run holds the session's lease from its start
 * to its end (forks, compactions and block writes wait for it), reads the blocks as its model context (pinned
 * first, then in order), compacts the session first when it is over the run's window (or fails, as asked), and
 * at its end adds its answer (and, when asked, its tool results) back as blocks and counts the invocation.
 */
import { requireScope, withTx, type Ctx } from '../../platform/context.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { appendBlocks, type NewBlock } from './blocks.js';
import { compactHeld } from './compact.js';
import { takeLease } from './lease.js';
import { blockRows, bumpSession } from './repo.js';
import type { Compaction } from './schemas.js';
import { ownSession, windowOf } from './service.js';

export interface RunSessionOptions {
  runId: string;
  /** The run's model's context window, when the catalogue knows it (else the session's window). */
  modelWindow: number | null;
  onOverflow: 'compact' | 'fail';
  includeToolResults: boolean;
}

export interface RunToolResult {
  toolCallId: string;
  name: string;
  output: string;
  isError: boolean;
}

export interface RunSession {
  id: string;
  /** The blocks rendered for the model, pinned first. */
  context: string;
  blockCount: number;
  tokens: number;
  /** The compaction the run made first, if any. */
  compaction: Compaction | null;
  /** Adds the run's answer (and tool results when asked), counts the invocation, releases the session. */
  finish(out: { threadId: string; status: string; answer: string | null; toolResults: readonly RunToolResult[] }): Promise<void>;
  /** Releases the session without recording anything (a run that never started). */
  release(): Promise<void>;
}

/** Cuts `text` to at most `max` UTF-8 bytes on a character boundary. */
function capBytes(text: string, max: number): string {
  if (Buffer.byteLength(text, 'utf8') <= max) return text;
  return Buffer.from(text, 'utf8')
    .subarray(0, max)
    .toString('utf8')
    .replace(/\uFFFD+$/, '');
}

export async function openSessionForRun(ctx: Ctx, sessionId: string, opts: RunSessionOptions): Promise<RunSession> {
  requireScope(ctx, 'sessions:write');
  const session = await ownSession(ctx, sessionId);
  const lease = await takeLease(ctx, sessionId, 'run');
  let compaction: Compaction | null = null;
  let context = '';
  let blockCount = 0;
  let tokens = 0;
  try {
    const window = opts.modelWindow ?? (await windowOf(ctx, session.default_agent));
    const fresh = await ownSession(ctx, sessionId);
    if (fresh.total_tokens > window) {
      const over = `session ${sessionId} holds ${fresh.total_tokens} tokens, over this run's ${window}-token window`;
      if (opts.onOverflow === 'fail')
        throw errors.invalidState(
          `${over}; compact it (POST /v1/aip/sessions/${sessionId}/compact) or run with sessionOptions.onOverflow "compact"`,
          'over_window',
        );
      const target = Math.floor((window * ctx.deps.config.sessions.runCompactPct) / 100);
      compaction = await compactHeld(ctx, sessionId, {
        targetTokens: target,
        preservePinned: true,
        preserveRecent: 5,
        summarizer: 'auto',
        reason: 'run',
        runId: opts.runId,
      }).catch((err: unknown) => {
        if (err instanceof AppError && err.code === 'invalid_request' && typeof err.details?.minimumTokens === 'number')
          throw errors.invalidState(
            `${over}, and its pinned and recent blocks alone need ${err.details.minimumTokens}: unpin or delete some`,
            'over_window',
          );
        throw err;
      });
    }
    const rows = await blockRows(ctx, sessionId);
    const ordered = [...rows.filter((b) => b.pinned), ...rows.filter((b) => !b.pinned)];
    blockCount = ordered.length;
    tokens = ordered.reduce((n, b) => n + b.tokens, 0);
    context = ordered.length
      ? [
          `Context session "${session.name}" (${ordered.length} block${ordered.length === 1 ? '' : 's'}, pinned first):`,
          ...ordered.map((b) => `[${b.kind}${b.pinned ? ', pinned' : ''}]\n${b.content}`),
        ].join('\n\n')
      : '';
  } catch (err) {
    await lease.release();
    throw err;
  }

  const finish: RunSession['finish'] = async (out) => {
    try {
      const max = ctx.deps.config.sessions.maxBlockBytes;
      const source = { runId: opts.runId, threadId: out.threadId };
      const blocks: NewBlock[] = [];
      if (opts.includeToolResults)
        for (const r of out.toolResults)
          blocks.push({
            kind: 'tool_result',
            content: capBytes(`${r.name}${r.isError ? ' (failed)' : ''}:\n${r.output || '(no output)'}`, max),
            tags: [],
            pinned: false,
            platformSource: { ...source, toolCallId: r.toolCallId, tool: r.name },
          });
      if (out.answer)
        blocks.push({
          kind: 'message',
          content: capBytes(out.answer, max),
          tags: [],
          pinned: false,
          platformSource: { ...source, role: 'assistant' },
        });
      await withTx(ctx, async (tx) => {
        // A full session (HANGAR_SESSIONS_MAX_BLOCKS) refuses before writing anything: the run still counts, and the
        // activity says what was not kept.
        let notKept: string | null = null;
        const added = blocks.length
          ? await appendBlocks(tx, sessionId, blocks, session.tokenizer).catch((err: unknown) => {
              if (!(err instanceof AppError && err.code === 'quota_exceeded')) throw err;
              notKept = err.message;
              return [];
            })
          : [];
        await bumpSession(tx, sessionId, { invocations: 1, at: nowIso() });
        await recordActivity(tx, {
          resourceType: 'context_session',
          resourceId: sessionId,
          agentRunId: opts.runId,
          threadId: out.threadId,
          eventType: 'session.invoked',
          status: 'completed',
          severity: notKept ? 'warning' : 'info',
          title: `Run ${opts.runId} used session ${session.name}`,
          summary: notKept ? `The run's ${blocks.length} block(s) were not added: ${notKept}` : undefined,
          metadata: {
            runStatus: out.status,
            blocksAdded: added.length,
            blockIds: added.map((b) => b.id),
            compacted: compaction !== null,
            ...(notKept ? { notKept: blocks.length } : {}),
          },
        });
      });
    } finally {
      await lease.release();
    }
  };
  return { id: sessionId, context, blockCount, tokens, compaction, finish, release: lease.release };
}
