import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { FakeOAuthServer } from '../../../test/fakes/oauth-server.js';
import { startSearchServer } from '../../../test/fakes/search-server.js';
import { startToolApi } from '../../../test/fakes/tool-api.js';
import { expectError } from '../../../test/helpers.js';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { fakeProvidersEnv } from '../../../test/oauth.js';
import { securitySuite } from '../../../test/security.js';
import { ALL_SCOPES } from '../../platform/scopes.js';

const AUTH_URL = 'http://127.0.0.1:8787';
const CALLBACK = `${AUTH_URL}/v1/oauth/callback`;
const OWM_KEY = 'owm-key-4f1d9c';
const SEARCH_KEY = 'brave-key-77aa';
const ALICE = { id: 'gh-alice', email: 'alice@example.test', username: 'alice', name: 'Alice Example' };
const ALICE_WORK = { id: 'gh-alice-work', email: 'alice@work.test', username: 'alice-work', name: 'Alice at Work' };

let fake: FakeOAuthServer;
let api: Awaited<ReturnType<typeof startToolApi>>;
let search: Awaited<ReturnType<typeof startSearchServer>>;
let h: Harness;
let admin: Actor;
let member: Actor;
/** Every response body the tests saw, searched at the end for credential values. */
const bodies: string[] = [];
const SECRET_VALUES = [OWM_KEY, SEARCH_KEY, 'stored-val', 'secret-val', 'override-val'];

/** The shipped catalogue with its hosts pointed at the loopback fakes, plus two probe tools: an operator's file. */
function catalogFile(apiUrl: string): string {
  const shipped = JSON.parse(readFileSync(new URL('./catalog.json', import.meta.url), 'utf8')) as { tools: { execution: { url?: string } }[] };
  const tools = shipped.tools
    .filter((t) => t.execution.url)
    .map((t) => ({
      ...t,
      execution: { ...t.execution, url: t.execution.url!.replace(/^https:\/\/[^/]+/, apiUrl) },
    }));
  tools.push(
    {
      slug: 'probe_chain',
      name: 'Probe (one OAuth-backed field)',
      category: 'test',
      inputSchema: { type: 'object', properties: {}, additionalProperties: false },
      credentials: [{ name: 'accessToken', required: true }],
      oauth: { provider: 'github', scopes: [], field: 'accessToken' },
      execution: { type: 'http', method: 'GET', url: `${apiUrl}/probe/chain`, headers: { Authorization: 'Bearer {{credentials.accessToken}}' } },
    } as never,
    {
      slug: 'probe_fields',
      name: 'Probe (five fields)',
      category: 'test',
      inputSchema: { type: 'object', properties: {}, additionalProperties: false },
      credentials: ['fa', 'fb', 'fc', 'fd', 'accessToken'].map((name) => ({ name, required: true })),
      oauth: { provider: 'github', scopes: [], field: 'accessToken' },
      execution: {
        type: 'http',
        method: 'GET',
        url: `${apiUrl}/probe/fields`,
        headers: {
          'X-A': '{{credentials.fa}}',
          'X-B': '{{credentials.fb}}',
          'X-C': '{{credentials.fc}}',
          'X-D': '{{credentials.fd}}',
          'X-E': '{{credentials.accessToken}}',
        },
      },
    } as never,
  );
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'hangar-tools-')), 'catalog.json');
  writeFileSync(file, JSON.stringify({ tools }));
  return file;
}

async function call(actor: Actor | { headers: Record<string, string> } | null, method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown) {
  const res = await h.app.inject({ method, url, headers: actor?.headers ?? {}, ...(payload !== undefined ? { payload: payload as object } : {}) });
  bodies.push(res.body);
  return res;
}

async function ok(
  actor: Actor | { headers: Record<string, string> },
  method: 'GET' | 'POST' | 'DELETE',
  url: string,
  payload?: unknown,
  status = 200,
) {
  const res = await call(actor, method, url, payload);
  expect(res.statusCode, res.body).toBe(status);
  return res.body ? json(res).data : null;
}

