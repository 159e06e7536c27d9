import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { seedChannel } from '../../../test/channels.js';
import { FakeBusiness } from '../../../test/fakes/business.js';
import { FakeChatbot } from '../../../test/fakes/chatbot.js';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { expectError, sleep, until } from '../../../test/helpers.js';
import { securitySuite } from '../../../test/security.js';

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE';

describe('messaging channels', () => {
  let h: Harness;
  let model: FakeOpenAI;
  let bot: FakeChatbot;
  let biz: FakeBusiness;
  let admin: Actor;
  let other: Actor;
  let base: string;

  const call = (actor: Actor, method: Method, url: string, payload?: unknown) =>
    h.app.inject({ method, url, headers: actor.headers, payload: payload as object });
  const ok = async (actor: Actor, method: Method, url: string, payload?: unknown, status = 200) => {
    const res = await call(actor, method, url, payload);
    expect(res.statusCode, res.body).toBe(status);
    return json(res).data;
  };
  /** Over the socket, so the webhook URL Hangar computes from the request is one the fakes can reach. */
  const registerWebhook = async (actor: Actor, channelId: string) => {
    const res = await fetch(`${base}/v1/agent-channels/${channelId}/register-webhook`, { method: 'POST', headers: actor.headers });
    expect(res.status, await res.clone().text()).toBe(200);
    return ((await res.json()) as { data: any }).data;
  };
  const secret = (actor: Actor, name: string, value: string) => ok(actor, 'POST', '/v1/secrets', { name, value }, 201);
  const messages = async (actor: Actor, channelId: string) =>
    (await ok(actor, 'GET', `/v1/agent-channels/${channelId}/messages?limit=200`)).messages as any[];
  const settled = (actor: Actor, channelId: string, n: number) =>
    until(`${n} settled messages`, async () => {
      const m = await messages(actor, channelId);
      return m.length >= n && m.every((x) => x.status !== 'received' && x.status !== 'processing') && m;
    });

  beforeAll(async () => {
    model = await new FakeOpenAI().start();
    bot = await FakeChatbot.start();
    biz = await FakeBusiness.start();
    h = await createHarness({
      HANGAR_OPENAI_BASE_URL: model.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'm1',
      HANGAR_CHANNELS_CHATBOT_API_URL: bot.url,
      HANGAR_CHANNELS_BUSINESS_API_URL: biz.url,
      HANGAR_CHANNELS_RETRY_BASE_MS: '50',
    });
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    admin = await createOrgAdmin(h);
    other = await createOrgAdmin(h);
    for (const slug of ['helper', 'second']) await ok(admin, 'POST', '/v1/agents', { slug, model: 'm1', instructions: 'Be brief.' }, 201);
    await ok(other, 'POST', '/v1/agents', { slug: 'helper', model: 'm1', instructions: 'Be brief.' }, 201);
  });
  afterAll(async () => {
    await h?.close();
    await model?.stop();
    await bot?.close();
    await biz?.close();
  });

  describe('a chat bot connected to an agent', () => {
    let channel: any;
    const token = '111:AAbotTokenForTests';

    it('checks the bot token with the provider before saving, and names what is wrong', async () => {
      bot.addBot(token, { id: 111, username: 'helper_bot', firstName: 'Helper' });
      let err = expectError(
        await call(admin, 'POST', '/v1/agent-channels', {
          agent: 'helper',
          provider: 'chatbot_provider',
          mode: 'byok',
          botTokenSecretName: 'BOT_TOKEN',
        }),
        400,
        'invalid_request',
      );
      expect(err.message).toContain('BOT_TOKEN');
      await secret(admin, 'BAD_BOT_TOKEN', '999:nope');
      err = expectError(
        await call(admin, 'POST', '/v1/agent-channels', { agent: 'helper', provider: 'chatbot_provider', botTokenSecretName: 'BAD_BOT_TOKEN' }),
        400,
        'invalid_request',
      );
      expect(err.message).toMatch(/botTokenSecretName/);
      expect(err.message).not.toContain('999:nope');
      expectError(await call(admin, 'POST', '/v1/agent-channels', { agent: 'helper', provider: 'sms' }), 400, 'provider_not_supported');
      expectError(await call(admin, 'POST', '/v1/agent-channels', { agent: 'helper', provider: 'pigeon' }), 400, 'invalid_request');
      expectError(
        await call(admin, 'POST', '/v1/agent-channels', { agent: 'nobody', provider: 'chatbot_provider', botTokenSecretName: 'X' }),
        404,
        'not_found',
      );
      expect((await ok(admin, 'GET', '/v1/agent-channels')).channels).toEqual([]);
    });

    it('connects with a stored token: the bot’s identity, no secret values, approved_only by default', async () => {
      await secret(admin, 'BOT_TOKEN', token);
      channel = await ok(
        admin,
        'POST',
        '/v1/agent-channels',
        { agent: 'helper', provider: 'chatbot_provider', mode: 'byok', botTokenSecretName: 'BOT_TOKEN' },
        201,
      );
      expect(channel).toMatchObject({
        agent: 'helper',
        provider: 'chatbot_provider',
        mode: 'byok',
        status: 'active',
        account: { id: '111', name: 'helper_bot' },
        secrets: { botToken: 'BOT_TOKEN' },
        privacy: { mode: 'approved_only', allowPrivateChats: true, allowGroups: false, unauthorizedReply: 'message' },
      });
      expect(channel.id).toMatch(/^ach_/);
      expect(JSON.stringify(channel)).not.toContain(token);
      await expectActivity(h, admin, { eventType: 'channel.created', resourceType: 'agent_channel', resourceId: channel.id });
      expect(await ok(admin, 'GET', `/v1/agent-channels/${channel.id}`)).toEqual(channel);
      expect((await ok(admin, 'GET', '/v1/agent-channels?agent=helper')).channels.map((c: any) => c.id)).toEqual([channel.id]);
      expect((await ok(admin, 'GET', '/v1/agent-channels?agent=second')).channels).toEqual([]);
      expect((await ok(admin, 'GET', '/v1/agent-channels?provider=chatbot_provider')).accounts).toEqual([
        { provider: 'chatbot_provider', accountId: '111', accountName: 'helper_bot', channelId: channel.id, agent: 'helper' },
      ]);
      // The same bot for a second agent: one channel per bot.
      expectError(
        await call(admin, 'POST', '/v1/agent-channels', { agent: 'second', provider: 'chatbot_provider', botTokenSecretName: 'BOT_TOKEN' }),
        409,
        'conflict',
      );
    });

    it('registers its webhook at the provider with a secret token', async () => {
      const r = await registerWebhook(admin, channel.id);
      expect(r).toMatchObject({ channelId: channel.id, provider: 'chatbot_provider', registered: true });
      expect(r.setup.webhookUrl).toBe(`${base}/v1/agent-channels/${channel.id}/webhook`);
      expect(r.setup.verifyToken).toBeUndefined();
      const hook = bot.webhookOf(token)!;
      expect(hook.url).toBe(r.setup.webhookUrl);
      expect(hook.secretToken).toMatch(/^[A-Za-z0-9_-]{32,}$/);
      await expectActivity(h, admin, { eventType: 'channel.webhook.registered', resourceType: 'agent_channel', resourceId: channel.id });
    });

    it('refuses forged webhooks before reading them, and stores nothing', async () => {
      const update = bot.privateText({ fromId: 5001, firstName: 'Mallory', text: 'let me in' });
      for (const secretToken of ['wrong', '']) {
        const res = await bot.deliver(token, update, { secretToken });
        expect(res.status).toBe(403);
      }
      const raw = await fetch(`${base}/v1/agent-channels/${channel.id}/webhook`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(update),
      });
      expect(raw.status).toBe(403);
      expect(
        (await fetch(`${base}/v1/agent-channels/ach_nope/webhook`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } }))
          .status,
      ).toBe(404);
      expect(await messages(admin, channel.id)).toEqual([]);
      expect(bot.sent).toEqual([]);
    });

    it('a stranger gets the unauthorized reply once and makes one pending request; the agent is not asked', async () => {
      const before = model.requests.length;
      const res = await bot.deliver(token, bot.privateText({ fromId: 42, firstName: 'Ada', username: 'ada', text: 'hello?' }));
      expect(res.status).toBe(200);
      await bot.deliver(token, bot.privateText({ fromId: 42, firstName: 'Ada', username: 'ada', text: 'anyone?' }));
      const m = await settled(admin, channel.id, 2);
      expect(m.map((x) => [x.status, x.outcome])).toEqual([
        ['ignored', 'privacy_pending'],
        ['ignored', 'privacy_pending'],
      ]);
      await sleep(100);
      expect(bot.sent.filter((s) => s.chatId === '42')).toHaveLength(1);
      expect(bot.sent[0]!.text).toMatch(/approved/);
      expect(model.requests.length).toBe(before);
      const { requests } = await ok(admin, 'GET', `/v1/agent-channels/${channel.id}/privacy/requests`);
      expect(requests).toHaveLength(1);
      expect(requests[0]).toMatchObject({
        status: 'pending',
        externalConversationId: '42',
        conversationType: 'private',
        displayName: 'Ada',
        username: 'ada',
      });
      await expectActivity(h, admin, { eventType: 'channel.privacy_request.created', resourceType: 'agent_channel', resourceId: channel.id });
    });

    it('once approved, the sender chats with the agent on their own thread', async () => {
      const { requests } = await ok(admin, 'GET', `/v1/agent-channels/${channel.id}/privacy/requests?status=pending`);
      const approved = await ok(admin, 'POST', `/v1/agent-channels/${channel.id}/privacy/requests/${requests[0].id}/approve`);
      expect(approved.request.status).toBe('approved');
      expect(approved.grant).toMatchObject({ scope: 'conversation', externalConversationId: '42', conversationType: 'private', status: 'granted' });
      expectError(await call(admin, 'POST', `/v1/agent-channels/${channel.id}/privacy/requests/${requests[0].id}/approve`), 409, 'invalid_state');
      await expectActivity(h, admin, { eventType: 'channel.privacy_request.approved', resourceType: 'agent_channel', resourceId: channel.id });
      await expectActivity(h, admin, { eventType: 'channel.privacy_grant.created', resourceType: 'agent_channel', resourceId: channel.id });

      model.script({ text: 'Hi Ada!', usage: { prompt: 3, completion: 2 } });
      await bot.deliver(token, bot.privateText({ fromId: 42, firstName: 'Ada', text: 'Hello agent' }));
      const sent = await bot.waitForSent(2);
      expect(sent[1]).toMatchObject({ chatId: '42', text: 'Hi Ada!' });
      const m = (await settled(admin, channel.id, 3))[0];
      expect(m).toMatchObject({ status: 'replied', text: 'Hello agent' });
      expect(m.threadId).toBeTruthy();
      const events = (await ok(admin, 'GET', `/v1/threads/${m.threadId}/events?limit=100`)).events as any[];
      expect(events.map((e) => e.type)).toEqual(expect.arrayContaining(['run_started', 'user_message', 'assistant_message', 'run_completed']));
      await expectActivity(h, admin, { eventType: 'channel.message.replied', resourceType: 'agent_channel', resourceId: channel.id });

      // The same conversation stays on the same thread; another person gets their own.
      model.script({ text: 'Again' });
      await bot.deliver(token, bot.privateText({ fromId: 42, firstName: 'Ada', text: 'Me again' }));
      await bot.waitForSent(3);
      const again = (await settled(admin, channel.id, 4))[0];
      expect(again.threadId).toBe(m.threadId);
    });

    it('a provider retry of the same update is acknowledged and answered once', async () => {
      model.script({ text: 'Only once' });
      const update = bot.privateText({ fromId: 42, firstName: 'Ada', text: 'dup?' });
      const first = await bot.deliver(token, update);
      const second = await bot.deliver(token, update);
      expect([first.status, second.status]).toEqual([200, 200]);
      expect(((await second.json()) as any).data).toMatchObject({ accepted: 0, duplicates: 1 });
      await bot.waitForSent(4);
      await settled(admin, channel.id, 5);
      await sleep(200);
      expect(bot.sent.filter((s) => s.text === 'Only once')).toHaveLength(1);
    });

    it('a second message while the first one’s run is active waits its turn, and both are answered in order', async () => {
      const n = bot.sent.length;
      model.script({ text: 'first answer', delayMs: 400 }, { text: 'second answer' });
      await bot.deliver(token, bot.privateText({ fromId: 42, firstName: 'Ada', text: 'one' }));
      await sleep(50);
      await bot.deliver(token, bot.privateText({ fromId: 42, firstName: 'Ada', text: 'two' }));
      const sent = await bot.waitForSent(n + 2);
      expect(sent.slice(n).map((s) => s.text)).toEqual(['first answer', 'second answer']);
      const m = await settled(admin, channel.id, 7);
      expect(m.slice(0, 2).map((x) => [x.text, x.status])).toEqual([
        ['two', 'replied'],
        ['one', 'replied'],
      ]);
    });

    it('splits a long reply at the provider’s limit', async () => {
      const n = bot.sent.length;
      const long = Array.from({ length: 120 }, (_, i) => `Paragraph ${i}: ${'words '.repeat(10)}`).join('\n\n');
      expect(long.length).toBeGreaterThan(4096);
      model.script({ text: long });
      await bot.deliver(token, bot.privateText({ fromId: 42, firstName: 'Ada', text: 'tell me everything' }));
      await until(
        'all parts',
        () =>
          bot.sent.length >= n + 2 &&
          bot.sent
            .slice(n)
            .map((s) => s.text)
            .join('\n\n').length >=
            long.length - 10,
      );
      const parts = bot.sent.slice(n).map((s) => s.text);
      expect(parts.every((p) => p.length <= 4096 && p.length > 0)).toBe(true);
      expect(parts.join('\n\n').replace(/\s+/g, ' ').trim()).toBe(long.replace(/\s+/g, ' ').trim());
    });

    it('a rate-limited send is retried after the provider’s retry_after, and recorded', async () => {
      const n = bot.sent.length;
      bot.failNext('sendMessage', { status: 429, errorCode: 429, description: 'Too Many Requests: retry after 1', retryAfter: 1 });
      model.script({ text: 'patience' });
      await bot.deliver(token, bot.privateText({ fromId: 42, firstName: 'Ada', text: 'slow?' }));
      await until('the retried reply', () => bot.sent.length > n && bot.sent[bot.sent.length - 1]!.text === 'patience', 15_000);
      const m = (await settled(admin, channel.id, 9))[0];
      expect(m).toMatchObject({ status: 'replied', attempts: 2 });
    });

    it('revoking the grant ends access at once', async () => {
      const { grants } = await ok(admin, 'GET', `/v1/agent-channels/${channel.id}/privacy/grants?status=granted`);
      const revoked = await ok(admin, 'DELETE', `/v1/agent-channels/${channel.id}/privacy/grants/${grants[0].id}`);
      expect(revoked.status).toBe('revoked');
      await expectActivity(h, admin, { eventType: 'channel.privacy_grant.revoked', resourceType: 'agent_channel', resourceId: channel.id });
      const before = model.requests.length;
      await bot.deliver(token, bot.privateText({ fromId: 42, firstName: 'Ada', text: 'still there?' }));
      const m = (await settled(admin, channel.id, 10))[0];
      expect(m).toMatchObject({ status: 'ignored', outcome: 'privacy_pending' });
      expect(model.requests.length).toBe(before);
      const { requests } = await ok(admin, 'GET', `/v1/agent-channels/${channel.id}/privacy/requests?status=pending`);
      expect(requests.map((r: any) => r.externalConversationId)).toEqual(['42']);
    });

    it('groups are off by default, and a private approval never opens a group', async () => {
      await ok(
        admin,
        'POST',
        `/v1/agent-channels/${channel.id}/privacy/grants`,
        { scope: 'conversation', externalConversationId: '77', conversationType: 'private', conversationDisplayName: 'Bob' },
        201,
      );
      await bot.deliver(token, bot.groupText({ groupId: -100500, title: 'Team', fromId: 77, firstName: 'Bob', text: 'hi group' }));
      let m = (await settled(admin, channel.id, 11))[0];
      expect(m).toMatchObject({ status: 'ignored', outcome: 'groups_off', conversationType: 'group' });
      const privacy = await ok(admin, 'PATCH', `/v1/agent-channels/${channel.id}/privacy`, { allowGroups: true });
      expect(privacy).toMatchObject({ mode: 'approved_only', allowGroups: true });
      await bot.deliver(token, bot.groupText({ groupId: -100500, title: 'Team', fromId: 77, firstName: 'Bob', text: 'hi again' }));
      m = (await settled(admin, channel.id, 12))[0];
      expect(m).toMatchObject({ status: 'ignored', outcome: 'privacy_pending' });
    });

    it('open mode answers anyone; disabled answers no one', async () => {
      await ok(admin, 'PATCH', `/v1/agent-channels/${channel.id}/privacy`, { mode: 'open' });
      model.script({ text: 'welcome' });
      await bot.deliver(token, bot.privateText({ fromId: 900, firstName: 'Eve', text: 'hey' }));
      await until('the open reply', () => bot.sent.some((s) => s.chatId === '900' && s.text === 'welcome'));
      await ok(admin, 'PATCH', `/v1/agent-channels/${channel.id}/privacy`, { mode: 'disabled' });
      const n = bot.sent.length;
      await bot.deliver(token, bot.privateText({ fromId: 900, firstName: 'Eve', text: 'hey again' }));
      const m = (await settled(admin, channel.id, 14))[0];
      expect(m).toMatchObject({ status: 'ignored', outcome: 'privacy_disabled' });
      expect(bot.sent.length).toBe(n);
      expect(
        await ok(admin, 'PATCH', `/v1/agent-channels/${channel.id}/privacy`, { mode: 'approved_only', unauthorizedReply: 'silent' }),
      ).toMatchObject({
        mode: 'approved_only',
        unauthorizedReply: 'silent',
      });
      expectError(await call(admin, 'PATCH', `/v1/agent-channels/${channel.id}/privacy`, { mode: 'everyone' }), 400, 'invalid_request');
    });

    it('another organization sees none of it', async () => {
      await ok(admin, 'GET', `/v1/agent-channels/${channel.id}`);
      expectError(await call(other, 'GET', `/v1/agent-channels/${channel.id}`), 404, 'not_found');
      expectError(await call(other, 'GET', `/v1/agent-channels/${channel.id}/messages`), 404, 'not_found');
      expect((await ok(other, 'GET', '/v1/agent-channels')).channels).toEqual([]);
    });

    it('moves to another agent, pauses, and is deleted with its messages', async () => {
      const moved = await ok(admin, 'PATCH', `/v1/agent-channels/${channel.id}`, { agent: 'second', status: 'paused' });
      expect(moved).toMatchObject({ agent: 'second', status: 'paused' });
      await ok(admin, 'PATCH', `/v1/agent-channels/${channel.id}/privacy`, { mode: 'open' });
      const n = bot.sent.length;
      await bot.deliver(token, bot.privateText({ fromId: 42, firstName: 'Ada', text: 'paused?' }));
      expect((await settled(admin, channel.id, 15))[0]).toMatchObject({ status: 'ignored', outcome: 'paused' });
      expect(bot.sent.length).toBe(n);
      expect(await ok(admin, 'DELETE', `/v1/agent-channels/${channel.id}`)).toEqual({ deleted: true });
      // The channel is gone, so its activity is found in the organization's log (a resource filter would be 404 now).
      const deleted = await expectActivity(h, admin, { eventType: 'channel.deleted', metadata: { accountId: '111' } });
      expect(deleted.resourceId).toBe(channel.id);
      expectError(await call(admin, 'GET', `/v1/agent-channels/${channel.id}`), 404, 'not_found');
      expect((await bot.deliver(token, bot.privateText({ fromId: 42, firstName: 'Ada', text: 'gone?' }))).status).toBe(404);
    });
  });

  describe('a business phone number connected to an agent', () => {
    const number = {
      phoneNumberId: '1065550001',
      displayPhoneNumber: '+1 555-0001',
      verifiedName: 'Acme',
      businessAccountId: '2001',
      accessToken: 'EAAG-test-token',
    };
    const appSecret = 'app-secret-for-tests';
    let channel: any;
    let setup: any;

    beforeAll(async () => {
      biz.addNumber(number);
      biz.addNumber({ ...number, phoneNumberId: '1065550002', displayPhoneNumber: '+1 555-0002' });
      await secret(admin, 'WA_TOKEN', number.accessToken);
      await secret(admin, 'WA_APP_SECRET', appSecret);
    });

    it('validates a connection before anything is saved, reporting each problem', async () => {
      const good = await ok(admin, 'POST', '/v1/agent-channels/business_messaging_provider/validate-connection', {
        agent: 'helper',
        accessToken: number.accessToken,
        phoneNumberId: number.phoneNumberId,
        businessAccountId: number.businessAccountId,
      });
      expect(good).toMatchObject({ valid: true, problems: [], account: { id: number.phoneNumberId, name: number.displayPhoneNumber } });
      const bad = await ok(admin, 'POST', '/v1/agent-channels/business_messaging_provider/validate-connection', {
        agent: 'ghost',
        accessToken: 'wrong',
        phoneNumberId: number.phoneNumberId,
        businessAccountId: number.businessAccountId,
      });
      expect(bad.valid).toBe(false);
      expect(bad.checks).toMatchObject({ agent: 'not_found', accessToken: 'invalid' });
      expect(bad.problems.length).toBeGreaterThanOrEqual(2);
      const mismatch = await ok(admin, 'POST', '/v1/agent-channels/business_messaging_provider/validate-connection', {
        agent: 'helper',
        accessToken: number.accessToken,
        phoneNumberId: number.phoneNumberId,
        businessAccountId: '9999',
      });
      expect(mismatch.valid).toBe(false);
      expect((await ok(admin, 'GET', '/v1/agent-channels?provider=business_messaging_provider')).accounts).toEqual([]);
    });

    it('connects a number to one agent only: a second agent is refused by the one-agent-per-number rule', async () => {
      channel = await ok(
        admin,
        'POST',
        '/v1/agent-channels',
        {
          agent: 'helper',
          provider: 'business_messaging_provider',
          mode: 'byok',
          accessTokenSecretName: 'WA_TOKEN',
          appSecretSecretName: 'WA_APP_SECRET',
          phoneNumberId: number.phoneNumberId,
          businessAccountId: number.businessAccountId,
        },
        201,
      );
      expect(channel).toMatchObject({
        provider: 'business_messaging_provider',
        account: { id: number.phoneNumberId, name: number.displayPhoneNumber },
        businessAccountId: '2001',
      });
      const err = expectError(
        await call(admin, 'POST', '/v1/agent-channels', {
          agent: 'second',
          provider: 'business_messaging_provider',
          accessTokenSecretName: 'WA_TOKEN',
          appSecretSecretName: 'WA_APP_SECRET',
          phoneNumberId: number.phoneNumberId,
          businessAccountId: number.businessAccountId,
        }),
        409,
        'phone_number_in_use',
      );
      expect(err.message).toMatch(/one agent at a time/);
      expect(err.message).toContain('helper');
      const check = await ok(admin, 'POST', '/v1/agent-channels/business_messaging_provider/validate-connection', {
        agent: 'second',
        accessToken: number.accessToken,
        phoneNumberId: number.phoneNumberId,
        businessAccountId: number.businessAccountId,
      });
      expect(check).toMatchObject({ valid: false, checks: { phoneNumberId: 'in_use' } });
    });

    it('hands out the webhook set-up, and answers the verification handshake only with the verify token', async () => {
      setup = (await registerWebhook(admin, channel.id)).setup;
      expect(setup.webhookUrl).toBe(`${base}/v1/agent-channels/${channel.id}/webhook`);
      expect(setup.verifyToken).toMatch(/^[A-Za-z0-9_-]{32,}$/);
      const good = await biz.challenge(setup.webhookUrl, setup.verifyToken, 'challenge-123');
      expect(good.status).toBe(200);
      expect(await good.text()).toBe('challenge-123');
      expect((await biz.challenge(setup.webhookUrl, 'wrong-token', 'challenge-123')).status).toBe(403);
      expect((await ok(admin, 'GET', `/v1/agent-channels/${channel.id}`)).webhook.registeredAt).toBeTruthy();
    });

    it('answers a signed message; refuses a bad signature; drops events for an unbound number', async () => {
      await ok(admin, 'PATCH', `/v1/agent-channels/${channel.id}/privacy`, { mode: 'open' });
      model.script({ text: 'Hello from Acme' });
      const event = biz.textEvent({ ...number, from: '15550123', name: 'Carol', text: 'Hi there' });
      expect((await biz.deliver(setup.webhookUrl, event, { appSecret: 'not-the-secret' })).status).toBe(403);
      expect((await biz.deliver(setup.webhookUrl, event, { appSecret, signature: 'sha256=00' })).status).toBe(403);
      expect(await messages(admin, channel.id)).toEqual([]);
      expect((await biz.deliver(setup.webhookUrl, event, { appSecret })).status).toBe(200);
      const sent = await biz.waitForSent(1);
      expect(sent[0]).toMatchObject({ phoneNumberId: number.phoneNumberId, to: '15550123', text: 'Hello from Acme' });
      const stray = biz.textEvent({
        ...number,
        phoneNumberId: '1065550002',
        displayPhoneNumber: '+1 555-0002',
        from: '15550123',
        name: 'Carol',
        text: 'wrong number',
      });
      const res = await biz.deliver(setup.webhookUrl, stray, { appSecret });
      expect(res.status).toBe(200);
      expect(((await res.json()) as any).data.accepted).toBe(0);
      expect((await settled(admin, channel.id, 1)).map((m) => m.text)).toEqual(['Hi there']);
      // The provider redelivering the same message id changes nothing.
      await biz.deliver(setup.webhookUrl, event, { appSecret });
      await sleep(100);
      expect(biz.sent).toHaveLength(1);
    });
  });

  describe('a product app bound to a channel', () => {
    const token = '222:AAproductBot';
    let channel: any;
    let binding: any;

    beforeAll(async () => {
      bot.addBot(token, { id: 222, username: 'product_bot', firstName: 'Product' });
      await secret(admin, 'PRODUCT_BOT', token);
      channel = await ok(
        admin,
        'POST',
        '/v1/agent-channels',
        { agent: 'helper', provider: 'chatbot_provider', botTokenSecretName: 'PRODUCT_BOT' },
        201,
      );
      await registerWebhook(admin, channel.id);
      await ok(admin, 'POST', '/v1/apps', { slug: 'acme', name: 'Acme' }, 201);
      binding = await ok(
        admin,
        'POST',
        '/v1/apps/acme/channel-bindings',
        {
          agentChannelId: channel.id,
          identityPolicy: 'link_required',
          groupPolicy: 'disabled',
          unknownSenderReply: 'Link your Acme account first: {linkUrl}',
          metadata: { linkUrl: 'https://acme.example/link' },
        },
        201,
      );
    });

    it('an unlinked sender gets a fresh link URL; the product completes it; their messages then run as the product user', async () => {
      expect(binding).toMatchObject({ identityPolicy: 'link_required', groupPolicy: 'disabled' });
      const before = model.requests.length;
      await bot.deliver(token, bot.privateText({ fromId: 3030, firstName: 'Pat', username: 'pat', text: 'hi' }));
      const invite = await until('the link reply', () => bot.sent.find((s) => s.token === token && s.chatId === '3030'));
      expect(model.requests.length).toBe(before);
      const url = new URL(invite.text.match(/https:\/\/acme\.example\/link\S*/)![0]);
      const sessionId = url.searchParams.get('linkSession')!;
      const linkToken = url.searchParams.get('token')!;
      expect(linkToken).toMatch(/^pcl_[A-Za-z0-9_-]+$/);
      expect(linkToken.length).toBeLessThanOrEqual(64);
      expect((await settled(admin, channel.id, 1))[0]).toMatchObject({ status: 'ignored', outcome: 'unlinked' });

      const link = await ok(
        admin,
        'POST',
        `/v1/apps/acme/channel-link-sessions/${sessionId}/complete`,
        {
          token: linkToken,
          productExternalUserId: 'user-77',
          providerExternalUserId: '3030',
          externalConversationId: '3030',
          displayName: 'Pat',
          username: 'pat',
        },
        201,
      );
      expect(link).toMatchObject({ productExternalUserId: 'user-77', providerExternalUserId: '3030', status: 'active' });

      model.script({ text: 'Hi Pat, linked.' });
      await bot.deliver(token, bot.privateText({ fromId: 3030, firstName: 'Pat', username: 'pat', text: 'now?' }));
      await until('the linked reply', () => bot.sent.some((s) => s.chatId === '3030' && s.text === 'Hi Pat, linked.'));
      const m = (await settled(admin, channel.id, 2))[0];
      expect(m.status).toBe('replied');
      // The thread is the product user's, not the builder's: it is not in the builder's own thread list.
      const mine = (await ok(admin, 'GET', '/v1/threads?limit=100')) as any;
      const listed = (mine.threads ?? mine).map?.((t: any) => t.id) ?? [];
      expect(listed).not.toContain(m.threadId);

      // Revoked: the sender is a stranger again.
      await ok(admin, 'POST', `/v1/apps/acme/channel-links/${link.id}/revoke`);
      const n = bot.sent.length;
      await bot.deliver(token, bot.privateText({ fromId: 3030, firstName: 'Pat', text: 'still linked?' }));
      await until('a new link reply', () => bot.sent.length > n && /acme\.example\/link/.test(bot.sent[bot.sent.length - 1]!.text));
    });

    it('group messages are ignored under groupPolicy disabled', async () => {
      await bot.deliver(token, bot.groupText({ groupId: -7, title: 'G', fromId: 3030, firstName: 'Pat', text: 'in a group' }));
      const m = (await settled(admin, channel.id, 4))[0];
      expect(m).toMatchObject({ status: 'ignored', outcome: 'group_disabled' });
    });
  });
});

