import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The chat-bot provider's Bot API on loopback, in the Telegram Bot API wire format: `POST /bot<token>/<method>` with a
 * JSON body (or query parameters), answers `{"ok":true,"result":...}` or `{"ok":false,"error_code":N,"description":"..."}`
 * (429s carry `parameters.retry_after`). Unknown tokens answer 401 `Unauthorized`, unknown methods 404 `Not Found`.
 *
 * Methods: getMe, setWebhook (url, secret_token, allowed_updates), deleteWebhook, getWebhookInfo, sendMessage.
 * Controls: `addBot`, `failNext(method, failure, times)`, `block(token, chatId)` (sendMessage then answers 403 "bot
 * was blocked by the user"), `deliver(token, update)` posts an update to the bot's webhook with its secret header as
 * the provider does. `privateText`/`groupText` build updates with increasing update and message ids.
 */

export interface BotInfo {
  id: number;
  username: string;
  firstName: string;
}

export interface SentMessage {
  token: string;
  /** The chat id as sent, as a string. */
  chatId: string;
  text: string;
  messageId: number;
}

export interface Failure {
  /** HTTP status (default: errorCode). */
  status?: number;
  errorCode: number;
  description: string;
  /** Seconds, answered as `parameters.retry_after`. */
  retryAfter?: number;
}

type Obj = Record<string, any>;

interface Bot extends BotInfo {
  webhook: { url: string; secretToken: string | undefined; allowedUpdates: string[] | undefined } | undefined;
}

export class FakeChatbot {
  /** Base URL for HANGAR_CHANNELS_CHATBOT_API_URL. */
  readonly url: string;
  /** Every message sent through sendMessage, in order. */
  readonly sent: SentMessage[] = [];
  /** Every API request (token, method, body), in order. */
  readonly requests: { token: string; method: string; body: Obj }[] = [];
  private readonly bots = new Map<string, Bot>();
  private readonly failures = new Map<string, { failure: Failure; times: number }[]>();
  private readonly blocked = new Set<string>();
  private readonly waiters = new Set<() => void>();
  private nextUpdateId = 100_000;
  private nextMessageId = 1;
  private nextSentId = 1;

  private constructor(
    private readonly server: http.Server,
    port: number,
  ) {
    this.url = `http://127.0.0.1:${port}`;
  }

  static async start(opts: { bots?: { token: string; bot: BotInfo }[] } = {}): Promise<FakeChatbot> {
    let fake: FakeChatbot | undefined;
    const server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => fake!.handle(req, Buffer.concat(chunks), res));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    fake = new FakeChatbot(server, (server.address() as AddressInfo).port);
    for (const b of opts.bots ?? []) fake.addBot(b.token, b.bot);
    return fake;
  }

  addBot(token: string, bot: BotInfo): void {
    this.bots.set(token, { ...bot, webhook: undefined });
  }

  /** The webhook the bot registered with setWebhook. */
  webhookOf(token: string): { url: string; secretToken: string | undefined; allowedUpdates: string[] | undefined } | undefined {
    const w = this.bots.get(token)?.webhook;
    return w ? { ...w } : undefined;
  }

  /** The next `times` calls of `method` (any bot) answer `failure`. */
  failNext(method: string, failure: Failure, times = 1): void {
    const list = this.failures.get(method) ?? [];
    list.push({ failure, times });
    this.failures.set(method, list);
  }

  /** The user of `chatId` blocked the bot: sendMessage to it answers 403. */
  block(token: string, chatId: string | number): void {
    this.blocked.add(`${token}\n${chatId}`);
  }

  /** Resolves with the sent messages (matching `filter`) once there are at least `n`; rejects after `timeoutMs`. */
  waitForSent(n: number, filter: (m: SentMessage) => boolean = () => true, timeoutMs = 20_000): Promise<SentMessage[]> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.sent.filter(filter);
        if (found.length < n) return false;
        clearTimeout(timer);
        this.waiters.delete(check as () => void);
        resolve(found);
        return true;
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check as () => void);
        reject(new Error(`the chat-bot fake saw ${this.sent.filter(filter).length} of ${n} expected messages: ${JSON.stringify(this.sent)}`));
      }, timeoutMs);
      if (!check()) this.waiters.add(check as () => void);
    });
  }

  /**
   * POSTs an update to the bot's registered webhook with `X-Telegram-Bot-Api-Secret-Token` as the provider does;
   * `secretToken` overrides the header (null: no header), `body` sends these exact bytes instead of the update.
   */
  async deliver(token: string, update: object, opts: { secretToken?: string | null; body?: string | Buffer } = {}): Promise<Response> {
    const webhook = this.bots.get(token)?.webhook;
    if (!webhook) throw new Error('the chat-bot fake has no webhook registered for this token');
    const secret = opts.secretToken === undefined ? webhook.secretToken : opts.secretToken;
    return fetch(webhook.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(secret ? { 'x-telegram-bot-api-secret-token': secret } : {}) },
      body: typeof opts.body === 'string' ? opts.body : opts.body ? new Uint8Array(opts.body) : JSON.stringify(update),
    });
  }

  /** An update with a text message in a private chat (the chat id is the sender's id). */
  privateText(o: {
    updateId?: number;
    chatId?: number;
    fromId?: number;
    firstName?: string;
    lastName?: string;
    username?: string;
    text: string;
  }): Obj {
    const fromId = o.fromId ?? o.chatId ?? 5_000_001;
    const from: Obj = { id: fromId, is_bot: false, first_name: o.firstName ?? 'Ada', language_code: 'en' };
    if (o.lastName) from.last_name = o.lastName;
    if (o.username) from.username = o.username;
    const chat: Obj = { id: o.chatId ?? fromId, type: 'private', first_name: from.first_name };
    if (o.lastName) chat.last_name = o.lastName;
    if (o.username) chat.username = o.username;
    return this.update(o.updateId, { from, chat, text: o.text });
  }

  /** An update with a text message in a group (negative id) or supergroup (`-100…` id). */
  groupText(o: {
    updateId?: number;
    groupId?: number;
    title?: string;
    type?: 'group' | 'supergroup';
    fromId?: number;
    firstName?: string;
    lastName?: string;
    username?: string;
    isBot?: boolean;
    text: string;
  }): Obj {
    const from: Obj = { id: o.fromId ?? 5_000_002, is_bot: o.isBot ?? false, first_name: o.firstName ?? 'Grace' };
    if (o.lastName) from.last_name = o.lastName;
    if (o.username) from.username = o.username;
    const chat = { id: o.groupId ?? -4_000_001, title: o.title ?? 'Test group', type: o.type ?? 'group' };
    return this.update(o.updateId, { from, chat, text: o.text });
  }

  /** An update carrying `message` (message_id and date filled in unless given). */
  update(updateId: number | undefined, message: Obj): Obj {
    return {
      update_id: updateId ?? this.nextUpdateId++,
      message: { message_id: this.nextMessageId++, date: Math.floor(Date.now() / 1000), ...message },
    };
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private handle(req: http.IncomingMessage, raw: Buffer, res: http.ServerResponse) {
    const answer = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    const fail = (code: number, description: string, extra: Obj = {}) => answer(code, { ok: false, error_code: code, description, ...extra });
    const url = new URL(req.url ?? '/', this.url);
    const m = /^\/bot([^/]+)\/([A-Za-z]+)$/.exec(url.pathname);
    if (!m) return fail(404, 'Not Found');
    const token = decodeURIComponent(m[1]!);
    const method = m[2]!;
    let body: Obj = Object.fromEntries(url.searchParams);
    if (raw.length > 0) {
      try {
        body = { ...body, ...JSON.parse(raw.toString('utf8')) };
      } catch {
        return fail(400, "Bad Request: can't parse JSON");
      }
    }
    const bot = this.bots.get(token);
    if (!bot) return fail(401, 'Unauthorized');
    this.requests.push({ token, method, body });
    const queued = this.failures.get(method);
    if (queued?.length) {
      const f = queued[0]!;
      if (--f.times <= 0) queued.shift();
      const { failure } = f;
      return answer(failure.status ?? failure.errorCode, {
        ok: false,
        error_code: failure.errorCode,
        description: failure.description,
        ...(failure.retryAfter !== undefined ? { parameters: { retry_after: failure.retryAfter } } : {}),
      });
    }
    switch (method) {
      case 'getMe':
        return answer(200, {
          ok: true,
          result: {
            id: bot.id,
            is_bot: true,
            first_name: bot.firstName,
            username: bot.username,
            can_join_groups: true,
            supports_inline_queries: false,
          },
        });
      case 'setWebhook': {
        if (typeof body.url !== 'string') return fail(400, 'Bad Request: bad webhook: URL must be provided');
        if (body.url === '') {
          bot.webhook = undefined;
          return answer(200, { ok: true, result: true, description: 'Webhook was deleted' });
        }
        if (body.secret_token !== undefined && !/^[A-Za-z0-9_-]{1,256}$/.test(String(body.secret_token)))
          return fail(400, 'Bad Request: secret token contains unallowed characters');
        try {
          new URL(body.url);
        } catch {
          return fail(400, 'Bad Request: bad webhook: Failed to resolve host: Name or service not known');
        }
        bot.webhook = {
          url: body.url,
          secretToken: body.secret_token === undefined ? undefined : String(body.secret_token),
          allowedUpdates: Array.isArray(body.allowed_updates) ? body.allowed_updates.map(String) : undefined,
        };
        return answer(200, { ok: true, result: true, description: 'Webhook was set' });
      }
      case 'deleteWebhook':
        bot.webhook = undefined;
        return answer(200, { ok: true, result: true, description: 'Webhook was deleted' });
      case 'getWebhookInfo':
        return answer(200, {
          ok: true,
          result: {
            url: bot.webhook?.url ?? '',
            has_custom_certificate: false,
            pending_update_count: 0,
            allowed_updates: bot.webhook?.allowedUpdates,
          },
        });
      case 'sendMessage': {
        const chatId = body.chat_id;
        if (chatId === undefined || chatId === null || chatId === '') return fail(400, 'Bad Request: chat_id is empty');
        if (typeof body.text !== 'string' || body.text.trim() === '') return fail(400, 'Bad Request: message text is empty');
        if (body.text.length > 4096) return fail(400, 'Bad Request: message is too long');
        if (this.blocked.has(`${token}\n${chatId}`)) return fail(403, 'Forbidden: bot was blocked by the user');
        const messageId = this.nextSentId++;
        this.sent.push({ token, chatId: String(chatId), text: body.text, messageId });
        for (const w of [...this.waiters]) w();
        const chat = Number(chatId) < 0 ? { id: Number(chatId), type: 'group', title: 'group' } : { id: Number(chatId), type: 'private' };
        return answer(200, {
          ok: true,
          result: {
            message_id: messageId,
            from: { id: bot.id, is_bot: true, first_name: bot.firstName, username: bot.username },
            chat,
            date: Math.floor(Date.now() / 1000),
            text: body.text,
          },
        });
      }
      default:
        return fail(404, 'Not Found');
    }
  }
}
