import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { FakeOAuthServer } from '../../../test/fakes/oauth-server.js';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { startToolApi } from '../../../test/fakes/tool-api.js';
import { expectError } from '../../../test/helpers.js';
import { createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { fakeProvidersEnv } from '../../../test/oauth.js';

const AUTH_URL = 'http://127.0.0.1:8787';
const CALLBACK = `${AUTH_URL}/v1/oauth/callback`;
const OWM_KEY = 'owm-run-key-31c';
const ALICE = { id: 'gh-run-alice', email: 'alice@run.test', username: 'alice-run', name: 'Alice Run' };
const WORK = { id: 'gh-run-work', email: 'work@run.test', username: 'alice-work', name: 'Alice Work' };

/** An operator's catalogue file: the weather and GitHub tools pointed at the loopback fake. */
function catalogFile(apiUrl: string): string {
  const shipped = JSON.parse(readShipped()) as { tools: { slug: string; execution: { url?: string } }[] };
  const tools = shipped.tools
    .filter((t) => ['openweathermap_current', 'github_list_issues'].includes(t.slug))
    .map((t) => ({ ...t, execution: { ...t.execution, url: t.execution.url!.replace(/^https:\/\/[^/]+/, apiUrl) } }));
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'hangar-run-tools-')), 'catalog.json');
  writeFileSync(file, JSON.stringify({ tools }));
  return file;
}

function readShipped(): string {
  return readFileSync(new URL('../tools/catalog.json', import.meta.url), 'utf8');
}

interface ThreadEvent {
  type: string;
  runId: string | null;
  payload: any;
}

