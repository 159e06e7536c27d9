import type { components } from '@hangar/sdk';
import { type FormEvent, useState } from 'react';
import { Link } from 'wouter';
import { type ApiError, data, toApiError, useLoad, useSession } from '../../api.js';
import { ActionButton, Button, Empty, ErrorBox, Field, Loading, PageHeader, StatusBadge, Time } from '../../ui.js';

type DeviceNode = components['schemas']['DeviceNode'];
type DeviceLink = components['schemas']['DeviceLink'];

/** Settings › Devices: the device mesh nodes the caller can see (admins: the organization's), rename and revoke. */
export function DevicesSettings() {
  const session = useSession();
  const { hangar } = session;
  const canWrite = session.can('runmesh:write');
  const isAdmin = session.can('org:admin');
  const [all, setAll] = useState(true);
  const nodes = useLoad(
    () => data(hangar.api.GET('/v1/runmesh/nodes', { params: { query: { all: all ? 'true' : 'false' } } })).then((d) => d.nodes),
    [all],
  );
  const pending = useLoad(
    () =>
      isAdmin ? data(hangar.api.GET('/v1/runmesh/links', { params: { query: { status: 'pending' } } })).then((d) => d.links) : Promise.resolve([]),
    [isAdmin],
  );

  if (!session.can('runmesh:read')) return <ErrorBox error={new Error('this credential lacks the runmesh:read scope')} title="Devices" />;
  return (
    <div className="devices">
      <h2>Devices</h2>
      <p className="muted">
        Machines linked to the device mesh with <code>hangar device link</code>. A device shows a code and a link; open the link (or enter the code on
        the <Link href="~/link">link page</Link>) to approve it.
      </p>
      <label className="check">
        <input type="checkbox" checked={all} onChange={(e) => setAll(e.target.checked)} /> Every device I can see (not only mine)
      </label>
      <ErrorBox error={nodes.error} title="Could not load devices" />
      {nodes.loading && !nodes.data ? <Loading what="devices" /> : null}
      {nodes.data && nodes.data.length === 0 ? (
        <Empty>
          No devices yet. Run <code>hangar device link</code> on a machine, then approve the code it shows.
        </Empty>
      ) : null}
      {nodes.data && nodes.data.length > 0 ? (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Status</th>
                <th scope="col">OS</th>
                <th scope="col">Mesh address</th>
                <th scope="col">Last seen</th>
                <th scope="col">Linked</th>
                <th scope="col">
                  <span className="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {nodes.data.map((n) => (
                <NodeRow key={n.id} node={n} canWrite={canWrite} onChange={nodes.reload} />
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      {isAdmin ? (
        <section className="panel">
          <h3>Codes waiting for approval</h3>
          <ErrorBox error={pending.error} title="Could not load pending codes" />
          {pending.data && pending.data.length === 0 ? <p className="muted">No code opened by your organization is waiting.</p> : null}
          {pending.data && pending.data.length > 0 ? (
            <ul>
              {pending.data.map((l) => (
                <li key={l.id}>
                  <Link href={`~/link/${l.code}`}>
                    <code>{l.code}</code>
                  </Link>{' '}
                  {l.deviceLabel} · expires <Time iso={l.expiresAt} />
                </li>
              ))}
            </ul>
          ) : null}
        </section>
      ) : null}
    </div>
  );
}

function NodeRow({ node, canWrite, onChange }: { node: DeviceNode; canWrite: boolean; onChange: () => void }) {
  const { hangar } = useSession();
  return (
    <tr>
      <td>
        <strong>{node.name}</strong>
        <div className="muted small">
          <code>{node.id}</code>
        </div>
      </td>
      <td>
        <StatusBadge status={node.status} />{' '}
        {node.status === 'active' ? <span className={node.online ? 'live-on' : 'muted'}>{node.online ? 'online' : 'offline'}</span> : null}
        {node.revokedReason ? <div className="muted small">{node.revokedReason}</div> : null}
      </td>
      <td>
        {node.os || '—'} {node.appVersion ? <span className="muted">({node.appVersion})</span> : null}
      </td>
      <td>
        <code>{node.meshAddress}</code>
      </td>
      <td>
        <Time iso={node.lastSeenAt} />
      </td>
      <td>
        <Time iso={node.createdAt} />
      </td>
      <td>
        {canWrite && node.status === 'active' ? (
          <ActionButton
            kind="danger"
            aria-label={`Revoke ${node.name}`}
            confirm={`Revoke ${node.name}? Its credential stops working at once and its running runs fail.`}
            action={async () => {
              await data(
                hangar.api.POST('/v1/runmesh/nodes/{id}/revoke', { params: { path: { id: node.id } }, body: { reason: 'revoked in the console' } }),
              );
              onChange();
            }}
          >
            Revoke
          </ActionButton>
        ) : null}
      </td>
    </tr>
  );
}

/** The code in the page's address: /link/ABCD-EFGH, or /link?code=ABCD-EFGH (the older /device page's form). */
function codeFromLocation(): string {
  const query = new URLSearchParams(window.location.search).get('code');
  if (query) return query.trim();
  const rest = window.location.pathname.replace(/^\/link\/?/, '');
  return decodeURIComponent(rest.split('/')[0] ?? '').trim();
}

/**
 * The page a device's link URL opens (/link/{code}): the device's label, OS, app version and public key as it
 * reported them, so the person approves the machine in front of them; Approve makes it a node of their organization.
 */
export function LinkApproval() {
  const [code, setCode] = useState(codeFromLocation);
  return (
    <>
      <PageHeader title="Link a device" />
      {code ? <LinkDetails code={code} onOther={() => setCode('')} /> : <CodeForm onCode={setCode} />}
    </>
  );
}

function CodeForm({ onCode }: { onCode: (code: string) => void }) {
  const [value, setValue] = useState('');
  const submit = (e: FormEvent) => {
    e.preventDefault();
    const c = value.trim().toUpperCase();
    if (!c) return;
    window.history.replaceState(null, '', `/link/${encodeURIComponent(c)}`);
    onCode(c);
  };
  return (
    <form className="panel link-code" onSubmit={submit}>
      <p>
        Enter the code <code>hangar device link</code> printed on the device (or open the link it printed).
      </p>
      <Field label="Device code">
        {(id) => (
          <input
            id={id}
            value={value}
            onChange={(e) => setValue(e.target.value)}
            placeholder="XXXX-XXXX"
            autoComplete="off"
            spellCheck={false}
            required
          />
        )}
      </Field>
      <Button kind="primary" type="submit">
        Continue
      </Button>
    </form>
  );
}

function LinkDetails({ code, onOther }: { code: string; onOther: () => void }) {
  const session = useSession();
  const { hangar } = session;
  const link = useLoad(() => data(hangar.api.GET('/v1/runmesh/devices/link/{code}', { params: { path: { code } } })), [code]);
  const [outcome, setOutcome] = useState<{ kind: 'approved'; node: DeviceNode } | { kind: 'denied' } | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const canApprove = session.can('runmesh:write');

  if (link.loading && !link.data) return <Loading what="the device" />;
  if (link.error || !link.data) {
    return (
      <div className="panel">
        <ErrorBox error={link.error} title={link.error?.status === 404 ? 'Unknown code' : 'Could not look up the code'} />
        {link.error?.status === 404 ? <p>No device is waiting with this code. Check it on the device, or start linking again.</p> : null}
        <Button onClick={onOther}>Enter another code</Button>
      </div>
    );
  }
  const l: DeviceLink = link.data;
  const expired = l.status === 'expired' || (l.status === 'pending' && Date.parse(l.expiresAt) <= Date.now());
  const approve = async () => {
    setBusy(true);
    setError(null);
    try {
      const res = await data(hangar.api.POST('/v1/runmesh/devices/link/approve', { body: { code: l.code } }));
      setOutcome({ kind: 'approved', node: res.node });
    } catch (err) {
      setError(toApiError(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="panel link-approval">
      <p>
        Code <span className="code-big">{l.code}</span>
      </p>
      <dl className="details">
        <dt>Device</dt>
        <dd data-testid="link-device">{l.deviceLabel}</dd>
        <dt>OS</dt>
        <dd>{l.os || 'not given'}</dd>
        <dt>App version</dt>
        <dd>{l.appVersion || 'not given'}</dd>
        <dt>Public key</dt>
        <dd>
          <code>{l.publicKey}</code>
        </dd>
        <dt>Expires</dt>
        <dd>
          <Time iso={l.expiresAt} />
        </dd>
      </dl>
      <div aria-live="polite">
        {outcome?.kind === 'approved' ? (
          <p className="notice ok" role="status">
            Approved: <strong>{outcome.node.name}</strong> is linked to your organization as <code>{outcome.node.id}</code> (
            {outcome.node.meshAddress}). The device finishes linking by itself. <Link href="~/settings/devices">See your devices</Link>
          </p>
        ) : null}
        {outcome?.kind === 'denied' ? (
          <p className="notice" role="status">
            Not approved. Nothing was linked; the code expires unused at <Time iso={l.expiresAt} />. If you did not start linking this device, ignore
            it.
          </p>
        ) : null}
      </div>
      {!outcome && expired ? <p className="notice warn">This code has expired: start linking again on the device.</p> : null}
      {!outcome && !expired && l.status !== 'pending' ? <p className="notice">This code was already approved.</p> : null}
      {!outcome && !expired && l.status === 'pending' ? (
        <>
          <p className="notice warn">Approve only if this is the machine you are linking right now and it shows the same code.</p>
          {canApprove ? null : <p className="muted">Your credential lacks the runmesh:write scope: you cannot approve devices.</p>}
          <div className="actions">
            <Button kind="primary" onClick={approve} disabled={busy || !canApprove} aria-busy={busy}>
              Approve
            </Button>
            <Button onClick={() => setOutcome({ kind: 'denied' })} disabled={busy}>
              Deny
            </Button>
          </div>
          <ErrorBox error={error} title="Not approved" />
        </>
      ) : null}
    </div>
  );
}
