import type { paths } from '@hangar/sdk';
import { type FormEvent, useEffect, useRef, useState } from 'react';
import { Link, Route, Switch, useLocation, useParams } from 'wouter';
import { ApiError, data, page, toApiError, useLoad, useSession } from '../api.js';
import { ActionButton, Button, Empty, ErrorBox, Field, Loading, PageHeader, StatusBadge, Time } from '../ui.js';

type CreateTemplateBody = paths['/v1/templates']['post']['requestBody']['content']['application/json'];

const SLUG = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** `apt: curl, git jq` → ['curl', 'git', 'jq']. */
const words = (s: string) =>
  s
    .split(/[\s,]+/)
    .map((w) => w.trim())
    .filter(Boolean);

/** The Server-Sent Events of one chunk of a stream (complete blocks only; the rest stays in `state.buffer`). */
export function parseEvents(state: { buffer: string }, text: string): { event: string; data: string }[] {
  state.buffer += text;
  const out: { event: string; data: string }[] = [];
  let end = state.buffer.search(/\r?\n\r?\n/);
  while (end >= 0) {
    const block = state.buffer.slice(0, end);
    state.buffer = state.buffer.slice(end).replace(/^\r?\n\r?\n/, '');
    let event = 'message';
    const lines: string[] = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) lines.push(line.slice(5).replace(/^ /, ''));
    }
    if (lines.length) out.push({ event, data: lines.join('\n') });
    end = state.buffer.search(/\r?\n\r?\n/);
  }
  return out;
}

interface BuildEnd {
  status: string;
  progress: number;
  error: string | null;
}

/**
 * A template's build log, live: the lines so far, then each new one and the progress while it builds, until the
 * build is ready or failed. A dropped stream is opened again and the lines already shown skipped by their number.
 */
