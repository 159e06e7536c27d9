import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { seedChannel } from '../../../test/channels.js';
import { FakeOAuthServer } from '../../../test/fakes/oauth-server.js';
import { startToolApi } from '../../../test/fakes/tool-api.js';
import { expectError } from '../../../test/helpers.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { fakeProvidersEnv, storedTokens } from '../../../test/oauth.js';
import { securitySuite } from '../../../test/security.js';
import { systemCtx, type Ctx } from '../../platform/context.js';
import { executeTool } from '../tools/index.js';
import { activeLink, bindingForChannel, endUserCtx, isLinkToken, presentLinkToken, unlinkedSenderReply } from './product.js';

const AUTH_URL = 'http://127.0.0.1:8787';
const CALLBACK = `${AUTH_URL}/v1/oauth/callback`;
const LINK_URL = 'https://app.example.test/link-chat';
const BUILDER = { id: 'gh-builder', email: 'builder@example.test', username: 'builder', name: 'The Builder' };
const CUSTOMER = { id: 'gh-customer', email: 'customer@example.test', username: 'customer', name: 'A Customer' };

let fake: FakeOAuthServer;
let api: Awaited<ReturnType<typeof startToolApi>>;
let h: Harness;
let admin: Actor;
let other: Actor;

type Who = Actor | { headers: Record<string, string> } | null;
type Method = 'GET' | 'POST' | 'DELETE';

const call = (actor: Who, method: Method, url: string, payload?: unknown) =>
  h.app.inject({ method, url, headers: actor?.headers ?? {}, ...(payload !== undefined ? { payload: payload as object } : {}) });

async function ok(actor: Who, method: Method, url: string, payload?: unknown, status = 200) {
  const res = await call(actor, method, url, payload);
  expect(res.statusCode, res.body).toBe(status);
  return json(res).data;
}

/** A one-tool catalogue: an OAuth-backed probe on the loopback tool API, which echoes what it was sent. */
function catalogFile(apiUrl: string): string {
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'hangar-product-')), 'catalog.json');
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
          execution: { type: 'http', method: 'GET', url: `${apiUrl}/probe/chain`, headers: { Authorization: 'Bearer {{credentials.accessToken}}' } },
        },
      ],
    }),
  );
  return file;
}

let slugSeq = 0;
const newSlug = () => `app-${++slugSeq}-${randomBytes(3).toString('hex')}`;

/** The organization's system context for the verbs message processing calls (it holds the apps scopes). */
const processingCtx = (actor: Actor): Ctx =>
  systemCtx(h.deps, { userId: actor.userId, orgId: actor.orgId, role: null, scopes: new Set(['apps:read', 'apps:write']), apiKeyId: null });

/** A product app with a bound chat-bot channel. */
async function boundApp(actor: Actor, binding: Record<string, unknown> = {}, channelOpts: Parameters<typeof seedChannel>[2] = {}) {
  const slug = newSlug();
  const app = await ok(actor, 'POST', '/v1/apps', { slug, name: 'Acme Notes' }, 201);
  const channel = await seedChannel(h, actor, channelOpts);
  const b = await ok(
    actor,
    'POST',
    `/v1/apps/${slug}/channel-bindings`,
    { agentChannelId: channel.id, identityPolicy: 'link_required', metadata: { linkUrl: LINK_URL }, ...binding },
    201,
  );
  return { slug, app, channelId: channel.id, binding: b };
}

const session = (actor: Actor, slug: string, body: Record<string, unknown>) => ok(actor, 'POST', `/v1/apps/${slug}/channel-link-sessions`, body, 201);
const complete = (actor: Actor, slug: string, id: string, body: Record<string, unknown>) =>
  call(actor, 'POST', `/v1/apps/${slug}/channel-link-sessions/${id}/complete`, body);

beforeAll(async () => {
  fake = await new FakeOAuthServer({ redirectUris: [CALLBACK] }).start();
  for (const a of [BUILDER, CUSTOMER]) fake.addAccount(a);
  api = await startToolApi({ userinfoUrl: fake.urls('standard').userinfo });
  h = await createHarness({
    ...fakeProvidersEnv(fake, [{ slug: 'github', behaviour: 'standard' }]),
    HANGAR_AUTH_URL: AUTH_URL,
    HANGAR_TOOLS_CATALOG_FILE: catalogFile(api.url),
    HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS: 'true',
    HANGAR_CHANNELS_CHATBOT_LINK_URL: 'https://chat.example.test',
    HANGAR_CHANNELS_BUSINESS_LINK_URL: 'https://biz.example.test',
  });
  admin = await createOrgAdmin(h);
  other = await createOrgAdmin(h);
});

afterAll(async () => {
  await h?.close();
  await api?.close();
  await fake?.close();
});