const execute = (actor: Actor | { headers: Record<string, string> }, slug: string, body: Record<string, unknown> = {}) =>
  ok(actor, 'POST', `/v1/tools/${slug}/execute`, { arguments: {}, ...body });

/** Connects a GitHub (loopback OAuth server) account for `actor` through the browser flow. */
async function connect(actor: Actor, account: { id: string }): Promise<string> {
  const start = await call(actor, 'GET', '/v1/oauth/start/github');
  expect(start.statusCode, start.body).toBe(200);
  const url = new URL(await fake.authorize(json(start).data.authUrl, account.id));
  expect(`${url.origin}${url.pathname}`).toBe(CALLBACK);
  const cb = await call(null, 'GET', `${url.pathname}${url.search}`);
  expect(cb.statusCode, cb.body).toBe(200);
  const list = await ok(actor, 'GET', '/v1/oauth/connections?provider=github');
  return (list as { id: string; accountId: string }[]).find((c) => c.accountId === account.id)!.id;
}

beforeAll(async () => {
  fake = await new FakeOAuthServer({ redirectUris: [CALLBACK] }).start();
  for (const a of [ALICE, ALICE_WORK]) fake.addAccount(a);
  api = await startToolApi({ apiKeys: [OWM_KEY], userinfoUrl: fake.urls('standard').userinfo });
  search = await startSearchServer({ apiKey: SEARCH_KEY });
  h = await createHarness({
    ...fakeProvidersEnv(fake, [{ slug: 'github', behaviour: 'standard' }]),
    HANGAR_AUTH_URL: AUTH_URL,
    HANGAR_TOOLS_CATALOG_FILE: catalogFile(api.url),
    HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS: 'true',
    HANGAR_SEARCH_PROVIDER: 'brave',
    HANGAR_SEARCH_API_KEY: SEARCH_KEY,
    HANGAR_SEARCH_URL: `${search.url}/res/v1/web/search`,
  });
  admin = await createOrgAdmin(h);
  member = await addOrgMember(h, admin);
});

afterAll(async () => {
  await h?.close();
  await api?.close();
  await search?.close();
  await fake?.close();
});

