import { type FormEvent, useState } from 'react';
import { type ApiError, signIn, toApiError } from '../api.js';
import { ErrorBox, Field } from '../ui.js';

/**
 * Sign-in with what the API takes: an API key (`hgr_live_…`, printed by `hangar init`) or a session token from
 * the built-in issuer or the configured OIDC issuer (with the organization to act in, for a member of several).
 */
export function SignIn({ onSignedIn }: { onSignedIn: () => void }) {
  const [credential, setCredential] = useState('');
  const [orgId, setOrgId] = useState('');
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await signIn(credential.trim(), orgId.trim() || null);
      onSignedIn();
    } catch (err) {
      setError(toApiError(err));
    } finally {
      setBusy(false);
    }
  };
  const isToken = credential.trim() !== '' && !credential.trim().startsWith('hgr_');
  return (
    <main className="sign-in" id="main">
      <h1>Sign in to Hangar</h1>
      <form onSubmit={submit}>
        <Field label="API key or session token" hint="The key `hangar init` printed (hgr_live_…), or a session token.">
          {(id) => (
            <input
              id={id}
              name="credential"
              type="password"
              autoComplete="current-password"
              required
              value={credential}
              onChange={(e) => setCredential(e.target.value)}
            />
          )}
        </Field>
        {isToken ? (
          <Field label="Organization ID (optional)" hint="For a session token of a member of several organizations.">
            {(id) => <input id={id} name="org" value={orgId} onChange={(e) => setOrgId(e.target.value)} />}
          </Field>
        ) : null}
        <button type="submit" className="btn btn-primary" disabled={busy || credential.trim() === ''}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
        <ErrorBox error={error} title="Could not sign in" />
      </form>
      <p className="muted">
        The console calls the public API with your credential and shows only what its scopes allow. The API reference is at{' '}
        <a href="/v1/docs">/v1/docs</a>.
      </p>
    </main>
  );
}