function BuildLog({ slug, ended }: { slug: string; ended: () => void }) {
  const { credential, me } = useSession();
  const [lines, setLines] = useState<string[]>([]);
  const [progress, setProgress] = useState<{ progress: number; step: number | null; steps: number | null } | null>(null);
  const [end, setEnd] = useState<BuildEnd | null>(null);
  const [state, setState] = useState<'connecting' | 'live' | 'reconnecting' | 'ended' | 'broken'>('connecting');
  const [error, setError] = useState<ApiError | null>(null);
  const box = useRef<HTMLPreElement>(null);
  const endedRef = useRef(ended);
  endedRef.current = ended;

  // biome-ignore lint/correctness/useExhaustiveDependencies: one stream per template (the credential does not change within a session)
  useEffect(() => {
    const controller = new AbortController();
    const { signal } = controller;
    setLines([]);
    setProgress(null);
    setEnd(null);
    setError(null);
    setState('connecting');
    let next = 0;
    let finished = false;
    const headers: Record<string, string> = { accept: 'text/event-stream', authorization: `Bearer ${credential}` };
    if (!credential.startsWith('hgr_') && me.currentOrganizationId) headers['x-org-id'] = me.currentOrganizationId;
    const follow = async () => {
      for (let attempt = 0; ; attempt++) {
        try {
          const res = await fetch(`/v1/templates/${encodeURIComponent(slug)}/logs`, { headers, signal });
          if (!res.ok) {
            const body = (await res.json().catch(() => ({}))) as { error?: { code?: string; message?: string; requestId?: string } };
            throw new ApiError(
              body.error?.code ?? `http_${res.status}`,
              body.error?.message ?? res.statusText,
              res.status,
              body.error?.requestId ?? res.headers.get('x-request-id'),
            );
          }
          setState('live');
          attempt = 0;
          const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
          const parser = { buffer: '' };
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            const fresh: string[] = [];
            for (const ev of parseEvents(parser, value)) {
              const d = JSON.parse(ev.data) as {
                n?: number;
                line?: string;
                progress?: number;
                step?: number | null;
                steps?: number | null;
              } & Partial<BuildEnd> & {
                  message?: string;
                };
              if (ev.event === 'log') {
                if (typeof d.n === 'number' && d.n < next) continue;
                next = (d.n ?? next) + 1;
                fresh.push(d.line ?? '');
              } else if (ev.event === 'progress') setProgress({ progress: d.progress ?? 0, step: d.step ?? null, steps: d.steps ?? null });
              else if (ev.event === 'status') {
                setEnd({ status: d.status ?? 'failed', progress: d.progress ?? 0, error: d.error ?? null });
                setState('ended');
                finished = true;
              } else if (ev.event === 'error') throw new Error(d.message ?? 'the build log broke off');
            }
            if (fresh.length) setLines((ls) => [...ls, ...fresh]);
          }
          if (signal.aborted) return;
          // The stream ends after the status event; otherwise it broke off.
          if (finished) {
            endedRef.current();
            return;
          }
        } catch (err) {
          if (signal.aborted) return;
          if (err instanceof ApiError && err.status !== 0) {
            setError(err);
            setState('broken');
            return;
          }
        }
        if (attempt >= 5) {
          setState('broken');
          setError(new ApiError('connection_error', 'the build log stream broke off; the build goes on', 0, null));
          return;
        }
        setState('reconnecting');
        await new Promise((r) => setTimeout(r, 500 * 2 ** attempt));
        if (signal.aborted) return;
      }
    };
    void follow();
    return () => controller.abort();
  }, [slug]);

  // Follow the newest lines while the reader is at the bottom.
  // biome-ignore lint/correctness/useExhaustiveDependencies: scroll when lines arrive
  useEffect(() => {
    const el = box.current;
    if (el && el.scrollHeight - el.scrollTop - el.clientHeight < 80) el.scrollTop = el.scrollHeight;
  }, [lines]);

  const liveLabel =
    state === 'live'
      ? 'live'
      : state === 'connecting'
        ? 'connecting…'
        : state === 'reconnecting'
          ? 'reconnecting…'
          : state === 'ended'
            ? 'finished'
            : 'stopped';
  return (
    <section className="panel" aria-labelledby="log-heading">
      <h2 id="log-heading" className="panel-title">
        Build log <span className={`live ${state === 'live' ? 'live-on' : 'live-off'}`}>● {liveLabel}</span>
      </h2>
      {progress && !end ? (
        <p>
          <label>
            Build progress{' '}
            <progress max={100} value={progress.progress}>
              {progress.progress}%
            </progress>{' '}
            {Math.round(progress.progress)}%{progress.step && progress.steps ? ` (step ${progress.step} of ${progress.steps})` : ''}
          </label>
        </p>
      ) : null}
      <pre ref={box} className="build-log" role="log" aria-live="polite" aria-label="Build log" data-testid="build-log">
        {lines.length ? lines.join('\n') : state === 'ended' ? '(the log is empty)' : ''}
      </pre>
      <p role="status" data-testid="build-end">
        {end ? `Build ${end.status}${end.error ? `: ${end.error}` : ''}.` : ''}
      </p>
      <ErrorBox error={error} title="The build log is not streaming" />
    </section>
  );
}

