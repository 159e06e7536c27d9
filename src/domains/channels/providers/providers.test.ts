import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeBusiness } from '../../../../test/fakes/business.js';
import { FakeChatbot } from '../../../../test/fakes/chatbot.js';
import type { ChannelsConfig } from '../../../config.js';
import {
  adapterFor,
  InboundParseError,
  isProvider,
  MAX_INBOUND_BYTES,
  ProviderError,
  splitMessage,
  validateBusinessConnection,
  verifyChallenge,
} from './index.js';

const BOT_TOKEN = '7001234567:AAH-test_token-Secret';
const OTHER_TOKEN = '7009999999:AAH-other_token';
const SECRET = 'whsec_chatbot-secret_0123456789';
const APP_SECRET = 'app-secret-0123456789abcdef';
const WA_TOKEN = 'EAAG-access-token-good';
const OTHER_WA_TOKEN = 'EAAG-access-token-other';

const makeConfig = (o: Partial<ChannelsConfig>): ChannelsConfig =>
  Object.freeze({
    chatbotApiUrl: 'http://127.0.0.1:1',
    chatbotLinkUrl: 'https://t.me',
    businessApiUrl: 'http://127.0.0.1:1/v21.0',
    businessLinkUrl: 'https://wa.me',
    providerTimeoutMs: 10_000,
    requestTtlSeconds: 86_400,
    replyWindowSeconds: 86_400,
    linkTtlSeconds: 900,
    maxAttempts: 6,
    retryBaseMs: 2000,
    ...o,
  });

