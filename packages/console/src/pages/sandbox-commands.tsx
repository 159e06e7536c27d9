import type { CommandResult } from '@hangar/sdk';
import { type FormEvent, useEffect, useRef, useState } from 'react';
import { toApiError, type ApiError, useSession } from '../api.js';
import { ErrorBox, Field } from '../ui.js';

interface Chunk {
  stream: 'stdout' | 'stderr';
  text: string;
}

/** How a finished command ended, in words. */
export function describeExit(r: CommandResult): string {
  if (r.timedOut) return `Timed out after ${(r.durationMs / 1000).toFixed(1)} s (killed)`;
  if (r.exitCode === null) return `Ended by ${r.signal ?? 'a signal'} after ${(r.durationMs / 1000).toFixed(1)} s`;
  return `Exit code ${r.exitCode} after ${(r.durationMs / 1000).toFixed(1)} s`;
}

/**
 * Runs a command in the sandbox (resuming it first when it is paused or stopped) and shows its output as it comes,
 * stdout and stderr interleaved as written, then how it ended. Stopping kills the command.
 */
export function RunCommand({ sandboxId, connected }: { sandboxId: string; connected?: () => void }) {
  const { hangar, can } = useSession();
  const [cmd, setCmd] = useState('');
  const [ran, setRan] = useState('');
  const [chunks, setChunks] = useState<Chunk[]>([]);
  const [result, setResult] = useState<CommandResult | null>(null);
  const [stopped, setStopped] = useState(false);
  const [running, setRunning] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const abort = useRef<AbortController | null>(null);
  const output = useRef<HTMLPreElement>(null);

  useEffect(() => () => abort.current?.abort(), []);
  // Keep the newest output in view as it streams.
  // biome-ignore lint/correctness/useExhaustiveDependencies: scroll when the output grows
  useEffect(() => {
    const el = output.current;
    if (el) el.scrollTop = el.scrollHeight;
  }, [chunks]);

  if (!can('sandbox:write')) return null;

  const append = (stream: Chunk['stream']) => (text: string) =>
    setChunks((cs) => {
      const last = cs[cs.length - 1];
      if (last?.stream === stream) return [...cs.slice(0, -1), { stream, text: last.text + text }];
      return [...cs, { stream, text }];
    });

  const run = async (e: FormEvent) => {
    e.preventDefault();
    const command = cmd.trim();
    if (!command || running) return;
    const controller = new AbortController();
    abort.current = controller;
    setRan(command);
    setChunks([]);
    setResult(null);
    setStopped(false);
    setError(null);
    setRunning(true);
    try {
      const sbx = await hangar.sandboxes.connect(sandboxId, { signal: controller.signal });
      connected?.(); // it may have been resumed: its page shows the state as it is now
      const r = await sbx.commands.run(command, {
        signal: controller.signal,
        timeout: 600_000,
        timeoutMs: 10 * 60_000,
        onStdout: append('stdout'),
        onStderr: append('stderr'),
      });
      setResult(r);
    } catch (err) {
      if (controller.signal.aborted) setStopped(true);
      else setError(toApiError(err));
    } finally {
      if (abort.current === controller) abort.current = null;
      setRunning(false);
    }
  };

  const hasOutput = chunks.length > 0;
  return (
    <section className="panel" aria-labelledby="run-heading">
      <h2 id="run-heading" className="panel-title">
        Run a command
      </h2>
      <form className="inline command-form" onSubmit={run}>
        <Field label="Command" hint="Run by /bin/bash -c as the sandbox user, in /home/user; up to 10 minutes.">
          {(id) => (
            <input
              id={id}
              className="mono"
              value={cmd}
              onChange={(e) => setCmd(e.target.value)}
              placeholder="ls -la"
              autoComplete="off"
              spellCheck={false}
            />
          )}
        </Field>
        <button type="submit" className="btn btn-primary" disabled={running || !cmd.trim()} aria-busy={running}>
          {running ? 'Running…' : 'Run'}
        </button>
        {running ? (
          <button type="button" className="btn btn-danger" onClick={() => abort.current?.abort()}>
            Stop
          </button>
        ) : null}
      </form>
      {ran ? (
        <>
          <p className="muted">
            <code>$ {ran}</code>
          </p>
          <pre className="command-output" ref={output} role="log" aria-live="polite" aria-label="Command output" data-testid="command-output">
            {hasOutput
              ? chunks.map((c, i) => (
                  // biome-ignore lint/suspicious/noArrayIndexKey: chunks are only appended, never reordered
                  <span key={i} className={c.stream === 'stderr' ? 'stderr' : undefined}>
                    {c.text}
                  </span>
                ))
              : running
                ? ''
                : '(no output)'}
          </pre>
          <p role="status" data-testid="command-exit">
            {running ? 'Running…' : result ? describeExit(result) : stopped ? 'Stopped: the command was killed.' : ''}
          </p>
        </>
      ) : null}
      <ErrorBox error={error} title="The command could not run" />
    </section>
  );
}
