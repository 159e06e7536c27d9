import type { components } from '@hangar/sdk';
import type { ReactNode } from 'react';
import { Link } from 'wouter';
import { data, type Loaded, useLoad, useSession } from '../api.js';
import { Empty, ErrorBox, Loading, PageHeader, StatusBadge, Time } from '../ui.js';
import { type ChartSeries, DailyChart } from './chart.js';

type ActivityEvent = components['schemas']['ActivityEvent'];
type UsageRows = Omit<components['schemas']['MyUsage'], 'period' | 'userId' | 'days'>;

// ---- formatting ------------------------------------------------------------------------------------------

const fmtInt = (n: number) => Math.round(n).toLocaleString();
const fmtMoney = (cents: number) => (cents / 100).toLocaleString(undefined, { style: 'currency', currency: 'USD' });
export function fmtDuration(seconds: number): string {
  if (seconds < 90) return `${Math.round(seconds)} s`;
  if (seconds < 90 * 60) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}
const fmtRange = (start: string | null, end: string) =>
  `${start ? new Date(start).toLocaleDateString(undefined, { day: 'numeric', month: 'short', timeZone: 'UTC' }) : 'the start'} – ${new Date(Date.parse(end) - 1).toLocaleDateString(undefined, { day: 'numeric', month: 'short', timeZone: 'UTC' })}`;

// ---- the daily series, from the meter (GET /v1/billing/my-usage?daily=true) -------------------------------

type Usage = components['schemas']['MyUsage'] | components['schemas']['OrgUsage'];
type UsageDay = components['schemas']['UsageDay'];

/** The chart's three series from the meter's days. */
export function dailySeries(days: UsageDay[]): { days: string[]; series: ChartSeries[] } {
  return {
    days: days.map((d) => d.day),
    series: [
      { label: 'Model tokens', swatch: 's1', values: days.map((d) => d.totalTokens), format: fmtInt },
      { label: 'Sandbox time', swatch: 's2', values: days.map((d) => d.sandboxSeconds), format: fmtDuration },
      { label: 'Tool executions', swatch: 's3', values: days.map((d) => d.toolExecutions), format: fmtInt },
    ],
  };
}

const runTokens = (e: ActivityEvent) => {
  const usage = (e.metadata?.usage ?? null) as { totalTokens?: unknown } | null;
  return typeof usage?.totalTokens === 'number' ? usage.totalTokens : 0;
};

// ---- the page -------------------------------------------------------------------------------------------------

/** A card or panel the credential may not read: its content, or a short note saying which scope it needs. */
function Scoped({ scope, what, children }: { scope: string; what: string; children: ReactNode }) {
  const session = useSession();
  if (session.can(scope)) return <>{children}</>;
  return (
    <p className="muted scope-note">
      {what} needs the <code>{scope}</code> scope, which this credential lacks.
    </p>
  );
}

export default function OverviewPage() {
  const session = useSession();
  const org = session.me.organizations.find((o) => o.id === session.me.currentOrganizationId);
  // One read of the meter for the cards and the chart: the organization's for admins (billing:read), else your own.
  const admin = session.can('billing:read');
  const usage = useLoad(
    () =>
      session.can('usage:read')
        ? data(
            session.hangar.api.GET('/v1/billing/my-usage', {
              params: { query: { period: 'current', all: admin ? 'true' : 'false', daily: 'true' } },
            }),
          )
        : Promise.resolve(null),
    [admin],
  );
  return (
    <>
      <PageHeader title="Overview" />
      {org ? <p className="muted">{org.name}</p> : null}
      <UsageCards usage={usage} />
      <section className="panel overview-panel" aria-labelledby="daily-heading">
        <h2 id="daily-heading">By day, this period</h2>
        <Scoped scope="usage:read" what="The daily chart">
          <DailyPanel usage={usage} />
        </Scoped>
      </section>
      <div className="overview-grid">
        <section className="panel overview-panel" aria-labelledby="sandboxes-heading">
          <h2 id="sandboxes-heading">Running sandboxes</h2>
          <Scoped scope="sandbox:read" what="The list of sandboxes">
            <RunningSandboxes />
          </Scoped>
        </section>
        <section className="panel overview-panel" aria-labelledby="runs-heading">
          <h2 id="runs-heading">Recent runs</h2>
          <Scoped scope="activity:read" what="Recent runs (from the activity feed)">
            <RecentRuns />
          </Scoped>
        </section>
      </div>
      <section className="panel overview-panel" aria-labelledby="failures-heading">
        <h2 id="failures-heading">Recent failures</h2>
        <Scoped scope="activity:read" what="Recent failures (from the activity feed)">
          <RecentFailures />
        </Scoped>
      </section>
    </>
  );
}

