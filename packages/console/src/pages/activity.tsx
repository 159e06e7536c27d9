import type { components, paths } from '@hangar/sdk';
import { type FormEvent, useEffect, useState } from 'react';
import { Link, useSearchParams } from 'wouter';
import { type ApiError, page, toApiError, useSession } from '../api.js';
import { Button, Empty, ErrorBox, Field, Loading, PageHeader, StatusBadge, Time } from '../ui.js';

type ActivityEvent = components['schemas']['ActivityEvent'];
type ActivityQuery = NonNullable<paths['/v1/activity']['get']['parameters']['query']>;

const RESOURCE_TYPES = [
  'sandbox',
  'agent',
  'workspace',
  'thread',
  'tool',
  'installable_agent_install',
  'runmesh_device',
  'code_execution',
  'organization',
  'api_key',
  'project',
  'secret',
  'template',
  'oauth_connection',
  'oauth_config',
  'billing',
  'product_app',
  'agent_channel',
  'context_session',
  'deployment',
  'trigger',
  'workflow',
] as const satisfies readonly NonNullable<ActivityQuery['resource_type']>[];
// Every resource type the API takes is offered: a type added to the API and not here fails the console's type check.
type Unoffered = Exclude<NonNullable<ActivityQuery['resource_type']>, (typeof RESOURCE_TYPES)[number]>;
const everyTypeOffered: [Unoffered] extends [never] ? true : Unoffered = true;
void everyTypeOffered;

const SEVERITIES = ['info', 'warning', 'error'] as const;
const LIMITS = ['25', '50', '100', '200'];

/** The free-text filters of `GET /v1/activity`, in the order the form shows them. */
const TEXT_FILTERS = [
  { key: 'resource_id', label: 'Resource id', hint: 'With a resource type' },
  { key: 'event_type', label: 'Event type', hint: 'e.g. agent.created' },
  { key: 'status', label: 'Status', hint: 'e.g. completed, failed' },
  { key: 'actor_user_id', label: 'Actor user id', hint: 'Someone else’s needs an organization admin' },
] as const;

/** The ids an event can be correlated with: under "More filters". */
const ID_FILTERS = [
  { key: 'thread_id', label: 'Thread id' },
  { key: 'agent_run_id', label: 'Agent run id' },
  { key: 'sandbox_id', label: 'Sandbox id' },
  { key: 'workspace_id', label: 'Workspace id' },
  { key: 'tool_slug', label: 'Tool slug' },
  { key: 'installable_agent_install_id', label: 'Installed agent id' },
  { key: 'code_execution_id', label: 'Code execution id' },
  { key: 'runmesh_node_id', label: 'Device (runmesh node) id' },
] as const;

/** Every query parameter the page keeps in the URL (all but `cursor`, which "Load more" follows). */
const FILTER_KEYS = [
  'resource_type',
  'severity',
  ...TEXT_FILTERS.map((f) => f.key),
  ...ID_FILTERS.map((f) => f.key),
  'since',
  'until',
  'limit',
] as const;
type Filters = Partial<Record<(typeof FILTER_KEYS)[number], string>>;

function filtersOf(params: URLSearchParams): Filters {
  const out: Filters = {};
  for (const k of FILTER_KEYS) {
    const v = params.get(k);
    if (v) out[k] = v;
  }
  return out;
}

