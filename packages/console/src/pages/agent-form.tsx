import type { components } from '@hangar/sdk';
import { type FormEvent, useState } from 'react';
import { type ApiError, data, page, toApiError, useLoad, useSession } from '../api.js';
import { Button, ErrorBox, Field } from '../ui.js';

export type Agent = components['schemas']['Agent'];
type Mode = Agent['executionMode'];

/** The tools that act in the thread's sandbox: they need the `in_sandbox` mode (src/domains/agents/schemas.ts). */
export const SANDBOX_TOOLS = [
  { slug: 'exec_command', what: 'run shell commands' },
  { slug: 'write_stdin', what: 'type into a running command' },
  { slug: 'apply_patch', what: 'edit files with a patch' },
  { slug: 'view_image', what: 'look at an image file' },
] as const;
const SANDBOX_SLUGS: readonly string[] = SANDBOX_TOOLS.map((t) => t.slug);

export const MODES: { value: Mode; label: string }[] = [
  { value: 'managed', label: 'Managed (the model only, and server-side tools)' },
  { value: 'in_sandbox', label: 'In a sandbox (shell and file tools in the thread’s sandbox)' },
  { value: 'local-desktop', label: 'Local device (runs on one of your linked devices)' },
];

/** What the form edits, as the user typed it (numbers as text until they are sent). */
interface Draft {
  slug: string;
  name: string;
  description: string;
  instructions: string;
  model: string;
  executionMode: Mode;
  sandboxTemplate: string;
  targetDeviceId: string;
  tools: string[];
  maxTurns: string;
  maxTokens: string;
  temperature: string;
}

function draftOf(a: Agent | undefined): Draft {
  return {
    slug: a?.slug ?? '',
    name: a?.name ?? '',
    description: a?.description ?? '',
    instructions: a?.instructions ?? '',
    model: a?.model ?? '',
    executionMode: a?.executionMode ?? 'managed',
    sandboxTemplate: a?.sandboxTemplate ?? '',
    targetDeviceId: a?.targetDeviceId ?? '',
    tools: a?.tools ?? [],
    maxTurns: a?.config.maxTurns?.toString() ?? '',
    maxTokens: a?.config.maxTokens?.toString() ?? '',
    temperature: a?.config.temperature?.toString() ?? '',
  };
}

const num = (s: string) => (s.trim() === '' ? undefined : Number(s));
const orNull = (s: string) => (s.trim() === '' ? null : s.trim());

/**
 * The agent's definition as a labelled form: for a new agent (`agent` undefined: POST /v1/agents) or to change one
 * (PATCH /v1/agents/{slug}, the slug stays). The model, template, device and tool choices come from the API.
 */
