import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { securitySuite } from '../../../test/security.js';
import { ALL_SCOPES, ROLE_SCOPES } from '../../platform/scopes.js';

// Installing calls no model, so a catalogue naming models (behind a port nothing listens on) is all it needs.
const MODELS = { HANGAR_OPENAI_BASE_URL: 'http://127.0.0.1:9/v1', HANGAR_OPENAI_API_KEY: 'sk-test', HANGAR_OPENAI_MODELS: 'model-a,model-b' };

type Headers = { headers: Record<string, string> };

describe('installable agents', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness(MODELS);
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h?.close());

  const call = (actor: Headers, method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown) =>
    h.app.inject({ method, url, headers: actor.headers, ...(payload !== undefined ? { payload: payload as object } : {}) });

  async function ok(actor: Headers, method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown, status = 200) {
    const res = await call(actor, method, url, payload);
    expect(res.statusCode, res.body).toBe(status);
    return res.body ? json(res).data : null;
  }

  /** The slugs installed for `actor` (user) and for the organization. */
  async function installedTools(actor: Headers): Promise<string[]> {
    const list = (await ok(actor, 'GET', '/v1/tools/installed')) as { slug: string; scope: string }[];
    return list.map((i) => `${i.slug}:${i.scope}`).sort();
  }

  it('lists the catalogue with each tool’s availability here, without a model', async () => {
    const list = (await ok(admin, 'GET', '/v1/installable-agents')) as Record<string, any>[];
    expect(list.map((a) => a.slug)).toEqual(['research-assistant', 'github-triage', 'weather-reporter', 'slack-notifier']);
    for (const a of list) {
      expect(a).toMatchObject({ executionMode: 'managed', name: expect.any(String), category: expect.any(String) });
      expect(a.instructions.length).toBeGreaterThan(100);
      expect(a.config.maxTurns).toBeGreaterThan(0);
      expect(a).not.toHaveProperty('model');
    }
    const research = list.find((a) => a.slug === 'research-assistant')!;
    // No search provider is configured on this server: web_search says what to set; http_request needs nothing.
    expect(research.tools).toEqual([
      { slug: 'web_search', available: false, unavailableReason: expect.stringContaining('HANGAR_SEARCH_PROVIDER') },
      { slug: 'http_request', available: true, unavailableReason: null },
    ]);
    expect(await ok(admin, 'GET', '/v1/installable-agents/github-triage')).toMatchObject({
      slug: 'github-triage',
      tools: [
        { slug: 'github_list_issues', available: true },
        { slug: 'github_create_issue', available: true },
      ],
    });
    const missing = await call(admin, 'GET', '/v1/installable-agents/no-such-agent');
    expect(missing.statusCode).toBe(404);
    expect(json(missing).error.code).toBe('not_found');
  });

  it('installs an agent with the first model, installs its tools and reports the credentials they lack', async () => {
    const res = await ok(admin, 'POST', '/v1/installable-agents/weather-reporter/install', {}, 201);
    expect(res.install).toMatchObject({
      id: expect.stringMatching(/^iai_/),
      slug: 'weather-reporter',
      agentId: res.agent.id,
      agentSlug: 'weather-reporter',
      installedByUserId: admin.userId,
    });
    expect(res.agent).toMatchObject({
      slug: 'weather-reporter',
      name: 'Weather reporter',
      executionMode: 'managed',
      model: 'model-a',
      tools: ['openweathermap_current'],
      metadata: { installableAgent: 'weather-reporter' },
    });
    expect(res.agent.instructions).toContain('openweathermap_current');
    expect(res.tools).toEqual([
      {
        slug: 'openweathermap_current',
        installed: true,
        available: true,
        unavailableReason: null,
        missingCredentials: ['apiKey'],
        oauthProvider: null,
        oauthConnected: null,
      },
    ]);
    // What a user sees afterwards: the agent, and the tool installed for them.
    expect(await ok(admin, 'GET', '/v1/agents/weather-reporter')).toMatchObject({ model: 'model-a', config: { maxTurns: 6 } });
    expect(await installedTools(admin)).toContain('openweathermap_current:user');
    const event = await expectActivity(h, admin, {
      eventType: 'installable_agent.installed',
      resourceType: 'installable_agent_install',
      resourceId: res.install.id,
      metadata: { slug: 'weather-reporter', agentSlug: 'weather-reporter', model: 'model-a', scope: 'user' },
    });
    expect(event.installableAgentInstallId).toBe(res.install.id);
    await expectActivity(h, admin, { eventType: 'tool.installed', resourceType: 'tool', resourceId: 'openweathermap_current' });
    await expectActivity(h, admin, { eventType: 'agent.created', resourceType: 'agent', resourceId: res.agent.id });

    // Stored credentials are no longer reported missing on the next install.
    await ok(admin, 'POST', '/v1/tools/openweathermap_current/credentials', { apiKey: 'owm-key' });
    const again = await ok(admin, 'POST', '/v1/installable-agents/weather-reporter/install', { agentSlug: 'weather-2' }, 201);
    expect(again.tools[0].missingCredentials).toEqual([]);
  });

  it('an OAuth-backed agent reports the provider and whether it is connected; a given model and agent slug are used', async () => {
    const res = await ok(
      admin,
      'POST',
      '/v1/installable-agents/github-triage/install',
      { agentSlug: 'triage', model: 'model-b', scope: 'organization' },
      201,
    );
    expect(res.agent).toMatchObject({ slug: 'triage', model: 'model-b', tools: ['github_list_issues', 'github_create_issue'] });
    expect(res.install.agentSlug).toBe('triage');
    for (const tool of res.tools) {
      // The token field is filled from the connected account, so it is not a credential to store.
      expect(tool).toMatchObject({ installed: true, missingCredentials: [], oauthProvider: 'github', oauthConnected: false });
    }
    expect(await installedTools(admin)).toEqual(expect.arrayContaining(['github_create_issue:organization', 'github_list_issues:organization']));
    // A credential that may not list connections gets null: unknown, not "not connected".
    const key = await keyFor(
      h,
      admin,
      ALL_SCOPES.filter((s) => s !== 'connections:read'),
    );
    const blind = await ok({ headers: { 'x-api-key': key } }, 'POST', '/v1/installable-agents/github-triage/install', { agentSlug: 'triage-2' }, 201);
    expect(blind.tools.map((t: { oauthConnected: unknown }) => t.oauthConnected)).toEqual([null, null]);
  });

  it('a taken agent slug is 409 and leaves nothing behind: no install, no tool installs, the agent untouched', async () => {
    const org = await createOrgAdmin(h);
    await ok(org, 'POST', '/v1/agents', { slug: 'slack-notifier', instructions: 'mine' }, 201);
    const before = await installedTools(org);
    const res = await call(org, 'POST', '/v1/installable-agents/slack-notifier/install', {});
    expect(res.statusCode, res.body).toBe(409);
    expect(json(res).error.code).toBe('conflict');
    expect(json(res).error.message).toContain('slack-notifier');
    expect(await ok(org, 'GET', '/v1/installable-agents/installs')).toEqual([]);
    expect(await installedTools(org)).toEqual(before);
    expect(before).not.toContain('slack_post_message:user');
    expect(await ok(org, 'GET', '/v1/agents/slack-notifier')).toMatchObject({ instructions: 'mine', tools: [] });
    const events = (await ok(org, 'GET', '/v1/activity?limit=200')).events as { eventType: string }[];
    expect(events.map((e) => e.eventType)).not.toContain('tool.installed');
    expect(events.map((e) => e.eventType)).not.toContain('installable_agent.installed');

    // An unknown model is refused the same way, after the tool installs would have run.
    const bad = await call(org, 'POST', '/v1/installable-agents/slack-notifier/install', { agentSlug: 'other', model: 'no-such-model' });
    expect(bad.statusCode).toBe(400);
    expect(json(bad).error.message).toContain('model');
    expect(await installedTools(org)).toEqual(before);
  });

  it('installing for the organization needs tools:admin; members install for themselves', async () => {
    const member = await addOrgMember(h, admin);
    const refused = await call(member, 'POST', '/v1/installable-agents/slack-notifier/install', { agentSlug: 'm-slack', scope: 'organization' });
    expect(refused.statusCode).toBe(403);
    expect(json(refused).error.message).toContain('tools:admin');
    expect((await call(member, 'GET', '/v1/agents/m-slack')).statusCode).toBe(404);
    const res = await ok(member, 'POST', '/v1/installable-agents/slack-notifier/install', { agentSlug: 'm-slack' }, 201);
    expect(res.tools[0]).toMatchObject({ slug: 'slack_post_message', oauthProvider: 'slack', oauthConnected: false });
    expect(await installedTools(member)).toContain('slack_post_message:user');
    const noTools = await keyFor(
      h,
      member,
      [...ROLE_SCOPES.member].filter((s) => s !== 'tools:write'),
    );
    const denied = await call({ headers: { 'x-api-key': noTools } }, 'POST', '/v1/installable-agents/slack-notifier/install', { agentSlug: 'm-2' });
    expect(denied.statusCode).toBe(403);
    expect(json(denied).error.message).toContain('tools:write');
  });

  it('lists, reads and uninstalls: members see their own installs, admins every one; the tools stay installed', async () => {
    const org = await createOrgAdmin(h);
    const alice = await addOrgMember(h, org);
    const bob = await addOrgMember(h, org);
    const mine = (await ok(alice, 'POST', '/v1/installable-agents/research-assistant/install', {}, 201)).install;
    const theirs = (await ok(bob, 'POST', '/v1/installable-agents/weather-reporter/install', {}, 201)).install;

    expect(await ok(alice, 'GET', '/v1/installable-agents/installs')).toEqual([mine]);
    expect(await ok(org, 'GET', '/v1/installable-agents/installs')).toEqual([theirs, mine]);
    expect(await ok(alice, 'GET', `/v1/installable-agents/installs/${mine.id}`)).toEqual(mine);
    expect(await ok(org, 'GET', `/v1/installable-agents/installs/${theirs.id}`)).toEqual(theirs);
    // Another member's install is 404, to read and to delete, and stays.
    expect((await call(alice, 'GET', `/v1/installable-agents/installs/${theirs.id}`)).statusCode).toBe(404);
    expect((await call(alice, 'DELETE', `/v1/installable-agents/installs/${theirs.id}`)).statusCode).toBe(404);
    expect((await call(alice, 'GET', '/v1/installable-agents/installs/iai_nope')).statusCode).toBe(404);

    await ok(alice, 'DELETE', `/v1/installable-agents/installs/${mine.id}`, undefined, 204);
    expect((await call(alice, 'GET', `/v1/installable-agents/installs/${mine.id}`)).statusCode).toBe(404);
    expect((await call(alice, 'DELETE', `/v1/installable-agents/installs/${mine.id}`)).statusCode).toBe(404);
    expect((await call(alice, 'GET', '/v1/agents/research-assistant')).statusCode).toBe(404);
    expect(await installedTools(alice)).toEqual(expect.arrayContaining(['http_request:user', 'web_search:user']));
    // A deleted install's events stay readable by its id.
    const gone = (await ok(alice, 'GET', `/v1/activity?installable_agent_install_id=${mine.id}`)).events as Record<string, unknown>[];
    expect(gone.map((e) => e.eventType)).toEqual(['installable_agent.uninstalled', 'installable_agent.installed']);
    expect(gone[0]).toMatchObject({
      resourceType: 'installable_agent_install',
      metadata: { slug: 'research-assistant', agentSlug: 'research-assistant' },
    });
    await expectActivity(h, alice, { eventType: 'agent.deleted', resourceType: 'agent', metadata: { slug: 'research-assistant' } });

    // An agent deleted on its own leaves the install, which then names no agent and uninstalls cleanly.
    await ok(bob, 'DELETE', '/v1/agents/weather-reporter', undefined, 204);
    expect(await ok(bob, 'GET', `/v1/installable-agents/installs/${theirs.id}`)).toMatchObject({ agentSlug: null, agentId: theirs.agentId });
    // Its slug reused by a new agent is not the install's agent: uninstalling leaves that one alone.
    await ok(bob, 'POST', '/v1/agents', { slug: 'weather-reporter' }, 201);
    await ok(org, 'DELETE', `/v1/installable-agents/installs/${theirs.id}`, undefined, 204);
    expect(await ok(bob, 'GET', '/v1/agents/weather-reporter')).toMatchObject({ slug: 'weather-reporter' });
    expect(await ok(org, 'GET', '/v1/installable-agents/installs')).toEqual([]);
  });

  it('GET /v1/installable-agents/installs/{id}/activity lists the install’s events for whoever may see the install', async () => {
    const org = await createOrgAdmin(h);
    const member = await addOrgMember(h, org);
    const other = await addOrgMember(h, org);
    const { install } = await ok(member, 'POST', '/v1/installable-agents/slack-notifier/install', {}, 201);
    const url = `/v1/installable-agents/installs/${install.id}/activity`;
    const events = (await ok(member, 'GET', url)).events as Record<string, unknown>[];
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      eventType: 'installable_agent.installed',
      resourceType: 'installable_agent_install',
      resourceId: install.id,
      installableAgentInstallId: install.id,
      actorUserId: member.userId,
    });
    // The admin sees the member's events through the install; another member gets 404, here and by filter.
    expect((await ok(org, 'GET', url)).events).toHaveLength(1);
    expect((await call(other, 'GET', url)).statusCode).toBe(404);
    const filter = `/v1/activity?resource_type=installable_agent_install&resource_id=${install.id}`;
    expect((await ok(member, 'GET', filter)).events).toHaveLength(1);
    expect((await call(other, 'GET', filter)).statusCode).toBe(404);
    // The shortcut takes the activity query.
    expect((await ok(member, 'GET', `${url}?event_type=installable_agent.uninstalled`)).events).toEqual([]);
  });
});

