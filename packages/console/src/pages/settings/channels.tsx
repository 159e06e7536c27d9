import type { components } from '@hangar/sdk';
import { type FormEvent, useState } from 'react';
import { type ApiError, data, toApiError, useLoad, useSession } from '../../api.js';
import { ActionButton, Button, Empty, ErrorBox, Field, Loading, StatusBadge, Time } from '../../ui.js';

type Channel = components['schemas']['AgentChannel'];

/** The providers this version connects, and what each asks for (secret names refer to stored secrets, Settings › Secrets). */
const PROVIDERS = {
  chatbot_provider: { label: 'Chat bot', fields: ['botTokenSecretName'] },
  business_messaging_provider: {
    label: 'Business messaging',
    fields: ['accessTokenSecretName', 'appSecretSecretName', 'phoneNumberId', 'businessAccountId'],
  },
} as const;
type ProviderSlug = keyof typeof PROVIDERS;
type FieldName = 'botTokenSecretName' | 'accessTokenSecretName' | 'appSecretSecretName' | 'phoneNumberId' | 'businessAccountId';

const FIELD_LABELS: Record<FieldName, { label: string; hint: string }> = {
  botTokenSecretName: { label: 'Bot token secret', hint: 'The name of the stored secret holding the bot token' },
  accessTokenSecretName: { label: 'Access token secret', hint: 'The name of the stored secret holding the access token' },
  appSecretSecretName: { label: 'App secret secret', hint: 'The name of the stored secret holding the app secret (signs webhooks)' },
  phoneNumberId: { label: 'Phone number id', hint: 'The numeric phone number id' },
  businessAccountId: { label: 'Business account id', hint: 'The numeric business account id' },
};

const providerLabel = (slug: string) => (slug in PROVIDERS ? PROVIDERS[slug as ProviderSlug].label : slug);