export function AgentForm({ agent, onSaved }: { agent?: Agent; onSaved: (a: Agent) => void }) {
  const session = useSession();
  const { hangar } = session;
  const [d, setD] = useState<Draft>(() => draftOf(agent));
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const [saved, setSaved] = useState<string | null>(null);
  const [toolFilter, setToolFilter] = useState('');
  const set = <K extends keyof Draft>(k: K, v: Draft[K]) => {
    setSaved(null);
    setD((x) => ({ ...x, [k]: v }));
  };

  const models = useLoad(() => (session.can('models:use') ? data(hangar.api.GET('/v1/models/available')) : Promise.resolve(null)), []);
  const templates = useLoad(() => (session.can('templates:read') ? data(hangar.api.GET('/v1/templates')) : Promise.resolve(null)), []);
  const tools = useLoad(
    () =>
      session.can('tools:read')
        ? page(hangar.api.GET('/v1/tools', { params: { query: { limit: 200 } } })).then((p) => p.data)
        : Promise.resolve(null),
    [],
  );
  const nodes = useLoad(
    () =>
      session.can('runmesh:read') && d.executionMode === 'local-desktop'
        ? data(hangar.api.GET('/v1/runmesh/nodes', { params: { query: { all: 'true' } } })).then((r) => r.nodes)
        : Promise.resolve(null),
    [d.executionMode === 'local-desktop'],
  );

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    setSaved(null);
    const fields = {
      name: d.name.trim() || (agent ? agent.name : d.slug.trim()),
      description: orNull(d.description),
      instructions: orNull(d.instructions),
      model: orNull(d.model),
      executionMode: d.executionMode,
      sandboxTemplate: d.executionMode === 'in_sandbox' ? orNull(d.sandboxTemplate) : null,
      targetDeviceId: d.executionMode === 'local-desktop' ? orNull(d.targetDeviceId) : null,
      tools: d.tools,
      config: { maxTurns: num(d.maxTurns), maxTokens: num(d.maxTokens), temperature: num(d.temperature) },
    };
    try {
      const result = agent
        ? await data(hangar.api.PATCH('/v1/agents/{slug}', { params: { path: { slug: agent.slug } }, body: fields }))
        : await data(hangar.api.POST('/v1/agents', { body: { slug: d.slug.trim(), ...fields } }));
      setSaved(agent ? 'Saved.' : 'Created.');
      onSaved(result);
    } catch (err) {
      setError(toApiError(err));
    } finally {
      setBusy(false);
    }
  };

  const modelOptions = models.data
    ? [...models.data.platform.map((m) => ({ ...m, tier: 'platform' })), ...models.data.byok.map((m) => ({ ...m, tier: 'own key' }))]
    : [];
  const knownModel = modelOptions.some((m) => m.model === d.model);
  const catalogue = (tools.data ?? []).filter((t) => !SANDBOX_SLUGS.includes(t.slug));
  const needle = toolFilter.trim().toLowerCase();
  const shownTools = needle
    ? catalogue.filter((t) => d.tools.includes(t.slug) || `${t.slug} ${t.name} ${t.description}`.toLowerCase().includes(needle))
    : catalogue;
  // Tools the agent has that the catalogue does not list (a removed custom tool): kept, and shown so they can be unticked.
  const unknownTools = d.tools.filter((t) => !SANDBOX_SLUGS.includes(t) && !catalogue.some((c) => c.slug === t));
  const toggle = (slug: string, on: boolean) => set('tools', on ? [...d.tools.filter((t) => t !== slug), slug] : d.tools.filter((t) => t !== slug));
  const sandboxToolsWithoutSandbox = d.executionMode !== 'in_sandbox' && d.tools.some((t) => SANDBOX_SLUGS.includes(t));

  return (
    <form className="panel agent-form" onSubmit={submit} aria-label={agent ? `Edit ${agent.slug}` : 'New agent'}>
      <div className="agent-form-grid">
        <Field
          label="Slug"
          hint={
            agent
              ? 'The agent’s name in the API and the CLI; it cannot change.'
              : '1 to 63 lowercase letters, digits and “-”: how runs name the agent.'
          }
        >
          {(id) => (
            <input
              id={id}
              value={d.slug}
              onChange={(e) => set('slug', e.target.value)}
              required
              disabled={!!agent}
              pattern="[a-z0-9][a-z0-9\-]{0,62}"
              autoComplete="off"
              spellCheck={false}
            />
          )}
        </Field>
        <Field label="Name" hint={agent ? undefined : 'Shown in lists; the slug when left empty.'}>
          {(id) => <input id={id} value={d.name} onChange={(e) => set('name', e.target.value)} maxLength={200} />}
        </Field>
      </div>
      <Field label="Description">
        {(id) => <input id={id} value={d.description} onChange={(e) => set('description', e.target.value)} maxLength={4000} />}
      </Field>
      <Field label="Instructions" hint="The system instructions the model gets at the start of every run.">
        {(id) => <textarea id={id} value={d.instructions} onChange={(e) => set('instructions', e.target.value)} rows={6} />}
      </Field>
      <div className="agent-form-grid">
        <Field
          label="Model"
          hint={
            !session.can('models:use')
              ? 'Listing the models needs the models:use scope.'
              : models.data && modelOptions.length === 0
                ? 'No model is configured on this server.'
                : undefined
          }
        >
          {(id) => (
            <select id={id} value={d.model} onChange={(e) => set('model', e.target.value)}>
              <option value="">No model</option>
              {d.model && !knownModel ? <option value={d.model}>{d.model}</option> : null}
              {modelOptions.map((m) => (
                <option key={`${m.tier}:${m.model}`} value={m.model} disabled={!m.available && m.model !== d.model}>
                  {m.displayName === m.model ? m.model : `${m.displayName} (${m.model})`}
                  {m.tier === 'own key' ? ' · own key' : ''}
                  {m.available ? '' : ' · not configured'}
                </option>
              ))}
            </select>
          )}
        </Field>
        <Field label="Execution mode">
          {(id) => (
            <select id={id} value={d.executionMode} onChange={(e) => set('executionMode', e.target.value as Mode)}>
              {MODES.map((m) => (
                <option key={m.value} value={m.value}>
                  {m.label}
                </option>
              ))}
            </select>
          )}
        </Field>
        {d.executionMode === 'in_sandbox' ? (
          <Field label="Sandbox template" hint="The template of the sandbox the tools run in (base-ubuntu when none is chosen).">
            {(id) => (
              <select id={id} value={d.sandboxTemplate} onChange={(e) => set('sandboxTemplate', e.target.value)}>
                <option value="">Default (base-ubuntu)</option>
                {d.sandboxTemplate && !templates.data?.some((t) => t.slug === d.sandboxTemplate) ? (
                  <option value={d.sandboxTemplate}>{d.sandboxTemplate}</option>
                ) : null}
                {(templates.data ?? []).map((t) => (
                  <option key={t.id} value={t.slug} disabled={t.status !== 'ready' && t.slug !== d.sandboxTemplate}>
                    {t.name === t.slug ? t.slug : `${t.name} (${t.slug})`}
                    {t.status === 'ready' ? '' : ` · ${t.status}`}
                  </option>
                ))}
              </select>
            )}
          </Field>
        ) : null}
        {d.executionMode === 'local-desktop' ? (
          <Field label="Device" hint="The linked device the agent runs on (Settings → Devices links one).">
            {(id) =>
              nodes.data ? (
                <select id={id} value={d.targetDeviceId} onChange={(e) => set('targetDeviceId', e.target.value)} required>
                  <option value="">Choose a device</option>
                  {d.targetDeviceId && !nodes.data.some((n) => n.id === d.targetDeviceId) ? (
                    <option value={d.targetDeviceId}>{d.targetDeviceId}</option>
                  ) : null}
                  {nodes.data
                    .filter((n) => n.status === 'active')
                    .map((n) => (
                      <option key={n.id} value={n.id}>
                        {n.name} ({n.os}){n.online ? '' : ' · offline'}
                      </option>
                    ))}
                </select>
              ) : (
                <input id={id} value={d.targetDeviceId} onChange={(e) => set('targetDeviceId', e.target.value)} placeholder="node_…" required />
              )
            }
          </Field>
        ) : null}
      </div>
      <ErrorBox error={templates.error} title="Could not list templates" />
      <ErrorBox error={models.error} title="Could not list models" />
      <ErrorBox error={nodes.error} title="Could not list devices" />

      <fieldset className="agent-tools">
        <legend>Tools</legend>
        <p className="hint">
          Sandbox tools act in the thread’s sandbox and need the “In a sandbox” mode; catalogue tools run on the server once installed.
        </p>
        <ul className="checks">
          {SANDBOX_TOOLS.map((t) => (
            <li key={t.slug}>
              <label>
                <input
                  type="checkbox"
                  checked={d.tools.includes(t.slug)}
                  onChange={(e) => toggle(t.slug, e.target.checked)}
                  disabled={d.executionMode !== 'in_sandbox' && !d.tools.includes(t.slug)}
                />
                <span>
                  <code>{t.slug}</code> <span className="muted">{t.what}</span>
                </span>
              </label>
            </li>
          ))}
        </ul>
        {sandboxToolsWithoutSandbox ? (
          <p className="hint" role="status">
            Sandbox tools need the “In a sandbox” mode: untick them or change the mode.
          </p>
        ) : null}
        {session.can('tools:read') ? (
          <>
            <Field label="Find a catalogue tool">
              {(id) => (
                <input id={id} type="search" value={toolFilter} onChange={(e) => setToolFilter(e.target.value)} placeholder="Slug, name or words" />
              )}
            </Field>
            <ErrorBox error={tools.error} title="Could not list the tool catalogue" />
            <ul className="checks checks-scroll" aria-label="Catalogue tools">
              {unknownTools.map((slug) => (
                <li key={slug}>
                  <label>
                    <input type="checkbox" checked onChange={(e) => toggle(slug, e.target.checked)} />
                    <span>
                      <code>{slug}</code> <span className="muted">not in the catalogue</span>
                    </span>
                  </label>
                </li>
              ))}
              {shownTools.map((t) => (
                <li key={t.slug}>
                  <label>
                    <input type="checkbox" checked={d.tools.includes(t.slug)} onChange={(e) => toggle(t.slug, e.target.checked)} />
                    <span>
                      <code>{t.slug}</code> <span className="muted">{t.name}</span>
                    </span>
                  </label>
                </li>
              ))}
              {tools.data && shownTools.length === 0 ? <li className="muted">No catalogue tool matches.</li> : null}
            </ul>
          </>
        ) : (
          <p className="muted">The tool catalogue needs the tools:read scope.</p>
        )}
      </fieldset>

      <fieldset className="agent-config">
        <legend>Run defaults</legend>
        <div className="agent-form-grid">
          <Field label="Max turns" hint="Model turns per run (default 20)">
            {(id) => <input id={id} type="number" min={1} max={200} step={1} value={d.maxTurns} onChange={(e) => set('maxTurns', e.target.value)} />}
          </Field>
          <Field label="Max output tokens" hint="Per model turn">
            {(id) => (
              <input id={id} type="number" min={1} max={1000000} step={1} value={d.maxTokens} onChange={(e) => set('maxTokens', e.target.value)} />
            )}
          </Field>
          <Field label="Temperature" hint="0 to 2">
            {(id) => (
              <input id={id} type="number" min={0} max={2} step={0.1} value={d.temperature} onChange={(e) => set('temperature', e.target.value)} />
            )}
          </Field>
        </div>
      </fieldset>

      <ErrorBox error={error} title={agent ? 'Could not save the agent' : 'Could not create the agent'} />
      <div className="actions">
        <Button kind="primary" type="submit" disabled={busy} aria-busy={busy}>
          {busy ? 'Saving…' : agent ? 'Save changes' : 'Create agent'}
        </Button>
        <span role="status" className="muted">
          {saved}
        </span>
      </div>
    </form>
  );
}