function UsageCards({ usage }: { usage: Loaded<Usage | null> }) {
  const session = useSession();
  const { hangar } = session;
  const admin = session.can('billing:read');
  const credits = useLoad(() => (admin ? data(hangar.api.GET('/v1/billing/credits')) : Promise.resolve(null)), [admin]);
  const u = usage.data;
  const rows: UsageRows | null = u ? ('organization' in u ? u.organization : u) : null;
  const runtime = rows ? rows.sandboxRuntime.settled.seconds + rows.sandboxRuntime.pending.seconds + rows.sandboxRuntime.active.estimatedSeconds : 0;
  return (
    <section aria-labelledby="usage-heading">
      <h2 id="usage-heading">
        {u && 'organization' in u ? 'The organization’s usage' : 'Your usage'} this period
        {u ? <span className="muted"> ({fmtRange(u.period.start, u.period.end)}, UTC)</span> : null}
      </h2>
      <div className="cards">
        <div className="card" data-testid="credits-card">
          <div className="muted">Credit balance</div>
          {admin ? (
            credits.data ? (
              <>
                <div className="value">{fmtMoney(credits.data.balanceCents)}</div>
                {credits.data.updatedAt ? (
                  <small className="muted">
                    as of <Time iso={credits.data.updatedAt} />
                  </small>
                ) : null}
              </>
            ) : credits.error ? (
              <ErrorBox error={credits.error} title="Could not read the balance" />
            ) : (
              <Loading />
            )
          ) : (
            <small className="muted">Organization admins see the balance (billing:read).</small>
          )}
        </div>
        {session.can('usage:read') ? (
          rows ? (
            <>
              <div className="card" data-testid="cost-card">
                <div className="muted">Spent</div>
                <div className="value">{fmtMoney(rows.totalCostCents)}</div>
              </div>
              <div className="card" data-testid="tokens-card">
                <div className="muted">Model tokens</div>
                <div className="value">{fmtInt(rows.tokens.totalTokens)}</div>
                <small className="muted">
                  {fmtInt(rows.tokens.inputTokens)} in · {fmtInt(rows.tokens.outputTokens)} out
                </small>
              </div>
              <div className="card">
                <div className="muted">Sandbox time</div>
                <div className="value">{fmtDuration(runtime)}</div>
                <small className="muted">{rows.sandboxRuntime.active.sandboxes} running now</small>
              </div>
              <div className="card">
                <div className="muted">Tool executions</div>
                <div className="value">{fmtInt(rows.toolExecutions.count)}</div>
              </div>
            </>
          ) : usage.error ? (
            <div className="card">
              <ErrorBox error={usage.error} title="Could not read the usage" />
            </div>
          ) : (
            <div className="card">
              <Loading what="usage" />
            </div>
          )
        ) : (
          <div className="card">
            <small className="muted">Usage needs the usage:read scope, which this credential lacks.</small>
          </div>
        )}
      </div>
    </section>
  );
}

function DailyPanel({ usage }: { usage: Loaded<Usage | null> }) {
  const session = useSession();
  if (usage.error) return <ErrorBox error={usage.error} title="Could not read the usage" />;
  if (!usage.data) return <Loading what="the chart" />;
  const { days, series } = dailySeries(usage.data.days ?? []);
  return (
    <>
      <DailyChart title="Tokens, sandbox time and tool executions by day this period" days={days} series={series} />
      <p className="hint">
        The meter’s figures by UTC day{session.can('billing:read') ? ', the whole organization’s' : ', your own'}: platform model tokens, sandbox
        running time (a running sandbox’s time so far counts today) and server-side tool executions.
      </p>
    </>
  );
}

