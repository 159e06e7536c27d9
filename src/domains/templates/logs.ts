import type { Ctx } from '../../platform/context.js';
import { buildChannel, type BuildMessage } from './builder.js';
import { logKey, templateBuildState, templateRow } from './service.js';

/** What a follower of a build log receives, in order: `log` lines, `progress` while it builds, one last `status`. */
export type BuildLogEvent =
  | { type: 'log'; n: number; line: string }
  | { type: 'progress'; progress: number; step: number | null; steps: number | null }
  | { type: 'status'; status: 'pending' | 'building' | 'ready' | 'failed'; progress: number; error: string | null };

async function readLog(ctx: Ctx, templateId: string): Promise<string> {
  const key = logKey(templateId);
  if (!(await ctx.deps.blobs.size(key))) return '';
  const chunks: Buffer[] = [];
  for await (const c of await ctx.deps.blobs.get(key)) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

const linesOf = (text: string): string[] => (text ? text.replace(/\n$/, '').split('\n') : []);

/** A visible template's build log so far, as text. */
export async function readBuildLog(ctx: Ctx, slug: string): Promise<string> {
  const row = await templateRow(ctx, slug);
  return readLog(ctx, row.id);
}

/**
 * Opens a visible template's build log for following (404 before anything is sent). `follow` delivers the
 * lines so far, then live lines and progress while the build runs, and a last `status` once it is ready or
 * failed; it resolves then, or when `signal` aborts. Each line is delivered once, in order.
 */
export async function openBuildLog(
  ctx: Ctx,
  slug: string,
): Promise<{ follow(onEvent: (e: BuildLogEvent) => void, signal: AbortSignal): Promise<void> }> {
  const row = await templateRow(ctx, slug);
  // Subscribe first, then read what is written: a line appended meanwhile arrives both ways and the
  // line numbers drop the repeat.
  const pending: BuildMessage[] = [];
  let live: ((m: BuildMessage) => void) | null = null;
  const unsubscribe = await ctx.deps.bus.subscribe(buildChannel(row.id), (m) => (live ? live(m as BuildMessage) : pending.push(m as BuildMessage)));
  return {
    async follow(onEvent, signal) {
      let finished = false;
      let ended!: () => void;
      const done = new Promise<void>((resolve) => {
        ended = resolve;
      });
      const finish = async () => {
        if (finished) return;
        finished = true;
        await unsubscribe();
        ended();
      };
      if (signal.aborted) return finish();
      signal.addEventListener('abort', () => void finish(), { once: true });

      const lines = linesOf(await readLog(ctx, row.id));
      for (const [n, line] of lines.entries()) onEvent({ type: 'log', n, line });
      let next = lines.length;
      const fresh = await templateBuildState(ctx, row.id);
      if (!fresh || fresh.status === 'ready' || fresh.status === 'failed') {
        // The build may have ended after the first read; its last lines were written before its status.
        const rest = linesOf(await readLog(ctx, row.id)).slice(next);
        for (const [i, line] of rest.entries()) onEvent({ type: 'log', n: next + i, line });
        onEvent({ type: 'status', status: fresh?.status ?? 'failed', progress: fresh?.progress ?? 0, error: fresh?.error ?? null });
        return finish();
      }
      const deliver = (m: BuildMessage) => {
        if (finished) return;
        if (m.type === 'log') {
          if (m.n < next) return;
          next = m.n + 1;
          onEvent({ type: 'log', n: m.n, line: m.line });
        } else if (m.type === 'progress') onEvent(m);
        else if (m.status !== 'building') {
          onEvent(m);
          void finish();
        }
      };
      onEvent({ type: 'progress', progress: fresh.progress, step: null, steps: null });
      for (const m of pending.splice(0)) deliver(m);
      live = deliver;
      return done;
    },
  };
}
