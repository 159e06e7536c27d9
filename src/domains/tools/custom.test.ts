import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { startMcpServer, type FakeMcp } from '../../../test/fakes/mcp-server.js';
import { startToolApi } from '../../../test/fakes/tool-api.js';
import { expectError, until } from '../../../test/helpers.js';
import { addOrgMember, createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { securitySuite } from '../../../test/security.js';

const MCP_TOKEN = 'mcp-token-5be2a9c1';
let seq = 0;
const API_KEY = 'custom-key-99d1';

let api: Awaited<ReturnType<typeof startToolApi>>;
let mcp: FakeMcp;
let h: Harness;
let admin: Actor;
let member: Actor;

const call = (actor: Actor, method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: unknown) =>
  h.app.inject({ method, url, headers: actor.headers, ...(payload !== undefined ? { payload: payload as object } : {}) });

async function ok(actor: Actor, method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: unknown, status = 200) {
  const res = await call(actor, method, url, payload);
  expect(res.statusCode, res.body).toBe(status);
  return res.body ? json(res).data : null;
}

const execute = (actor: Actor, slug: string, body: Record<string, unknown> = {}) =>
  ok(actor, 'POST', `/v1/tools/${slug}/execute`, { arguments: {}, ...body });

const weatherTool = (apiUrl: string) => ({
  inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
  output: 'the weather',
  credentials: [{ name: 'apiKey', required: true }],
  execution: { type: 'http', method: 'GET', url: `${apiUrl}/data/2.5/weather`, query: { q: '{{args.city}}', appid: '{{credentials.apiKey}}' } },
});

const openApiDoc = (apiUrl: string) => ({
  openapi: '3.0.3',
  info: { title: 'Probe', version: '1' },
  servers: [{ url: `${apiUrl}/probe` }],
  components: { securitySchemes: { key: { type: 'apiKey', in: 'header', name: 'X-Api-Key' }, basic: { type: 'http', scheme: 'basic' } } },
  security: [{ key: [] }],
  paths: {
    '/items/{id}': {
      get: {
        operationId: 'getItem',
        summary: 'One item',
        parameters: [
          { name: 'id', in: 'path', required: true, schema: { type: 'string' } },
          { name: 'verbose', in: 'query', schema: { type: 'boolean' } },
        ],
        responses: { 200: { description: 'the item' } },
      },
    },
    '/items': {
      post: {
        operationId: 'createItem',
        requestBody: {
          required: true,
          content: { 'application/json': { schema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } } },
        },
        responses: { 201: { description: 'created' } },
      },
    },
    '/admin': { get: { operationId: 'adminOnly', security: [{ basic: [] }], responses: { 200: { description: 'x' } } } },
  },
});

beforeAll(async () => {
  api = await startToolApi({ apiKeys: [API_KEY] });
  mcp = await startMcpServer({ bearer: MCP_TOKEN });
  h = await createHarness({ HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS: 'true', HANGAR_TOOLS_MCP_REFRESH_MS: '0' });
  admin = await createOrgAdmin(h);
  member = await addOrgMember(h, admin);
});

afterAll(async () => {
  await h?.close();
  await api?.close();
  await mcp?.close();
});