function RunningSandboxes() {
  const { hangar } = useSession();
  const list = useLoad(() => data(hangar.api.GET('/v1/sandboxes', { params: { query: { state: 'running', limit: 20 } } })), []);
  if (list.error) return <ErrorBox error={list.error} title="Could not list sandboxes" />;
  if (!list.data) return <Loading what="sandboxes" />;
  if (list.data.length === 0) return <Empty>No sandbox is running.</Empty>;
  return (
    <div className="table-wrap">
      <table aria-label="Running sandboxes">
        <thead>
          <tr>
            <th scope="col">Sandbox</th>
            <th scope="col">Template</th>
            <th scope="col">Running for</th>
            <th scope="col">Last active</th>
          </tr>
        </thead>
        <tbody>
          {list.data.map((s) => (
            <tr key={s.id}>
              <td>
                <Link href={`/sandboxes/${encodeURIComponent(s.id)}`}>{s.name}</Link>
              </td>
              <td>{s.template}</td>
              <td>{fmtDuration(s.usage.runningSeconds)}</td>
              <td>
                <Time iso={s.lastActiveAt} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function RecentRuns() {
  const { hangar } = useSession();
  const runs = useLoad(async () => {
    const [done, failed] = await Promise.all(
      ['agent.run.completed', 'agent.run.failed'].map((event_type) =>
        data(hangar.api.GET('/v1/activity', { params: { query: { event_type, limit: 10 } } })),
      ),
    );
    return [...(done?.events ?? []), ...(failed?.events ?? [])].sort((a, b) => b.occurredAt.localeCompare(a.occurredAt)).slice(0, 10);
  }, []);
  if (runs.error) return <ErrorBox error={runs.error} title="Could not read recent runs" />;
  if (!runs.data) return <Loading what="runs" />;
  if (runs.data.length === 0)
    return (
      <Empty>
        No run has finished yet. Run an agent from <Link href="/agents">Agents</Link>.
      </Empty>
    );
  return (
    <div className="table-wrap">
      <table aria-label="Recent runs">
        <thead>
          <tr>
            <th scope="col">Run</th>
            <th scope="col">Status</th>
            <th scope="col">Tokens</th>
            <th scope="col">Ended</th>
          </tr>
        </thead>
        <tbody>
          {runs.data.map((e) => {
            const status = typeof e.metadata?.status === 'string' ? e.metadata.status : e.status;
            return (
              <tr key={e.id}>
                <td>
                  {e.threadId ? <Link href={`/threads/${encodeURIComponent(e.threadId)}`}>{e.title}</Link> : e.title}
                  {e.summary ? <div className="muted">{e.summary}</div> : null}
                </td>
                <td>
                  <StatusBadge status={status} />
                </td>
                <td>{fmtInt(runTokens(e))}</td>
                <td>
                  <Time iso={e.occurredAt} />
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

function RecentFailures() {
  const { hangar } = useSession();
  const failures = useLoad(() => data(hangar.api.GET('/v1/activity', { params: { query: { severity: 'error', limit: 8 } } })), []);
  if (failures.error) return <ErrorBox error={failures.error} title="Could not read recent failures" />;
  if (!failures.data) return <Loading what="failures" />;
  if (failures.data.events.length === 0) return <Empty>No failures recorded.</Empty>;
  return (
    <ul className="failures">
      {failures.data.events.map((e) => (
        <li key={e.id}>
          <StatusBadge status={e.status} /> <strong>{e.title}</strong>
          {e.summary ? <span className="muted"> — {e.summary}</span> : null}{' '}
          <small className="muted">
            <Time iso={e.occurredAt} />
          </small>{' '}
          {e.threadId ? <Link href={`/threads/${encodeURIComponent(e.threadId)}`}>thread</Link> : null}
          {e.sandboxId ? <Link href={`/sandboxes/${encodeURIComponent(e.sandboxId)}`}>sandbox</Link> : null}
        </li>
      ))}
    </ul>
  );
}