function TemplateDetail() {
  const { slug = '' } = useParams<{ slug: string }>();
  const { hangar, can } = useSession();
  const [, navigate] = useLocation();
  const template = useLoad(() => data(hangar.api.GET('/v1/templates/{slug}', { params: { path: { slug } } })), [slug]);
  const t = template.data?.slug === slug ? template.data : undefined;
  return (
    <>
      <p>
        <Link href="/">← Templates</Link>
      </p>
      <PageHeader title={t ? `Template ${t.name}` : `Template ${slug}`}>
        {t?.status === 'ready' && can('sandbox:write') ? (
          <ActionButton
            kind="primary"
            action={async () => {
              const s = await data(hangar.api.POST('/v1/sandboxes', { body: { template: t.slug, network: true } }));
              navigate(`~/sandboxes/${s.id}`);
            }}
          >
            New sandbox from it
          </ActionButton>
        ) : null}
        {t && !t.system && can('templates:write') ? (
          <ActionButton
            kind="danger"
            confirm={`Delete the template ${t.slug}?`}
            action={async () => {
              await page(hangar.api.DELETE('/v1/templates/{slug}', { params: { path: { slug: t.slug } } }));
              navigate('/');
            }}
          >
            Delete
          </ActionButton>
        ) : null}
        <Button onClick={template.reload}>Refresh</Button>
      </PageHeader>
      <ErrorBox error={template.error} title="Could not load the template" />
      {template.loading && !t ? <Loading what="the template" /> : null}
      {t ? (
        <section className="panel" aria-labelledby="tpl-details">
          <h2 id="tpl-details" className="panel-title">
            Details
          </h2>
          <dl className="props">
            <dt>Status</dt>
            <dd data-testid="template-status">
              <StatusBadge status={t.status} /> {t.status === 'building' ? `${Math.round(t.progress)}%` : null}
              {t.error ? <span className="error-text"> {t.error}</span> : null}
            </dd>
            <dt>Slug</dt>
            <dd className="mono">{t.slug}</dd>
            <dt>Runs</dt>
            <dd>{t.runs}</dd>
            <dt>OS</dt>
            <dd>
              {t.os} {t.osImage ? '(image built from its mirror)' : '(this server’s userland)'}
            </dd>
            <dt>Defined by</dt>
            <dd>{t.system ? 'system template' : t.source}</dd>
            <dt>Built on</dt>
            <dd>{t.parent ? <Link href={`/${encodeURIComponent(t.parent)}`}>{t.parent}</Link> : 'the base layer'}</dd>
            {(['apt', 'npm', 'pip'] as const).map((k) =>
              t.packages[k].length ? (
                <div key={k} className="dl-row">
                  <dt>{k} packages</dt>
                  <dd>{t.packages[k].join(', ')}</dd>
                </div>
              ) : null,
            )}
            <dt>Environment</dt>
            <dd>{t.envKeys.length ? t.envKeys.join(', ') : <span className="muted">none</span>}</dd>
            <dt>Working directory</dt>
            <dd className="mono">{t.workdir ?? '/home/user'}</dd>
            <dt>Created</dt>
            <dd>
              <Time iso={t.createdAt} />
            </dd>
            <dt>Build</dt>
            <dd>
              {t.buildStartedAt ? (
                <>
                  started <Time iso={t.buildStartedAt} />
                  {t.buildFinishedAt ? (
                    <>
                      , finished <Time iso={t.buildFinishedAt} />
                    </>
                  ) : null}
                </>
              ) : (
                <span className="muted">{t.status === 'pending' ? 'queued' : '—'}</span>
              )}
            </dd>
          </dl>
        </section>
      ) : null}
      {t ? <BuildLog slug={t.slug} ended={template.reload} /> : null}
    </>
  );
}

function CreateTemplate() {
  const { hangar } = useSession();
  const [, navigate] = useLocation();
  const [slug, setSlug] = useState('');
  const [name, setName] = useState('');
  const [kind, setKind] = useState<'dockerfile' | 'packages'>('dockerfile');
  const [dockerfile, setDockerfile] = useState('FROM base-ubuntu\n');
  const [os, setOs] = useState('');
  const [apt, setApt] = useState('');
  const [npm, setNpm] = useState('');
  const [pip, setPip] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | Error | null>(null);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    if (!SLUG.test(slug)) return setError(new Error('The slug must be 1 to 63 lowercase letters, digits and "-", starting with a letter or digit.'));
    const body: CreateTemplateBody = { slug, name: name.trim() || slug };
    if (kind === 'dockerfile') body.dockerfile = dockerfile;
    else {
      if (os.trim()) body.os = os.trim();
      for (const [k, v] of [
        ['apt', apt],
        ['npm', npm],
        ['pip', pip],
      ] as const)
        if (words(v).length) body[k] = words(v);
    }
    setBusy(true);
    try {
      const created = await data(hangar.api.POST('/v1/templates', { body }));
      navigate(`/${encodeURIComponent(created.slug)}`);
    } catch (err) {
      setError(toApiError(err));
      setBusy(false);
    }
  };
  return (
    <section className="panel" aria-labelledby="new-template">
      <h2 id="new-template" className="panel-title">
        New template
      </h2>
      <form onSubmit={submit}>
        <div className="tpl-fields">
          <Field label="Slug" hint="Lowercase letters, digits and -; sandboxes name it.">
            {(id) => <input id={id} value={slug} onChange={(e) => setSlug(e.target.value)} required maxLength={63} autoComplete="off" />}
          </Field>
          <Field label="Display name">{(id) => <input id={id} value={name} onChange={(e) => setName(e.target.value)} maxLength={200} />}</Field>
          <Field label="Defined by">
            {(id) => (
              <select id={id} value={kind} onChange={(e) => setKind(e.target.value as 'dockerfile' | 'packages')}>
                <option value="dockerfile">A Dockerfile</option>
                <option value="packages">Packages to install</option>
              </select>
            )}
          </Field>
        </div>
        {kind === 'dockerfile' ? (
          <Field
            label="Dockerfile"
            hint="FROM a template slug (e.g. base-ubuntu), then RUN, ENV, WORKDIR, ARG, LABEL. Builds run as root with network."
          >
            {(id) => (
              <textarea
                id={id}
                className="mono dockerfile"
                rows={8}
                value={dockerfile}
                onChange={(e) => setDockerfile(e.target.value)}
                spellCheck={false}
              />
            )}
          </Field>
        ) : (
          <div className="tpl-fields">
            <Field label="OS" hint="ubuntu-22.04, ubuntu-24.04, debian-12 or alpine-3.19; empty: the server's default">
              {(id) => <input id={id} value={os} onChange={(e) => setOs(e.target.value)} />}
            </Field>
            <Field label="System packages" hint="apt (or apk) names, separated by spaces or commas">
              {(id) => <input id={id} value={apt} onChange={(e) => setApt(e.target.value)} />}
            </Field>
            <Field label="npm packages">{(id) => <input id={id} value={npm} onChange={(e) => setNpm(e.target.value)} />}</Field>
            <Field label="pip packages">{(id) => <input id={id} value={pip} onChange={(e) => setPip(e.target.value)} />}</Field>
          </div>
        )}
        <button type="submit" className="btn btn-primary" disabled={busy} aria-busy={busy}>
          {busy ? 'Submitting…' : 'Build template'}
        </button>
      </form>
      <ErrorBox error={error} title="Could not create the template" />
    </section>
  );
}