describe('custom HTTP tools', () => {
  let id: string;

  it('an admin defines one; it appears in the catalogue, installed for everyone, and members run it', async () => {
    expectError(await call(member, 'POST', '/v1/tools/custom', { kind: 'http', slug: 'weather', tool: weatherTool(api.url) }), 403, 'forbidden');
    const created = await ok(
      admin,
      'POST',
      '/v1/tools/custom',
      { kind: 'http', slug: 'weather', name: 'Our weather', tool: weatherTool(api.url) },
      201,
    );
    id = created.id;
    expect(created).toMatchObject({ slug: 'weather', kind: 'http', tools: ['weather'], skipped: [], lastError: null });
    await expectActivity(h, admin, { eventType: 'tool.custom.created', resourceType: 'tool', resourceId: 'weather' });
    const tool = await ok(member, 'GET', '/v1/tools/weather');
    expect(tool).toMatchObject({
      source: 'custom',
      name: 'Our weather',
      installed: { user: false, organization: true },
      execution: { hosts: [new URL(api.url).host] },
    });
    const out = await execute(member, 'weather', { arguments: { city: 'Oslo' }, credentials: { apiKey: API_KEY } });
    expect(out, JSON.stringify(out)).toMatchObject({ status: 'completed', credentialSources: { apiKey: 'request' } });
    expect(out.output.name).toBe('Oslo');
    expect((await ok(member, 'GET', '/v1/tools/custom')).map((t: { slug: string }) => t.slug)).toContain('weather');
  });

  it('refuses definitions that would leak credentials or let arguments pick the host', async () => {
    const bad = async (tool: unknown, slug = 'bad_tool') =>
      expectError(await call(admin, 'POST', '/v1/tools/custom', { kind: 'http', slug, tool }), 400, 'invalid_request');
    const base = weatherTool(api.url);
    expect((await bad({ ...base, execution: { ...base.execution, url: 'https://{{args.city}}/x' } })).message).toContain('literal host');
    expect((await bad({ ...base, execution: { ...base.execution, url: `${api.url}/k/{{credentials.apiKey}}` } })).message).toContain('URL path');
    expect((await bad({ ...base, execution: { ...base.execution, headers: { X: '{{credentials.nope}}' } } })).message).toContain(
      'not a declared credential field',
    );
    expect((await bad({ ...base, inputSchema: { type: 'string' } })).message).toContain('object');
    await bad(base, 'has__double');
    expectError(await call(admin, 'POST', '/v1/tools/custom', { kind: 'http', slug: 'web_search', tool: base }), 409, 'conflict');
    expectError(await call(admin, 'POST', '/v1/tools/custom', { kind: 'http', slug: 'weather', tool: base }), 409, 'conflict');
    expect((await ok(admin, 'GET', '/v1/tools/custom')).map((t: { slug: string }) => t.slug)).not.toContain('bad_tool');
  });

  it('PATCH changes it, DELETE removes the tool, its installs and its stored credentials', async () => {
    await ok(member, 'POST', '/v1/tools/weather/credentials', { apiKey: API_KEY });
    const patched = await ok(admin, 'PATCH', `/v1/tools/custom/${id}`, { description: 'Weather, ours' });
    expect(patched.description).toBe('Weather, ours');
    expectError(await call(admin, 'PATCH', `/v1/tools/custom/${id}`, { url: 'https://example.com/mcp' }), 400, 'invalid_request');
    expect((await execute(member, 'weather', { arguments: { city: 'Rome' } })).credentialSources).toEqual({ apiKey: 'stored' });
    expect((await call(admin, 'DELETE', `/v1/tools/custom/${id}`)).statusCode).toBe(204);
    expectError(await call(member, 'GET', '/v1/tools/weather'), 404, 'not_found');
    const left = await h.deps.db.kysely.selectFrom('tool_credentials').select('id').where('slug', '=', 'weather').execute();
    expect(left).toEqual([]);
    expectError(await call(admin, 'GET', `/v1/tools/custom/${id}`), 404, 'not_found');
  });
});

describe('OpenAPI tool sets', () => {
  it('imports one tool per operation, says what it skipped, and runs them with the key header', async () => {
    const created = await ok(admin, 'POST', '/v1/tools/custom', { kind: 'openapi', slug: 'probe', document: openApiDoc(api.url) }, 201);
    expect(created.tools.sort()).toEqual(['probe__create_item', 'probe__get_item']);
    expect(created.skipped).toEqual([expect.objectContaining({ name: 'adminOnly' })]);
    const tool = await ok(member, 'GET', '/v1/tools/probe__get_item');
    expect(tool.credentials.map((c: { name: string }) => c.name)).toEqual(['key']);
    const out = await execute(member, 'probe__get_item', { arguments: { id: 'a/b', verbose: true }, credentials: { key: 'k-123' } });
    expect(out, JSON.stringify(out)).toMatchObject({ status: 'completed' });
    const sent = api.requests.at(-1)!;
    expect(sent.path).toBe('/probe/items/a%2Fb');
    expect(sent.headers['x-api-key']).toBe('k-123');
    expect(sent.query).toMatchObject({ verbose: 'true' });
    const made = await execute(member, 'probe__create_item', { arguments: { name: 'widget' }, credentials: { key: 'k-123' } });
    expect(made.status).toBe('completed');
    expect(api.requests.at(-1)!.body).toEqual({ name: 'widget' });
  });

  it('takes YAML text, and a document with nothing importable is a 400', async () => {
    const yaml = `openapi: 3.1.0\ninfo: {title: Y, version: '1'}\nservers: [{url: '${api.url}/probe'}]\npaths:\n  /ping:\n    get:\n      operationId: ping\n      responses: {'200': {description: ok}}\n`;
    const created = await ok(admin, 'POST', '/v1/tools/custom', { kind: 'openapi', slug: 'yamlset', document: yaml }, 201);
    expect(created.tools).toEqual(['yamlset__ping']);
    expectError(
      await call(admin, 'POST', '/v1/tools/custom', { kind: 'openapi', slug: 'swag', document: { swagger: '2.0', paths: {} } }),
      400,
      'invalid_request',
    );
    expectError(await call(admin, 'POST', '/v1/tools/custom', { kind: 'openapi', slug: 'junk', document: 'a: [unclosed' }), 400, 'invalid_request');
  });
});