describe('the catalogue', () => {
  it('lists the shipped tools with their schemas, credential fields, OAuth needs and hosts', async () => {
    const res = await call(member, 'GET', '/v1/tools?limit=200');
    expect(res.statusCode, res.body).toBe(200);
    const tools = json(res).data as Record<string, any>[];
    const slugs = tools.map((t) => t.slug);
    for (const s of [
      'web_search',
      'http_request',
      'github_list_issues',
      'github_create_issue',
      'slack_post_message',
      'notion_search',
      'openweathermap_current',
      'resend_send_email',
    ])
      expect(slugs).toContain(s);
    expect(slugs).toEqual([...slugs].sort());
    const gh = tools.find((t) => t.slug === 'github_create_issue')!;
    expect(gh.oauth).toEqual({ provider: 'github', scopes: ['repo'] });
    expect(gh.credentials).toEqual([expect.objectContaining({ name: 'accessToken', required: true, oauth: true })]);
    expect(gh.inputSchema.required).toEqual(['owner', 'repo', 'title']);
    expect(gh.execution).toEqual({ type: 'http', method: 'POST', hosts: [new URL(api.url).host] });
    const owm = tools.find((t) => t.slug === 'openweathermap_current')!;
    expect(owm.credentials).toEqual([expect.objectContaining({ name: 'apiKey', required: true, oauth: false })]);
    expect(owm.installed).toEqual({ user: false, organization: false });
    expect(tools.find((t) => t.slug === 'web_search')!).toMatchObject({
      available: true,
      unavailableReason: null,
      execution: { type: 'builtin', hosts: [] },
    });
  });

  it('searches by words and category, and pages with a cursor', async () => {
    const found = (await ok(member, 'GET', '/v1/tools?q=github%20issue')) as { slug: string }[];
    expect(found.map((t) => t.slug)).toEqual(['github_create_issue', 'github_list_issues']);
    const comms = (await ok(member, 'GET', '/v1/tools?category=communication')) as { slug: string }[];
    expect(comms.map((t) => t.slug)).toEqual(['resend_send_email', 'slack_post_message']);
    const first = await call(member, 'GET', '/v1/tools?limit=3');
    const p1 = json(first);
    expect(p1.data).toHaveLength(3);
    expect(p1.meta.hasMore).toBe(true);
    const p2 = json(await call(member, 'GET', `/v1/tools?limit=3&cursor=${p1.meta.nextCursor}`));
    expect(p2.data[0].slug > p1.data[2].slug).toBe(true);
    expectError(await call(member, 'GET', '/v1/tools?cursor=nonsense'), 400, 'invalid_request');
    expectError(await call(member, 'GET', '/v1/tools?limit=0'), 400, 'invalid_request');
  });

  it('shows one tool, and an unknown slug is a 404', async () => {
    const one = await ok(member, 'GET', '/v1/tools/openweathermap_current');
    expect(one.name).toContain('OpenWeatherMap');
    expectError(await call(member, 'GET', '/v1/tools/no_such_tool'), 404, 'not_found');
    expectError(await call(member, 'GET', '/v1/tools/NOT..valid'), 400, 'invalid_request');
  });

  it('says web_search cannot run where no search provider is configured', async () => {
    const bare = await createHarness();
    try {
      const a = await createOrgAdmin(bare);
      const res = await bare.app.inject({ method: 'GET', url: '/v1/tools/web_search', headers: a.headers });
      expect(json(res).data).toMatchObject({ available: false, unavailableReason: expect.stringContaining('HANGAR_SEARCH_PROVIDER') });
    } finally {
      await bare.close();
    }
  });

  it('refuses a bad catalogue file at start-up, naming the setting and the tool', async () => {
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'hangar-tools-')), 'bad.json');
    const bad = (execution: unknown, extra: Record<string, unknown> = {}) => {
      writeFileSync(file, JSON.stringify({ tools: [{ slug: 'evil_tool', name: 'x', inputSchema: { type: 'object' }, execution, ...extra }] }));
      return createHarness({ HANGAR_TOOLS_CATALOG_FILE: file }).then(
        (x) => x.close().then(() => ''),
        (err: Error) => err.message,
      );
    };
    const hostFromArg = await bad({ type: 'http', method: 'GET', url: 'https://{{args.host}}/x' });
    expect(hostFromArg).toContain('HANGAR_TOOLS_CATALOG_FILE');
    expect(hostFromArg).toContain('evil_tool');
    expect(
      await bad({ type: 'http', method: 'GET', url: 'https://api.example.com/{{credentials.apiKey}}' }, { credentials: [{ name: 'apiKey' }] }),
    ).toContain('credentials may not go into the URL path');
    expect(await bad({ type: 'http', method: 'GET', url: 'https://api.example.com/x', headers: { A: '{{env.HOME}}' } })).toContain(
      'unknown placeholder',
    );
    expect(await bad({ type: 'http', method: 'GET', url: 'https://api.example.com/x', headers: { A: '{{credentials.token}}' } })).toContain(
      'not a declared credential field',
    );
  });
});

