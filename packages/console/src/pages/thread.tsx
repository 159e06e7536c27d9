import type { components } from '@hangar/sdk';
import { type FormEvent, type ReactNode, useEffect, useReducer, useState } from 'react';
import { Link, useParams } from 'wouter';
import { type ApiError, data, page, toApiError, useLoad, useSession } from '../api.js';
import { ActionButton, Empty, ErrorBox, Field, Loading, PageHeader, StatusBadge, Time } from '../ui.js';
import { type Connection, initialState, lastRunStatus, type LiveMessage, type LiveTool, rec, reduce, str, type ThreadEvent } from './thread-state.js';

type Agent = components['schemas']['Agent'];

/** At most this many history pages of 500 events are read before following live. */
const MAX_HISTORY_PAGES = 20;

/** One thread: its durable history, then its live frames (the SDK reconnects and resumes), and a composer to run its agent. */
export default function ThreadPage() {
  const { id = '' } = useParams<{ id: string }>();
  const session = useSession();
  const [state, dispatch] = useReducer(reduce, initialState);
  const [loadError, setLoadError] = useState<ApiError | null>(null);
  const [streamError, setStreamError] = useState<ApiError | null>(null);
  const [loaded, setLoaded] = useState(false);

  useEffect(() => {
    const stop = new AbortController();
    let sub: { close(): void } | null = null;
    setLoadError(null);
    setStreamError(null);
    setLoaded(false);
    (async () => {
      // The durable history first (oldest first, page by page), then the live stream from the last sequence read.
      let cursor: string | undefined;
      let lastSequence: number | undefined;
      for (let n = 0; n < MAX_HISTORY_PAGES; n++) {
        const r = await page(
          session.hangar.api.GET('/v1/threads/{threadId}/events', {
            params: { path: { threadId: id }, query: { limit: 500, cursor } },
            signal: stop.signal,
          }),
        );
        if (stop.signal.aborted) return;
        dispatch({ type: 'history', thread: r.data.thread, events: r.data.events });
        for (const e of r.data.events) lastSequence = Math.max(lastSequence ?? 0, e.sequence);
        if (!r.hasMore || !r.nextCursor) break;
        cursor = r.nextCursor;
      }
      setLoaded(true);
      dispatch({ type: 'connection', connection: 'connecting' });
      sub = session.hangar.threads.subscribe(id, {
        lastSequence,
        orgId: session.me.currentOrganizationId ?? undefined,
        signal: stop.signal,
        onFrame: (frame) => dispatch({ type: 'frame', frame }),
        onReconnect: () => dispatch({ type: 'connection', connection: 'reconnecting' }),
        onError: (err) => {
          dispatch({ type: 'connection', connection: 'closed' });
          setStreamError(toApiError(err));
        },
      });
    })().catch((err) => {
      if (!stop.signal.aborted) setLoadError(toApiError(err));
    });
    return () => {
      stop.abort();
      sub?.close();
    };
  }, [id, session.hangar, session.me.currentOrganizationId]);

  const thread = state.thread;
  const run = lastRunStatus(state);
  return (
    <>
      <p className="crumbs">
        <Link href="/threads">← Threads</Link>
      </p>
      <PageHeader title={thread ? (thread.title ?? 'Untitled thread') : 'Thread'}>
        {loaded ? <LiveIndicator connection={state.connection} /> : null}
      </PageHeader>
      <ErrorBox error={loadError} title="Could not load this thread" />
      {!loadError && !loaded ? <Loading what="the thread" /> : null}
      {thread ? (
        <p className="muted thread-meta">
          <code>{thread.id}</code> · {thread.executionMode} · {thread.archived ? 'archived · ' : ''}last activity <Time iso={thread.updatedAt} />
        </p>
      ) : null}
      <ErrorBox error={streamError} title="The live stream stopped" />
      {state.connection === 'deleted' ? <div className="empty">This thread was deleted.</div> : null}
      {loaded ? (
        <>
          <div className="run-status" aria-live="polite" data-testid="run-status">
            {run ? (
              <>
                <span>
                  Run <code>{run.runId}</code>:
                </span>
                <StatusBadge status={run.status} />
                {run.error ? <span className="muted">{run.error}</span> : null}
              </>
            ) : (
              <span className="muted">No run yet</span>
            )}
            {state.activeRunId && session.can('agent:run') ? <CancelRun runId={state.activeRunId} /> : null}
          </div>
          <Timeline events={state.events} live={state.live} tools={state.tools} />
          {thread && state.connection !== 'deleted' && session.can('agent:run') ? (
            <Composer
              threadId={thread.id}
              agentId={thread.agentId}
              busy={state.activeRunId !== null}
              onRunStarted={(runId) => dispatch({ type: 'run-started', runId })}
            />
          ) : null}
        </>
      ) : null}
    </>
  );
}

