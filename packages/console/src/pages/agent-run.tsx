import type { RunResult, RunResultFrame, ThreadFrame } from '@hangar/sdk';
import { type FormEvent, useEffect, useRef, useState } from 'react';
import { Link } from 'wouter';
import { type ApiError, toApiError, useSession } from '../api.js';
import { Button, ErrorBox, Field, StatusBadge } from '../ui.js';

interface RunState {
  phase: 'idle' | 'starting' | 'running' | 'done';
  threadId: string | null;
  runId: string | null;
  /** The answer as it streams (deltas), then the run's final text. */
  text: string;
  /** Tool calls seen, by name, in order. */
  tools: string[];
  result: RunResult | null;
  error: ApiError | null;
}

const IDLE: RunState = { phase: 'idle', threadId: null, runId: null, text: '', tools: [], result: null, error: null };

/**
 * Runs the agent with a prompt (POST /v1/run with `stream: true`, through `hangar.runs.stream`): the answer shows
 * here as it streams, and the thread the run opened is a link away. Leaving the page does not stop the run; the
 * Stop button does (a run whose client disconnects is cancelled).
 */
export function RunPanel({ slug }: { slug: string }) {
  const { hangar } = useSession();
  const [prompt, setPrompt] = useState('');
  const [run, setRun] = useState<RunState>(IDLE);
  const abort = useRef<AbortController | null>(null);
  const mounted = useRef(true);
  useEffect(() => {
    mounted.current = true;
    return () => {
      mounted.current = false;
    };
  }, []);
  const update = (f: (r: RunState) => RunState) => {
    if (mounted.current) setRun(f);
  };

  const start = async (e: FormEvent) => {
    e.preventDefault();
    if (!prompt.trim()) return;
    const controller = new AbortController();
    abort.current = controller;
    setRun({ ...IDLE, phase: 'starting' });
    // The first frame can wait for a sandbox to start: give the answer minutes to begin, and never send the run twice.
    const stream = hangar.runs.stream({ agent: slug, prompt }, { signal: controller.signal, timeout: 300_000, maxRetries: 0 });
    try {
      for await (const f of stream) {
        if (f.type === 'result') {
          const result = (f as RunResultFrame).result;
          update((r) => ({
            ...r,
            phase: 'done',
            result,
            threadId: result.threadId,
            runId: result.runId,
            text: typeof result.result === 'string' && result.result ? result.result : r.text,
          }));
          break;
        }
        const frame = f as ThreadFrame;
        const threadId = typeof frame.threadId === 'string' ? frame.threadId : null;
        const runId = typeof frame.runId === 'string' ? frame.runId : null;
        update((r) => {
          const next = { ...r, phase: 'running' as const, threadId: r.threadId ?? threadId, runId: r.runId ?? runId };
          if (frame.type === 'assistant_message_delta' && typeof frame.delta === 'string') next.text = r.text + frame.delta;
          if (frame.type === 'tool_call_started' && typeof frame.name === 'string') next.tools = [...r.tools, frame.name];
          return next;
        });
      }
    } catch (err) {
      update((r) => ({ ...r, phase: 'done', error: toApiError(err) }));
    } finally {
      if (abort.current === controller) abort.current = null;
    }
  };

  const busy = run.phase === 'starting' || run.phase === 'running';
  const status = run.result?.status ?? (run.error ? 'failed' : busy ? 'running' : null);
  return (
    <section className="panel run-panel" aria-labelledby="run-heading">
      <h2 id="run-heading">Run</h2>
      <form onSubmit={start}>
        <Field label="Prompt" hint="Opens a new thread with this message; the agent answers in it.">
          {(id) => (
            <textarea
              id={id}
              value={prompt}
              onChange={(e) => setPrompt(e.target.value)}
              rows={3}
              required
              onKeyDown={(e) => {
                if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) e.currentTarget.form?.requestSubmit();
              }}
            />
          )}
        </Field>
        <div className="actions">
          <Button kind="primary" type="submit" disabled={busy || !prompt.trim()} aria-busy={busy}>
            {busy ? 'Running…' : 'Run'}
          </Button>
          {busy ? (
            <Button kind="danger" onClick={() => abort.current?.abort()}>
              Stop
            </Button>
          ) : null}
        </div>
      </form>
      {run.phase !== 'idle' ? (
        <div className="run-output" aria-live="polite" aria-busy={busy}>
          <p className="run-meta">
            {status ? <StatusBadge status={status} /> : null} {run.phase === 'starting' ? <span className="muted">Starting the run…</span> : null}
            {run.threadId ? (
              <Link href={`~/threads/${encodeURIComponent(run.threadId)}`} className="run-thread">
                Open the thread
              </Link>
            ) : null}
            {run.result ? (
              <span className="muted">
                {' '}
                {run.result.usage.totalTokens.toLocaleString()} tokens · {run.result.iterations} turn{run.result.iterations === 1 ? '' : 's'}
                {run.result.model ? ` · ${run.result.model}` : ''}
              </span>
            ) : null}
          </p>
          {run.tools.length > 0 ? <p className="muted">Tools called: {run.tools.join(', ')}</p> : null}
          {run.text ? (
            <div className="msg msg-assistant" data-testid="run-answer">
              <div className="role">{slug}</div>
              <div className="text">{run.text}</div>
            </div>
          ) : null}
          {run.result?.error ? (
            <div className="error" role="alert">
              <strong>The run {run.result.status === 'failed' ? 'failed' : `ended ${run.result.status}`}:</strong> {run.result.error}
            </div>
          ) : null}
          <ErrorBox error={run.error} title="The run failed" />
        </div>
      ) : null}
    </section>
  );
}