describe('product apps', () => {
  it('create, list, get and delete; a taken slug is 409; an unknown one 404', async () => {
    const slug = newSlug();
    const app = await ok(admin, 'POST', '/v1/apps', { slug, name: 'Acme Notes' }, 201);
    expect(app).toMatchObject({
      id: expect.stringMatching(/^app_/),
      slug,
      name: 'Acme Notes',
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
    });
    expectError(await call(admin, 'POST', '/v1/apps', { slug, name: 'Again' }), 409, 'conflict');
    // Another organization may use the same slug.
    await ok(other, 'POST', '/v1/apps', { slug, name: 'Theirs' }, 201);
    expect((await ok(admin, 'GET', '/v1/apps')).map((a: { slug: string }) => a.slug)).toContain(slug);
    expect(await ok(admin, 'GET', `/v1/apps/${slug}`)).toEqual(app);
    await expectActivity(h, admin, { eventType: 'app.created', resourceType: 'product_app', resourceId: app.id, metadata: { slug } });
    expect(await ok(admin, 'DELETE', `/v1/apps/${slug}`)).toEqual({ deleted: true });
    expectError(await call(admin, 'GET', `/v1/apps/${slug}`), 404, 'not_found');
    expectError(await call(admin, 'DELETE', `/v1/apps/${slug}`), 404, 'not_found');
    await expectActivity(h, admin, { eventType: 'app.deleted', resourceType: 'product_app', resourceId: app.id });
    // The other organization's app is untouched.
    expect(await ok(other, 'GET', `/v1/apps/${slug}`)).toMatchObject({ name: 'Theirs' });
  });

  it('refuses slugs outside lowercase [a-z0-9-], 2-64', async () => {
    for (const slug of ['A-app', 'a', 'x'.repeat(65), 'with space', 'dots.no']) {
      const err = expectError(await call(admin, 'POST', '/v1/apps', { slug, name: 'n' }), 400, 'invalid_request');
      expect(err.message).toContain('slug');
    }
  });

  it('deleting an app deletes its bindings, sessions, links and end users; the channel can be bound again', async () => {
    const { slug, app, channelId } = await boundApp(admin);
    await session(admin, slug, { agentChannelId: channelId });
    await ok(
      admin,
      'POST',
      `/v1/apps/${slug}/channel-links`,
      { agentChannelId: channelId, externalUserId: '501', productExternalUserId: 'u-501' },
      201,
    );
    await ok(admin, 'DELETE', `/v1/apps/${slug}`);
    const db = h.deps.db.kysely;
    for (const table of ['channel_bindings', 'channel_link_sessions', 'channel_links', 'product_end_users'] as const) {
      const rows = await db.selectFrom(table).select('id').where('app_id', '=', app.id).execute();
      expect(rows, table).toHaveLength(0);
    }
    const again = newSlug();
    await ok(admin, 'POST', '/v1/apps', { slug: again, name: 'Next' }, 201);
    await ok(
      admin,
      'POST',
      `/v1/apps/${again}/channel-bindings`,
      { agentChannelId: channelId, identityPolicy: 'link_required', unknownSenderReply: 'Hi' },
      201,
    );
  });
});