describe('catalogue tools in agent runs', () => {
  let fake: FakeOpenAI;
  let oauth: FakeOAuthServer;
  let api: Awaited<ReturnType<typeof startToolApi>>;
  let h: Harness;
  let admin: Actor;

  const call = (actor: Actor | { headers: Record<string, string> }, method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown) =>
    h.app.inject({ method, url, headers: actor.headers, ...(payload !== undefined ? { payload: payload as object } : {}) });
  const events = async (threadId: string) => json(await call(admin, 'GET', `/v1/threads/${threadId}/events?limit=500`)).data.events as ThreadEvent[];

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    oauth = await new FakeOAuthServer({ redirectUris: [CALLBACK] }).start();
    for (const a of [ALICE, WORK]) oauth.addAccount(a);
    api = await startToolApi({ apiKeys: [OWM_KEY], userinfoUrl: oauth.urls('standard').userinfo });
    h = await createHarness({
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'm1',
      ...fakeProvidersEnv(oauth, [{ slug: 'github', behaviour: 'standard' }]),
      HANGAR_AUTH_URL: AUTH_URL,
      HANGAR_TOOLS_CATALOG_FILE: catalogFile(api.url),
      HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS: 'true',
    });
    admin = await createOrgAdmin(h);
  });
  afterAll(async () => {
    await h?.close();
    await api?.close();
    await oauth?.close();
    await fake?.stop();
  });

  it('an agent naming an unknown tool is a 400', async () => {
    const res = await call(admin, 'POST', '/v1/agents', { slug: 'broken', model: 'm1', tools: ['no_such_tool'] });
    expect(expectError(res, 400, 'invalid_request').message).toContain('no_such_tool');
  });

  it('a run refuses a tool its user has not installed, naming it', async () => {
    expect((await call(admin, 'POST', '/v1/agents', { slug: 'weather', model: 'm1', tools: ['openweathermap_current'] })).statusCode).toBe(201);
    const before = fake.requests.length;
    const err = expectError(await call(admin, 'POST', '/v1/run', { agent: 'weather', prompt: 'Weather in Paris?' }), 409, 'tool_not_installed');
    expect(err.message).toContain('openweathermap_current');
    expect(fake.requests.length).toBe(before);
  });

  it('offers the tool with its schema, runs it on the server and records it in the thread, the activity log and the meter', async () => {
    await call(admin, 'POST', '/v1/tools/openweathermap_current/install', {});
    await call(admin, 'POST', '/v1/tools/openweathermap_current/credentials', { apiKey: OWM_KEY });
    fake.script(
      { toolCalls: [{ id: 'call_w', name: 'openweathermap_current', arguments: JSON.stringify({ city: 'Paris' }) }] },
      { text: 'It is mild in Paris.' },
    );
    const before = fake.requests.length;
    const res = await call(admin, 'POST', '/v1/run', { agent: 'weather', prompt: 'Weather in Paris?' });
    expect(res.statusCode, res.body).toBe(200);
    const run = json(res).data;
    expect(run).toMatchObject({ status: 'completed', result: 'It is mild in Paris.', iterations: 2 });

    const offered = fake.requests[before]!.body.tools as { function: { name: string; parameters: { properties: object } } }[];
    expect(offered.map((t) => t.function.name)).toEqual(['openweathermap_current']);
    expect(Object.keys(offered[0]!.function.parameters.properties)).toEqual(['city', 'units']);

    expect(api.requests.at(-1)!.query).toMatchObject({ q: 'Paris', appid: OWM_KEY });
    const thread = (await events(run.threadId)).filter((e) => e.runId === run.runId);
    expect(thread.map((e) => e.type)).toEqual(['run_started', 'user_message', 'tool_call', 'tool_result', 'assistant_message', 'run_completed']);
    expect(thread[2]!.payload).toMatchObject({ toolCallId: 'call_w', name: 'openweathermap_current', input: { city: 'Paris' } });
    expect(thread[3]!.payload).toMatchObject({ toolCallId: 'call_w', isError: false });
    expect(thread[3]!.payload.output).toContain('"name":"Paris"');
    expect(thread[3]!.payload.output).not.toContain(OWM_KEY);
    // What the model got back for its next turn is the same answer.
    const toolMessage = fake.requests[before + 1]!.body.messages.find((m: { role: string }) => m.role === 'tool');
    expect(String(toolMessage.content)).toContain('Paris');

    const rows = await h.deps.db.kysely.selectFrom('tool_executions').selectAll().where('run_id', '=', run.runId).execute();
    expect(rows).toEqual([expect.objectContaining({ tool: 'openweathermap_current', via: 'run', status: 'completed' })]);
    expect(JSON.parse(rows[0]!.credential_sources!)).toEqual({ apiKey: 'stored' });
    const ev = await expectActivity(h, admin, {
      eventType: 'tool.call.completed',
      resourceType: 'tool',
      resourceId: 'openweathermap_current',
      metadata: { via: 'run' },
    });
    expect(ev.agentRunId).toBe(run.runId);
  });

  it("a tool's failure and the model's bad arguments are error results the model sees, and the run goes on", async () => {
    fake.script(
      { toolCalls: [{ id: 'call_bad', name: 'openweathermap_current', arguments: JSON.stringify({ town: 'Paris' }) }] },
      { toolCalls: [{ id: 'call_nowhere', name: 'openweathermap_current', arguments: JSON.stringify({ city: 'Atlantis' }) }] },
      { text: 'I could not find it.' },
    );
    const run = json(await call(admin, 'POST', '/v1/run', { agent: 'weather', prompt: 'Weather in Atlantis?' })).data;
    expect(run).toMatchObject({ status: 'completed', iterations: 3 });
    const results = (await events(run.threadId)).filter((e) => e.runId === run.runId && e.type === 'tool_result');
    expect(results.map((e) => e.payload.isError)).toEqual([true, true]);
    expect(results[0]!.payload.output).toContain('invalid_request');
    expect(results[1]!.payload.output).toContain('city not found');
    const rows = await h.deps.db.kysely.selectFrom('tool_executions').selectAll().where('run_id', '=', run.runId).orderBy('created_at').execute();
    expect(rows.map((r) => [r.status, r.error_code])).toEqual([
      ['failed', 'invalid_request'],
      ['failed', 'tool_http_error'],
    ]);
  });

  it('an OAuth tool in a run gets connected_account and acts as the account the model names', async () => {
    expect((await call(admin, 'POST', '/v1/agents', { slug: 'triage', model: 'm1', tools: ['github_list_issues'] })).statusCode).toBe(201);
    await call(admin, 'POST', '/v1/tools/github_list_issues/install', {});
    for (const account of [ALICE, WORK]) {
      const start = await call(admin, 'GET', '/v1/oauth/start/github');
      const url = new URL(await oauth.authorize(json(start).data.authUrl, account.id));
      expect((await h.app.inject({ method: 'GET', url: `${url.pathname}${url.search}` })).statusCode).toBe(200);
    }
    fake.script(
      {
        toolCalls: [
          {
            id: 'call_gh',
            name: 'github_list_issues',
            arguments: JSON.stringify({ owner: 'acme', repo: 'app', connected_account: 'work@run.test' }),
          },
        ],
      },
      { text: 'Three issues.' },
    );
    const before = fake.requests.length;
    const run = json(await call(admin, 'POST', '/v1/run', { agent: 'triage', prompt: 'List issues' })).data;
    expect(run.status).toBe('completed');
    const params = fake.requests[before]!.body.tools[0].function.parameters;
    expect(Object.keys(params.properties)).toEqual(expect.arrayContaining(['owner', 'repo', 'connected_account', 'connected_connection_id']));
    const result = (await events(run.threadId)).find((e) => e.runId === run.runId && e.type === 'tool_result')!;
    expect(result.payload.isError, result.payload.output).toBe(false);
    const execution = await h.deps.db.kysely.selectFrom('tool_executions').selectAll().where('run_id', '=', run.runId).executeTakeFirstOrThrow();
    expect(JSON.parse(execution.credential_sources!)).toEqual({ accessToken: 'oauth' });
    // The issue list came from the fake GitHub, which checked the token at the OAuth server.
    expect(api.requests.at(-1)!.path).toBe('/repos/acme/app/issues');
  });

  it('a key holding agent:run but not connections:use runs the agent, and the OAuth tool fails with the reason', async () => {
    const limited = { headers: { 'x-api-key': await keyFor(h, admin, ['agent:run', 'agent:read']) } };
    fake.script(
      { toolCalls: [{ id: 'call_l', name: 'github_list_issues', arguments: JSON.stringify({ owner: 'acme', repo: 'app' }) }] },
      { text: 'No access.' },
    );
    const res = await call(limited, 'POST', '/v1/run', { agent: 'triage', prompt: 'List issues' });
    expect(res.statusCode, res.body).toBe(200);
    const run = json(res).data;
    const result = (await events(run.threadId)).find((e) => e.runId === run.runId && e.type === 'tool_result')!;
    expect(result.payload.isError).toBe(true);
    expect(result.payload.output).toContain('connections:use');
  });
});