function TemplateList() {
  const { hangar, can } = useSession();
  const [status, setStatus] = useState('');
  const list = useLoad(() => data(hangar.api.GET('/v1/templates')), []);
  const busy = (list.data ?? []).some((t) => t.status === 'building' || (t.status === 'pending' && !t.system));
  // While a build runs, look again now and then for its progress.
  // biome-ignore lint/correctness/useExhaustiveDependencies: reload is a fresh function each render
  useEffect(() => {
    if (!busy) return;
    const timer = setInterval(list.reload, 3000);
    return () => clearInterval(timer);
  }, [busy]);
  const rows = list.data ?? [];
  return (
    <>
      <PageHeader title="Templates">
        <Button onClick={list.reload}>Refresh</Button>
      </PageHeader>
      {can('templates:write') ? <CreateTemplate /> : null}
      <p className="muted" aria-live="polite">
        {status}
      </p>
      <ErrorBox error={list.error} title="Could not load the templates" />
      {list.loading && !list.data ? <Loading what="templates" /> : null}
      {list.data && rows.length === 0 ? <Empty>No templates yet.</Empty> : null}
      {rows.length ? (
        <div className="table-wrap">
          <table aria-label="Templates">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Status</th>
                <th scope="col">Defined by</th>
                <th scope="col">OS</th>
                <th scope="col">Built on</th>
                <th scope="col">Created</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((t) => (
                <tr key={t.id}>
                  <td>
                    <Link href={`/${encodeURIComponent(t.slug)}`}>{t.name}</Link>
                    <div className="muted mono">{t.slug}</div>
                  </td>
                  <td>
                    <StatusBadge status={t.status} /> {t.status === 'building' ? <span>{Math.round(t.progress)}%</span> : null}
                  </td>
                  <td>{t.system ? 'system' : t.source}</td>
                  <td>{t.os}</td>
                  <td>{t.parent ?? '—'}</td>
                  <td>
                    <Time iso={t.createdAt} />
                  </td>
                  <td>
                    {!t.system && can('templates:write') ? (
                      <ActionButton
                        kind="danger"
                        aria-label={`Delete ${t.slug}`}
                        confirm={`Delete the template ${t.slug}?`}
                        action={async () => {
                          await page(hangar.api.DELETE('/v1/templates/{slug}', { params: { path: { slug: t.slug } } }));
                          setStatus(`Template ${t.slug} deleted.`);
                          list.reload();
                        }}
                      >
                        Delete
                      </ActionButton>
                    ) : null}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
    </>
  );
}

/** Templates, nested under /templates: the list (and the form of a new one) at /, a template and its live build log at /:slug. */
export default function Templates() {
  return (
    <Switch>
      <Route path="/" component={TemplateList} />
      <Route path="/:slug" component={TemplateDetail} />
    </Switch>
  );
}