describe('MCP servers', () => {
  let id: string;

  it('registers a server; without its credentials it lists nothing and says which field is missing', async () => {
    const created = await ok(
      admin,
      'POST',
      '/v1/tools/custom',
      {
        kind: 'mcp',
        slug: 'srv',
        url: mcp.url,
        headers: { Authorization: 'Bearer {{credentials.token}}' },
        credentials: [{ name: 'token', required: true }],
      },
      201,
    );
    id = created.id;
    expect(created).toMatchObject({
      kind: 'mcp',
      tools: [],
      headerNames: ['Authorization'],
      credentials: [{ name: 'token', required: true }],
      url: mcp.url,
    });
    expect(created.lastError).toContain('token');
    expect(JSON.stringify(created)).not.toContain('{{credentials.token}}');
  });

  it('with the token stored for the organization, a refresh lists its tools, and they run through the SDK client', async () => {
    await ok(admin, 'POST', '/v1/tools/srv/credentials?scope=organization', { token: MCP_TOKEN });
    const refreshed = await ok(admin, 'POST', `/v1/tools/custom/${id}/refresh`);
    expect(refreshed.lastError).toBeNull();
    expect(refreshed.tools).toEqual(expect.arrayContaining(['srv__echo', 'srv__add', 'srv__whoami', 'srv__fail']));
    const echo = await execute(member, 'srv__echo', { arguments: { text: 'hi there' } });
    expect(echo, JSON.stringify(echo)).toMatchObject({ status: 'completed', output: 'echo: hi there', credentialSources: { token: 'stored' } });
    const add = await execute(member, 'srv__add', { arguments: { a: 40, b: 2 } });
    expect(add.output).toMatchObject({ structured: { sum: 42 } });
    // The server saw the token the chain filled in; what it says back about it is blanked out.
    const who = await execute(member, 'srv__whoami');
    expect(who.output).toBe('Bearer [redacted]');
    expect(mcp.requests.at(-1)!.headers.authorization).toBe(`Bearer ${MCP_TOKEN}`);
    const failed = await execute(member, 'srv__fail');
    expect(failed).toMatchObject({ status: 'failed', error: { code: 'tool_error' } });
    expectError(await call(member, 'POST', '/v1/tools/srv__echo/execute', { arguments: { text: 5 } }), 400, 'invalid_request');
  });

  it('a refresh follows the server: new tools are installed, gone ones lose their installs', async () => {
    mcp.setExtraTools(['extra_one']);
    const more = await ok(admin, 'POST', `/v1/tools/custom/${id}/refresh`);
    expect(more.tools).toContain('srv__extra_one');
    expect((await ok(member, 'GET', '/v1/tools/srv__extra_one')).installed.organization).toBe(true);
    mcp.setExtraTools([]);
    const fewer = await ok(admin, 'POST', `/v1/tools/custom/${id}/refresh`);
    expect(fewer.tools).not.toContain('srv__extra_one');
    expectError(await call(member, 'GET', '/v1/tools/srv__extra_one'), 404, 'not_found');
    const installs = await h.deps.db.kysely.selectFrom('tool_installs').select('slug').where('slug', '=', 'srv__extra_one').execute();
    expect(installs).toEqual([]);
    await expectActivity(h, admin, { eventType: 'tool.custom.refreshed', resourceType: 'tool', resourceId: 'srv' });
  });

  it('a server that fails keeps its last list and records why', async () => {
    await ok(admin, 'PATCH', `/v1/tools/custom/${id}`, { url: 'http://127.0.0.1:9/mcp' });
    const after = await ok(admin, 'GET', `/v1/tools/custom/${id}`);
    expect(after.tools).toContain('srv__echo');
    expect(after.lastError).toContain('mcp_unreachable');
    const run = await execute(member, 'srv__echo', { arguments: { text: 'x' } });
    expect(run).toMatchObject({ status: 'failed', error: { code: 'mcp_unreachable' } });
    await ok(admin, 'PATCH', `/v1/tools/custom/${id}`, { url: mcp.url });
    expect((await ok(admin, 'GET', `/v1/tools/custom/${id}`)).lastError).toBeNull();
  });

  it('only MCP servers refresh', async () => {
    const set = (await ok(admin, 'GET', '/v1/tools/custom')).find((t: { slug: string }) => t.slug === 'probe');
    expectError(await call(admin, 'POST', `/v1/tools/custom/${set.id}/refresh`), 409, 'invalid_state');
  });

  it('the refresh job lists servers on its schedule', async () => {
    const timed = await createHarness({ HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS: 'true', HANGAR_TOOLS_MCP_REFRESH_MS: '1000' });
    try {
      const a = await createOrgAdmin(timed);
      const open = await startMcpServer();
      try {
        const res = await timed.app.inject({
          method: 'POST',
          url: '/v1/tools/custom',
          headers: a.headers,
          payload: { kind: 'mcp', slug: 'timed', url: open.url },
        });
        expect(res.statusCode, res.body).toBe(201);
        open.setExtraTools(['later']);
        await until(
          'the job lists the new tool',
          async () => {
            const one = await timed.app.inject({ method: 'GET', url: `/v1/tools/custom/${json(res).data.id}`, headers: a.headers });
            return (json(one).data.tools as string[]).includes('timed__later');
          },
          { timeoutMs: 15_000 },
        );
      } finally {
        await open.close();
      }
    } finally {
      await timed.close();
    }
  });
});

