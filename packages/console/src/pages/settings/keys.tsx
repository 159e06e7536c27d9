import type { components } from '@hangar/sdk';
import { type FormEvent, useState } from 'react';
import { type ApiError, data, page, toApiError, useLoad, useSession } from '../../api.js';
import { ActionButton, Button, Empty, ErrorBox, Field, Loading, Time } from '../../ui.js';

type ApiKey = components['schemas']['ApiKey'];
type CreatedApiKey = components['schemas']['CreatedApiKey'];

/** The secret of a key just created: shown once, with a copy button. */
function NewSecret({ created, onDone }: { created: CreatedApiKey; onDone: () => void }) {
  const [copied, setCopied] = useState<'yes' | 'failed' | null>(null);
  return (
    <div className="secret panel" role="status" aria-live="polite" data-testid="new-key">
      <p>
        <strong>API key “{created.name}” created.</strong> Copy its secret now: <strong>you won’t see it again</strong>.
      </p>
      <p>
        <code data-testid="new-key-secret">{created.key}</code>
      </p>
      <div className="actions">
        <Button
          kind="primary"
          onClick={async () => {
            try {
              await navigator.clipboard.writeText(created.key);
              setCopied('yes');
            } catch {
              setCopied('failed');
            }
          }}
        >
          Copy secret
        </Button>
        <Button onClick={onDone}>I have stored it</Button>
        <span className="muted" aria-live="polite">
          {copied === 'yes' ? 'Copied to the clipboard.' : copied === 'failed' ? 'Could not copy: select the text and copy it by hand.' : ''}
        </span>
      </div>
    </div>
  );
}

function CreateKey({ onCreated }: { onCreated: (k: CreatedApiKey) => void }) {
  const { hangar, me } = useSession();
  // The scopes the caller holds are the ones a new key can have (it never holds more than its creator).
  const catalogue = [...new Set(me.scopes.filter((s) => s !== '*'))].sort();
  const all = me.scopes.includes('*');
  const [name, setName] = useState('');
  const [environment, setEnvironment] = useState<'live' | 'test'>('live');
  const [scopes, setScopes] = useState<Set<string>>(new Set());
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);

  const toggle = (s: string, on: boolean) =>
    setScopes((prev) => {
      const next = new Set(prev);
      if (on) next.add(s);
      else next.delete(s);
      return next;
    });

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const created = await data(hangar.api.POST('/v1/api-keys', { body: { name: name.trim(), scopes: [...scopes], environment } }));
      setName('');
      setScopes(new Set());
      onCreated(created);
    } catch (err) {
      setError(toApiError(err));
    } finally {
      setBusy(false);
    }
  };

  const groups = new Map<string, string[]>();
  for (const s of catalogue) {
    const g = s.split(':')[0] ?? s;
    groups.set(g, [...(groups.get(g) ?? []), s]);
  }

  return (
    <form className="panel" aria-label="Create an API key" onSubmit={submit}>
      <h3>Create an API key</h3>
      <Field label="Name">{(id) => <input id={id} value={name} onChange={(e) => setName(e.target.value)} required maxLength={100} />}</Field>
      <Field label="Environment">
        {(id) => (
          <select id={id} value={environment} onChange={(e) => setEnvironment(e.target.value as 'live' | 'test')}>
            <option value="live">live</option>
            <option value="test">test</option>
          </select>
        )}
      </Field>
      <fieldset className="scope-picker">
        <legend>Scopes</legend>
        <p className="hint">A key never holds more than you do. Pick at least one.</p>
        {all ? (
          <label className="scope">
            <input type="checkbox" checked={scopes.has('*')} onChange={(e) => toggle('*', e.target.checked)} /> <code>*</code> every scope you hold
          </label>
        ) : null}
        <div className="scope-groups">
          {[...groups].map(([g, list]) => (
            <div key={g} className="scope-group">
              {list.map((s) => (
                <label key={s} className="scope">
                  <input type="checkbox" checked={scopes.has(s)} onChange={(e) => toggle(s, e.target.checked)} /> <code>{s}</code>
                </label>
              ))}
            </div>
          ))}
        </div>
      </fieldset>
      <div className="actions">
        <button type="submit" className="btn btn-primary" disabled={busy || !name.trim() || scopes.size === 0} aria-busy={busy}>
          {busy ? 'Creating…' : 'Create key'}
        </button>
      </div>
      <ErrorBox error={error} title="Could not create the key" />
    </form>
  );
}

