import { Hangar, type components } from '@hangar/sdk';
import { createContext, type ReactNode, useCallback, useContext, useEffect, useMemo, useRef, useState } from 'react';

export type Me = components['schemas']['Me'];

/** An error the API answered (its `{ error: { code, message, requestId } }`), or a network failure. */
export class ApiError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status: number,
    readonly requestId: string | null,
  ) {
    super(message);
  }
}

type Answer<T> = { data?: T; error?: unknown; response: Response };

/** The `data` of an answer's `{ data, meta }` envelope, or throws the API's error with its requestId. */
export async function data<T>(call: Promise<Answer<{ data: T }>>): Promise<T> {
  return (await page(call)).data;
}

/** The whole `{ data, meta }` envelope (for pages: `meta.nextCursor`), or throws the API's error. */
export async function page<T>(call: Promise<Answer<T>>): Promise<T> {
  let answer: Answer<T>;
  try {
    answer = await call;
  } catch (err) {
    const e = err as { code?: string; message?: string; status?: number; requestId?: string };
    throw new ApiError(e.code ?? 'network_error', e.message ?? String(err), e.status ?? 0, e.requestId ?? null);
  }
  const { data: body, error, response } = answer;
  if (error !== undefined || !response.ok) {
    const e = (error as { error?: { code?: string; message?: string; requestId?: string } } | undefined)?.error ?? {};
    throw new ApiError(
      e.code ?? `http_${response.status}`,
      e.message ?? (response.statusText || 'request failed'),
      response.status,
      e.requestId ?? response.headers.get('x-request-id'),
    );
  }
  return body as T;
}

const STORAGE_KEY = 'hangar.console.credential';
const ORG_KEY = 'hangar.console.org';

export interface Session {
  hangar: Hangar;
  /** The API key or session token the console signed in with (threads' WebSocket takes it in its query). */
  credential: string;
  me: Me;
  /** Whether the credential holds a scope (`*` holds every scope). */
  can(scope: string): boolean;
  signOut(): void;
}

const SessionContext = createContext<Session | null>(null);

export function useSession(): Session {
  const s = useContext(SessionContext);
  if (!s) throw new Error('useSession outside <SessionProvider>');
  return s;
}

/** The SDK client of the console: the credential, this origin, and `X-Org-Id` for session tokens. */
export function clientFor(credential: string, orgId?: string | null): Hangar {
  const fetchWithOrg = (input: Request) => {
    if (orgId && !credential.startsWith('hgr_') && !input.headers.has('x-org-id')) input.headers.set('x-org-id', orgId);
    return globalThis.fetch(input);
  };
  return new Hangar({ apiKey: credential, baseUrl: window.location.origin, maxRetries: 1, timeout: 60_000, fetch: fetchWithOrg });
}

export function scopeHeld(scopes: readonly string[], scope: string): boolean {
  if (scopes.includes('*') || scopes.includes(scope)) return true;
  const [resource] = scope.split(':');
  return scopes.includes(`${resource}:*`);
}

/** Signs in: checks the credential with `GET /v1/me` and keeps it in this browser's local storage. */
export async function signIn(credential: string, orgId?: string | null): Promise<Me> {
  const hangar = clientFor(credential, orgId);
  const me = await data(hangar.api.GET('/v1/me'));
  window.localStorage.setItem(STORAGE_KEY, credential);
  if (orgId) window.localStorage.setItem(ORG_KEY, orgId);
  return me;
}

export function SessionProvider({ children, signedOut }: { children: ReactNode; signedOut: (onSignedIn: () => void) => ReactNode }) {
  const [state, setState] = useState<{ credential: string; me: Me; orgId: string | null } | null | 'loading'>('loading');
  const load = useCallback(async () => {
    const credential = window.localStorage.getItem(STORAGE_KEY);
    const orgId = window.localStorage.getItem(ORG_KEY);
    if (!credential) return setState(null);
    try {
      const me = await data(clientFor(credential, orgId).api.GET('/v1/me'));
      setState({ credential, me, orgId });
    } catch (err) {
      if (err instanceof ApiError && (err.status === 401 || err.status === 403)) window.localStorage.removeItem(STORAGE_KEY);
      setState(null);
    }
  }, []);
  useEffect(() => {
    void load();
  }, [load]);
  // One client per sign-in: pages' effects depend on it, so it must not change from one render to the next.
  const session = useMemo<Session | null>(() => {
    if (!state || state === 'loading') return null;
    return {
      hangar: clientFor(state.credential, state.orgId ?? state.me.currentOrganizationId),
      credential: state.credential,
      me: state.me,
      can: (scope) => scopeHeld(state.me.scopes, scope),
      signOut: () => {
        window.localStorage.removeItem(STORAGE_KEY);
        window.localStorage.removeItem(ORG_KEY);
        setState(null);
      },
    };
  }, [state]);
  if (state === 'loading') return <p className="loading">Loading…</p>;
  if (!session) return <>{signedOut(() => void load())}</>;
  return <SessionContext.Provider value={session}>{children}</SessionContext.Provider>;
}

export interface Loaded<T> {
  data: T | undefined;
  error: ApiError | null;
  loading: boolean;
  reload(): void;
}

/** Loads with `fn` when `deps` change (and on `reload()`); a newer load wins over an older one still in flight. */
export function useLoad<T>(fn: () => Promise<T>, deps: readonly unknown[]): Loaded<T> {
  const [value, setValue] = useState<{ data?: T; error: ApiError | null; loading: boolean }>({ error: null, loading: true });
  const [tick, setTick] = useState(0);
  const latest = useRef(0);
  // biome-ignore lint/correctness/useExhaustiveDependencies: deps are the caller's
  useEffect(() => {
    const n = ++latest.current;
    setValue((v) => ({ ...v, loading: true }));
    fn().then(
      (d) => n === latest.current && setValue({ data: d, error: null, loading: false }),
      (err) => n === latest.current && setValue((v) => ({ ...v, error: toApiError(err), loading: false })),
    );
  }, [...deps, tick]);
  return { ...value, data: value.data, reload: () => setTick((t) => t + 1) };
}

export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  const e = err as { code?: string; message?: string; status?: number; requestId?: string };
  return new ApiError(e?.code ?? 'error', e?.message ?? String(err), e?.status ?? 0, e?.requestId ?? null);
}