describe('channel bindings', () => {
  it('binds a channel with defaults, lists and deletes it; records activity', async () => {
    const { slug, app, channelId, binding } = await boundApp(admin);
    expect(binding).toEqual({
      id: expect.stringMatching(/^cbd_/),
      appSlug: slug,
      agentChannelId: channelId,
      identityPolicy: 'link_required',
      groupPolicy: 'disabled',
      unknownSenderReply: 'To chat here, link your {appName} account: {linkUrl}',
      metadata: { linkUrl: LINK_URL },
      createdAt: expect.any(String),
    });
    expect(await ok(admin, 'GET', `/v1/apps/${slug}/channel-bindings`)).toEqual([binding]);
    await expectActivity(h, admin, {
      eventType: 'channel.binding.created',
      resourceType: 'product_app',
      resourceId: app.id,
      metadata: { bindingId: binding.id, channelId },
    });
    expect(await ok(admin, 'DELETE', `/v1/apps/${slug}/channel-bindings/${binding.id}`)).toEqual({ deleted: true });
    expect(await ok(admin, 'GET', `/v1/apps/${slug}/channel-bindings`)).toEqual([]);
    expectError(await call(admin, 'DELETE', `/v1/apps/${slug}/channel-bindings/${binding.id}`), 404, 'not_found');
    await expectActivity(h, admin, {
      eventType: 'channel.binding.deleted',
      resourceType: 'product_app',
      resourceId: app.id,
      metadata: { bindingId: binding.id },
    });
  });

  it('a channel is bound to one app at most: 409 channel_already_bound', async () => {
    const { channelId } = await boundApp(admin);
    const second = newSlug();
    await ok(admin, 'POST', '/v1/apps', { slug: second, name: 'Second' }, 201);
    const err = expectError(
      await call(admin, 'POST', `/v1/apps/${second}/channel-bindings`, {
        agentChannelId: channelId,
        identityPolicy: 'link_required',
        unknownSenderReply: 'Hi',
      }),
      409,
      'conflict',
    );
    expect(err.message).toContain('channel_already_bound');
  });

  it('identityPolicy other than link_required, bad metadata, bad linkUrl and a missing linkUrl are 400 naming the rule', async () => {
    const slug = newSlug();
    await ok(admin, 'POST', '/v1/apps', { slug, name: 'Rules' }, 201);
    const { id: channelId } = await seedChannel(h, admin);
    const bind = (body: Record<string, unknown>) =>
      call(admin, 'POST', `/v1/apps/${slug}/channel-bindings`, {
        agentChannelId: channelId,
        identityPolicy: 'link_required',
        metadata: { linkUrl: LINK_URL },
        ...body,
      });
    for (const identityPolicy of ['open', 'approved_only', undefined]) {
      const err = expectError(await bind({ identityPolicy }), 400, 'invalid_request');
      expect(err.message).toContain('identityPolicy');
    }
    expect(expectError(await bind({ identityPolicy: 'open' }), 400, 'invalid_request').message).toContain('link_required');
    expect(expectError(await bind({ groupPolicy: 'everyone' }), 400, 'invalid_request').message).toContain('groupPolicy');
    expect(expectError(await bind({ unknownSenderReply: 'x'.repeat(2001) }), 400, 'invalid_request').message).toContain('unknownSenderReply');
    expect(expectError(await bind({ metadata: { blob: 'x'.repeat(9000) } }), 400, 'invalid_request').message).toContain('metadata');
    let deep: Record<string, unknown> = {};
    for (let i = 0; i < 12; i++) deep = { d: deep };
    expect(expectError(await bind({ metadata: deep }), 400, 'invalid_request').message).toContain('metadata');
    for (const linkUrl of ['http://app.example.test/link', 'javascript:alert(1)', '/relative', 42]) {
      const err = expectError(await bind({ metadata: { linkUrl } }), 400, 'invalid_request');
      expect(err.message).toContain('metadata.linkUrl');
    }
    expect(expectError(await bind({ metadata: {} }), 400, 'invalid_request').message).toContain('{linkUrl}');
    // http on loopback is fine (a product developing locally); nothing was bound by the refusals above.
    expect(await ok(admin, 'GET', `/v1/apps/${slug}/channel-bindings`)).toEqual([]);
    await ok(
      admin,
      'POST',
      `/v1/apps/${slug}/channel-bindings`,
      { agentChannelId: channelId, identityPolicy: 'link_required', metadata: { linkUrl: 'http://127.0.0.1:3000/link' } },
      201,
    );
  });

  it('a channel of another organization is 404, as an unknown one (the owner binds it as the control)', async () => {
    const { id: theirs } = await seedChannel(h, other);
    const otherSlug = newSlug();
    await ok(other, 'POST', '/v1/apps', { slug: otherSlug, name: 'Theirs' }, 201);
    const mine = newSlug();
    await ok(admin, 'POST', '/v1/apps', { slug: mine, name: 'Mine' }, 201);
    const body = { agentChannelId: theirs, identityPolicy: 'link_required', unknownSenderReply: 'Hi' };
    await ok(other, 'POST', `/v1/apps/${otherSlug}/channel-bindings`, body, 201);
    expectError(await call(admin, 'POST', `/v1/apps/${mine}/channel-bindings`, body), 404, 'not_found');
    expectError(await call(admin, 'POST', `/v1/apps/${mine}/channel-link-sessions`, { agentChannelId: theirs }), 404, 'not_found');
    expectError(
      await call(admin, 'POST', `/v1/apps/${mine}/channel-links`, { agentChannelId: theirs, externalUserId: '1', productExternalUserId: 'u' }),
      404,
      'not_found',
    );
    expectError(await call(admin, 'POST', `/v1/apps/${mine}/channel-bindings`, { ...body, agentChannelId: 'chn_unknown' }), 404, 'not_found');
  });
});