/** Settings › Channels: the messaging channels connecting agents to chat providers; pause, webhook set-up, delete, connect. */
export function ChannelsSettings() {
  const session = useSession();
  const { hangar } = session;
  const canWrite = session.can('channels:write');
  const channels = useLoad(() => data(hangar.api.GET('/v1/agent-channels')).then((d) => ('channels' in d ? (d.channels as Channel[]) : [])), []);
  if (!session.can('channels:read')) return <ErrorBox error={new Error('this credential lacks the channels:read scope')} title="Channels" />;
  return (
    <div className="channels">
      <h2>Channels</h2>
      <p className="muted">Messaging accounts connected to agents: messages sent to the account reach the agent, and its answers go back.</p>
      <ErrorBox error={channels.error} title="Could not load channels" />
      {channels.loading && !channels.data ? <Loading what="channels" /> : null}
      {channels.data && channels.data.length === 0 ? <Empty>No channels yet.{canWrite ? ' Connect one with the form below.' : ''}</Empty> : null}
      {channels.data && channels.data.length > 0 ? (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Account</th>
                <th scope="col">Provider</th>
                <th scope="col">Agent</th>
                <th scope="col">Status</th>
                <th scope="col">Privacy</th>
                <th scope="col">Webhook</th>
                <th scope="col">
                  <span className="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {channels.data.map((c) => (
                <ChannelRow key={c.id} c={c} canWrite={canWrite} onChange={channels.reload} />
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      {canWrite ? <CreateChannel onCreated={channels.reload} /> : null}
    </div>
  );
}

function ChannelRow({ c, canWrite, onChange }: { c: Channel; canWrite: boolean; onChange: () => void }) {
  const { hangar } = useSession();
  const [setup, setSetup] = useState<string | null>(null);
  const name = c.account.name ?? c.account.id;
  return (
    <tr>
      <td>
        <strong>{name}</strong>
        <div className="muted small">
          <code>{c.id}</code>
        </div>
      </td>
      <td>{providerLabel(c.provider)}</td>
      <td>{c.agent}</td>
      <td>
        <StatusBadge status={c.status} />
      </td>
      <td className="small">{c.privacy.mode.replace(/_/g, ' ')}</td>
      <td className="small">
        {c.webhook.registeredAt ? (
          <>
            registered <Time iso={c.webhook.registeredAt} />
          </>
        ) : (
          'not registered'
        )}
        {setup ? (
          <div className="notice" role="status">
            {setup}
          </div>
        ) : null}
      </td>
      <td>
        {canWrite ? (
          <span className="actions">
            <ActionButton
              aria-label={`${c.status === 'active' ? 'Pause' : 'Resume'} ${name}`}
              action={async () => {
                await data(
                  hangar.api.PATCH('/v1/agent-channels/{channelId}', {
                    params: { path: { channelId: c.id } },
                    body: { status: c.status === 'active' ? 'paused' : 'active' },
                  }),
                );
                onChange();
              }}
            >
              {c.status === 'active' ? 'Pause' : 'Resume'}
            </ActionButton>
            <ActionButton
              aria-label={`Set up the webhook of ${name}`}
              action={async () => {
                const r = (await data(
                  hangar.api.POST('/v1/agent-channels/{channelId}/register-webhook', { params: { path: { channelId: c.id } } }),
                )) as {
                  registered: boolean;
                  setup?: { webhookUrl?: string; verifyToken?: string } | null;
                };
                setSetup(
                  r.registered
                    ? 'Webhook registered with the provider.'
                    : `Enter in the provider's app settings: webhook URL ${r.setup?.webhookUrl ?? c.webhook.url}${r.setup?.verifyToken ? `, verify token ${r.setup.verifyToken}` : ''}`,
                );
                onChange();
              }}
            >
              Set up webhook
            </ActionButton>
            <ActionButton
              kind="danger"
              aria-label={`Delete ${name}`}
              confirm={`Delete the channel ${name}? Its messages, requests and grants go with it.`}
              action={async () => {
                await data(hangar.api.DELETE('/v1/agent-channels/{channelId}', { params: { path: { channelId: c.id } } }));
                onChange();
              }}
            >
              Delete
            </ActionButton>
          </span>
        ) : null}
      </td>
    </tr>
  );
}

function CreateChannel({ onCreated }: { onCreated: () => void }) {
  const { hangar } = useSession();
  const agents = useLoad(() => data(hangar.api.GET('/v1/agents')), []);
  const [provider, setProvider] = useState<ProviderSlug>('chatbot_provider');
  const [agent, setAgent] = useState('');
  const [values, setValues] = useState<Partial<Record<FieldName, string>>>({});
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const [created, setCreated] = useState<Channel | null>(null);
  const chosenAgent = agent || agents.data?.[0]?.slug || '';
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    setCreated(null);
    const body: Record<string, string> = { agent: chosenAgent, provider, mode: 'byok' };
    for (const f of PROVIDERS[provider].fields) if (values[f]?.trim()) body[f] = values[f]!.trim();
    try {
      setCreated(await data(hangar.api.POST('/v1/agent-channels', { body: body as never })));
      setValues({});
      onCreated();
    } catch (err) {
      setError(toApiError(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form className="panel" onSubmit={submit}>
      <h3>Connect a channel</h3>
      <p className="muted small">
        Store the provider's credentials in Settings › Secrets first, then name those secrets here. The credentials are checked with the provider
        before anything is saved.
      </p>
      <ErrorBox error={agents.error} title="Could not load agents" />
      {agents.data && agents.data.length === 0 ? <p className="muted">Create an agent first: a channel answers with an agent.</p> : null}
      <div className="form-grid">
        <Field label="Provider">
          {(id) => (
            <select id={id} value={provider} onChange={(e) => setProvider(e.target.value as ProviderSlug)}>
              {Object.entries(PROVIDERS).map(([slug, p]) => (
                <option key={slug} value={slug}>
                  {p.label}
                </option>
              ))}
            </select>
          )}
        </Field>
        <Field label="Agent">
          {(id) => (
            <select id={id} value={chosenAgent} onChange={(e) => setAgent(e.target.value)} required>
              {(agents.data ?? []).map((a) => (
                <option key={a.slug} value={a.slug}>
                  {a.slug}
                </option>
              ))}
            </select>
          )}
        </Field>
        {PROVIDERS[provider].fields.map((f) => (
          <Field key={f} label={FIELD_LABELS[f].label} hint={FIELD_LABELS[f].hint}>
            {(id) => (
              <input id={id} value={values[f] ?? ''} onChange={(e) => setValues({ ...values, [f]: e.target.value })} autoComplete="off" required />
            )}
          </Field>
        ))}
      </div>
      <Button kind="primary" type="submit" disabled={busy || !chosenAgent} aria-busy={busy}>
        Connect channel
      </Button>
      <div aria-live="polite">
        {created ? (
          <p className="notice ok" role="status">
            Connected {created.account.name ?? created.account.id} to {created.agent}. Next: set privacy and set up its webhook.
          </p>
        ) : null}
      </div>
      <ErrorBox error={error} title="Not connected" />
    </form>
  );
}
