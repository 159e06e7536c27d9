import { type ButtonHTMLAttributes, type ReactNode, useId, useState } from 'react';
import { type ApiError, toApiError } from './api.js';

/** The API's error as the user sees it: the message, the code and the requestId to quote when asking for help. */
export function ErrorBox({ error, title }: { error: ApiError | Error | null | undefined; title?: string }) {
  if (!error) return null;
  const e = toApiError(error);
  return (
    <div className="error" role="alert">
      <strong>{title ?? 'Something went wrong'}:</strong> {e.message}
      <div className="error-meta">
        <code>{e.code}</code>
        {e.status ? <span> · HTTP {e.status}</span> : null}
        {e.requestId ? (
          <span>
            {' '}
            · request <code data-testid="request-id">{e.requestId}</code>
          </span>
        ) : null}
      </div>
    </div>
  );
}

/** What a list shows when it has nothing: what it would hold and how to make the first one. */
export function Empty({ children }: { children: ReactNode }) {
  return <div className="empty">{children}</div>;
}

export function Loading({ what }: { what?: string }) {
  return (
    <p className="loading" aria-live="polite">
      Loading{what ? ` ${what}` : ''}…
    </p>
  );
}

/** A section a page has, that this version of Hangar does not: said plainly rather than hidden. */
export function NotAvailable({ what }: { what: string }) {
  return (
    <div className="empty" data-testid="not-available">
      {what} is not available in this version of Hangar.
    </div>
  );
}

/** A page's heading row: the title and its actions. */
export function PageHeader({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="page-header">
      <h1>{title}</h1>
      <div className="actions">{children}</div>
    </div>
  );
}

export function Button({ kind = 'secondary', ...props }: ButtonHTMLAttributes<HTMLButtonElement> & { kind?: 'primary' | 'secondary' | 'danger' }) {
  return <button type="button" {...props} className={`btn btn-${kind} ${props.className ?? ''}`} />;
}

/**
 * A button whose action calls the API: disabled while it runs, and the API's error (with its requestId) shown
 * beside it when it fails.
 */
export function ActionButton({
  action,
  children,
  kind,
  confirm,
  ...rest
}: Omit<ButtonHTMLAttributes<HTMLButtonElement>, 'onClick'> & {
  action: () => Promise<unknown>;
  kind?: 'primary' | 'secondary' | 'danger';
  confirm?: string;
}) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  return (
    <span className="action">
      <Button
        {...rest}
        kind={kind}
        disabled={busy || rest.disabled}
        aria-busy={busy}
        onClick={async () => {
          if (confirm && !window.confirm(confirm)) return;
          setBusy(true);
          setError(null);
          try {
            await action();
          } catch (err) {
            setError(toApiError(err));
          } finally {
            setBusy(false);
          }
        }}
      >
        {children}
      </Button>
      <ErrorBox error={error} title="Failed" />
    </span>
  );
}

/** A labelled form field; `children` gets the id to put on its control. */
export function Field({ label, hint, children }: { label: string; hint?: string; children: (id: string) => ReactNode }) {
  const id = useId();
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {children(id)}
      {hint ? <small className="hint">{hint}</small> : null}
    </div>
  );
}

export function StatusBadge({ status }: { status: string }) {
  return <span className={`badge badge-${status.replace(/[^a-z_]/gi, '')}`}>{status}</span>;
}

/** A timestamp as the user's locale writes it, with the exact ISO time on hover. */
export function Time({ iso }: { iso: string | null | undefined }) {
  if (!iso) return <span>—</span>;
  const d = new Date(iso);
  return (
    <time dateTime={iso} title={iso}>
      {d.toLocaleString()}
    </time>
  );
}