describe('installable agents on a server without models', () => {
  let h: Harness;
  beforeAll(async () => {
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'hangar-models-')), 'models.json');
    writeFileSync(file, JSON.stringify({ platform: [], byok: [] }));
    h = await createHarness({ HANGAR_MODELS_FILE: file });
  });
  afterAll(() => h?.close());

  it('refuses to install, saying to configure a model or pass one, and leaves nothing behind', async () => {
    const admin = await createOrgAdmin(h);
    const res = await h.app.inject({ method: 'POST', url: '/v1/installable-agents/weather-reporter/install', headers: admin.headers, payload: {} });
    expect(res.statusCode).toBe(400);
    expect(json(res).error.code).toBe('invalid_request');
    expect(json(res).error.message).toMatch(/model.*configure.*pass `model`/);
    const agents = await h.app.inject({ method: 'GET', url: '/v1/agents', headers: admin.headers });
    expect(json(agents).data).toEqual([]);
  });
});

let seq = 0;
/** An install made by `owner` (the security harness's first model, a default BYOK one, is the agent's). */
async function installOf(owner: Actor, h: Harness): Promise<string> {
  const res = await h.app.inject({
    method: 'POST',
    url: '/v1/installable-agents/weather-reporter/install',
    headers: owner.headers,
    payload: { agentSlug: `sec-${++seq}` },
  });
  expect(res.statusCode, res.body).toBe(201);
  return json(res).data.install.id;
}

securitySuite('installable agents', [
  { method: 'GET', url: () => '/v1/installable-agents', scope: 'agent:read' },
  { method: 'GET', url: () => '/v1/installable-agents/research-assistant', scope: 'agent:read' },
  { method: 'POST', url: () => '/v1/installable-agents/weather-reporter/install', scope: 'agent:write', body: {} },
  { method: 'GET', url: () => '/v1/installable-agents/installs', scope: 'agent:read' },
  { method: 'GET', url: async (o, h) => `/v1/installable-agents/installs/${await installOf(o, h)}`, scope: 'agent:read', crossOrg: true },
  { method: 'DELETE', url: async (o, h) => `/v1/installable-agents/installs/${await installOf(o, h)}`, scope: 'agent:write', crossOrg: true },
  {
    method: 'GET',
    url: async (o, h) => `/v1/installable-agents/installs/${await installOf(o, h)}/activity`,
    scope: 'activity:read',
    crossOrg: true,
  },
]);
