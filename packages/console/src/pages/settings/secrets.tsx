import { type FormEvent, useState } from 'react';
import { type ApiError, data, page, toApiError, useLoad, useSession } from '../../api.js';
import { ActionButton, Empty, ErrorBox, Field, Loading, Time } from '../../ui.js';

type Scope = 'user' | 'organization';

function PutSecret({ onSaved }: { onSaved: () => void }) {
  const { hangar, can } = useSession();
  const [name, setName] = useState('');
  const [value, setValue] = useState('');
  const [scope, setScope] = useState<Scope>('user');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const [saved, setSaved] = useState<string | null>(null);
  const orgAllowed = can('credentials:admin');
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    setSaved(null);
    try {
      const answer = await hangar.api.POST('/v1/secrets', { body: { name: name.trim(), value, scope } });
      const secret = await data(Promise.resolve(answer));
      setSaved(`${secret.name} ${answer.response.status === 201 ? 'created' : 'replaced'}.`);
      setName('');
      setValue('');
      onSaved();
    } catch (err) {
      setError(toApiError(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form className="panel" aria-label="Create or replace a secret" onSubmit={submit}>
      <h3>Create or replace a secret</h3>
      <p className="hint">
        Saving a name that exists replaces its value. Names are upper-cased (other characters become “_”). Values are encrypted and never shown again,
        here or by the API.
      </p>
      <div className="inline-fields">
        <Field label="Secret name">
          {(id) => (
            <input
              id={id}
              value={name}
              onChange={(e) => setName(e.target.value)}
              required
              maxLength={128}
              autoComplete="off"
              placeholder="OPENAI_API_KEY"
            />
          )}
        </Field>
        <Field label="Secret value">
          {(id) => <input id={id} type="password" value={value} onChange={(e) => setValue(e.target.value)} required autoComplete="new-password" />}
        </Field>
        <Field label="Scope">
          {(id) => (
            <select id={id} value={scope} onChange={(e) => setScope(e.target.value as Scope)}>
              <option value="user">Mine (user)</option>
              <option value="organization" disabled={!orgAllowed}>
                Organization{orgAllowed ? '' : ' (needs credentials:admin)'}
              </option>
            </select>
          )}
        </Field>
        <button type="submit" className="btn btn-primary" disabled={busy || !name.trim() || !value} aria-busy={busy}>
          {busy ? 'Saving…' : 'Save secret'}
        </button>
      </div>
      <p className="muted" aria-live="polite">
        {saved ?? ''}
      </p>
      <ErrorBox error={error} title="Could not save the secret" />
    </form>
  );
}

export function SecretsSettings() {
  const { hangar, can } = useSession();
  const secrets = useLoad(() => (can('secrets:read') ? data(hangar.api.GET('/v1/secrets')) : Promise.resolve([])), []);
  if (!can('secrets:read')) return <Empty>This credential cannot list secrets (it lacks the secrets:read scope).</Empty>;
  const write = can('secrets:write');
  return (
    <>
      <h2>Secrets</h2>
      <p className="muted">Names and dates only: a secret’s value is never shown. Bring-your-own-key models and tools read them on the server.</p>
      {write ? <PutSecret onSaved={secrets.reload} /> : null}
      <ErrorBox error={secrets.error} title="Could not list the secrets" />
      {secrets.loading && !secrets.data ? (
        <Loading what="secrets" />
      ) : secrets.data && secrets.data.length === 0 ? (
        <Empty>No secrets yet. Store a provider key or a tool credential above.</Empty>
      ) : secrets.data ? (
        <div className="table-wrap">
          <table aria-label="Secrets">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Scope</th>
                <th scope="col">Created</th>
                <th scope="col">Updated</th>
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {secrets.data.map((s) => (
                <tr key={`${s.scope}:${s.name}`} data-testid="secret-row">
                  <td>
                    <code>{s.name}</code>
                  </td>
                  <td>{s.scope === 'organization' ? 'organization' : 'mine'}</td>
                  <td>
                    <Time iso={s.createdAt} />
                  </td>
                  <td>
                    <Time iso={s.updatedAt} />
                  </td>
                  <td>
                    {write && (s.scope === 'user' || can('credentials:admin')) ? (
                      <ActionButton
                        kind="danger"
                        aria-label={`Delete ${s.name} (${s.scope})`}
                        confirm={`Delete the secret ${s.name}? What uses it stops working.`}
                        action={async () => {
                          await page(hangar.api.DELETE('/v1/secrets/{name}', { params: { path: { name: s.name }, query: { scope: s.scope } } }));
                          secrets.reload();
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