describe('installs', () => {
  it('installs for the caller (201, then 200), lists it and uninstalls it, with activity', async () => {
    const first = await call(member, 'POST', '/v1/tools/notion_search/install', {});
    expect(first.statusCode, first.body).toBe(201);
    expect(json(first).data).toMatchObject({ slug: 'notion_search', scope: 'user', installedByUserId: member.userId });
    expect((await call(member, 'POST', '/v1/tools/notion_search/install', {})).statusCode).toBe(200);
    const installed = (await ok(member, 'GET', '/v1/tools/installed')) as { slug: string; tool: { installed: unknown } }[];
    expect(installed.find((i) => i.slug === 'notion_search')?.tool.installed).toEqual({ user: true, organization: false });
    // Another member's install is theirs alone.
    expect(((await ok(admin, 'GET', '/v1/tools/installed')) as { slug: string }[]).some((i) => i.slug === 'notion_search')).toBe(false);
    await expectActivity(h, member, { eventType: 'tool.installed', resourceType: 'tool', resourceId: 'notion_search' });
    expect((await call(member, 'DELETE', '/v1/tools/notion_search/install')).statusCode).toBe(204);
    expectError(await call(member, 'DELETE', '/v1/tools/notion_search/install'), 404, 'not_found');
    await expectActivity(h, member, { eventType: 'tool.uninstalled', resourceType: 'tool', resourceId: 'notion_search' });
  });

  it('organization-wide installs need tools:admin, which members cannot hold', async () => {
    expectError(await call(member, 'POST', '/v1/tools/resend_send_email/install', { scope: 'organization' }), 403, 'forbidden');
    const res = await call(admin, 'POST', '/v1/tools/resend_send_email/install', { scope: 'organization' });
    expect(res.statusCode, res.body).toBe(201);
    const seen = (await ok(member, 'GET', '/v1/tools/installed')) as { slug: string; scope: string }[];
    expect(seen).toContainEqual(expect.objectContaining({ slug: 'resend_send_email', scope: 'organization' }));
    expectError(await call(member, 'DELETE', '/v1/tools/resend_send_email/install?scope=organization'), 403, 'forbidden');
    expect((await call(admin, 'DELETE', '/v1/tools/resend_send_email/install?scope=organization')).statusCode).toBe(204);
  });

  it('installing an unknown tool is a 404, and a tool that is not installed does not run', async () => {
    expectError(await call(member, 'POST', '/v1/tools/nope_tool/install', {}), 404, 'not_found');
    const err = expectError(
      await call(member, 'POST', '/v1/tools/openweathermap_current/execute', { arguments: { city: 'Paris' } }),
      409,
      'tool_not_installed',
    );
    expect(err.message).toContain('/v1/tools/openweathermap_current/install');
  });
});

describe('stored credentials', () => {
  beforeAll(async () => {
    await call(member, 'POST', '/v1/tools/openweathermap_current/install', {});
  });

  it('stores fields encrypted, shows names only, refuses unknown fields and deletes', async () => {
    const bad = expectError(
      await call(member, 'POST', '/v1/tools/openweathermap_current/credentials', { apiKey: 'x', password: 'y' }),
      400,
      'invalid_request',
    );
    expect(bad.message).toContain('password');
    expect((await ok(member, 'GET', '/v1/tools/openweathermap_current/credentials')).stored).toBe(false);
    const stored = await ok(member, 'POST', '/v1/tools/openweathermap_current/credentials', { apiKey: OWM_KEY });
    expect(stored).toMatchObject({ stored: true, fields: ['apiKey'], missingRequired: [], scope: 'user' });
    const row = await h.deps.db.kysely.selectFrom('tool_credentials').selectAll().where('user_id', '=', member.userId).executeTakeFirstOrThrow();
    expect(row.values_ciphertext).not.toContain(OWM_KEY);
    await expectActivity(h, member, {
      eventType: 'tool.credentials.updated',
      resourceType: 'tool',
      resourceId: 'openweathermap_current',
      metadata: { fields: ['apiKey'] },
    });
    // The admin sees nothing of the member's own credentials.
    expect((await ok(admin, 'GET', '/v1/tools/openweathermap_current/credentials')).stored).toBe(false);
  });

  it("the organization's credentials need credentials:admin", async () => {
    expectError(await call(member, 'POST', '/v1/tools/resend_send_email/credentials?scope=organization', { apiKey: 'x' }), 403, 'forbidden');
    const stored = await ok(admin, 'POST', '/v1/tools/resend_send_email/credentials?scope=organization', { apiKey: 're_org' });
    expect(stored).toMatchObject({ scope: 'organization', fields: ['apiKey'] });
    expect((await ok(member, 'GET', '/v1/tools/resend_send_email/credentials')).missingRequired).toEqual([]);
    expect((await call(admin, 'DELETE', '/v1/tools/resend_send_email/credentials?scope=organization')).statusCode).toBe(204);
    expectError(await call(admin, 'DELETE', '/v1/tools/resend_send_email/credentials?scope=organization'), 404, 'not_found');
  });
});