describe('link sessions', () => {
  it('answers a single-use pcl_ token of at most 64 URL-safe characters and the chat deep link carrying it', async () => {
    const { slug, app, channelId } = await boundApp(admin);
    const s = await session(admin, slug, { agentChannelId: channelId, returnUrl: 'https://app.example.test/done' });
    expect(s).toEqual({
      id: expect.stringMatching(/^cls_/),
      token: expect.stringMatching(/^pcl_[A-Za-z0-9_-]+$/),
      deepLink: `https://chat.example.test/acme_support_bot?start=${s.token}`,
      expiresAt: expect.any(String),
      status: 'created',
      agentChannelId: channelId,
      externalUserId: null,
      returnUrl: 'https://app.example.test/done',
    });
    expect(s.token.length).toBeLessThanOrEqual(64);
    expect(Date.parse(s.expiresAt) - Date.now()).toBeGreaterThan(800_000);
    // Only the hash is stored.
    const row = await h.deps.db.kysely.selectFrom('channel_link_sessions').selectAll().where('id', '=', s.id).executeTakeFirstOrThrow();
    expect(JSON.stringify(row)).not.toContain(s.token);
    await expectActivity(h, admin, {
      eventType: 'channel.link_session.created',
      resourceType: 'product_app',
      resourceId: app.id,
      metadata: { sessionId: s.id, origin: 'api' },
    });
    // The business provider's click-to-chat link carries the token as the message text.
    const biz = await boundApp(admin, {}, { provider: 'business_messaging_provider', accountName: '+1 (555) 010-0200' });
    const bs = await session(admin, biz.slug, { agentChannelId: biz.channelId });
    expect(bs.deepLink).toBe(`https://biz.example.test/15550100200?text=${bs.token}`);
  });

  it('a channel not bound to this app is 409 channel_not_bound; a returnUrl must be https (or http on loopback)', async () => {
    const slug = newSlug();
    await ok(admin, 'POST', '/v1/apps', { slug, name: 'Unbound' }, 201);
    const { id: channelId } = await seedChannel(h, admin);
    expect(
      expectError(await call(admin, 'POST', `/v1/apps/${slug}/channel-link-sessions`, { agentChannelId: channelId }), 409, 'conflict').message,
    ).toContain('channel_not_bound');
    const bound = await boundApp(admin);
    // Bound, but to another app.
    expect(
      expectError(await call(admin, 'POST', `/v1/apps/${slug}/channel-link-sessions`, { agentChannelId: bound.channelId }), 409, 'conflict').message,
    ).toContain('channel_not_bound');
    expect(
      expectError(
        await call(admin, 'POST', `/v1/apps/${bound.slug}/channel-link-sessions`, {
          agentChannelId: bound.channelId,
          returnUrl: 'http://app.example.test/x',
        }),
        400,
        'invalid_request',
      ).message,
    ).toContain('returnUrl');
    await session(admin, bound.slug, { agentChannelId: bound.channelId, returnUrl: 'http://localhost:3000/x' });
  });

  it('completes once into a link; a second complete is 409 already_completed', async () => {
    const { slug, app, channelId } = await boundApp(admin);
    const s = await session(admin, slug, { agentChannelId: channelId, externalUserId: '7001' });
    expect(s.externalUserId).toBe('7001');
    const res = await complete(admin, slug, s.id, {
      token: s.token,
      productExternalUserId: 'user-1',
      displayName: 'Ada',
      username: 'ada',
      externalConversationId: '7001',
    });
    expect(res.statusCode, res.body).toBe(201);
    const link = json(res).data;
    expect(link).toEqual({
      id: expect.stringMatching(/^cln_/),
      appSlug: slug,
      agentChannelId: channelId,
      productExternalUserId: 'user-1',
      providerExternalUserId: '7001',
      externalConversationId: '7001',
      displayName: 'Ada',
      username: 'ada',
      source: 'session',
      status: 'active',
      createdAt: expect.any(String),
      revokedAt: null,
    });
    const again = expectError(await complete(admin, slug, s.id, { token: s.token, productExternalUserId: 'user-1' }), 409, 'invalid_state');
    expect(again.message).toContain('already_completed');
    await expectActivity(h, admin, {
      eventType: 'channel.link.created',
      resourceType: 'product_app',
      resourceId: app.id,
      metadata: { linkId: link.id, source: 'session' },
    });
    // The end user exists, and the link answers for the sender.
    const found = await activeLink(processingCtx(admin), channelId, '7001');
    expect(found).toEqual({
      id: link.id,
      endUser: { id: expect.stringMatching(/^peu_/), appId: app.id, appSlug: slug, productExternalUserId: 'user-1' },
    });
  });

  it('two concurrent completes of one session: exactly one wins', async () => {
    const { slug, channelId } = await boundApp(admin);
    const s = await session(admin, slug, { agentChannelId: channelId, externalUserId: '7002' });
    const results = await Promise.all([
      complete(admin, slug, s.id, { token: s.token, productExternalUserId: 'user-a' }),
      complete(admin, slug, s.id, { token: s.token, productExternalUserId: 'user-b' }),
      complete(admin, slug, s.id, { token: s.token, productExternalUserId: 'user-c' }),
    ]);
    expect(results.map((r) => r.statusCode).sort()).toEqual([201, 409, 409]);
    const links = await ok(admin, 'GET', `/v1/apps/${slug}/channel-links?agentChannelId=${channelId}`);
    expect(links).toHaveLength(1);
  });

  it('a wrong token is 400 invalid_token, an unknown session 404, an expired one 410 link_expired', async () => {
    const { slug, channelId } = await boundApp(admin);
    const s = await session(admin, slug, { agentChannelId: channelId, externalUserId: '7003' });
    const wrong = expectError(
      await complete(admin, slug, s.id, { token: `pcl_${'A'.repeat(43)}`, productExternalUserId: 'u' }),
      400,
      'invalid_request',
    );
    expect(wrong.message).toContain('invalid_token');
    expectError(await complete(admin, slug, 'cls_unknown', { token: s.token, productExternalUserId: 'u' }), 404, 'not_found');
    await h.deps.db.kysely
      .updateTable('channel_link_sessions')
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where('id', '=', s.id)
      .execute();
    expectError(await complete(admin, slug, s.id, { token: s.token, productExternalUserId: 'u' }), 410, 'link_expired');
    // A wrong token on an expired session still says only that the token is wrong.
    expectError(await complete(admin, slug, s.id, { token: 'pcl_nope', productExternalUserId: 'u' }), 400, 'invalid_request');
    expect(await ok(admin, 'GET', `/v1/apps/${slug}/channel-links`)).toEqual([]);
  });

  it('a session of a channel unbound since it was opened does not complete: 409 channel_not_bound', async () => {
    const { slug, channelId, binding } = await boundApp(admin);
    const s = await session(admin, slug, { agentChannelId: channelId, externalUserId: '7010' });
    await ok(admin, 'DELETE', `/v1/apps/${slug}/channel-bindings/${binding.id}`);
    const err = expectError(await complete(admin, slug, s.id, { token: s.token, productExternalUserId: 'u' }), 409, 'conflict');
    expect(err.message).toContain('channel_not_bound');
    expect(await ok(admin, 'GET', `/v1/apps/${slug}/channel-links`)).toEqual([]);
  });

  it('the product user finishing must be the one who started it: 403 wrong_user', async () => {
    const { slug, channelId } = await boundApp(admin);
    const s = await session(admin, slug, { agentChannelId: channelId, externalUserId: '7004', productExternalUserId: 'alice' });
    const err = expectError(await complete(admin, slug, s.id, { token: s.token, productExternalUserId: 'mallory' }), 403, 'forbidden');
    expect(err.message).toContain('wrong_user');
    const link = json(await complete(admin, slug, s.id, { token: s.token, productExternalUserId: 'alice' })).data;
    expect(link).toMatchObject({ productExternalUserId: 'alice', providerExternalUserId: '7004' });
  });

  it('a providerExternalUserId other than the sender the session knows is 409 sender_mismatch; none known nor given is 400', async () => {
    const { slug, channelId } = await boundApp(admin);
    const known = await session(admin, slug, { agentChannelId: channelId, externalUserId: '7005' });
    const err = expectError(
      await complete(admin, slug, known.id, { token: known.token, productExternalUserId: 'u', providerExternalUserId: '9999' }),
      409,
      'conflict',
    );
    expect(err.message).toContain('sender_mismatch');
    const unknown = await session(admin, slug, { agentChannelId: channelId });
    const missing = expectError(
      await complete(admin, slug, unknown.id, { token: unknown.token, productExternalUserId: 'u' }),
      400,
      'invalid_request',
    );
    expect(missing.message).toContain('providerExternalUserId');
    // Given by the product, it is used.
    const link = json(
      await complete(admin, slug, unknown.id, { token: unknown.token, productExternalUserId: 'u', providerExternalUserId: '7006' }),
    ).data;
    expect(link.providerExternalUserId).toBe('7006');
  });

  it('a sender presenting the token in chat is recorded on the session; the product then completes without naming them', async () => {
    const { slug, channelId } = await boundApp(admin);
    const ctx = processingCtx(admin);
    const s = await session(admin, slug, { agentChannelId: channelId, returnUrl: 'https://app.example.test/finish' });
    const text = `/start ${s.token}`;
    expect(isLinkToken(text)).toBe(s.token);
    expect(isLinkToken(s.token)).toBe(s.token);
    expect(isLinkToken(`  ${s.token}\n`)).toBe(s.token);
    expect(isLinkToken('hello there')).toBeNull();
    expect(isLinkToken('/start')).toBeNull();
    expect(isLinkToken(`please link ${s.token}`)).toBeNull();
    const sender = { senderId: '8001', conversationId: '8001', senderName: 'Bo', username: 'bo' };
    const reply = await presentLinkToken(ctx, channelId, sender, s.token);
    expect(reply).toContain(`https://app.example.test/finish?linkSession=${s.id}`);
    // Another sender presenting the same token is told it was made for another account, and not recorded.
    const stranger = await presentLinkToken(ctx, channelId, { ...sender, senderId: '8002', conversationId: '8002' }, s.token);
    expect(stranger).toContain('another account');
    expect(await presentLinkToken(ctx, channelId, sender, `pcl_${'B'.repeat(43)}`)).toMatch(/invalid or has expired/);
    const link = json(await complete(admin, slug, s.id, { token: s.token, productExternalUserId: 'bo-in-product' })).data;
    expect(link).toMatchObject({ providerExternalUserId: '8001', externalConversationId: '8001', source: 'session' });
    // Used up: presenting it again is an invalid link.
    expect(await presentLinkToken(ctx, channelId, sender, s.token)).toMatch(/invalid or has expired/);
    // A session made for a named sender refuses another one in chat too.
    const named = await session(admin, slug, { agentChannelId: channelId, externalUserId: '8003' });
    expect(await presentLinkToken(ctx, channelId, sender, named.token)).toContain('another account');
    // Without a returnUrl the reply sends them back to the product by name.
    const plain = await session(admin, slug, { agentChannelId: channelId });
    expect(await presentLinkToken(ctx, channelId, { ...sender, senderId: '8004' }, plain.token)).toContain('Acme Notes');
  });

  it('an unlinked sender gets the reply with a link carrying a chat-origin session whose token completes', async () => {
    const { slug, app, channelId } = await boundApp(admin, { unknownSenderReply: 'Hi! Link your {appName} account first: {linkUrl}' });
    const ctx = processingCtx(admin);
    const binding = await bindingForChannel(ctx, channelId);
    expect(binding).toEqual({
      id: expect.stringMatching(/^cbd_/),
      appId: app.id,
      appSlug: slug,
      appName: 'Acme Notes',
      groupPolicy: 'disabled',
      unknownSenderReply: 'Hi! Link your {appName} account first: {linkUrl}',
      metadata: { linkUrl: LINK_URL },
    });
    expect(await bindingForChannel(ctx, (await seedChannel(h, admin)).id)).toBeNull();
    expect(await activeLink(ctx, channelId, '9001')).toBeNull();
    const reply = await unlinkedSenderReply(ctx, binding!, channelId, { senderId: '9001', conversationId: '9001' });
    expect(reply.startsWith('Hi! Link your Acme Notes account first: https://app.example.test/link-chat?')).toBe(true);
    const url = new URL(reply.slice(reply.indexOf('https://')));
    const sessionId = url.searchParams.get('linkSession')!;
    const token = url.searchParams.get('token')!;
    expect(sessionId).toMatch(/^cls_/);
    expect(token).toMatch(/^pcl_[A-Za-z0-9_-]{1,60}$/);
    await expectActivity(h, admin, {
      eventType: 'channel.link_session.created',
      resourceType: 'product_app',
      resourceId: app.id,
      metadata: { sessionId, origin: 'chat' },
    });
    // The product's page signs its user in and completes: the sender and conversation come from the session.
    expectError(await complete(admin, slug, sessionId, { token, productExternalUserId: 'cust-1', providerExternalUserId: '9002' }), 409, 'conflict');
    const link = json(await complete(admin, slug, sessionId, { token, productExternalUserId: 'cust-1' })).data;
    expect(link).toMatchObject({
      providerExternalUserId: '9001',
      externalConversationId: '9001',
      productExternalUserId: 'cust-1',
      source: 'session',
    });
    expect(await activeLink(ctx, channelId, '9001')).toMatchObject({ id: link.id, endUser: { productExternalUserId: 'cust-1', appSlug: slug } });
    // The default reply fills in the app's name too.
    const dflt = await boundApp(admin);
    const b2 = await bindingForChannel(ctx, dflt.channelId);
    expect(await unlinkedSenderReply(ctx, b2!, dflt.channelId, { senderId: '1', conversationId: '1' })).toMatch(
      /^To chat here, link your Acme Notes account: https:\/\/app\.example\.test\/link-chat\?linkSession=cls_\w+&token=pcl_/,
    );
  });
});

