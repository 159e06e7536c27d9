import type { components } from '@hangar/sdk';
import { type FormEvent, useEffect, useRef, useState } from 'react';
import { type ApiError, data, page, toApiError, useLoad, useSession } from '../../api.js';
import { ActionButton, Button, Empty, ErrorBox, Field, Loading, StatusBadge, Time } from '../../ui.js';

type Provider = components['schemas']['OAuthProvider'];
type Connection = components['schemas']['OAuthConnection'];
type DeviceStart = components['schemas']['OAuthDeviceStart'];

/** Settings › Connections: the caller's OAuth accounts, the providers to connect, and (admins) the organization's own OAuth apps. */
export function ConnectionsSettings() {
  const session = useSession();
  const { hangar } = session;
  const canWrite = session.can('connections:write');
  const providers = useLoad(() => data(hangar.api.GET('/v1/oauth/providers')), []);
  const connections = useLoad(() => data(hangar.api.GET('/v1/oauth/connections')), []);
  // Back from the provider: the callback redirects to this page with ?oauth=connected or ?oauth=error.
  const back = new URLSearchParams(window.location.search).get('oauth');
  const names = new Map((providers.data ?? []).map((p) => [p.slug, p.name]));

  if (!session.can('connections:read')) return <ErrorBox error={new Error('this credential lacks the connections:read scope')} title="Connections" />;
  return (
    <div className="connections">
      <h2>Connections</h2>
      <p className="muted">Accounts you connected with OAuth. Tools act through them for you; the tokens never leave the server.</p>
      {back === 'connected' ? (
        <p className="notice ok" role="status">
          Account connected.
        </p>
      ) : null}
      {back === 'error' ? (
        <p className="notice warn" role="status">
          The provider did not connect the account
          {new URLSearchParams(window.location.search).get('message') ? `: ${new URLSearchParams(window.location.search).get('message')}` : '.'}
        </p>
      ) : null}
      <h3>Your accounts</h3>
      <ErrorBox error={connections.error} title="Could not load your connections" />
      {connections.loading && !connections.data ? <Loading what="connections" /> : null}
      {connections.data && connections.data.length === 0 ? <Empty>No accounts connected yet. Connect one from the providers below.</Empty> : null}
      {connections.data && connections.data.length > 0 ? (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Provider</th>
                <th scope="col">Account</th>
                <th scope="col">Status</th>
                <th scope="col">Scopes</th>
                <th scope="col">Connected</th>
                <th scope="col">
                  <span className="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {connections.data.map((c) => (
                <ConnectionRow
                  key={c.id}
                  c={c}
                  providerName={names.get(c.provider) ?? c.provider}
                  canWrite={canWrite}
                  onChange={connections.reload}
                />
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      <h3>Providers</h3>
      <ErrorBox error={providers.error} title="Could not load the providers" />
      {providers.loading && !providers.data ? <Loading what="providers" /> : null}
      {providers.data && providers.data.length === 0 ? <Empty>This installation defines no OAuth providers.</Empty> : null}
      {providers.data && providers.data.length > 0 ? (
        <ul className="provider-list">
          {providers.data.map((p) => (
            <ProviderItem key={p.slug} p={p} canWrite={canWrite} onConnected={connections.reload} />
          ))}
        </ul>
      ) : null}
      {session.can('credentials:admin') ? <ProviderConfigs providers={providers.data ?? []} onChange={providers.reload} /> : null}
    </div>
  );
}

function ConnectionRow({ c, providerName, canWrite, onChange }: { c: Connection; providerName: string; canWrite: boolean; onChange: () => void }) {
  const { hangar } = useSession();
  const account = c.displayName ?? c.username ?? c.email ?? c.accountId;
  return (
    <tr>
      <td>{providerName}</td>
      <td>
        {account} {c.isDefault ? <span className="badge">default</span> : null}
        {c.email && c.email !== account ? <div className="muted small">{c.email}</div> : null}
      </td>
      <td>
        <StatusBadge status={c.status} />
        {c.lastError ? <div className="muted small">{c.lastError}</div> : null}
      </td>
      <td className="small">{c.scopes.join(' ') || '—'}</td>
      <td>
        <Time iso={c.createdAt} />
      </td>
      <td>
        {canWrite ? (
          <span className="actions">
            {c.isDefault ? null : (
              <ActionButton
                aria-label={`Make ${account} the default ${providerName} account`}
                action={async () => {
                  await data(hangar.api.POST('/v1/oauth/connections/{id}/set-default', { params: { path: { id: c.id } } }));
                  onChange();
                }}
              >
                Make default
              </ActionButton>
            )}
            <ActionButton
              kind="danger"
              aria-label={`Disconnect ${account} (${providerName})`}
              confirm={`Disconnect ${account} from ${providerName}? Tools stop acting through it.`}
              action={async () => {
                await data(hangar.api.DELETE('/v1/oauth/connections/{id}', { params: { path: { id: c.id } } }));
                onChange();
              }}
            >
              Disconnect
            </ActionButton>
          </span>
        ) : null}
      </td>
    </tr>
  );
}

function ProviderItem({ p, canWrite, onConnected }: { p: Provider; canWrite: boolean; onConnected: () => void }) {
  const { hangar } = useSession();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const [device, setDevice] = useState<DeviceStart | null>(null);
  const browser = p.authModes.includes('oauth2');
  const connect = async () => {
    setBusy(true);
    setError(null);
    try {
      if (browser) {
        const returnUrl = `${window.location.origin}/settings/connections`;
        const start = await data(
          hangar.api.GET('/v1/oauth/start/{provider}', { params: { path: { provider: p.slug }, query: { returnUrl } } }),
        ).catch((err: unknown) => {
          // The operator may not allow the console's address as a return URL: then the callback shows its own page.
          if (toApiError(err).status === 400 && /returnUrl/.test(toApiError(err).message))
            return data(hangar.api.GET('/v1/oauth/start/{provider}', { params: { path: { provider: p.slug } } }));
          throw err;
        });
        window.location.assign(start.authUrl);
        return;
      }
      setDevice(await data(hangar.api.POST('/v1/oauth/device/start/{provider}', { params: { path: { provider: p.slug } }, body: {} })));
    } catch (err) {
      setError(toApiError(err));
    }
    setBusy(false);
  };
  return (
    <li className="provider">
      <div>
        <strong>{p.name}</strong>{' '}
        {p.enabled ? null : <span className="muted small">{p.configRequired ? 'an admin must add an OAuth app for it first' : 'turned off'}</span>}
        {p.organizationConfig ? <span className="badge">your organization's app</span> : null}
        {p.docs ? (
          <div className="small">
            <a href={p.docs} target="_blank" rel="noreferrer noopener">
              Docs
            </a>
          </div>
        ) : null}
      </div>
      {canWrite ? (
        <Button kind="primary" onClick={connect} disabled={busy || !p.enabled} aria-busy={busy} aria-label={`Connect ${p.name}`}>
          Connect
        </Button>
      ) : null}
      <ErrorBox error={error} title={`Could not connect ${p.name}`} />
      {device ? <DeviceFlow provider={p} start={device} onDone={onConnected} /> : null}
    </li>
  );
}

/** A provider that connects with a device code (RFC 8628): show the code, open the provider's page, poll until done. */
function DeviceFlow({ provider, start, onDone }: { provider: Provider; start: DeviceStart; onDone: () => void }) {
  const { hangar } = useSession();
  const [status, setStatus] = useState<{ status: string; error: string | null } | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const done = useRef(onDone);
  done.current = onDone;
  useEffect(() => {
    let stop = false;
    let timer: ReturnType<typeof setTimeout>;
    const poll = async () => {
      if (stop) return;
      try {
        const s = await data(
          hangar.api.POST('/v1/oauth/device/status/{provider}', {
            params: { path: { provider: provider.slug } },
            body: { attemptId: start.attemptId },
          }),
        );
        if (stop) return;
        setStatus(s);
        if (s.status === 'completed') done.current();
        if (s.status === 'pending' || s.status === 'slow_down') timer = setTimeout(() => void poll(), s.interval * 1000);
      } catch (err) {
        setError(toApiError(err));
      }
    };
    timer = setTimeout(() => void poll(), start.interval * 1000);
    return () => {
      stop = true;
      clearTimeout(timer);
    };
  }, [hangar, provider.slug, start]);
  return (
    <div className="panel" aria-live="polite">
      <p>
        Open{' '}
        <a href={start.verification_uri_complete ?? start.verification_uri} target="_blank" rel="noreferrer noopener">
          {start.verification_uri}
        </a>{' '}
        and enter the code <code className="code-big">{start.user_code}</code>
      </p>
      <p role="status">
        {status?.status === 'completed'
          ? 'Connected.'
          : status && !['pending', 'slow_down'].includes(status.status)
            ? `Not connected: ${status.status}${status.error ? ` (${status.error})` : ''}.`
            : 'Waiting for you to approve at the provider…'}
      </p>
      <ErrorBox error={error} title="Could not check the connection" />
    </div>
  );
}

/** The organization's own OAuth apps (bring your own client), admins only; the secret is write-only. */
function ProviderConfigs({ providers, onChange }: { providers: Provider[]; onChange: () => void }) {
  const { hangar } = useSession();
  const configs = useLoad(() => data(hangar.api.GET('/v1/oauth/configs')), []);
  const [provider, setProvider] = useState('');
  const [clientId, setClientId] = useState('');
  const [clientSecret, setClientSecret] = useState('');
  const [scopes, setScopes] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const reload = () => {
    configs.reload();
    onChange();
  };
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await data(
        hangar.api.POST('/v1/oauth/configs', {
          body: {
            provider: provider || providers[0]?.slug || '',
            client_id: clientId.trim(),
            client_secret: clientSecret,
            ...(scopes.trim() ? { scopes: scopes.trim() } : {}),
          },
        }),
      );
      setClientId('');
      setClientSecret('');
      setScopes('');
      reload();
    } catch (err) {
      setError(toApiError(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <section className="panel">
      <h3>Your organization's OAuth apps</h3>
      <p className="muted small">Your own client for a provider takes precedence over the platform's. The client secret is never shown again.</p>
      <ErrorBox error={configs.error} title="Could not load the OAuth apps" />
      {configs.data && configs.data.length === 0 ? <p className="muted">None: connections use the platform's apps.</p> : null}
      {configs.data && configs.data.length > 0 ? (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Provider</th>
                <th scope="col">Client id</th>
                <th scope="col">Secret</th>
                <th scope="col">Scopes</th>
                <th scope="col">Enabled</th>
                <th scope="col">
                  <span className="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {configs.data.map((c) => (
                <tr key={c.provider}>
                  <td>{providers.find((p) => p.slug === c.provider)?.name ?? c.provider}</td>
                  <td>
                    <code>{c.clientId}</code>
                  </td>
                  <td>
                    <code>{c.clientSecretHint}</code>
                  </td>
                  <td className="small">{c.scopes?.join(' ') ?? "the provider's"}</td>
                  <td>{c.enabled ? 'yes' : 'no'}</td>
                  <td>
                    <span className="actions">
                      <ActionButton
                        aria-label={`${c.enabled ? 'Disable' : 'Enable'} the ${c.provider} app`}
                        action={async () => {
                          await data(
                            hangar.api.PATCH('/v1/oauth/configs/{provider}', {
                              params: { path: { provider: c.provider } },
                              body: { enabled: !c.enabled },
                            }),
                          );
                          reload();
                        }}
                      >
                        {c.enabled ? 'Disable' : 'Enable'}
                      </ActionButton>
                      <ActionButton
                        kind="danger"
                        aria-label={`Delete the ${c.provider} app`}
                        confirm={`Delete your organization's ${c.provider} app? Connections fall back to the platform's app, if any.`}
                        action={async () => {
                          await page(hangar.api.DELETE('/v1/oauth/configs/{provider}', { params: { path: { provider: c.provider } } }));
                          reload();
                        }}
                      >
                        Delete
                      </ActionButton>
                    </span>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      {providers.length > 0 ? (
        <form className="inline" onSubmit={submit}>
          <Field label="Provider">
            {(id) => (
              <select id={id} value={provider || providers[0]?.slug} onChange={(e) => setProvider(e.target.value)}>
                {providers.map((p) => (
                  <option key={p.slug} value={p.slug}>
                    {p.name}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <Field label="Client id">
            {(id) => <input id={id} value={clientId} onChange={(e) => setClientId(e.target.value)} autoComplete="off" required />}
          </Field>
          <Field label="Client secret">
            {(id) => (
              <input
                id={id}
                type="password"
                value={clientSecret}
                onChange={(e) => setClientSecret(e.target.value)}
                autoComplete="new-password"
                required
              />
            )}
          </Field>
          <Field label="Scopes (optional)">
            {(id) => <input id={id} value={scopes} onChange={(e) => setScopes(e.target.value)} placeholder="repo read:user" />}
          </Field>
          <Button kind="primary" type="submit" disabled={busy} aria-busy={busy}>
            Save app
          </Button>
        </form>
      ) : null}
      <ErrorBox error={error} title="Not saved" />
    </section>
  );
}