describe('execution', () => {
  it('runs an installed HTTP tool with stored credentials and records it', async () => {
    const before = api.requests.length;
    const out = await execute(member, 'openweathermap_current', { arguments: { city: 'Paris', units: 'metric' } });
    expect(out, JSON.stringify(out)).toMatchObject({
      status: 'completed',
      error: null,
      credentialSources: { apiKey: 'stored' },
      httpStatus: 200,
      connection: null,
    });
    expect(out.output.name).toBe('Paris');
    const sent = api.requests.slice(before).find((r) => r.path === '/data/2.5/weather')!;
    expect(sent.query).toMatchObject({ q: 'Paris', units: 'metric', appid: OWM_KEY });
    const rec = await h.deps.db.kysely.selectFrom('tool_executions').selectAll().where('id', '=', out.id).executeTakeFirstOrThrow();
    expect(rec).toMatchObject({ tool: 'openweathermap_current', via: 'api', status: 'completed', run_id: null, user_id: member.userId });
    expect(JSON.parse(rec.credential_sources!)).toEqual({ apiKey: 'stored' });
    await expectActivity(h, member, {
      eventType: 'tool.call.completed',
      resourceType: 'tool',
      resourceId: 'openweathermap_current',
      metadata: { executionId: out.id },
    });
  });

  it("a provider's error is a failed execution with its message, not a 5xx", async () => {
    const out = await execute(member, 'openweathermap_current', { arguments: { city: 'Atlantis' } });
    expect(out).toMatchObject({ status: 'failed', httpStatus: 404, error: { code: 'tool_http_error' } });
    expect(out.error.message).toContain('city not found');
    await expectActivity(h, member, { eventType: 'tool.call.failed', resourceType: 'tool', resourceId: 'openweathermap_current' });
  });

  it('arguments that do not match the schema are a 400 naming the problem', async () => {
    const err = expectError(
      await call(member, 'POST', '/v1/tools/openweathermap_current/execute', { arguments: { town: 'Paris' } }),
      400,
      'invalid_request',
    );
    expect(err.message).toMatch(/city|town/);
    expectError(
      await call(member, 'POST', '/v1/tools/openweathermap_current/execute', { arguments: { city: 'Paris' }, surprise: 1 }),
      400,
      'invalid_request',
    );
    expectError(
      await call(member, 'POST', '/v1/tools/openweathermap_current/execute', { arguments: { city: 'Paris' }, credentials: { password: 'x' } }),
      400,
      'invalid_request',
    );
  });

  it('a missing credential is a clear tool error naming the fields, never a value', async () => {
    await ok(admin, 'POST', '/v1/tools/openweathermap_current/install', {}, 201);
    const out = await execute(admin, 'openweathermap_current', { arguments: { city: 'Paris' } });
    expect(out).toMatchObject({ status: 'failed', output: null, error: { code: 'credentials_missing', missingFields: ['apiKey'] } });
    expect(out.error.message).toContain('APIKEY');
    expect(out.error.connect).toBeUndefined();
  });

  it('an OAuth tool with no connection fails with where to connect; with one it runs as the default account or the one named', async () => {
    await ok(admin, 'POST', '/v1/tools/github_list_issues/install', {}, 201);
    await ok(admin, 'POST', '/v1/tools/github_create_issue/install', {}, 201);
    const none = await execute(admin, 'github_list_issues', { arguments: { owner: 'acme', repo: 'app' } });
    expect(none).toMatchObject({
      status: 'failed',
      error: {
        code: 'credentials_missing',
        missingFields: ['accessToken'],
        connect: { provider: 'github', startUrl: `${AUTH_URL}/v1/oauth/start/github` },
      },
    });

    const personal = await connect(admin, ALICE);
    const work = await connect(admin, ALICE_WORK);
    const created = await execute(admin, 'github_create_issue', {
      arguments: { owner: 'acme', repo: 'app', title: 'Broken build', labels: ['bug'] },
    });
    expect(created, JSON.stringify(created)).toMatchObject({
      status: 'completed',
      credentialSources: { accessToken: 'oauth' },
      connection: { id: personal, accountId: ALICE.id },
    });
    expect(created.output).toMatchObject({ title: 'Broken build', number: expect.any(Number) });
    const listed = await execute(admin, 'github_list_issues', { arguments: { owner: 'acme', repo: 'app' }, oauth: { account: 'alice@work.test' } });
    expect(listed).toMatchObject({ status: 'completed', connection: { id: work, accountId: ALICE_WORK.id } });
    expect((listed.output as { title: string }[]).map((i) => i.title)).toContain('Broken build');
    const unknown = await execute(admin, 'github_list_issues', {
      arguments: { owner: 'acme', repo: 'app' },
      oauth: { account: 'nobody@example.test' },
    });
    expect(unknown).toMatchObject({ status: 'failed', error: { code: 'credentials_missing', connect: { provider: 'github' } } });
    expect(unknown.error.message).toContain('nobody@example.test');
    // A key without connections:use may not act through connected accounts, and is told why.
    const limited = {
      headers: {
        'x-api-key': await keyFor(
          h,
          admin,
          ALL_SCOPES.filter((s) => s !== 'connections:use'),
        ),
      },
    };
    const refused = await execute(limited, 'github_list_issues', { arguments: { owner: 'acme', repo: 'app' } });
    expect(refused).toMatchObject({ status: 'failed', error: { code: 'credentials_missing' } });
    expect(refused.error.message).toContain('connections:use');
  });

  it('web_search goes through the configured provider; the key never comes back', async () => {
    await ok(member, 'POST', '/v1/tools/web_search/install', {}, 201);
    const out = await execute(member, 'web_search', { arguments: { query: 'hangar agents', count: 2 } });
    expect(out, JSON.stringify(out)).toMatchObject({ status: 'completed' });
    expect(out.output.results).toHaveLength(2);
    expect(out.output.results[0]).toEqual({ title: expect.any(String), url: expect.stringMatching(/^https?:/), description: expect.any(String) });
    expect(search.requests.at(-1)!.headers['x-subscription-token']).toBe(SEARCH_KEY);
  });

  it('http_request reaches a public-looking URL here (private networks allowed for the fakes), with no credentials attached', async () => {
    await ok(member, 'POST', '/v1/tools/http_request/install', {}, 201);
    const out = await execute(member, 'http_request', {
      arguments: { method: 'POST', url: `${api.url}/probe/echo?x=1`, body: '{"a":1}', headers: { 'content-type': 'application/json' } },
    });
    expect(out, JSON.stringify(out)).toMatchObject({ status: 'completed', httpStatus: 200 });
    expect(out.output.body).toMatchObject({ method: 'POST', path: '/probe/echo', body: { a: 1 } });
    expect(out.output.body.headers.authorization).toBeUndefined();
  });
});