export function KeysSettings() {
  const { hangar, can, me } = useSession();
  const [showRevoked, setShowRevoked] = useState(false);
  const [created, setCreated] = useState<CreatedApiKey | null>(null);
  const keys = useLoad(async () => {
    const out: ApiKey[] = [];
    let cursor: string | undefined;
    // Every page: an organization has few keys, and the list should be whole.
    for (let i = 0; i < 20; i++) {
      const p = await page(
        hangar.api.GET('/v1/api-keys', { params: { query: { limit: 200, cursor, include_revoked: showRevoked ? 'true' : 'false' } } }),
      );
      out.push(...p.data);
      if (!p.meta.nextCursor) break;
      cursor = p.meta.nextCursor;
    }
    return out;
  }, [showRevoked]);

  if (!can('api_keys:read')) return <Empty>This credential cannot list API keys (it lacks the api_keys:read scope).</Empty>;

  return (
    <>
      <h2>API keys</h2>
      <p className="muted">
        {can('org:admin') ? 'Every key of the organization.' : 'Your keys in this organization.'} Secrets are shown only once, when a key is created.
      </p>
      {created ? <NewSecret created={created} onDone={() => setCreated(null)} /> : null}
      {can('api_keys:write') ? (
        <CreateKey
          onCreated={(k) => {
            setCreated(k);
            keys.reload();
          }}
        />
      ) : null}
      <label className="inline-check">
        <input type="checkbox" checked={showRevoked} onChange={(e) => setShowRevoked(e.target.checked)} /> Show revoked keys
      </label>
      <ErrorBox error={keys.error} title="Could not list the API keys" />
      {keys.loading && !keys.data ? (
        <Loading what="API keys" />
      ) : keys.data && keys.data.length === 0 ? (
        <Empty>No API keys yet: create one above to call the API from your code.</Empty>
      ) : keys.data ? (
        <div className="table-wrap">
          <table aria-label="API keys">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Key</th>
                <th scope="col">Environment</th>
                <th scope="col">Scopes</th>
                <th scope="col">Created</th>
                <th scope="col">Last used</th>
                <th scope="col">State</th>
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {keys.data.map((k) => (
                <tr key={k.id} data-testid="api-key-row">
                  <td>
                    {k.name}
                    {k.userId === me.user.id ? null : <div className="muted">another member’s</div>}
                  </td>
                  <td>
                    <code>{k.prefix}…</code>
                  </td>
                  <td>{k.environment}</td>
                  <td className="key-scopes">
                    {k.scopes.length > 6 ? (
                      <details>
                        <summary>{k.scopes.length} scopes</summary>
                        {k.scopes.join(', ')}
                      </details>
                    ) : (
                      k.scopes.join(', ')
                    )}
                  </td>
                  <td>
                    <Time iso={k.createdAt} />
                  </td>
                  <td>
                    <Time iso={k.lastUsedAt} />
                  </td>
                  <td>{k.revokedAt ? <span className="badge badge-failed">revoked</span> : <span className="badge badge-active">active</span>}</td>
                  <td>
                    {!k.revokedAt && can('api_keys:write') ? (
                      <ActionButton
                        kind="danger"
                        aria-label={`Revoke ${k.name}`}
                        confirm={`Revoke the API key “${k.name}”? Anything using it stops working at once.`}
                        action={async () => {
                          await data(hangar.api.DELETE('/v1/api-keys/{id}', { params: { path: { id: k.id } } }));
                          keys.reload();
                        }}
                      >
                        Revoke
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
