import type { components } from '@hangar/sdk';
import { type FormEvent, useState } from 'react';
import { Link } from 'wouter';
import { data, page, toApiError, type ApiError, useLoad, useSession } from '../api.js';
import { ActionButton, Button, Empty, ErrorBox, Field, Loading, PageHeader, StatusBadge, Time } from '../ui.js';

export type SandboxInfo = components['schemas']['Sandbox'];
type Template = components['schemas']['Template'];

export const SANDBOX_STATES = ['starting', 'running', 'paused', 'stopped', 'error', 'destroyed'] as const;
type SandboxState = (typeof SANDBOX_STATES)[number];

/** Which lifecycle actions a sandbox in this state takes. */
export const canPause = (s: SandboxInfo) => s.state === 'running';
export const canResume = (s: SandboxInfo) => s.state === 'paused' || s.state === 'stopped' || s.state === 'error';
export const canDestroy = (s: SandboxInfo) => s.state !== 'destroyed';

/** Pause, resume and destroy of one sandbox, as the credential may; `changed` gets the sandbox as it is after. */
export function SandboxActions({ sandbox, changed }: { sandbox: SandboxInfo; changed: (s: SandboxInfo | null) => void }) {
  const { hangar, can } = useSession();
  if (!can('sandbox:write')) return null;
  const path = { params: { path: { id: sandbox.id } } };
  const label = sandbox.name;
  return (
    <div className="actions">
      {canPause(sandbox) ? (
        <ActionButton aria-label={`Pause ${label}`} action={async () => changed(await data(hangar.api.POST('/v1/sandboxes/{id}/pause', path)))}>
          Pause
        </ActionButton>
      ) : null}
      {canResume(sandbox) ? (
        <ActionButton aria-label={`Resume ${label}`} action={async () => changed(await data(hangar.api.POST('/v1/sandboxes/{id}/resume', path)))}>
          Resume
        </ActionButton>
      ) : null}
      {canDestroy(sandbox) ? (
        <ActionButton
          kind="danger"
          aria-label={`Destroy ${label}`}
          confirm={`Destroy the sandbox ${label}? Its processes are killed and its files deleted.`}
          action={async () => {
            await page(hangar.api.DELETE('/v1/sandboxes/{id}', path));
            changed(null);
          }}
        >
          Destroy
        </ActionButton>
      ) : null}
    </div>
  );
}

