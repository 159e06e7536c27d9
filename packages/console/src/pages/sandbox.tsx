import { lazy, Suspense, useEffect } from 'react';
import { Link, useParams } from 'wouter';
import { data, useLoad, useSession } from '../api.js';
import { Button, ErrorBox, Loading, PageHeader, StatusBadge, Time } from '../ui.js';
import { RunCommand } from './sandbox-commands.js';
import { FileBrowser, formatBytes } from './sandbox-files.js';
import { SandboxActions, type SandboxInfo } from './sandboxes.js';

// xterm.js is loaded with the terminal only.
const Terminal = lazy(() => import('./sandbox-terminal.js').then((m) => ({ default: m.Terminal })));

function duration(seconds: number): string {
  if (seconds < 60) return `${Math.round(seconds)} s`;
  const parts =
    seconds < 3600
      ? [`${Math.floor(seconds / 60)} min`, `${Math.round(seconds % 60)} s`]
      : [`${Math.floor(seconds / 3600)} h`, `${Math.floor((seconds % 3600) / 60)} min`];
  return parts.filter((p) => !p.startsWith('0 ')).join(' ');
}

function Details({ s }: { s: SandboxInfo }) {
  return (
    <section className="panel" aria-labelledby="details-heading">
      <h2 id="details-heading" className="panel-title">
        Details
      </h2>
      <dl className="props">
        <dt>State</dt>
        <dd data-testid="sandbox-state" aria-live="polite">
          <StatusBadge status={s.state} />
          {s.error ? <span className="error-text"> {s.error}</span> : null}
        </dd>
        <dt>Id</dt>
        <dd className="mono">{s.id}</dd>
        <dt>Template</dt>
        <dd>
          <Link href={`/templates/${encodeURIComponent(s.template)}`}>{s.template}</Link>
        </dd>
        <dt>Resources</dt>
        <dd>
          {s.cpu} CPU · {s.memoryMb} MiB memory · {s.diskMb} MiB disk
          {s.usage.diskBytes !== null ? ` (${formatBytes(s.usage.diskBytes)} used)` : ''}
        </dd>
        <dt>Internet access</dt>
        <dd>{s.network ? 'yes' : 'no'}</dd>
        <dt>Pauses when idle</dt>
        <dd>{s.idleTimeoutSeconds ? `after ${duration(s.idleTimeoutSeconds)}` : 'never'}</dd>
        <dt>Running time</dt>
        <dd>{duration(s.usage.runningSeconds)}</dd>
        <dt>Environment</dt>
        <dd>{s.envKeys.length ? s.envKeys.map((k) => <code key={k}>{k} </code>) : <span className="muted">none set</span>}</dd>
        {Object.keys(s.metadata).length ? (
          <>
            <dt>Metadata</dt>
            <dd>
              {Object.entries(s.metadata).map(([k, v]) => (
                <div key={k}>
                  <code>{k}</code>: {v}
                </div>
              ))}
            </dd>
          </>
        ) : null}
        <dt>Created</dt>
        <dd>
          <Time iso={s.createdAt} />
        </dd>
        <dt>Last active</dt>
        <dd>
          <Time iso={s.lastActiveAt} />
        </dd>
        {s.destroyedAt ? (
          <>
            <dt>Destroyed</dt>
            <dd>
              <Time iso={s.destroyedAt} />
            </dd>
          </>
        ) : null}
        <dt>Node</dt>
        <dd className="mono">{s.nodeId}</dd>
      </dl>
    </section>
  );
}

export default function SandboxPage() {
  const { id = '' } = useParams<{ id: string }>();
  const { hangar } = useSession();
  const sandbox = useLoad(() => data(hangar.api.GET('/v1/sandboxes/{id}', { params: { path: { id } } })), [id]);
  const s = sandbox.data?.id === id ? sandbox.data : undefined;

  // A starting sandbox becomes running (or error) on its own: look again until it has.
  const starting = s?.state === 'starting';
  // biome-ignore lint/correctness/useExhaustiveDependencies: reload is a fresh function each render
  useEffect(() => {
    if (!starting) return;
    const t = setInterval(sandbox.reload, 2000);
    return () => clearInterval(t);
  }, [starting]);

  return (
    <>
      <p>
        <Link href="/sandboxes">← Sandboxes</Link>
      </p>
      <PageHeader title={s ? `Sandbox ${s.name}` : 'Sandbox'}>
        {s ? <SandboxActions sandbox={s} changed={() => sandbox.reload()} /> : null}
        <Button onClick={sandbox.reload}>Refresh</Button>
      </PageHeader>
      <ErrorBox error={sandbox.error} title="Could not load the sandbox" />
      {sandbox.loading && !s ? <Loading what="the sandbox" /> : null}
      {s ? (
        <>
          <Details s={s} />
          {s.state === 'running' ? (
            <>
              <h2>Terminal</h2>
              <Suspense fallback={<Loading what="the terminal" />}>
                <Terminal sandboxId={s.id} />
              </Suspense>
            </>
          ) : null}
          {s.state === 'running' ? (
            <FileBrowser sandboxId={s.id} />
          ) : s.state === 'destroyed' ? null : (
            <p className="empty">
              The sandbox is {s.state}: {s.state === 'paused' || s.state === 'stopped' ? 'resume it' : 'it has to be running'} to browse its files or
              open a terminal.
            </p>
          )}
          {s.state === 'running' || s.state === 'paused' || s.state === 'stopped' ? <RunCommand sandboxId={s.id} connected={sandbox.reload} /> : null}
        </>
      ) : null}
    </>
  );
}