securitySuite('channels', [
  { method: 'GET', url: () => '/v1/agent-channels', scope: 'channels:read' },
  { method: 'POST', url: () => '/v1/agent-channels', scope: 'channels:write', body: { agent: 'x', provider: 'chatbot_provider' } },
  {
    method: 'POST',
    url: () => '/v1/agent-channels/business_messaging_provider/validate-connection',
    scope: 'channels:write',
    body: { agent: 'x', accessToken: 't', phoneNumberId: '1', businessAccountId: '2' },
  },
  { method: 'GET', url: async (o, h) => `/v1/agent-channels/${(await seedChannel(h, o)).id}`, scope: 'channels:read', crossOrg: true },
  {
    method: 'PATCH',
    url: async (o, h) => `/v1/agent-channels/${(await seedChannel(h, o)).id}`,
    scope: 'channels:write',
    body: { status: 'paused' },
    crossOrg: true,
  },
  { method: 'DELETE', url: async (o, h) => `/v1/agent-channels/${(await seedChannel(h, o)).id}`, scope: 'channels:write', crossOrg: true },
  { method: 'GET', url: async (o, h) => `/v1/agent-channels/${(await seedChannel(h, o)).id}/privacy`, scope: 'channels:read', crossOrg: true },
  {
    method: 'PATCH',
    url: async (o, h) => `/v1/agent-channels/${(await seedChannel(h, o)).id}/privacy`,
    scope: 'channels:write',
    body: { mode: 'open' },
    crossOrg: true,
  },
  {
    method: 'GET',
    url: async (o, h) => `/v1/agent-channels/${(await seedChannel(h, o)).id}/privacy/requests`,
    scope: 'channels:read',
    crossOrg: true,
  },
  { method: 'GET', url: async (o, h) => `/v1/agent-channels/${(await seedChannel(h, o)).id}/privacy/grants`, scope: 'channels:read', crossOrg: true },
  {
    method: 'POST',
    url: async (o, h) => `/v1/agent-channels/${(await seedChannel(h, o)).id}/privacy/grants`,
    scope: 'channels:write',
    body: { externalConversationId: '1', conversationType: 'private' },
    crossOrg: true,
  },
  {
    method: 'POST',
    url: async (o, h) => `/v1/agent-channels/${(await seedChannel(h, o)).id}/privacy/requests/cpr_x/approve`,
    scope: 'channels:write',
  },
  { method: 'DELETE', url: async (o, h) => `/v1/agent-channels/${(await seedChannel(h, o)).id}/privacy/grants/cpg_x`, scope: 'channels:write' },
  { method: 'GET', url: async (o, h) => `/v1/agent-channels/${(await seedChannel(h, o)).id}/messages`, scope: 'channels:read', crossOrg: true },
  { method: 'POST', url: async (o, h) => `/v1/agent-channels/${(await seedChannel(h, o)).id}/register-webhook`, scope: 'channels:write' },
]);