function LiveIndicator({ connection }: { connection: Connection }) {
  const text: Record<Connection, string> = {
    connecting: 'Connecting…',
    live: 'Live',
    reconnecting: 'Reconnecting…',
    closed: 'Not following',
    deleted: 'Deleted',
  };
  return (
    <span className={`live ${connection === 'live' ? 'live-on' : 'live-off'}`} role="status" aria-live="polite" data-testid="live-indicator">
      {connection === 'live' ? '● ' : '○ '}
      {text[connection]}
    </span>
  );
}

function CancelRun({ runId }: { runId: string }) {
  const session = useSession();
  return (
    <ActionButton kind="danger" action={() => data(session.hangar.api.POST('/v1/runs/{runId}/cancel', { params: { path: { runId } } }))}>
      Cancel run
    </ActionButton>
  );
}

/** The durable history in order (tool calls paired with their results), then what is streaming in now. */
function Timeline({ events, live, tools }: { events: ThreadEvent[]; live: LiveMessage[]; tools: LiveTool[] }) {
  const results = new Map<string, ThreadEvent>();
  for (const e of events) if (e.type === 'tool_result') results.set(str(rec(e.payload).toolCallId) ?? '', e);
  const calls = new Set(events.filter((e) => e.type === 'tool_call').map((e) => str(rec(e.payload).toolCallId) ?? ''));
  const items: ReactNode[] = [];
  for (const e of events) {
    const p = rec(e.payload);
    switch (e.type) {
      case 'user_message':
        items.push(
          <div key={e.sequence} className="msg msg-user">
            <div className="role">You</div>
            <div className="text">{str(p.text) ?? ''}</div>
          </div>,
        );
        break;
      case 'assistant_message':
        items.push(<AssistantMessage key={e.sequence} text={str(p.text) ?? ''} reasoning={str(p.reasoning) ?? ''} sources={p.sources} />);
        break;
      case 'tool_call': {
        const id = str(p.toolCallId) ?? '';
        const result = results.get(id);
        const liveTool = tools.find((t) => t.toolCallId === id);
        items.push(
          <ToolCall
            key={e.sequence}
            name={str(p.name) ?? 'tool'}
            input={p.input}
            output={result ? (str(rec(result.payload).output) ?? '') : (liveTool?.output ?? null)}
            isError={result ? rec(result.payload).isError === true : (liveTool?.isError ?? false)}
            done={Boolean(result)}
          />,
        );
        break;
      }
      case 'tool_result':
        if (!calls.has(str(p.toolCallId) ?? '')) {
          items.push(
            <ToolCall
              key={e.sequence}
              name={str(p.name) ?? 'tool'}
              input={undefined}
              output={str(p.output) ?? ''}
              isError={p.isError === true}
              done
            />,
          );
        }
        break;
      case 'run_started':
        items.push(
          <div key={e.sequence} className="run-line muted">
            Run <code>{str(p.runId) ?? e.runId}</code> started · {str(p.agent) ?? 'agent'}
            {str(p.model) ? ` · ${str(p.model)}` : ''} · <Time iso={e.createdAt} />
          </div>,
        );
        break;
      case 'run_completed':
        items.push(
          <div key={e.sequence} className="run-line muted">
            Run <code>{str(p.runId) ?? e.runId}</code> ended <StatusBadge status={str(p.status) ?? 'completed'} />
            {str(p.error) ? ` ${str(p.error)}` : ''}
          </div>,
        );
        break;
      case 'compaction_started':
        items.push(
          <div key={e.sequence} className="run-line muted">
            Compacting the thread{str(p.reason) ? `: ${str(p.reason)}` : ''}…
          </div>,
        );
        break;
      case 'compaction_completed':
        items.push(
          <details key={e.sequence} className="tool">
            <summary>Thread compacted ({str(p.summaryMethod) ?? 'summary'})</summary>
            <div className="text">{str(p.summary) ?? ''}</div>
          </details>,
        );
        break;
    }
  }
  for (const t of tools) {
    if (calls.has(t.toolCallId)) continue; // shown with its durable call
    items.push(<ToolCall key={`tool-${t.toolCallId}`} name={t.name} input={undefined} output={t.output} isError={t.isError} done={false} />);
  }
  for (const m of live) {
    items.push(<AssistantMessage key={`live-${m.messageId}`} text={m.text} reasoning={m.reasoning} streaming />);
  }
  if (items.length === 0) return <Empty>No messages yet. Send the first one below.</Empty>;
  return (
    <section className="timeline" aria-label="Conversation" aria-live="polite" aria-relevant="additions text">
      {items}
    </section>
  );
}