describe('channel links', () => {
  it('imports, lists with filters newest first, revokes (idempotently); a new link of the same sender replaces the old', async () => {
    const { slug, app, channelId } = await boundApp(admin);
    const second = await seedChannel(h, admin);
    await ok(
      admin,
      'POST',
      `/v1/apps/${slug}/channel-bindings`,
      { agentChannelId: second.id, identityPolicy: 'link_required', metadata: { linkUrl: LINK_URL } },
      201,
    );
    const imp = (body: Record<string, unknown>) => ok(admin, 'POST', `/v1/apps/${slug}/channel-links`, body, 201);
    const a = await imp({ agentChannelId: channelId, externalUserId: '100', productExternalUserId: 'pu-1', externalConversationId: '100' });
    expect(a).toMatchObject({
      source: 'import',
      status: 'active',
      providerExternalUserId: '100',
      productExternalUserId: 'pu-1',
      externalConversationId: '100',
      revokedAt: null,
    });
    await expectActivity(h, admin, {
      eventType: 'channel.link.created',
      resourceType: 'product_app',
      resourceId: app.id,
      metadata: { linkId: a.id, source: 'import' },
    });
    // The same link again is the same link.
    expect(await imp({ agentChannelId: channelId, externalUserId: '100', productExternalUserId: 'pu-1' })).toMatchObject({ id: a.id });
    const b = await imp({ agentChannelId: second.id, externalUserId: '100', productExternalUserId: 'pu-1' });
    const c = await imp({ agentChannelId: channelId, externalUserId: '200', productExternalUserId: 'pu-2' });
    const list = (q = '') => ok(admin, 'GET', `/v1/apps/${slug}/channel-links${q}`);
    expect((await list()).map((l: { id: string }) => l.id)).toEqual([c.id, b.id, a.id]);
    expect((await list(`?agentChannelId=${channelId}`)).map((l: { id: string }) => l.id)).toEqual([c.id, a.id]);
    expect((await list('?productExternalUserId=pu-1')).map((l: { id: string }) => l.id)).toEqual([b.id, a.id]);
    expect((await list(`?productExternalUserId=pu-1&agentChannelId=${second.id}`)).map((l: { id: string }) => l.id)).toEqual([b.id]);
    // Sender 100 on the first channel now links to pu-3: the old link is revoked.
    const d = await imp({ agentChannelId: channelId, externalUserId: '100', productExternalUserId: 'pu-3' });
    expect((await list('?status=revoked')).map((l: { id: string }) => l.id)).toEqual([a.id]);
    expect((await list('?status=active')).map((l: { id: string }) => l.id)).toEqual([d.id, c.id, b.id]);
    const revoked = await ok(admin, 'POST', `/v1/apps/${slug}/channel-links/${c.id}/revoke`);
    expect(revoked).toMatchObject({ id: c.id, status: 'revoked', revokedAt: expect.any(String) });
    expect(await ok(admin, 'POST', `/v1/apps/${slug}/channel-links/${c.id}/revoke`)).toEqual(revoked);
    await expectActivity(h, admin, {
      eventType: 'channel.link.revoked',
      resourceType: 'product_app',
      resourceId: app.id,
      metadata: { linkId: c.id },
    });
    expect(await activeLink(processingCtx(admin), channelId, '200')).toBeNull();
    expectError(await call(admin, 'POST', `/v1/apps/${slug}/channel-links/cln_unknown/revoke`), 404, 'not_found');
    expectError(await call(admin, 'GET', `/v1/apps/${slug}/channel-links?status=gone`), 400, 'invalid_request');
    // The channel must be bound to this app.
    const loose = await seedChannel(h, admin);
    expect(
      expectError(
        await call(admin, 'POST', `/v1/apps/${slug}/channel-links`, { agentChannelId: loose.id, externalUserId: '1', productExternalUserId: 'x' }),
        409,
        'conflict',
      ).message,
    ).toContain('channel_not_bound');
  });
});

