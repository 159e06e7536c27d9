import { useState } from 'react';
import { Link, Route, Switch, useLocation, useParams } from 'wouter';
import { data, page, useLoad, useSession } from '../api.js';
import { ActionButton, Empty, ErrorBox, Field, Loading, PageHeader, Time } from '../ui.js';
import { type Agent, AgentForm, MODES } from './agent-form.js';
import { RunPanel } from './agent-run.js';

/** /agents: the list at `/`, a new agent at `/new`, one agent (view, edit, run, delete) at `/:slug`. */
export default function AgentsPage() {
  return (
    <Switch>
      <Route path="/" component={AgentList} />
      <Route path="/new" component={NewAgent} />
      <Route path="/:slug" component={AgentPage} />
    </Switch>
  );
}

const modeLabel = (m: Agent['executionMode']) => ({ managed: 'managed', in_sandbox: 'in a sandbox', 'local-desktop': 'local device' })[m] ?? m;

function AgentList() {
  const session = useSession();
  const [search, setSearch] = useState('');
  const agents = useLoad(() => data(session.hangar.api.GET('/v1/agents')), []);
  const needle = search.trim().toLowerCase();
  const list = agents.data ?? [];
  const shown = needle ? list.filter((a) => `${a.slug} ${a.name} ${a.description ?? ''} ${a.model ?? ''}`.toLowerCase().includes(needle)) : list;
  return (
    <>
      <PageHeader title="Agents">
        {session.can('agent:write') ? (
          <Link href="/new" className="btn btn-primary">
            New agent
          </Link>
        ) : null}
      </PageHeader>
      {!session.can('agent:write') ? (
        <p className="muted">This credential can use agents but not create or change them (it lacks agent:write).</p>
      ) : null}
      <ErrorBox error={agents.error} title="Could not list agents" />
      {agents.loading && !agents.data ? <Loading what="agents" /> : null}
      {agents.data && list.length === 0 ? (
        <Empty>
          No agents yet.{' '}
          {session.can('agent:write') ? (
            <>
              <Link href="/new">Create the first one</Link>: a model, instructions and the tools it may use.
            </>
          ) : (
            'An organization member with agent:write can create one.'
          )}
        </Empty>
      ) : null}
      {list.length > 5 ? (
        <div className="inline agents-filter">
          <Field label="Search agents">
            {(id) => <input id={id} type="search" value={search} onChange={(e) => setSearch(e.target.value)} placeholder="Slug, name or model" />}
          </Field>
        </div>
      ) : null}
      {list.length > 0 && shown.length === 0 ? <Empty>No agent matches “{search}”.</Empty> : null}
      {shown.length > 0 ? (
        <div className="table-wrap">
          <table aria-label="Agents">
            <thead>
              <tr>
                <th scope="col">Agent</th>
                <th scope="col">Model</th>
                <th scope="col">Mode</th>
                <th scope="col">Tools</th>
                <th scope="col">Changed</th>
              </tr>
            </thead>
            <tbody>
              {shown.map((a) => (
                <tr key={a.id}>
                  <td>
                    <Link href={`/${encodeURIComponent(a.slug)}`}>{a.name}</Link>
                    <div className="muted">
                      <code>{a.slug}</code>
                      {a.description ? ` · ${a.description}` : ''}
                    </div>
                  </td>
                  <td>{a.model ?? <span className="muted">none</span>}</td>
                  <td>{modeLabel(a.executionMode)}</td>
                  <td>{a.tools.length ? a.tools.join(', ') : <span className="muted">none</span>}</td>
                  <td>
                    <Time iso={a.updatedAt} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
    </>
  );
}

function NewAgent() {
  const session = useSession();
  const [, navigate] = useLocation();
  return (
    <>
      <p>
        <Link href="~/agents">← Agents</Link>
      </p>
      <PageHeader title="New agent" />
      {session.can('agent:write') ? (
        <AgentForm onSaved={(a) => navigate(`/${encodeURIComponent(a.slug)}`)} />
      ) : (
        <Empty>Creating an agent needs the agent:write scope, which this credential lacks.</Empty>
      )}
    </>
  );
}

function AgentPage() {
  const { slug } = useParams<{ slug: string }>();
  const session = useSession();
  const [, navigate] = useLocation();
  const agent = useLoad(() => data(session.hangar.api.GET('/v1/agents/{slug}', { params: { path: { slug } } })), [slug]);
  const [current, setCurrent] = useState<Agent | null>(null);
  const a = current?.slug === slug ? current : agent.data;
  return (
    <>
      <p>
        <Link href="~/agents">← Agents</Link>
      </p>
      <PageHeader title={a?.name ?? slug}>
        {a && session.can('agent:write') ? (
          <ActionButton
            kind="danger"
            confirm={`Delete the agent ${a.slug}? Its threads stay; it cannot be run any more.`}
            action={async () => {
              await page(session.hangar.api.DELETE('/v1/agents/{slug}', { params: { path: { slug: a.slug } } }));
              navigate('~/agents');
            }}
          >
            Delete
          </ActionButton>
        ) : null}
      </PageHeader>
      <ErrorBox error={agent.error} title="Could not load the agent" />
      {agent.loading && !a ? <Loading what="the agent" /> : null}
      {a ? (
        <>
          <p className="muted">
            <code>{a.slug}</code> · {modeLabel(a.executionMode)} · created <Time iso={a.createdAt} /> · changed <Time iso={a.updatedAt} />
          </p>
          {session.can('agent:run') ? <RunPanel slug={a.slug} /> : <p className="muted">Running the agent needs the agent:run scope.</p>}
          <h2>Definition</h2>
          {session.can('agent:write') ? <AgentForm key={a.slug} agent={a} onSaved={setCurrent} /> : <AgentDetails agent={a} />}
        </>
      ) : null}
    </>
  );
}

/** The definition, read-only, for a credential without agent:write. */
function AgentDetails({ agent: a }: { agent: Agent }) {
  const config = [
    a.config.maxTurns !== undefined ? `max ${a.config.maxTurns} turns` : null,
    a.config.maxTokens !== undefined ? `${a.config.maxTokens} output tokens a turn` : null,
    a.config.temperature !== undefined ? `temperature ${a.config.temperature}` : null,
  ].filter(Boolean);
  return (
    <dl className="panel agent-details">
      <dt>Description</dt>
      <dd>{a.description ?? <span className="muted">none</span>}</dd>
      <dt>Model</dt>
      <dd>{a.model ?? <span className="muted">none</span>}</dd>
      <dt>Execution mode</dt>
      <dd>{MODES.find((m) => m.value === a.executionMode)?.label ?? a.executionMode}</dd>
      {a.executionMode === 'in_sandbox' ? (
        <>
          <dt>Sandbox template</dt>
          <dd>{a.sandboxTemplate ?? 'base-ubuntu (default)'}</dd>
        </>
      ) : null}
      {a.targetDeviceId ? (
        <>
          <dt>Device</dt>
          <dd>
            <code>{a.targetDeviceId}</code>
          </dd>
        </>
      ) : null}
      <dt>Tools</dt>
      <dd>{a.tools.length ? a.tools.map((t) => <code key={t}>{t} </code>) : <span className="muted">none</span>}</dd>
      <dt>Run defaults</dt>
      <dd>{config.length ? config.join(', ') : <span className="muted">the server’s</span>}</dd>
      <dt>Instructions</dt>
      <dd>{a.instructions ? <pre>{a.instructions}</pre> : <span className="muted">none</span>}</dd>
    </dl>
  );
}