/** Starts a sandbox from a template; answers once it runs (several seconds). */
function CreateSandbox({ created }: { created: (s: SandboxInfo) => void }) {
  const { hangar, can } = useSession();
  const templates = useLoad(() => data(hangar.api.GET('/v1/templates')), []);
  const [template, setTemplate] = useState('');
  const [name, setName] = useState('');
  const [network, setNetwork] = useState(true);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  if (!can('sandbox:write')) return null;
  const ready = (templates.data ?? []).filter((t: Template) => t.status === 'ready');
  const chosen = template || (ready.find((t) => t.slug === 'base-ubuntu') ?? ready[0])?.slug || '';
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const s = await data(hangar.api.POST('/v1/sandboxes', { body: { template: chosen, network, ...(name.trim() ? { name: name.trim() } : {}) } }));
      setName('');
      created(s);
    } catch (err) {
      setError(toApiError(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <section className="panel" aria-labelledby="new-sandbox">
      <h2 id="new-sandbox" className="panel-title">
        New sandbox
      </h2>
      {templates.error ? <ErrorBox error={templates.error} title="Could not load the templates" /> : null}
      <form className="inline" onSubmit={submit}>
        <Field label="Template">
          {(id) => (
            <select id={id} value={chosen} onChange={(e) => setTemplate(e.target.value)} disabled={templates.loading && !templates.data}>
              {ready.length === 0 ? <option value="">No ready template</option> : null}
              {ready.map((t) => (
                <option key={t.id} value={t.slug}>
                  {t.name === t.slug ? t.slug : `${t.name} (${t.slug})`}
                </option>
              ))}
            </select>
          )}
        </Field>
        <Field label="Name (optional)">{(id) => <input id={id} value={name} onChange={(e) => setName(e.target.value)} maxLength={63} />}</Field>
        <div className="field checkbox-field">
          <label>
            <input type="checkbox" checked={network} onChange={(e) => setNetwork(e.target.checked)} /> Internet access
          </label>
        </div>
        <button type="submit" className="btn btn-primary" disabled={busy || !chosen} aria-busy={busy}>
          {busy ? 'Starting…' : 'Create sandbox'}
        </button>
      </form>
      <p className="muted" aria-live="polite">
        {busy ? 'Starting the sandbox; this takes a few seconds…' : ''}
      </p>
      <ErrorBox error={error} title="Could not create the sandbox" />
    </section>
  );
}

export default function Sandboxes() {
  const { hangar, can } = useSession();
  const [state, setState] = useState<SandboxState | ''>('');
  const [extra, setExtra] = useState<{ items: SandboxInfo[]; cursor: string | null }>({ items: [], cursor: null });
  const [status, setStatus] = useState('');
  const list = useLoad(async () => {
    const p = await page(hangar.api.GET('/v1/sandboxes', { params: { query: { limit: 50, ...(state ? { state } : {}) } } }));
    setExtra({ items: [], cursor: p.meta.nextCursor ?? null });
    return p.data;
  }, [state]);
  const rows = [...(list.data ?? []), ...extra.items];
  const more = async () => {
    if (!extra.cursor) return;
    const p = await page(hangar.api.GET('/v1/sandboxes', { params: { query: { limit: 50, cursor: extra.cursor, ...(state ? { state } : {}) } } }));
    setExtra((x) => ({ items: [...x.items, ...p.data], cursor: p.meta.nextCursor ?? null }));
  };
  return (
    <>
      <PageHeader title="Sandboxes">
        <Button onClick={list.reload}>Refresh</Button>
      </PageHeader>
      <CreateSandbox
        created={(s) => {
          setStatus(`Sandbox ${s.name} is ${s.state}.`);
          list.reload();
        }}
      />
      <p className="muted" aria-live="polite" data-testid="sandboxes-status">
        {status}
      </p>
      <form className="inline filters" onSubmit={(e) => e.preventDefault()}>
        <Field label="State">
          {(id) => (
            <select id={id} value={state} onChange={(e) => setState(e.target.value as SandboxState | '')}>
              <option value="">All but destroyed</option>
              {SANDBOX_STATES.map((s) => (
                <option key={s} value={s}>
                  {s}
                </option>
              ))}
            </select>
          )}
        </Field>
      </form>
      <ErrorBox error={list.error} title="Could not load the sandboxes" />
      {list.loading && !list.data ? <Loading what="sandboxes" /> : null}
      {list.data && rows.length === 0 ? (
        <Empty>
          {state ? `No sandbox is ${state}.` : 'No sandboxes yet.'}{' '}
          {can('sandbox:write') && !state ? 'Pick a template above and create one: a persistent machine to run commands and keep files in.' : null}
        </Empty>
      ) : null}
      {rows.length > 0 ? (
        <div className="table-wrap">
          <table>
            <caption className="sr-only">Sandboxes</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">State</th>
                <th scope="col">Template</th>
                <th scope="col">Resources</th>
                <th scope="col">Created</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((s) => (
                <tr key={s.id} data-testid={`sandbox-${s.id}`}>
                  <td>
                    <Link href={`/sandboxes/${s.id}`}>{s.name}</Link>
                    <div className="muted mono">{s.id}</div>
                  </td>
                  <td>
                    <StatusBadge status={s.state} />
                  </td>
                  <td>{s.template}</td>
                  <td>
                    {s.cpu} CPU · {s.memoryMb} MiB · {s.diskMb} MiB disk
                  </td>
                  <td>
                    <Time iso={s.createdAt} />
                  </td>
                  <td>
                    <SandboxActions
                      sandbox={s}
                      changed={(after) => {
                        setStatus(after ? `Sandbox ${after.name} is ${after.state}.` : `Sandbox ${s.name} destroyed.`);
                        list.reload();
                      }}
                    />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      {extra.cursor ? <ActionButton action={more}>Load more</ActionButton> : null}
    </>
  );
}
