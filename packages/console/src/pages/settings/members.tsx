import { type FormEvent, useState } from 'react';
import { type ApiError, data, page, toApiError, useLoad, useSession } from '../../api.js';
import { ActionButton, Empty, ErrorBox, Field, Loading, Time } from '../../ui.js';

type Role = 'admin' | 'member';
const ROLES: readonly Role[] = ['admin', 'member'];

function AddMember({ orgId, onAdded }: { orgId: string; onAdded: () => void }) {
  const { hangar } = useSession();
  const [email, setEmail] = useState('');
  const [role, setRole] = useState<Role>('member');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const [added, setAdded] = useState<string | null>(null);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    setAdded(null);
    try {
      const m = await data(
        hangar.api.POST('/v1/organizations/{id}/members', { params: { path: { id: orgId } }, body: { email: email.trim(), role } }),
      );
      setAdded(m.invited ? `${email.trim()} is invited: their first sign-in with that email joins the organization.` : `${email.trim()} added.`);
      setEmail('');
      onAdded();
    } catch (err) {
      setError(toApiError(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form className="panel" aria-label="Add a member" onSubmit={submit}>
      <h3>Add a member</h3>
      <div className="inline-fields">
        <Field label="Email">
          {(id) => (
            <input id={id} type="email" value={email} onChange={(e) => setEmail(e.target.value)} required maxLength={320} autoComplete="off" />
          )}
        </Field>
        <Field label="Role">
          {(id) => (
            <select id={id} value={role} onChange={(e) => setRole(e.target.value as Role)}>
              {ROLES.map((r) => (
                <option key={r} value={r}>
                  {r}
                </option>
              ))}
            </select>
          )}
        </Field>
        <button type="submit" className="btn btn-primary" disabled={busy || !email.trim()} aria-busy={busy}>
          {busy ? 'Adding…' : 'Add member'}
        </button>
      </div>
      <p className="muted" aria-live="polite">
        {added ?? ''}
      </p>
      <ErrorBox error={error} title="Could not add the member" />
    </form>
  );
}

function RoleSelect({ orgId, userId, role, label, onChanged }: { orgId: string; userId: string; role: Role; label: string; onChanged: () => void }) {
  const { hangar } = useSession();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  return (
    <>
      <select
        aria-label={`Role of ${label}`}
        value={role}
        disabled={busy}
        aria-busy={busy}
        onChange={async (e) => {
          const next = e.target.value as Role;
          setBusy(true);
          setError(null);
          try {
            await data(
              hangar.api.PATCH('/v1/organizations/{id}/members/{userId}', { params: { path: { id: orgId, userId } }, body: { role: next } }),
            );
            onChanged();
          } catch (err) {
            setError(toApiError(err));
          } finally {
            setBusy(false);
          }
        }}
      >
        {ROLES.map((r) => (
          <option key={r} value={r}>
            {r}
          </option>
        ))}
      </select>
      <ErrorBox error={error} title="Could not change the role" />
    </>
  );
}

export function MembersSettings() {
  const { hangar, can, me } = useSession();
  const orgId = me.currentOrganizationId;
  const admin = can('org:admin');
  const members = useLoad(
    () => (admin && orgId ? data(hangar.api.GET('/v1/organizations/{id}/members', { params: { path: { id: orgId } } })) : Promise.resolve([])),
    [admin, orgId],
  );
  const org = me.organizations.find((o) => o.id === orgId);

  if (!orgId) return <Empty>Choose an organization to see its members.</Empty>;
  if (!admin) {
    return (
      <>
        <h2>Members</h2>
        <Empty>
          Member management is for organization admins. You are{' '}
          {org?.role === 'admin' ? 'an admin, but this credential lacks the org:admin scope' : `a ${org?.role ?? 'member'}`} of{' '}
          {org?.name ?? 'this organization'}.
        </Empty>
      </>
    );
  }

  return (
    <>
      <h2>Members</h2>
      <AddMember orgId={orgId} onAdded={members.reload} />
      <ErrorBox error={members.error} title="Could not list the members" />
      {members.loading && !members.data ? (
        <Loading what="members" />
      ) : members.data ? (
        <div className="table-wrap">
          <table aria-label="Members">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Email</th>
                <th scope="col">Role</th>
                <th scope="col">Joined</th>
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {members.data.map((m) => {
                const label = m.email ?? m.name ?? m.userId;
                return (
                  <tr key={m.userId} data-testid="member-row">
                    <td>
                      {m.name ?? '—'}
                      {m.userId === me.user.id ? <span className="muted"> (you)</span> : null}
                    </td>
                    <td>
                      {m.email ?? '—'}
                      {m.invited ? <span className="badge badge-pending member-invited">invited</span> : null}
                    </td>
                    <td>
                      <RoleSelect orgId={orgId} userId={m.userId} role={m.role} label={label} onChanged={members.reload} />
                    </td>
                    <td>
                      <Time iso={m.joinedAt} />
                    </td>
                    <td>
                      <ActionButton
                        kind="danger"
                        aria-label={`Remove ${label}`}
                        confirm={`Remove ${label} from the organization? Their API keys here are revoked at once.`}
                        action={async () => {
                          await page(
                            hangar.api.DELETE('/v1/organizations/{id}/members/{userId}', { params: { path: { id: orgId, userId: m.userId } } }),
                          );
                          members.reload();
                        }}
                      >
                        Remove
                      </ActionButton>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      ) : null}
    </>
  );
}
