import type { components } from '@hangar/sdk';
import { type FormEvent, useEffect, useState } from 'react';
import { Link, useLocation } from 'wouter';
import { type ApiError, data, page, toApiError, useLoad, useSession } from '../api.js';
import { Button, Empty, ErrorBox, Field, Loading, PageHeader, StatusBadge, Time } from '../ui.js';

type Thread = components['schemas']['Thread'];
type Agent = components['schemas']['Agent'];

const PAGE_SIZE = 50;

/** The thread list: the caller's threads, most recently updated first, paged with "Load more". */
export default function ThreadsPage() {
  const session = useSession();
  const [archived, setArchived] = useState(false);
  const [search, setSearch] = useState('');
  const [threads, setThreads] = useState<Thread[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [more, setMore] = useState<{ busy: boolean; error: ApiError | null }>({ busy: false, error: null });

  // The search is the API's (`q`: the title contains it, or the id is it), asked 250 ms after the last keystroke.
  const [q, setQ] = useState('');
  useEffect(() => {
    const t = setTimeout(() => setQ(search.trim()), 250);
    return () => clearTimeout(t);
  }, [search]);
  const query = (extra: { cursor?: string } = {}) =>
    ({ limit: PAGE_SIZE, archived: archived ? 'true' : 'false', ...(q ? { q } : {}), ...extra }) as const;
  const first = useLoad(() => page(session.hangar.api.GET('/v1/threads', { params: { query: query() } })), [archived, q]);
  useEffect(() => {
    if (!first.data) return;
    setThreads(first.data.data);
    setCursor(first.data.meta.nextCursor ?? null);
  }, [first.data]);

  const agents = useLoad(() => (session.can('agent:read') ? data(session.hangar.api.GET('/v1/agents')) : Promise.resolve([] as Agent[])), []);
  const agentSlug = (id: string | null) => (id ? (agents.data?.find((a) => a.id === id)?.slug ?? id) : '—');

  const loadMore = async () => {
    if (!cursor) return;
    setMore({ busy: true, error: null });
    try {
      const next = await page(session.hangar.api.GET('/v1/threads', { params: { query: query({ cursor }) } }));
      setThreads((t) => [...t, ...next.data.filter((n) => !t.some((o) => o.id === n.id))]);
      setCursor(next.meta.nextCursor ?? null);
      setMore({ busy: false, error: null });
    } catch (err) {
      setMore({ busy: false, error: toApiError(err) });
    }
  };

  const shown = threads;

  return (
    <>
      <PageHeader title="Threads" />
      {session.can('agent:run') ? <NewThread agents={agents.data ?? []} agentsError={agents.error} /> : null}
      <search aria-label="Filter threads">
        <form className="inline threads-filters" onSubmit={(e) => e.preventDefault()}>
          <Field label="Search" hint="Words of the title, or a thread id">
            {(id) => <input id={id} type="search" value={search} onChange={(e) => setSearch(e.target.value)} placeholder="Title or id" />}
          </Field>
          <div className="field field-check">
            <label>
              <input type="checkbox" checked={archived} onChange={(e) => setArchived(e.target.checked)} /> Include archived
            </label>
          </div>
        </form>
      </search>
      <ErrorBox error={first.error} title="Could not list threads" />
      {first.loading && !first.data ? <Loading what="threads" /> : null}
      {first.data && threads.length === 0 && !q ? (
        <Empty>
          No threads yet.{' '}
          {session.can('agent:run')
            ? 'Start one above with one of your agents, or run an agent over the API.'
            : 'Threads appear here when you run an agent.'}
        </Empty>
      ) : null}
      {first.data && !first.loading && threads.length === 0 && q ? <Empty>No thread matches “{q}”.</Empty> : null}
      {shown.length > 0 ? (
        <div className="table-wrap">
          <table aria-label="Threads">
            <thead>
              <tr>
                <th scope="col">Title</th>
                <th scope="col">Agent</th>
                <th scope="col">Mode</th>
                <th scope="col">Status</th>
                <th scope="col">Last activity</th>
              </tr>
            </thead>
            <tbody>
              {shown.map((t) => (
                <tr key={t.id}>
                  <td>
                    <Link href={`/threads/${encodeURIComponent(t.id)}`}>{t.title ?? 'Untitled thread'}</Link>
                    <div className="muted">
                      <code>{t.id}</code>
                    </div>
                  </td>
                  <td>{agentSlug(t.agentId)}</td>
                  <td>{t.executionMode}</td>
                  <td>
                    <StatusBadge status={t.archived ? 'archived' : 'active'} />
                  </td>
                  <td>
                    <Time iso={t.updatedAt} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      {cursor ? (
        <p>
          <Button onClick={() => void loadMore()} disabled={more.busy} aria-busy={more.busy}>
            {more.busy ? 'Loading…' : 'Load more'}
          </Button>
        </p>
      ) : null}
      <ErrorBox error={more.error} title="Could not load more threads" />
    </>
  );
}

/** Opens a thread for one of the organization's agents, then goes to it. */
function NewThread({ agents, agentsError }: { agents: Agent[]; agentsError: ApiError | null }) {
  const session = useSession();
  const [, navigate] = useLocation();
  const [agentId, setAgentId] = useState('');
  const [title, setTitle] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const agent = agents.find((a) => a.id === agentId) ?? agents[0];

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (!agent) return;
    setBusy(true);
    setError(null);
    try {
      const thread = await data(
        session.hangar.api.POST('/v1/threads', {
          body: { agentId: agent.id, executionMode: agent.executionMode, ...(title.trim() ? { title: title.trim() } : {}) },
        }),
      );
      navigate(`/threads/${encodeURIComponent(thread.id)}`);
    } catch (err) {
      setError(toApiError(err));
      setBusy(false);
    }
  };

  return (
    <section className="panel new-thread" aria-labelledby="new-thread-heading">
      <h2 id="new-thread-heading">New thread</h2>
      <ErrorBox error={agentsError} title="Could not list agents" />
      {agents.length === 0 && !agentsError ? (
        <p className="muted">
          Your organization has no agents yet: <Link href="/agents/new">create one</Link> to start a thread.
        </p>
      ) : null}
      {agents.length > 0 ? (
        <form className="inline" onSubmit={(e) => void submit(e)}>
          <Field label="Agent">
            {(id) => (
              <select id={id} value={agent?.id ?? ''} onChange={(e) => setAgentId(e.target.value)}>
                {agents.map((a) => (
                  <option key={a.id} value={a.id}>
                    {a.slug}
                    {a.name !== a.slug ? ` (${a.name})` : ''}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <Field label="Title (optional)">{(id) => <input id={id} value={title} maxLength={500} onChange={(e) => setTitle(e.target.value)} />}</Field>
          <button type="submit" className="btn btn-primary" disabled={busy || !agent} aria-busy={busy}>
            Start thread
          </button>
        </form>
      ) : null}
      <ErrorBox error={error} title="Could not open the thread" />
    </section>
  );
}