function AssistantMessage({ text, reasoning, sources, streaming }: { text: string; reasoning: string; sources?: unknown; streaming?: boolean }) {
  const links = Array.isArray(sources) ? sources.map(rec).filter((s) => str(s.url)) : [];
  return (
    <div className={`msg msg-assistant${streaming ? ' streaming' : ''}`} data-testid={streaming ? 'streaming-message' : 'assistant-message'}>
      <div className="role">Assistant{streaming ? ' (streaming…)' : ''}</div>
      {reasoning ? (
        <details className="reasoning">
          <summary>Reasoning</summary>
          <div className="text">{reasoning}</div>
        </details>
      ) : null}
      <div className="text">{text}</div>
      {links.length > 0 ? (
        <ul className="sources" aria-label="Sources">
          {links.map((s) => (
            <li key={str(s.id) ?? str(s.url)}>
              <a href={str(s.url) ?? '#'} target="_blank" rel="noreferrer noopener">
                {str(s.title) ?? str(s.url)}
              </a>
            </li>
          ))}
        </ul>
      ) : null}
    </div>
  );
}

function ToolCall({ name, input, output, isError, done }: { name: string; input: unknown; output: string | null; isError: boolean; done: boolean }) {
  const status = !done ? 'running' : isError ? 'failed' : 'completed';
  return (
    <details className="tool msg">
      <summary>
        Tool <code>{name}</code> <StatusBadge status={status} />
      </summary>
      {input !== undefined ? (
        <>
          <div className="role">Arguments</div>
          <pre className="tool-io">{typeof input === 'string' ? input : JSON.stringify(input, null, 2)}</pre>
        </>
      ) : null}
      {output !== null ? (
        <>
          <div className="role">Output</div>
          <pre className="tool-io">{output || (done ? '(no output)' : '…')}</pre>
        </>
      ) : null}
    </details>
  );
}

/**
 * Sends a message: a streamed run of the thread's agent on this thread (`POST /v1/run`, `stream: true`). What it
 * says is shown from the thread's live frames; the run's own stream gives its id (for Cancel) and its errors.
 */
function Composer({
  threadId,
  agentId,
  busy,
  onRunStarted,
}: {
  threadId: string;
  agentId: string | null;
  busy: boolean;
  onRunStarted(runId: string): void;
}) {
  const session = useSession();
  const agents = useLoad(() => data(session.hangar.api.GET('/v1/agents')), []);
  const [chosen, setChosen] = useState('');
  const [text, setText] = useState('');
  const [sending, setSending] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const own = agentId ? agents.data?.find((a: Agent) => a.id === agentId) : undefined;
  const agent = own ?? agents.data?.find((a) => a.slug === chosen) ?? (agentId ? undefined : agents.data?.[0]);

  const send = async (e: FormEvent) => {
    e.preventDefault();
    const prompt = text.trim();
    if (!prompt || !agent) return;
    setSending(true);
    setError(null);
    try {
      // Not aborted when the page is left: leaving the stream would cancel the run.
      const stream = session.hangar.runs.stream({ agent: agent.slug, threadId, prompt });
      let started = false;
      for await (const frame of stream) {
        if (!started && frame.type === 'run_started') {
          started = true;
          setText('');
          const runId = str(rec((frame as { payload?: unknown }).payload).runId) ?? str((frame as { runId?: unknown }).runId);
          if (runId) onRunStarted(runId);
        }
      }
      if (!started) setText('');
    } catch (err) {
      setError(toApiError(err));
    } finally {
      setSending(false);
    }
  };

  return (
    <form className="composer-form" onSubmit={(e) => void send(e)}>
      <ErrorBox error={agents.error} title="Could not list agents" />
      {agentId && agents.data && !own ? (
        <ErrorBox error={new Error(`this thread’s agent (${agentId}) no longer exists`)} title="Cannot send" />
      ) : null}
      {!agentId && agents.data ? (
        agents.data.length > 0 ? (
          <Field label="Agent">
            {(id) => (
              <select id={id} value={agent?.slug ?? ''} onChange={(e) => setChosen(e.target.value)}>
                {agents.data?.map((a) => (
                  <option key={a.id} value={a.slug}>
                    {a.slug}
                  </option>
                ))}
              </select>
            )}
          </Field>
        ) : (
          <p className="muted">
            No agent to run: <Link href="/agents/new">create one</Link>.
          </p>
        )
      ) : null}
      <div className="composer">
        <Field label="Message">
          {(id) => (
            <textarea
              id={id}
              rows={3}
              value={text}
              onChange={(e) => setText(e.target.value)}
              onKeyDown={(e) => {
                if (e.key === 'Enter' && (e.metaKey || e.ctrlKey)) e.currentTarget.form?.requestSubmit();
              }}
            />
          )}
        </Field>
        <button type="submit" className="btn btn-primary" disabled={sending || busy || !agent || !text.trim()} aria-busy={sending}>
          Send
        </button>
      </div>
      <ErrorBox error={error} title="Could not send" />
    </form>
  );
}