describe('custom tools and the egress guard', () => {
  it('where private networks are not allowed, neither an MCP server nor an HTTP tool reaches loopback', async () => {
    const guarded = await createHarness();
    try {
      const a = await createOrgAdmin(guarded);
      const before = mcp.requests.length;
      const srv = await guarded.app.inject({
        method: 'POST',
        url: '/v1/tools/custom',
        headers: a.headers,
        payload: { kind: 'mcp', slug: 'inside', url: mcp.url },
      });
      expect(srv.statusCode, srv.body).toBe(201);
      expect(json(srv).data.lastError).toContain('blocked_address');
      expect(mcp.requests.length).toBe(before);
      const tool = {
        ...weatherTool(api.url),
        credentials: [] as unknown[],
        execution: { type: 'http', method: 'GET', url: `${api.url}/probe/inside` },
      };
      const made = await guarded.app.inject({
        method: 'POST',
        url: '/v1/tools/custom',
        headers: a.headers,
        payload: { kind: 'http', slug: 'inside_http', tool },
      });
      expect(made.statusCode, made.body).toBe(201);
      const apiBefore = api.requests.length;
      const res = await guarded.app.inject({
        method: 'POST',
        url: '/v1/tools/inside_http/execute',
        headers: a.headers,
        payload: { arguments: { city: 'x' } },
      });
      expect(json(res).data).toMatchObject({ status: 'failed', error: { code: 'blocked_address' } });
      expect(api.requests.length).toBe(apiBefore);
    } finally {
      await guarded.close();
    }
  });
});

/** Creates a custom tool as `owner` and answers its URL (for the security cases that need one to exist). */
async function customUrl(hh: Harness, owner: Actor, payload: Record<string, unknown>): Promise<string> {
  const res = await hh.app.inject({ method: 'POST', url: '/v1/tools/custom', headers: owner.headers, payload });
  expect(res.statusCode, res.body).toBe(201);
  return `/v1/tools/custom/${json(res).data.id}`;
}

securitySuite('custom tools', [
  { method: 'GET', url: () => '/v1/tools/custom', scope: 'tools:read' },
  {
    method: 'POST',
    url: () => '/v1/tools/custom',
    scope: 'tools:admin',
    body: { kind: 'http', slug: 'sec_tool', tool: weatherTool('https://api.example.com') },
  },
  {
    method: 'GET',
    scope: 'tools:read',
    crossOrg: true,
    url: (owner, hh) => customUrl(hh, owner, { kind: 'http', slug: `s${++seq}`, tool: weatherTool('https://api.example.com') }),
  },
  {
    method: 'PATCH',
    scope: 'tools:admin',
    crossOrg: true,
    body: { description: 'x' },
    url: (owner, hh) => customUrl(hh, owner, { kind: 'http', slug: `p${++seq}`, tool: weatherTool('https://api.example.com') }),
  },
  {
    method: 'DELETE',
    scope: 'tools:admin',
    crossOrg: true,
    url: (owner, hh) => customUrl(hh, owner, { kind: 'http', slug: `d${++seq}`, tool: weatherTool('https://api.example.com') }),
  },
  {
    method: 'POST',
    scope: 'tools:admin',
    url: async (owner, hh) => `${await customUrl(hh, owner, { kind: 'mcp', slug: `m${++seq}`, url: 'http://127.0.0.1:9/mcp' })}/refresh`,
  },
]);