describe('the credential chain', () => {
  const STEPS = ['request', 'override', 'stored', 'secret', 'oauth'] as const;
  let connected: Actor;
  let unconnected: Actor;

  beforeAll(async () => {
    connected = await addOrgMember(h, admin);
    unconnected = await addOrgMember(h, admin);
    for (const a of [connected, unconnected]) {
      await ok(a, 'POST', '/v1/tools/probe_chain/install', {}, 201);
      await ok(a, 'POST', '/v1/tools/probe_fields/install', {}, 201);
      await ok(a, 'POST', '/v1/secrets', { name: 'OVR_SECRET', value: 'override-val', scope: 'user' }, 201);
    }
    await connect(connected, ALICE);
  });

  /** What the probe received as its bearer token. */
  const lastAuth = () => api.requests.at(-1)!.headers.authorization as string | undefined;

  it('walks all 32 combinations of the five steps: the first step that has the field supplies it', async () => {
    for (let mask = 0; mask < 32; mask++) {
      const on = (step: (typeof STEPS)[number]) => (mask & (1 << STEPS.indexOf(step))) !== 0;
      const actor = on('oauth') ? connected : unconnected;
      if (on('stored')) await ok(actor, 'POST', '/v1/tools/probe_chain/credentials', { accessToken: 'stored-val' });
      else await call(actor, 'DELETE', '/v1/tools/probe_chain/credentials');
      if (on('secret'))
        expect([200, 201]).toContain(
          (await call(actor, 'POST', '/v1/secrets', { name: 'ACCESSTOKEN', value: 'secret-val', scope: 'user' })).statusCode,
        );
      else await call(actor, 'DELETE', '/v1/secrets/ACCESSTOKEN?scope=user');
      const before = api.requests.length;
      const out = await execute(actor, 'probe_chain', {
        ...(on('request') ? { credentials: { accessToken: 'request-val' } } : {}),
        ...(on('override') ? { credentialOverrides: { accessToken: 'OVR_SECRET' } } : {}),
      });
      const expected = STEPS.find(on);
      const label = `mask ${mask.toString(2).padStart(5, '0')}`;
      if (!expected) {
        expect(out, label).toMatchObject({
          status: 'failed',
          error: { code: 'credentials_missing', missingFields: ['accessToken'], connect: { provider: 'github' } },
        });
        expect(api.requests.length, label).toBe(before);
        continue;
      }
      expect(out, `${label}: ${JSON.stringify(out)}`).toMatchObject({ status: 'completed', credentialSources: { accessToken: expected } });
      const values = { request: 'request-val', override: 'override-val', stored: 'stored-val', secret: 'secret-val' } as Record<string, string>;
      if (expected === 'oauth') {
        expect(lastAuth(), label).toMatch(/^Bearer .{10,}/);
        expect(
          Object.values(values).map((v) => `Bearer ${v}`),
          label,
        ).not.toContain(lastAuth());
      } else expect(lastAuth(), label).toBe(`Bearer ${values[expected]}`);
    }
  });

  it('each step fills only the fields still missing', async () => {
    const actor = connected;
    await call(actor, 'DELETE', '/v1/secrets/ACCESSTOKEN?scope=user');
    await ok(actor, 'POST', '/v1/tools/probe_fields/credentials', { fa: 'stored-a', fc: 'stored-val' });
    await ok(actor, 'POST', '/v1/secrets', { name: 'FD', value: 'secret-val', scope: 'user' }, 201);
    await ok(actor, 'POST', '/v1/secrets', { name: 'FC', value: 'secret-c', scope: 'user' }, 201);
    const out = await execute(actor, 'probe_fields', {
      credentials: { fa: 'request-a' },
      credentialOverrides: { fb: 'OVR_SECRET', fa: 'OVR_SECRET' },
    });
    expect(out, JSON.stringify(out)).toMatchObject({
      status: 'completed',
      credentialSources: { fa: 'request', fb: 'override', fc: 'stored', fd: 'secret', accessToken: 'oauth' },
    });
    const sent = api.requests.at(-1)!.headers;
    expect([sent['x-a'], sent['x-b'], sent['x-c'], sent['x-d']]).toEqual(['request-a', 'override-val', 'stored-val', 'secret-val']);
    expect(String(sent['x-e']).length).toBeGreaterThan(10);
  });

  it('an organization secret fills a field the member has none for, and the member’s own wins over it', async () => {
    const actor = unconnected;
    await call(actor, 'DELETE', '/v1/tools/probe_chain/credentials');
    await call(actor, 'DELETE', '/v1/secrets/ACCESSTOKEN?scope=user');
    await ok(admin, 'POST', '/v1/secrets', { name: 'ACCESSTOKEN', value: 'org-secret', scope: 'organization' }, 201);
    expect((await execute(actor, 'probe_chain')).credentialSources).toEqual({ accessToken: 'secret' });
    expect(lastAuth()).toBe('Bearer org-secret');
    await ok(actor, 'POST', '/v1/secrets', { name: 'ACCESSTOKEN', value: 'secret-val', scope: 'user' }, 201);
    await execute(actor, 'probe_chain');
    expect(lastAuth()).toBe('Bearer secret-val');
  });
});