describe('product end users and their credentials', () => {
  it('a linked end user never uses the builder’s connection or the organization’s credentials: connect_required until they connect their own', async () => {
    // The builder: an organization-wide install, an organization credential and secret, and their own connection.
    await ok(admin, 'POST', '/v1/tools/probe_chain/install', { scope: 'organization' }, 201);
    await ok(admin, 'POST', '/v1/tools/probe_chain/credentials?scope=organization', { accessToken: 'org-stored-token' });
    await ok(admin, 'POST', '/v1/secrets', { name: 'ACCESSTOKEN', value: 'org-secret-token', scope: 'organization' }, 201);
    const start = await ok(admin, 'GET', '/v1/oauth/start/github');
    const cb = new URL(await fake.authorize(start.authUrl, BUILDER.id));
    expect((await call(null, 'GET', `${cb.pathname}${cb.search}`)).statusCode).toBe(200);
    // The control: the builder's own run of the tool gets a credential.
    const builderRun = await ok(admin, 'POST', '/v1/tools/probe_chain/execute', { arguments: {} });
    expect(builderRun).toMatchObject({ status: 'completed', credentialSources: { accessToken: 'stored' } });

    // A linked end user.
    const { slug, app, channelId } = await boundApp(admin);
    await ok(
      admin,
      'POST',
      `/v1/apps/${slug}/channel-links`,
      { agentChannelId: channelId, externalUserId: '4242', productExternalUserId: 'customer-1' },
      201,
    );
    const link = await activeLink(processingCtx(admin), channelId, '4242');
    const ctx = endUserCtx(h.deps, admin.orgId, link!.endUser, 'req_test');
    expect(ctx.principal).toMatchObject({
      kind: 'system',
      userId: link!.endUser.id,
      role: null,
      apiKeyId: null,
      endUser: { appId: app.id, appSlug: slug, productExternalUserId: 'customer-1' },
    });
    expect(ctx.principal.scopes.has('apps:write')).toBe(false);
    expect(ctx.principal.scopes.has('tools:execute')).toBe(true);
    const before = api.requests.length;
    const refused = await executeTool(ctx, 'probe_chain', { arguments: {} }, { via: 'run' });
    expect(refused).toMatchObject({
      status: 'failed',
      error: { code: 'connect_required', missingFields: ['accessToken'], connect: { provider: 'github' } },
    });
    expect(refused.error!.message).toContain('github');
    expect(refused.credentialSources).toEqual({});
    expect(api.requests.length).toBe(before);
    expect(await ok(admin, 'GET', `/v1/apps/${slug}/end-users/customer-1/connections`)).toEqual([]);

    // The product's server lets its user connect their own account: a real flow against the loopback provider.
    const flow = await ok(admin, 'POST', `/v1/apps/${slug}/end-users/customer-1/connections/github/start`, {});
    expect(flow).toMatchObject({ authUrl: expect.any(String), flowId: expect.stringMatching(/^oaf_/) });
    const back = new URL(await fake.authorize(flow.authUrl, CUSTOMER.id));
    const done = await call(null, 'GET', `${back.pathname}${back.search}`);
    expect(done.statusCode, done.body).toBe(200);
    const connections = await ok(admin, 'GET', `/v1/apps/${slug}/end-users/customer-1/connections`);
    expect(connections).toEqual([expect.objectContaining({ provider: 'github', accountId: CUSTOMER.id })]);
    // The builder's own connections do not include it.
    const builderConnections = await ok(admin, 'GET', '/v1/oauth/connections?provider=github');
    expect(builderConnections.map((c: { accountId: string }) => c.accountId)).toEqual([BUILDER.id]);

    const used = await executeTool(ctx, 'probe_chain', { arguments: {} }, { via: 'run' });
    expect(used, JSON.stringify(used)).toMatchObject({
      status: 'completed',
      credentialSources: { accessToken: 'oauth' },
      connection: { accountId: CUSTOMER.id },
    });
    const { access } = await storedTokens(h.deps, connections[0].id);
    expect(api.requests.at(-1)!.headers.authorization).toBe(`Bearer ${access}`);
  });

  it('the end-user routes answer 404 for an unknown end user or app', async () => {
    const { slug } = await boundApp(admin);
    expectError(await call(admin, 'GET', `/v1/apps/${slug}/end-users/nobody/connections`), 404, 'not_found');
    expectError(await call(admin, 'POST', `/v1/apps/${slug}/end-users/nobody/connections/github/start`, {}), 404, 'not_found');
    expectError(await call(admin, 'GET', '/v1/apps/no-such-app/end-users/nobody/connections'), 404, 'not_found');
  });
});

