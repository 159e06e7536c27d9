import type { AddressInfo } from 'node:net';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeChatbot } from '../../../test/fakes/chatbot.js';
import { FakeOAuthServer } from '../../../test/fakes/oauth-server.js';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { startToolApi } from '../../../test/fakes/tool-api.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { until } from '../../../test/helpers.js';
import { fakeProvidersEnv, storedTokens } from '../../../test/oauth.js';

// The whole product story through the real clients: a chat sender linked to a product user talks to the
// agent; the agent's tool needs the product user's own account (never the builder's), so the first answer carries
// connect_required's "how to connect"; after the product user connects theirs, the same tool acts with their token.

const AUTH_URL = 'http://127.0.0.1:8788';
const CALLBACK = `${AUTH_URL}/v1/oauth/callback`;
const BUILDER = { id: 'gh-builder', email: 'builder@example.test', username: 'builder', name: 'The Builder' };
const CUSTOMER = { id: 'gh-customer', email: 'customer@example.test', username: 'customer', name: 'A Customer' };

describe('a product user chatting through a bound channel', () => {
  let oauth: FakeOAuthServer;
  let api: Awaited<ReturnType<typeof startToolApi>>;
  let model: FakeOpenAI;
  let bot: FakeChatbot;
  let h: Harness;
  let admin: Actor;
  let base: string;
  const token = '333:AAe2eBot';

  const ok = async (method: 'GET' | 'POST' | 'PATCH', url: string, payload?: unknown, status = 200) => {
    const res = await h.app.inject({ method, url, headers: admin.headers, ...(payload !== undefined ? { payload: payload as object } : {}) });
    expect(res.statusCode, res.body).toBe(status);
    return json(res).data;
  };

  beforeAll(async () => {
    oauth = await new FakeOAuthServer({ redirectUris: [CALLBACK] }).start();
    for (const a of [BUILDER, CUSTOMER]) oauth.addAccount(a);
    api = await startToolApi({ userinfoUrl: oauth.urls('standard').userinfo });
    model = await new FakeOpenAI().start();
    bot = await FakeChatbot.start();
    bot.addBot(token, { id: 333, username: 'notes_bot', firstName: 'Notes' });
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'hangar-channels-e2e-')), 'catalog.json');
    writeFileSync(
      file,
      JSON.stringify({
        tools: [
          {
            slug: 'probe_chain',
            name: 'Probe (one OAuth-backed field)',
            category: 'test',
            inputSchema: { type: 'object', properties: {}, additionalProperties: false },
            credentials: [{ name: 'accessToken', required: true }],
            oauth: { provider: 'github', scopes: [], field: 'accessToken' },
            execution: {
              type: 'http',
              method: 'GET',
              url: `${api.url}/probe/chain`,
              headers: { Authorization: 'Bearer {{credentials.accessToken}}' },
            },
          },
        ],
      }),
    );
    h = await createHarness({
      ...fakeProvidersEnv(oauth, [{ slug: 'github', behaviour: 'standard' }]),
      HANGAR_AUTH_URL: AUTH_URL,
      HANGAR_TOOLS_CATALOG_FILE: file,
      HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS: 'true',
      HANGAR_OPENAI_BASE_URL: model.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'm1',
      HANGAR_CHANNELS_CHATBOT_API_URL: bot.url,
    });
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    admin = await createOrgAdmin(h);
  });
  afterAll(async () => {
    await h?.close();
    await bot?.close();
    await model?.stop();
    await api?.close();
    await oauth?.close();
  });

  it('answers with connect_required’s how-to until the product user connects their own account, never the builder’s', async () => {
    // The builder: the tool installed for the organization, and their own connected account (never to be used).
    await ok('POST', '/v1/tools/probe_chain/install', { scope: 'organization' }, 201);
    const start = await ok('GET', '/v1/oauth/start/github');
    const cb = new URL(await oauth.authorize(start.authUrl, BUILDER.id));
    expect((await h.app.inject({ method: 'GET', url: `${cb.pathname}${cb.search}` })).statusCode).toBe(200);
    await ok('POST', '/v1/agents', { slug: 'notes', model: 'm1', instructions: 'Use your tool.', tools: ['probe_chain'] }, 201);
    await ok('POST', '/v1/secrets', { name: 'NOTES_BOT', value: token }, 201);
    const channel = await ok('POST', '/v1/agent-channels', { agent: 'notes', provider: 'chatbot_provider', botTokenSecretName: 'NOTES_BOT' }, 201);
    const reg = await fetch(`${base}/v1/agent-channels/${channel.id}/register-webhook`, { method: 'POST', headers: admin.headers });
    expect(reg.status).toBe(200);
    await ok('POST', '/v1/apps', { slug: 'notes-app', name: 'Notes App' }, 201);
    await ok(
      'POST',
      '/v1/apps/notes-app/channel-bindings',
      {
        agentChannelId: channel.id,
        identityPolicy: 'link_required',
        groupPolicy: 'disabled',
        metadata: { linkUrl: 'https://notes.example/link', connectUrl: 'https://notes.example/connections' },
      },
      201,
    );
    await ok(
      'POST',
      '/v1/apps/notes-app/channel-links',
      { agentChannelId: channel.id, externalUserId: '5151', productExternalUserId: 'cust-9' },
      201,
    );

    const before = api.requests.length;
    model.script({ toolCalls: [{ id: 'call_1', name: 'probe_chain', arguments: '{}' }] }, { text: 'I could not reach your notes.' });
    await bot.deliver(token, bot.privateText({ fromId: 5151, firstName: 'Cus', text: 'read my notes' }));
    const first = await until('the first reply', () => bot.sent.find((s) => s.chatId === '5151'));
    expect(first.text).toContain('I could not reach your notes.');
    expect(first.text).toContain('Connect the account it needs in Notes App: https://notes.example/connections');
    // The tool never ran: not with the builder's connection, not with anything else.
    expect(api.requests.length).toBe(before);
    const toolResult = model.requests.at(-1)!.body.messages.find((m: any) => m.role === 'tool');
    expect(JSON.stringify(toolResult)).toContain('connect_required');

    // The product's server lets its user connect their own account.
    const flow = await ok('POST', '/v1/apps/notes-app/end-users/cust-9/connections/github/start', {});
    const back = new URL(await oauth.authorize(flow.authUrl, CUSTOMER.id));
    expect((await h.app.inject({ method: 'GET', url: `${back.pathname}${back.search}` })).statusCode).toBe(200);
    const [connection] = await ok('GET', '/v1/apps/notes-app/end-users/cust-9/connections');

    model.script({ toolCalls: [{ id: 'call_2', name: 'probe_chain', arguments: '{}' }] }, { text: 'Here are your notes.' });
    await bot.deliver(token, bot.privateText({ fromId: 5151, firstName: 'Cus', text: 'try again' }));
    const second = await until('the second reply', () => bot.sent.filter((s) => s.chatId === '5151')[1]);
    expect(second.text).toBe('Here are your notes.');
    const { access } = await storedTokens(h.deps, connection.id);
    expect(api.requests.at(-1)!.headers.authorization).toBe(`Bearer ${access}`);
  });
});