/** A webhook receiver: records each request's headers, raw bytes and URL, answers 200. */
async function startReceiver() {
  const received: { headers: http.IncomingHttpHeaders; raw: Buffer; url: URL }[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({ headers: req.headers, raw: Buffer.concat(chunks), url: new URL(req.url ?? '/', 'http://receiver') });
      res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/ch_test`;
  return {
    url,
    received,
    last: () => received[received.length - 1]!,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The ProviderError a call rejected with (fails the test when it resolved or threw something else). */
async function providerError(p: Promise<unknown>): Promise<ProviderError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ProviderError);
  return err as ProviderError;
}

const body = (v: unknown) => Buffer.from(JSON.stringify(v));

describe('chat-bot provider adapter', () => {
  let fake: FakeChatbot;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let config: ChannelsConfig;
  const creds = { token: BOT_TOKEN };

  beforeAll(async () => {
    fake = await FakeChatbot.start();
    fake.addBot(BOT_TOKEN, { id: 7001234567, username: 'hangar_test_bot', firstName: 'Hangar Test' });
    receiver = await startReceiver();
    config = makeConfig({ chatbotApiUrl: fake.url });
  });
  afterAll(async () => {
    await fake.close();
    await receiver.close();
  });

  describe('identify', () => {
    it("answers the bot's id, username and first name from getMe", async () => {
      const adapter = adapterFor(config, 'chatbot_provider');
      expect(await adapter.identify(creds)).toEqual({ accountId: '7001234567', accountName: 'hangar_test_bot', displayName: 'Hangar Test' });
    });

    it('a refused token is a permanent error that says so and never shows the token', async () => {
      const adapter = adapterFor(config, 'chatbot_provider');
      await expect(adapter.identify(creds)).resolves.toBeTruthy(); // control: the good token works
      const err = await providerError(adapter.identify({ token: OTHER_TOKEN }));
      expect(err.message).toBe('the bot token was refused by the chat-bot provider (401 Unauthorized)');
      expect(err.opts).toMatchObject({ status: 401, permanent: true });
      expect(err.message).not.toContain(OTHER_TOKEN);
    });

    it('a token that could change the URL path is refused before any call', async () => {
      const before = fake.requests.length;
      const err = await providerError(adapterFor(config, 'chatbot_provider').identify({ token: `${BOT_TOKEN}/../x` }));
      expect(err.opts.permanent).toBe(true);
      expect(err.message).not.toContain(BOT_TOKEN);
      expect(fake.requests.length).toBe(before);
    });

    it('an unreachable provider is a retryable error without the token in it', async () => {
      const closed = await FakeChatbot.start();
      const url = closed.url;
      await closed.close();
      const err = await providerError(adapterFor(makeConfig({ chatbotApiUrl: url }), 'chatbot_provider').identify(creds));
      expect(err.opts.permanent).toBeFalsy();
      expect(err.opts.code).toBe('network');
      expect(err.message).not.toContain(BOT_TOKEN);
      expect(err.message).not.toContain('AAH');
    });

    it('an address that is not a Bot API (HTML 404, or 200 without a Bot API answer) is named, not taken for a refused token', async () => {
      const other = http.createServer((req, res) => {
        res.writeHead(req.url?.includes('getMe') ? 404 : 200, { 'content-type': 'text/html' }).end('<html>nope</html>');
      });
      await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
      try {
        const cfg = makeConfig({ chatbotApiUrl: `http://127.0.0.1:${(other.address() as AddressInfo).port}` });
        const notFound = await providerError(adapterFor(cfg, 'chatbot_provider').identify(creds));
        expect(notFound.opts).toMatchObject({ status: 404, permanent: true });
        expect(notFound.message).toContain('HANGAR_CHANNELS_CHATBOT_API_URL');
        const garbled = await providerError(adapterFor(cfg, 'chatbot_provider').send(creds, '1', 'x'));
        expect(garbled.opts.code).toBe('bad_response');
        const business = await providerError(
          validateBusinessConnection(makeConfig({ businessApiUrl: cfg.chatbotApiUrl }), {
            accessToken: WA_TOKEN,
            phoneNumberId: '1',
            businessAccountId: '2',
          }),
        );
        expect(business.opts.code).toBe('bad_response');
      } finally {
        other.closeAllConnections();
        await new Promise<void>((resolve) => other.close(() => resolve()));
      }
    });

    it('a provider that never answers is a timeout error', async () => {
      const hanging = http.createServer(() => undefined);
      await new Promise<void>((resolve) => hanging.listen(0, '127.0.0.1', resolve));
      try {
        const cfg = makeConfig({ chatbotApiUrl: `http://127.0.0.1:${(hanging.address() as AddressInfo).port}`, providerTimeoutMs: 200 });
        const err = await providerError(adapterFor(cfg, 'chatbot_provider').identify(creds));
        expect(err.opts).toMatchObject({ code: 'timeout' });
        expect(err.opts.permanent).toBeFalsy();
        expect(err.message).toContain('did not answer within 200 ms');
      } finally {
        hanging.closeAllConnections();
        await new Promise<void>((resolve) => hanging.close(() => resolve()));
      }
    });
  });

  it('registerWebhook sets the webhook with the secret, for messages only', async () => {
    const setup = await adapterFor(config, 'chatbot_provider').registerWebhook(creds, receiver.url, SECRET);
    expect(setup).toEqual({ webhookUrl: receiver.url, registered: true });
    expect(fake.webhookOf(BOT_TOKEN)).toEqual({ url: receiver.url, secretToken: SECRET, allowedUpdates: ['message'] });
  });

  describe('send', () => {
    it('sends a long reply split into parts within 4096 characters, in order', async () => {
      const adapter = adapterFor(config, 'chatbot_provider');
      const paragraph = (n: number) => `Paragraph ${n}. ${'word '.repeat(300).trim()}.`;
      const reply = [1, 2, 3, 4, 5, 6].map(paragraph).join('\n\n');
      const parts = splitMessage(reply, adapter.maxMessageChars);
      expect(adapter.maxMessageChars).toBe(4096);
      expect(parts.length).toBeGreaterThan(1);
      const before = fake.sent.length;
      const ids: (string | null)[] = [];
      for (const part of parts) ids.push((await adapter.send(creds, '5000001', part)).providerMessageId);
      const sent = await fake.waitForSent(before + parts.length);
      const mine = sent.slice(before);
      expect(mine.map((m) => m.text)).toEqual(parts);
      expect(mine.every((m) => m.chatId === '5000001' && m.text.length <= 4096)).toBe(true);
      expect(ids).toEqual(mine.map((m) => String(m.messageId)));
      // Every paragraph arrives whole: the cuts were at paragraph breaks.
      expect(mine.map((m) => m.text).join('\n\n')).toBe(reply);
    });

    it('a rate limit is a ProviderError with retryAfterMs from retry_after, not permanent', async () => {
      fake.failNext('sendMessage', { errorCode: 429, description: 'Too Many Requests: retry after 7', retryAfter: 7 });
      const err = await providerError(adapterFor(config, 'chatbot_provider').send(creds, '5000001', 'hello'));
      expect(err.opts).toMatchObject({ status: 429, retryAfterMs: 7000 });
      expect(err.opts.permanent).toBeFalsy();
      // The next call goes through.
      expect((await adapterFor(config, 'chatbot_provider').send(creds, '5000001', 'hello')).providerMessageId).toMatch(/^\d+$/);
    });

    it('a provider failure (5xx) is retryable; a blocked user (403) and a bad request (400) are permanent', async () => {
      const adapter = adapterFor(config, 'chatbot_provider');
      fake.failNext('sendMessage', { errorCode: 502, description: 'Bad Gateway' });
      const failed = await providerError(adapter.send(creds, '5000001', 'hello'));
      expect(failed.opts).toMatchObject({ status: 502 });
      expect(failed.opts.permanent).toBeFalsy();

      fake.block(BOT_TOKEN, 5000009);
      const blocked = await providerError(adapter.send(creds, '5000009', 'hello'));
      expect(blocked.opts).toMatchObject({ status: 403, permanent: true });
      expect(blocked.message).toContain('bot was blocked by the user');

      const empty = await providerError(adapter.send(creds, '5000001', '   '));
      expect(empty.opts).toMatchObject({ status: 400, permanent: true });
      expect(empty.message).toContain('message text is empty');
    });

    it('sends to a group by its negative chat id', async () => {
      await adapterFor(config, 'chatbot_provider').send(creds, '-4000001', 'hello group');
      const [m] = await fake.waitForSent(1, (x) => x.text === 'hello group');
      expect(m!.chatId).toBe('-4000001');
    });
  });

  describe('verify', () => {
    it('accepts a delivery carrying the secret; refuses a forged, missing or unconfigured secret', async () => {
      const adapter = adapterFor(config, 'chatbot_provider');
      await adapter.registerWebhook(creds, receiver.url, SECRET);
      const update = fake.privateText({ firstName: 'Ada', text: 'hi' });

      expect((await fake.deliver(BOT_TOKEN, update)).status).toBe(200);
      const good = receiver.last();
      expect(adapter.verify(good.headers, good.raw, SECRET, null)).toBe(true);

      await fake.deliver(BOT_TOKEN, update, { secretToken: 'forged-secret' });
      expect(adapter.verify(receiver.last().headers, receiver.last().raw, SECRET, null)).toBe(false);
      // Same length, one character off.
      await fake.deliver(BOT_TOKEN, update, { secretToken: `${SECRET.slice(0, -1)}X` });
      expect(adapter.verify(receiver.last().headers, receiver.last().raw, SECRET, null)).toBe(false);

      await fake.deliver(BOT_TOKEN, update, { secretToken: null });
      expect(adapter.verify(receiver.last().headers, receiver.last().raw, SECRET, null)).toBe(false);

      // No secret configured: fail closed, whatever the request carries (even an empty header).
      expect(adapter.verify(good.headers, good.raw, '', null)).toBe(false);
      expect(adapter.verify({ 'x-telegram-bot-api-secret-token': '' }, good.raw, '', null)).toBe(false);
      // A repeated header is refused.
      expect(adapter.verify({ 'x-telegram-bot-api-secret-token': [SECRET, SECRET] }, good.raw, SECRET, null)).toBe(false);
      // Header names are matched case-insensitively.
      expect(adapter.verify({ 'X-Telegram-Bot-Api-Secret-Token': SECRET }, good.raw, SECRET, null)).toBe(true);
    });
  });

  describe('parse', () => {
    const adapter = () => adapterFor(config, 'chatbot_provider');

    it('a private text message', () => {
      const update = fake.privateText({ updateId: 901, fromId: 5000001, firstName: 'Ada', lastName: 'Lovelace', username: 'ada', text: 'hello bot' });
      const result = adapter().parse(body(update));
      expect(result).toEqual({
        kind: 'messages',
        messages: [
          {
            providerMessageId: 'update:901',
            conversationId: '5000001',
            conversationType: 'private',
            conversationName: null,
            senderId: '5000001',
            senderName: 'Ada Lovelace',
            senderUsername: 'ada',
            text: 'hello bot',
            sentAt: new Date(update.message.date * 1000).toISOString(),
          },
        ],
      });
    });

    it('group and supergroup messages are group conversations named by the title', () => {
      for (const type of ['group', 'supergroup'] as const) {
        const update = fake.groupText({
          groupId: -1001234,
          title: 'Ops room',
          type,
          fromId: 42,
          firstName: 'Grace',
          text: '@hangar_test_bot status?',
        });
        const result = adapter().parse(body(update));
        expect(result.kind).toBe('messages');
        if (result.kind !== 'messages') return;
        expect(result.messages[0]).toMatchObject({
          providerMessageId: `update:${update.update_id}`,
          conversationId: '-1001234',
          conversationType: 'group',
          conversationName: 'Ops room',
          senderId: '42',
          senderName: 'Grace',
          senderUsername: null,
          text: '@hangar_test_bot status?',
        });
      }
    });

    it("ignores bots' messages, other update kinds, channel posts and service messages", () => {
      const fromBot = fake.groupText({ isBot: true, text: 'beep' });
      expect(adapter().parse(body(fromBot))).toEqual({ kind: 'ignored', reason: 'a message sent by a bot' });
      const edited = { update_id: 77, edited_message: fake.privateText({ text: 'edit' }).message };
      expect(adapter().parse(body(edited))).toMatchObject({ kind: 'ignored', reason: expect.stringContaining('edited_message') });
      const channel = fake.update(undefined, {
        from: { id: 1, is_bot: false, first_name: 'A' },
        chat: { id: -100777, type: 'channel', title: 'News' },
        text: 'post',
      });
      expect(adapter().parse(body(channel)).kind).toBe('ignored');
      const noSender = fake.update(undefined, {
        sender_chat: { id: -100777, type: 'channel' },
        chat: { id: -100777, type: 'channel' },
        text: 'post',
      });
      expect(adapter().parse(body(noSender)).kind).toBe('ignored');
      const joined = fake.update(undefined, {
        from: { id: 3, is_bot: false, first_name: 'Lin' },
        chat: { id: -4000001, type: 'group', title: 'G' },
        new_chat_members: [{ id: 7001234567, is_bot: true, first_name: 'Hangar Test' }],
      });
      expect(adapter().parse(body(joined))).toMatchObject({ kind: 'ignored', reason: expect.stringContaining('new_chat_members') });
    });

    it('describes non-text messages, uses captions and truncates long text to 16 000 characters', () => {
      const base = { from: { id: 5, is_bot: false, first_name: 'Ada' }, chat: { id: 5, type: 'private' } };
      const textOf = (message: object) => {
        const r = adapter().parse(body(fake.update(undefined, { ...base, ...message })));
        return r.kind === 'messages' ? r.messages[0]!.text : `(${r.reason})`;
      };
      expect(textOf({ photo: [{ file_id: 'x', width: 1, height: 1 }] })).toBe('[photo]');
      expect(textOf({ photo: [{ file_id: 'x' }], caption: 'look at this' })).toBe('look at this');
      expect(textOf({ document: { file_id: 'd' } })).toBe('[document]');
      expect(textOf({ sticker: { file_id: 's', emoji: '🙂' } })).toBe('[sticker]');
      expect(textOf({ something_new: {} })).toBe('[unsupported message]');
      const long = textOf({ text: `${'a'.repeat(15_999)}😀tail` });
      expect(long.length).toBe(15_999); // the emoji's pair would not fit whole
      expect(textOf({ text: 'b'.repeat(20_000) }).length).toBe(16_000);
    });

    it('malformed, wrongly shaped or oversized bodies throw InboundParseError', () => {
      const parse = (raw: Buffer) => () => adapter().parse(raw);
      expect(parse(Buffer.from('{not json'))).toThrow(InboundParseError);
      expect(parse(body([1, 2]))).toThrow(InboundParseError);
      expect(parse(body({ message: { text: 'no update id' } }))).toThrow(InboundParseError);
      expect(parse(body({ update_id: 1, message: { message_id: 1, date: 1, chat: 'not a chat' } }))).toThrow(InboundParseError);
      const big = body(fake.privateText({ text: 'x'.repeat(MAX_INBOUND_BYTES) }));
      expect(parse(big)).toThrow(/larger than/);
      // Control: a normal update of the same shape parses.
      expect(adapter().parse(body(fake.privateText({ text: 'ok' }))).kind).toBe('messages');
    });
  });

  it('deepLink opens the bot with the payload; null without a username', () => {
    const adapter = adapterFor(config, 'chatbot_provider');
    expect(adapter.deepLink({ accountName: 'hangar_test_bot' }, 'pcl_abc-123')).toBe('https://t.me/hangar_test_bot?start=pcl_abc-123');
    expect(adapter.deepLink({ accountName: null }, 'pcl_abc')).toBeNull();
  });
});