describe('no credential value ever leaves in a response', () => {
  it('none of the bodies above contains a stored, secret or provider key value', () => {
    const all = bodies.join('\n');
    for (const v of SECRET_VALUES) expect(all.includes(v), v).toBe(false);
  });
});

describe('the egress guard on tool requests', () => {
  let guarded: Harness;
  let user: Actor;
  beforeAll(async () => {
    guarded = await createHarness();
    user = await createOrgAdmin(guarded);
    await guarded.app.inject({ method: 'POST', url: '/v1/tools/http_request/install', headers: user.headers, payload: {} });
  });
  afterAll(() => guarded?.close());

  it('refuses loopback, private, link-local and metadata addresses in every spelling, and nothing reaches the target', async () => {
    const before = api.requests.length;
    const port = new URL(api.url).port;
    for (const url of [
      `${api.url}/probe/ssrf`,
      `http://localhost:${port}/probe/ssrf`,
      `http://2130706433:${port}/probe/ssrf`,
      `http://0x7f.1:${port}/probe/ssrf`,
      `http://[::ffff:127.0.0.1]:${port}/probe/ssrf`,
      'http://169.254.169.254/latest/meta-data/',
      'http://10.0.0.1/',
      'http://192.168.1.1/',
      'http://[fd00::1]/',
    ]) {
      const res = await guarded.app.inject({
        method: 'POST',
        url: '/v1/tools/http_request/execute',
        headers: user.headers,
        payload: { arguments: { url } },
      });
      expect(res.statusCode, res.body).toBe(200);
      const out = json(res).data;
      expect(out.status, url).toBe('failed');
      expect(['blocked_address', 'invalid_url'], `${url}: ${out.error.code}`).toContain(out.error.code);
    }
    expect(api.requests.length).toBe(before);
  });
});

securitySuite('tools', [
  { method: 'GET', url: () => '/v1/tools', scope: 'tools:read' },
  { method: 'GET', url: () => '/v1/tools/installed', scope: 'tools:read' },
  { method: 'GET', url: () => '/v1/tools/web_search', scope: 'tools:read' },
  { method: 'POST', url: () => '/v1/tools/web_search/install', scope: 'tools:write', body: {} },
  { method: 'DELETE', url: () => '/v1/tools/web_search/install', scope: 'tools:write' },
  { method: 'POST', url: () => '/v1/tools/openweathermap_current/credentials', scope: 'tools:write', body: { apiKey: 'k' } },
  { method: 'GET', url: () => '/v1/tools/openweathermap_current/credentials', scope: 'tools:read' },
  { method: 'DELETE', url: () => '/v1/tools/openweathermap_current/credentials', scope: 'tools:write' },
  { method: 'POST', url: () => '/v1/tools/web_search/execute', scope: 'tools:execute', body: { arguments: { query: 'x' } } },
]);