/** A fresh app of `owner` with a bound channel, a session, an imported link (and so an end user). */
async function fixture(owner: Actor, sh: Harness) {
  const inject = async (method: Method, url: string, payload?: unknown) => {
    const res = await sh.app.inject({ method, url, headers: owner.headers, ...(payload !== undefined ? { payload: payload as object } : {}) });
    expect(res.statusCode, res.body).toBeLessThan(300);
    return json(res).data;
  };
  const slug = `sec-${randomBytes(4).toString('hex')}`;
  await inject('POST', '/v1/apps', { slug, name: 'Sec' });
  const channel = await seedChannel(sh, owner);
  const binding = await inject('POST', `/v1/apps/${slug}/channel-bindings`, {
    agentChannelId: channel.id,
    identityPolicy: 'link_required',
    unknownSenderReply: 'Hi',
  });
  const s = await inject('POST', `/v1/apps/${slug}/channel-link-sessions`, { agentChannelId: channel.id });
  const link = await inject('POST', `/v1/apps/${slug}/channel-links`, {
    agentChannelId: channel.id,
    externalUserId: '1',
    productExternalUserId: 'pu',
  });
  return { slug, channelId: channel.id, bindingId: binding.id, sessionId: s.id, linkId: link.id };
}

securitySuite('product channels', [
  { method: 'POST', url: () => '/v1/apps', scope: 'apps:write', body: { slug: 'sec-new', name: 'n' } },
  { method: 'GET', url: () => '/v1/apps', scope: 'apps:read' },
  { method: 'GET', url: async (o, sh) => `/v1/apps/${(await fixture(o, sh)).slug}`, scope: 'apps:read', crossOrg: true },
  { method: 'DELETE', url: async (o, sh) => `/v1/apps/${(await fixture(o, sh)).slug}`, scope: 'apps:write', crossOrg: true },
  {
    method: 'POST',
    url: async (o, sh) => `/v1/apps/${(await fixture(o, sh)).slug}/channel-bindings`,
    scope: 'apps:write',
    body: { agentChannelId: 'chn_x', identityPolicy: 'link_required', unknownSenderReply: 'Hi' },
  },
  { method: 'GET', url: async (o, sh) => `/v1/apps/${(await fixture(o, sh)).slug}/channel-bindings`, scope: 'apps:read', crossOrg: true },
  {
    method: 'DELETE',
    url: async (o, sh) => {
      const f = await fixture(o, sh);
      return `/v1/apps/${f.slug}/channel-bindings/${f.bindingId}`;
    },
    scope: 'apps:write',
    crossOrg: true,
  },
  {
    method: 'POST',
    url: async (o, sh) => `/v1/apps/${(await fixture(o, sh)).slug}/channel-link-sessions`,
    scope: 'apps:write',
    body: { agentChannelId: 'chn_x' },
  },
  {
    method: 'POST',
    url: async (o, sh) => {
      const f = await fixture(o, sh);
      return `/v1/apps/${f.slug}/channel-link-sessions/${f.sessionId}/complete`;
    },
    scope: 'apps:write',
    body: { token: 'pcl_wrong', productExternalUserId: 'pu' },
    crossOrg: true,
  },
  {
    method: 'POST',
    url: async (o, sh) => `/v1/apps/${(await fixture(o, sh)).slug}/channel-links`,
    scope: 'apps:write',
    body: { agentChannelId: 'chn_x', externalUserId: '1', productExternalUserId: 'pu' },
  },
  { method: 'GET', url: async (o, sh) => `/v1/apps/${(await fixture(o, sh)).slug}/channel-links`, scope: 'apps:read', crossOrg: true },
  {
    method: 'POST',
    url: async (o, sh) => {
      const f = await fixture(o, sh);
      return `/v1/apps/${f.slug}/channel-links/${f.linkId}/revoke`;
    },
    scope: 'apps:write',
    crossOrg: true,
  },
  {
    method: 'POST',
    url: async (o, sh) => `/v1/apps/${(await fixture(o, sh)).slug}/end-users/pu/connections/github/start`,
    scope: 'apps:write',
    body: {},
  },
  { method: 'GET', url: async (o, sh) => `/v1/apps/${(await fixture(o, sh)).slug}/end-users/pu/connections`, scope: 'apps:read', crossOrg: true },
]);