describe('business messaging provider adapter', () => {
  let fake: FakeBusiness;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let config: ChannelsConfig;
  const number = {
    phoneNumberId: '106540352242922',
    displayPhoneNumber: '+1 555-010-0199',
    verifiedName: 'Hangar Support',
    businessAccountId: '102290129340398',
  };
  const creds = { token: WA_TOKEN, appSecret: APP_SECRET, phoneNumberId: number.phoneNumberId, businessAccountId: number.businessAccountId };

  beforeAll(async () => {
    fake = await FakeBusiness.start();
    fake.addNumber({ ...number, accessToken: WA_TOKEN });
    // The same token also manages a second business account's number.
    fake.addNumber({
      phoneNumberId: '206540352242933',
      displayPhoneNumber: '+1 555-010-0200',
      verifiedName: 'Hangar Sales',
      businessAccountId: '202290129340399',
      accessToken: WA_TOKEN,
    });
    fake.addNumber({
      phoneNumberId: '306540352242944',
      displayPhoneNumber: '+44 20 7946 0000',
      verifiedName: 'Other Org',
      businessAccountId: '302290129340300',
      accessToken: OTHER_WA_TOKEN,
    });
    receiver = await startReceiver();
    config = makeConfig({ businessApiUrl: fake.url });
  });
  afterAll(async () => {
    await fake.close();
    await receiver.close();
  });

  describe('identify and validation', () => {
    it("answers the number's id, display number and verified name", async () => {
      expect(await adapterFor(config, 'business_messaging_provider').identify(creds)).toEqual({
        accountId: number.phoneNumberId,
        accountName: '+1 555-010-0199',
        displayName: 'Hangar Support',
      });
      const lookup = fake.requests.find((r) => r.path === number.phoneNumberId);
      expect(lookup).toMatchObject({ method: 'GET', token: WA_TOKEN, query: { fields: 'display_phone_number,verified_name,id' } });
    });

    it('a refused token is permanent and says so; a number of another business account is named', async () => {
      const adapter = adapterFor(config, 'business_messaging_provider');
      const refused = await providerError(adapter.identify({ ...creds, token: 'EAAG-wrong' }));
      expect(refused.opts.permanent).toBe(true);
      expect(refused.message).toMatch(/^the access token was refused by the business messaging provider \(190: /);
      expect(refused.message).not.toContain('EAAG-wrong');

      const mismatch = await providerError(adapter.identify({ ...creds, businessAccountId: '202290129340399' }));
      expect(mismatch.opts.permanent).toBe(true);
      expect(mismatch.message).toBe(`phone number id ${number.phoneNumberId} does not belong to business account 202290129340399`);
    });

    it('validateBusinessConnection reports every problem and what was fine', async () => {
      const good = await validateBusinessConnection(config, {
        accessToken: WA_TOKEN,
        phoneNumberId: number.phoneNumberId,
        businessAccountId: number.businessAccountId,
      });
      expect(good).toEqual({
        valid: true,
        checks: { accessToken: 'ok', phoneNumberId: 'ok', businessAccountId: 'ok' },
        problems: [],
        phoneNumber: { id: number.phoneNumberId, displayPhoneNumber: '+1 555-010-0199', verifiedName: 'Hangar Support' },
      });

      const badToken = await validateBusinessConnection(config, {
        accessToken: 'EAAG-wrong',
        phoneNumberId: number.phoneNumberId,
        businessAccountId: number.businessAccountId,
      });
      expect(badToken).toMatchObject({
        valid: false,
        checks: { accessToken: 'invalid', phoneNumberId: 'unchecked', businessAccountId: 'unchecked' },
        phoneNumber: null,
      });
      expect(badToken.problems).toEqual([expect.stringContaining('the access token was refused')]);

      const unknownBoth = await validateBusinessConnection(config, { accessToken: WA_TOKEN, phoneNumberId: '999', businessAccountId: '888' });
      expect(unknownBoth).toMatchObject({ valid: false, checks: { accessToken: 'ok', phoneNumberId: 'not_found', businessAccountId: 'not_found' } });
      expect(unknownBoth.problems).toEqual([
        expect.stringContaining('phone number id 999 was not found'),
        expect.stringContaining('business account 888 was not found'),
      ]);

      // Another organization's number, seen with this token: not found (the token cannot see it).
      const foreign = await validateBusinessConnection(config, {
        accessToken: WA_TOKEN,
        phoneNumberId: '306540352242944',
        businessAccountId: number.businessAccountId,
      });
      expect(foreign.checks).toEqual({ accessToken: 'ok', phoneNumberId: 'not_found', businessAccountId: 'ok' });

      const mismatch = await validateBusinessConnection(config, {
        accessToken: WA_TOKEN,
        phoneNumberId: number.phoneNumberId,
        businessAccountId: '202290129340399',
      });
      expect(mismatch).toMatchObject({ valid: false, checks: { accessToken: 'ok', phoneNumberId: 'ok', businessAccountId: 'mismatch' } });
      expect(mismatch.problems).toEqual([`phone number id ${number.phoneNumberId} does not belong to business account 202290129340399`]);

      // Values that are not ids are reported without a call (they would change the request path).
      const before = fake.requests.length;
      const malformed = await validateBusinessConnection(config, { accessToken: WA_TOKEN, phoneNumberId: '+1 555 010', businessAccountId: '../me' });
      expect(malformed.checks).toEqual({ accessToken: 'unchecked', phoneNumberId: 'not_found', businessAccountId: 'not_found' });
      expect(malformed.problems).toHaveLength(2);
      expect(fake.requests.length).toBe(before);
    });

    it('validation throws only when nothing can be said: a provider failure or an unreachable provider', async () => {
      fake.failNext('phone_number', { status: 500, code: 2, message: 'Service temporarily unavailable', type: 'OAuthException' });
      const err = await providerError(
        validateBusinessConnection(config, {
          accessToken: WA_TOKEN,
          phoneNumberId: number.phoneNumberId,
          businessAccountId: number.businessAccountId,
        }),
      );
      expect(err.opts.permanent).toBeFalsy();
      const closed = await FakeBusiness.start();
      await closed.close();
      const unreachable = await providerError(
        validateBusinessConnection(makeConfig({ businessApiUrl: closed.url }), { accessToken: WA_TOKEN, phoneNumberId: '1', businessAccountId: '2' }),
      );
      expect(unreachable.opts.code).toBe('network');
      expect(unreachable.message).not.toContain(WA_TOKEN);
    });
  });

  it('registerWebhook describes the dashboard set-up without calling the provider', async () => {
    const before = fake.requests.length;
    const setup = await adapterFor(config, 'business_messaging_provider').registerWebhook(creds, receiver.url, 'verify-token-1');
    expect(setup).toEqual({ webhookUrl: receiver.url, verifyToken: 'verify-token-1', registered: false });
    expect(fake.requests.length).toBe(before);
  });

  describe('send', () => {
    it('sends a text message from the channel number and answers its wamid', async () => {
      const adapter = adapterFor(config, 'business_messaging_provider');
      expect(adapter.maxMessageChars).toBe(4096);
      const { providerMessageId } = await adapter.send(creds, '447700900123', 'Hello from Hangar');
      const [m] = await fake.waitForSent(1, (x) => x.text === 'Hello from Hangar');
      expect(m).toEqual({ phoneNumberId: number.phoneNumberId, to: '447700900123', text: 'Hello from Hangar', id: providerMessageId });
      expect(fake.requests.at(-1)!.body).toEqual({
        messaging_product: 'whatsapp',
        recipient_type: 'individual',
        to: '447700900123',
        type: 'text',
        text: { body: 'Hello from Hangar', preview_url: false },
      });
    });

    it('rate limits carry Retry-After; 5xx is retryable; other refusals are permanent', async () => {
      const adapter = adapterFor(config, 'business_messaging_provider');
      fake.failNext('messages', { status: 429, code: 130429, message: 'Rate limit hit', retryAfter: 30 });
      const limited = await providerError(adapter.send(creds, '447700900123', 'x'));
      expect(limited.opts).toMatchObject({ status: 429, code: 130429, retryAfterMs: 30_000 });
      expect(limited.opts.permanent).toBeFalsy();

      fake.failNext('messages', { status: 400, code: 131056, message: '(Business Account, Consumer Account) pair rate limit hit' });
      const pair = await providerError(adapter.send(creds, '447700900123', 'x'));
      expect(pair.opts).toMatchObject({ code: 131056, retryAfterMs: undefined });
      expect(pair.opts.permanent).toBeFalsy();

      fake.failNext('messages', { status: 503, code: 131016, message: 'Service unavailable' });
      expect((await providerError(adapter.send(creds, '447700900123', 'x'))).opts.permanent).toBeFalsy();

      fake.failNext('messages', { status: 400, code: 131047, message: 'Re-engagement message' });
      const window = await providerError(adapter.send(creds, '447700900123', 'x'));
      expect(window.opts).toMatchObject({ status: 400, code: 131047, permanent: true });
      expect(window.message).toContain('Re-engagement message');

      const token = await providerError(adapter.send({ ...creds, token: 'EAAG-wrong' }, '447700900123', 'x'));
      expect(token.opts).toMatchObject({ status: 401, code: 190, permanent: true });
      expect(token.message).toContain('the access token was refused');

      // Control: the same call goes through once the failures are spent.
      expect((await adapter.send(creds, '447700900123', 'after')).providerMessageId).toMatch(/^wamid\./);
    });
  });

  describe('verify', () => {
    it('checks the HMAC over the exact raw bytes with the app secret; fails closed', async () => {
      const adapter = adapterFor(config, 'business_messaging_provider');
      const event = fake.textEvent({ phoneNumberId: number.phoneNumberId, from: '447700900123', name: 'Ada', text: 'hi' });
      // Pretty-printed, as the provider's bytes may be: a re-serialized body has other bytes.
      await fake.deliver(receiver.url, JSON.stringify(event, null, 2), { appSecret: APP_SECRET });
      const { headers, raw } = receiver.last();
      expect(adapter.verify(headers, raw, 'verify-token-1', creds)).toBe(true);
      expect(adapter.verify(headers, Buffer.from(JSON.stringify(JSON.parse(raw.toString()))), 'verify-token-1', creds)).toBe(false);
      expect(adapter.verify(headers, raw, 'verify-token-1', { ...creds, appSecret: 'another-secret' })).toBe(false);
      expect(adapter.verify(headers, raw, 'verify-token-1', { ...creds, appSecret: undefined })).toBe(false);
      expect(adapter.verify(headers, raw, 'verify-token-1', null)).toBe(false);

      await fake.deliver(receiver.url, event, { appSecret: APP_SECRET, signature: null });
      expect(adapter.verify(receiver.last().headers, receiver.last().raw, 'verify-token-1', creds)).toBe(false);
      for (const signature of ['sha256=', 'sha1=abc', `sha256=${'0'.repeat(64)}`, 'sha256=zz', `sha256=${'a'.repeat(63)}`]) {
        await fake.deliver(receiver.url, event, { appSecret: APP_SECRET, signature });
        expect(adapter.verify(receiver.last().headers, receiver.last().raw, 'verify-token-1', creds)).toBe(false);
      }
    });

    it('the verification handshake echoes the challenge only for subscribe with the right token', async () => {
      const query = () => Object.fromEntries(receiver.last().url.searchParams);
      await fake.challenge(receiver.url, 'verify-token-1', '1158201444');
      expect(verifyChallenge(query(), 'verify-token-1')).toBe('1158201444');
      await fake.challenge(receiver.url, 'verify-token-2', '1158201444');
      expect(verifyChallenge(query(), 'verify-token-1')).toBeNull();
      await fake.challenge(receiver.url, 'verify-token-1', '1158201444', 'unsubscribe');
      expect(verifyChallenge(query(), 'verify-token-1')).toBeNull();
      expect(verifyChallenge({ 'hub.mode': 'subscribe', 'hub.challenge': '1' }, 'verify-token-1')).toBeNull();
      expect(verifyChallenge({ 'hub.mode': 'subscribe', 'hub.verify_token': '', 'hub.challenge': '1' }, '')).toBeNull();
      expect(
        verifyChallenge({ 'hub.mode': 'subscribe', 'hub.verify_token': 'verify-token-1', 'hub.challenge': '<script>' }, 'verify-token-1'),
      ).toBeNull();
    });
  });

  describe('parse', () => {
    const adapter = () => adapterFor(config, 'business_messaging_provider');

    it('a text message, with the sender name and the number it was sent to', () => {
      const event = fake.textEvent({
        phoneNumberId: number.phoneNumberId,
        from: '447700900123',
        name: 'Ada Lovelace',
        text: 'hello',
        id: 'wamid.ABC',
        timestamp: 1_700_000_000,
      });
      expect(adapter().parse(body(event))).toEqual({
        kind: 'messages',
        messages: [
          {
            providerMessageId: 'wamid.ABC',
            conversationId: '447700900123',
            conversationType: 'private',
            conversationName: null,
            senderId: '447700900123',
            senderName: 'Ada Lovelace',
            senderUsername: null,
            text: 'hello',
            phoneNumberId: number.phoneNumberId,
            sentAt: '2023-11-14T22:13:20.000Z',
          },
        ],
      });
    });

    it('every message of every entry and change; non-text messages described; captions kept', () => {
      const a = fake.textEvent({ phoneNumberId: number.phoneNumberId, from: '111', name: 'A', text: 'one', id: 'wamid.1' });
      const b = fake.notification(
        { phoneNumberId: '206540352242933' },
        {
          contacts: [
            { profile: { name: 'B' }, wa_id: '222' },
            { profile: { name: 'C' }, wa_id: '333' },
          ],
          messages: [
            { from: '222', id: 'wamid.2', timestamp: '1700000000', type: 'image', image: { id: 'm1', mime_type: 'image/jpeg' } },
            { from: '333', id: 'wamid.3', timestamp: '1700000001', type: 'image', image: { id: 'm2', caption: 'a receipt' } },
            { from: '333', id: 'wamid.4', timestamp: '1700000002', type: 'reaction', reaction: { message_id: 'wamid.1', emoji: '👍' } },
            { from: '333', id: 'wamid.5', timestamp: '1700000003', type: 'unsupported', errors: [{ code: 131051 }] },
          ],
        },
      );
      const merged = {
        object: 'whatsapp_business_account',
        entry: [...a.entry, { ...b.entry[0], changes: [{ field: 'account_update', value: {} }, ...b.entry[0].changes] }],
      };
      const result = adapter().parse(body(merged));
      expect(result.kind).toBe('messages');
      if (result.kind !== 'messages') return;
      expect(result.messages.map((m) => [m.providerMessageId, m.senderName, m.text, m.phoneNumberId])).toEqual([
        ['wamid.1', 'A', 'one', number.phoneNumberId],
        ['wamid.2', 'B', '[image]', '206540352242933'],
        ['wamid.3', 'C', 'a receipt', '206540352242933'],
        ['wamid.5', 'C', '[unsupported message]', '206540352242933'],
      ]);
    });

    it('statuses only, other fields and other products are ignored', () => {
      const statuses = fake.statusEvent({ phoneNumberId: number.phoneNumberId, messageId: 'wamid.X', recipient: '447700900123', status: 'read' });
      expect(adapter().parse(body(statuses))).toMatchObject({ kind: 'ignored' });
      expect(adapter().parse(body({ object: 'page', entry: [] }))).toMatchObject({ kind: 'ignored' });
      expect(
        adapter().parse(
          body({ object: 'whatsapp_business_account', entry: [{ id: '1', changes: [{ field: 'account_update', value: { event: 'x' } }] }] }),
        ),
      ).toMatchObject({
        kind: 'ignored',
      });
    });

    it('malformed, wrongly shaped, oversized or too-many-message bodies throw InboundParseError', () => {
      const parse = (raw: Buffer) => () => adapter().parse(raw);
      expect(parse(Buffer.from('<xml/>'))).toThrow(InboundParseError);
      expect(parse(body({ object: 'whatsapp_business_account' }))).toThrow(InboundParseError);
      expect(parse(body({ object: 'whatsapp_business_account', entry: [{ changes: [{ field: 'messages', value: { messages: 'x' } }] }] }))).toThrow(
        InboundParseError,
      );
      const event = fake.textEvent({ phoneNumberId: number.phoneNumberId, from: '1', text: 'x' });
      const many = Array.from({ length: 101 }, (_, i) => ({ from: '1', id: `wamid.${i}`, timestamp: '1', type: 'text', text: { body: 'x' } }));
      event.entry[0].changes[0].value.messages = many;
      expect(parse(body(event))).toThrow(InboundParseError);
      // Control: 100 messages are fine.
      event.entry[0].changes[0].value.messages = many.slice(0, 100);
      const ok = adapter().parse(body(event));
      expect(ok.kind === 'messages' && ok.messages.length).toBe(100);
      expect(parse(Buffer.alloc(MAX_INBOUND_BYTES + 1, 0x20))).toThrow(/larger than/);
    });
  });

  it('deepLink opens a chat with the number carrying the payload', () => {
    const adapter = adapterFor(config, 'business_messaging_provider');
    expect(adapter.deepLink({ accountName: '+1 555-010-0199' }, 'pcl_abc 1')).toBe('https://wa.me/15550100199?text=pcl_abc%201');
    expect(adapter.deepLink({ accountName: null }, 'pcl_abc')).toBeNull();
  });
});

describe('adapterFor, isProvider and splitMessage', () => {
  it('builds each adapter once per configuration object', () => {
    const a = makeConfig({});
    const b = makeConfig({});
    expect(adapterFor(a, 'chatbot_provider')).toBe(adapterFor(a, 'chatbot_provider'));
    expect(adapterFor(a, 'chatbot_provider')).not.toBe(adapterFor(b, 'chatbot_provider'));
    expect(adapterFor(a, 'business_messaging_provider').provider).toBe('business_messaging_provider');
    expect(() => adapterFor(a, 'sms' as never)).toThrow(/no channel adapter/);
  });

  it('isProvider knows the built providers only', () => {
    expect(isProvider('chatbot_provider')).toBe(true);
    expect(isProvider('business_messaging_provider')).toBe(true);
    expect(isProvider('sms')).toBe(false);
    expect(isProvider(undefined)).toBe(false);
  });

  it('splits at paragraphs, then lines, then sentences, then spaces', () => {
    expect(splitMessage('short', 10)).toEqual(['short']);
    expect(splitMessage('', 10)).toEqual([]);
    expect(splitMessage(' \n\n ', 10)).toEqual([]);
    expect(splitMessage('aaaa bbbb\n\ncccc dddd', 12)).toEqual(['aaaa bbbb', 'cccc dddd']);
    expect(splitMessage('aaaa bbbb\ncccc dddd', 12)).toEqual(['aaaa bbbb', 'cccc dddd']);
    expect(splitMessage('One two. Three four five.', 15)).toEqual(['One two.', 'Three four', 'five.']);
    expect(splitMessage('alpha beta gamma delta', 11)).toEqual(['alpha beta', 'gamma delta']);
    // A paragraph break too early in the window is passed over for a later line break.
    expect(splitMessage('a\n\nbbbbbbbbbbbbbbb\ncccc', 20)).toEqual(['a\n\nbbbbbbbbbbbbbbb', 'cccc']);
  });

  it('cuts words longer than a part without splitting a surrogate pair, and never makes empty parts', () => {
    expect(splitMessage('abcdefghij', 4)).toEqual(['abcd', 'efgh', 'ij']);
    const emoji = '😀'.repeat(5); // 10 UTF-16 units
    const parts = splitMessage(emoji, 3);
    expect(parts.join('')).toBe(emoji);
    for (const p of parts) {
      expect(p.length).toBeLessThanOrEqual(3);
      expect(p.length).toBeGreaterThan(0);
      expect(/[\ud800-\udbff]$/.test(p)).toBe(false);
      expect(/^[\udc00-\udfff]/.test(p)).toBe(false);
    }
    const spaced = splitMessage(`x${' '.repeat(50)}y${'\n'.repeat(30)}z`, 5);
    expect(spaced).toEqual(['x', 'y', 'z']);
    const long = Array.from({ length: 2000 }, (_, i) => `word${i}`).join(' ');
    const chunks = splitMessage(long, 4096);
    expect(chunks.every((c) => c.length > 0 && c.length <= 4096)).toBe(true);
    expect(chunks.join(' ')).toBe(long);
  });
});