/** An ISO timestamp as a `datetime-local` value (the user's local time, to the minute). */
function toLocalInput(iso: string | undefined): string {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function fromLocalInput(value: string): string | undefined {
  if (!value) return undefined;
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? undefined : d.toISOString();
}

/** The console page of the resource an event is about, when the console has one. */
function resourceHref(e: ActivityEvent): string | null {
  const slug = typeof e.metadata?.slug === 'string' ? e.metadata.slug : null;
  switch (e.resourceType) {
    case 'thread':
      return `/threads/${encodeURIComponent(e.resourceId)}`;
    case 'agent':
      return `/agents/${encodeURIComponent(slug ?? e.resourceId)}`;
    case 'sandbox':
      return `/sandboxes/${encodeURIComponent(e.resourceId)}`;
    case 'template':
      return `/templates/${encodeURIComponent(slug ?? e.resourceId)}`;
    default:
      return null;
  }
}

function Resource({ event }: { event: ActivityEvent }) {
  const href = resourceHref(event);
  const slug = typeof event.metadata?.slug === 'string' ? event.metadata.slug : null;
  const label = `${event.resourceType} ${slug ?? event.resourceId}`;
  return href ? (
    <Link href={href} title={event.resourceId}>
      {label}
    </Link>
  ) : (
    <span title={event.resourceId}>{label}</span>
  );
}

export default function ActivityPage() {
  const { hangar, can, me } = useSession();
  const [params, setParams] = useSearchParams();
  const filters = filtersOf(params);
  const key = JSON.stringify(filters);
  const [draft, setDraft] = useState<Filters>(filters);
  const [events, setEvents] = useState<ActivityEvent[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const [more, setMore] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);

  const fetchPage = (after: string | null) => {
    const query: ActivityQuery = { ...(filters as Omit<ActivityQuery, 'limit'>), limit: filters.limit ? Number(filters.limit) : undefined };
    if (after) query.cursor = after;
    return page(hangar.api.GET('/v1/activity', { params: { query } }));
  };

  // A new filter (from the form, or the URL on load and back/forward) starts the list over.
  // biome-ignore lint/correctness/useExhaustiveDependencies: the filters are `key`
  useEffect(() => {
    setDraft(JSON.parse(key) as Filters);
    let current = true;
    setLoading(true);
    setError(null);
    fetchPage(null).then(
      (p) => {
        if (!current) return;
        setEvents(p.data.events);
        setCursor(p.meta.nextCursor);
        setLoading(false);
      },
      (err) => {
        if (!current) return;
        setEvents([]);
        setCursor(null);
        setError(toApiError(err));
        setLoading(false);
      },
    );
    return () => {
      current = false;
    };
  }, [key]);

  const apply = (next: Filters) => {
    const clean: Record<string, string> = {};
    for (const k of FILTER_KEYS) {
      const v = next[k]?.trim();
      if (v) clean[k] = v;
    }
    setParams(clean);
  };

  const loadMore = async () => {
    if (!cursor) return;
    setMore(true);
    setError(null);
    try {
      const p = await fetchPage(cursor);
      setEvents((es) => [...es, ...p.data.events]);
      setCursor(p.meta.nextCursor);
    } catch (err) {
      setError(toApiError(err));
    } finally {
      setMore(false);
    }
  };

  if (!can('activity:read')) {
    return (
      <>
        <PageHeader title="Activity" />
        <Empty>This credential cannot read the activity log (it lacks the activity:read scope).</Empty>
      </>
    );
  }

  const set = (k: keyof Filters, v: string) => setDraft((d) => ({ ...d, [k]: v }));
  const onSubmit = (e: FormEvent) => {
    e.preventDefault();
    apply(draft);
  };
  const active = Object.keys(filters).filter((k) => k !== 'limit').length;

  return (
    <>
      <PageHeader title="Activity" />
      <form className="panel activity-filters" aria-label="Filter activity" onSubmit={onSubmit}>
        <div className="activity-filter-grid">
          <Field label="Resource type">
            {(id) => (
              <select
                id={id}
                value={draft.resource_type ?? ''}
                onChange={(e) => {
                  const next = { ...draft, resource_type: e.target.value };
                  setDraft(next);
                  apply(next);
                }}
              >
                <option value="">Any</option>
                {RESOURCE_TYPES.map((t) => (
                  <option key={t} value={t}>
                    {t}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <Field label="Severity">
            {(id) => (
              <select
                id={id}
                value={draft.severity ?? ''}
                onChange={(e) => {
                  const next = { ...draft, severity: e.target.value };
                  setDraft(next);
                  apply(next);
                }}
              >
                <option value="">Any</option>
                {SEVERITIES.map((s) => (
                  <option key={s} value={s}>
                    {s}
                  </option>
                ))}
              </select>
            )}
          </Field>
          {TEXT_FILTERS.map((f) => (
            <Field key={f.key} label={f.label} hint={'hint' in f ? f.hint : undefined}>
              {(id) => <input id={id} type="text" value={draft[f.key] ?? ''} onChange={(e) => set(f.key, e.target.value)} autoComplete="off" />}
            </Field>
          ))}
          <Field label="Since" hint="Events at or after (your local time)">
            {(id) => (
              <input
                id={id}
                type="datetime-local"
                value={toLocalInput(draft.since)}
                onChange={(e) => set('since', fromLocalInput(e.target.value) ?? '')}
              />
            )}
          </Field>
          <Field label="Until" hint="Events before (your local time)">
            {(id) => (
              <input
                id={id}
                type="datetime-local"
                value={toLocalInput(draft.until)}
                onChange={(e) => set('until', fromLocalInput(e.target.value) ?? '')}
              />
            )}
          </Field>
          <Field label="Page size">
            {(id) => (
              <select
                id={id}
                value={draft.limit ?? '50'}
                onChange={(e) => {
                  const next = { ...draft, limit: e.target.value === '50' ? '' : e.target.value };
                  setDraft(next);
                  apply(next);
                }}
              >
                {LIMITS.map((l) => (
                  <option key={l} value={l}>
                    {l}
                  </option>
                ))}
              </select>
            )}
          </Field>
        </div>
        <details className="activity-more" key={key} open={ID_FILTERS.some((f) => filters[f.key])}>
          <summary>More filters: related thread, run, sandbox, workspace, tool, installed agent, code execution, device</summary>
          <div className="activity-filter-grid">
            {ID_FILTERS.map((f) => (
              <Field key={f.key} label={f.label}>
                {(id) => <input id={id} type="text" value={draft[f.key] ?? ''} onChange={(e) => set(f.key, e.target.value)} autoComplete="off" />}
              </Field>
            ))}
          </div>
        </details>
        <div className="actions">
          <button type="submit" className="btn btn-primary">
            Apply filters
          </button>
          <Button
            onClick={() => {
              setDraft({});
              apply({});
            }}
            disabled={active === 0 && !filters.limit}
          >
            Clear filters
          </Button>
          <span className="muted" aria-live="polite">
            {active ? `${active} filter${active === 1 ? '' : 's'} applied` : 'No filters'}
          </span>
        </div>
      </form>

      <ErrorBox error={error} title="Could not load the activity log" />
      {loading ? (
        <Loading what="activity" />
      ) : events.length === 0 && !error ? (
        <Empty>{active ? 'No events match these filters.' : 'No activity yet: what you and your organization do with Hangar shows up here.'}</Empty>
      ) : (
        <div className="table-wrap">
          <table aria-label="Activity events">
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Event</th>
                <th scope="col">Severity</th>
                <th scope="col">Status</th>
                <th scope="col">Resource</th>
                <th scope="col">Actor</th>
              </tr>
            </thead>
            <tbody>
              {events.map((e) => (
                <tr key={e.id} data-testid="activity-event">
                  <td>
                    <Time iso={e.occurredAt} />
                  </td>
                  <td>
                    <div>{e.title}</div>
                    <code className="muted">{e.eventType}</code>
                    {e.summary ? <div className="muted">{e.summary}</div> : null}
                  </td>
                  <td>
                    <span className={`badge severity-${e.severity}`}>{e.severity}</span>
                  </td>
                  <td>
                    <StatusBadge status={e.status} />
                  </td>
                  <td className="activity-resource">
                    <Resource event={e} />
                  </td>
                  <td>
                    {e.actorUserId === me.user.id ? (
                      <span title={e.actorUserId}>you</span>
                    ) : e.actorUserId ? (
                      <code>{e.actorUserId}</code>
                    ) : (
                      <span className="muted">system</span>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <p className="muted" aria-live="polite" data-testid="activity-count">
        {loading ? '' : `${events.length} event${events.length === 1 ? '' : 's'} shown${cursor ? ', more available' : ''}`}
      </p>
      {cursor && !loading ? (
        <Button onClick={loadMore} disabled={more} aria-busy={more}>
          {more ? 'Loading…' : 'Load more'}
        </Button>
      ) : null}
    </>
  );
}
