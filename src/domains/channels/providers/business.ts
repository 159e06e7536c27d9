/**
 * The business messaging provider (`business_messaging_provider`), in the WhatsApp Cloud API wire format: Graph API
 * calls against `<url>` (version included) with `Authorization: Bearer <access token>`, errors as
 * `{ error: { message, type, code, error_subcode?, fbtrace_id } }`. Its webhook is set in the provider's app
 * dashboard: a GET handshake (`hub.mode=subscribe`, `hub.verify_token`, `hub.challenge`), then POSTs signed with
 * `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body with the app secret>`.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import type { ChannelsConfig } from '../../../config.js';
import { InboundParseError } from './errors.js';
import {
  callProvider,
  headerOf,
  MAX_INBOUND_TEXT,
  type ProviderResponse,
  parseInbound,
  retryAfterHeader,
  sameSecret,
  scrub,
  truncate,
} from './http.js';
import { type AdapterFactory, type ChannelAdapter, type InboundMessage, type InboundResult, ProviderError, type ProviderIdentity } from './types.js';

const NAME = 'the business messaging provider';
const MAX_MESSAGE_CHARS = 4096;
/** Graph object ids are numeric; they go into the URL path, so nothing else is sent. */
const ID_FORMAT = /^\d{1,32}$/;
/** A bearer token: visible ASCII only (anything else could not be a header value). */
const TOKEN_FORMAT = /^[\x21-\x7e]{1,4096}$/;
/** Graph error codes that mean "too many calls" (application, account, pair and throughput limits). */
const RATE_LIMIT_CODES = new Set([4, 17, 32, 613, 80007, 130429, 131056]);
/** Graph error codes for a temporary failure at the provider. */
const TRANSIENT_CODES = new Set([1, 2, 131000, 131016]);
/** The most messages one webhook POST may carry. */
export const MAX_BUSINESS_MESSAGES = 100;

const GraphError = z.looseObject({
  error: z.looseObject({
    message: z.string().optional(),
    type: z.string().optional(),
    code: z.number().int().optional(),
    error_subcode: z.number().int().optional(),
    fbtrace_id: z.string().optional(),
  }),
});

interface Refusal {
  status: number;
  code: number | null;
  subcode: number | null;
  message: string;
  retryAfterMs: number | undefined;
  kind: 'token' | 'not_found' | 'rate_limited' | 'transient' | 'refused' | 'not_graph';
}

function refusal(r: ProviderResponse, token: string): Refusal {
  const parsed = GraphError.safeParse(r.json);
  const e = parsed.success ? parsed.data.error : null;
  const code = e?.code ?? null;
  const subcode = e?.error_subcode ?? null;
  const message = e?.message ? scrub(e.message, [token]) : `HTTP ${r.status}`;
  const retryAfterMs = retryAfterHeader(r.headers);
  let kind: Refusal['kind'];
  if (r.status === 429 || (code !== null && RATE_LIMIT_CODES.has(code))) kind = 'rate_limited';
  else if (!parsed.success && r.status >= 400 && r.status < 500) kind = 'not_graph';
  else if (code === 190 || r.status === 401 || (code === null && r.status === 403 && e?.type === 'OAuthException')) kind = 'token';
  else if (r.status >= 500 || (code !== null && TRANSIENT_CODES.has(code)) || !parsed.success) kind = 'transient';
  else if (r.status === 404 || code === 100 || code === 803) kind = 'not_found';
  else kind = 'refused';
  return { status: r.status, code, subcode, message, retryAfterMs, kind };
}

const tokenRefused = (x: Refusal) => `the access token was refused by ${NAME} (${x.code ?? x.status}: ${x.message})`;

function errorOf(x: Refusal, what: string): ProviderError {
  const code = x.code ?? x.status;
  if (x.kind === 'rate_limited')
    return new ProviderError(`${NAME} is rate limiting ${what} (${code}: ${x.message})`, { status: x.status, code, retryAfterMs: x.retryAfterMs });
  if (x.kind === 'token') return new ProviderError(tokenRefused(x), { status: x.status, code, permanent: true });
  if (x.kind === 'not_graph')
    return new ProviderError(`${NAME} answered ${what} with HTTP ${x.status} and no Graph API error (is HANGAR_CHANNELS_BUSINESS_API_URL right?)`, {
      status: x.status,
      code: x.status,
      permanent: true,
    });
  if (x.kind === 'transient') return new ProviderError(`${NAME} failed ${what} (${code}: ${x.message})`, { status: x.status, code });
  return new ProviderError(`${NAME} refused ${what} (${code}: ${x.message})`, { status: x.status, code, permanent: true });
}

async function graph(config: ChannelsConfig, token: string, method: 'GET' | 'POST', path: string, body?: unknown) {
  return callProvider({ provider: NAME, timeoutMs: config.providerTimeoutMs, secrets: [token] }, `${config.businessApiUrl}/${path}`, {
    method,
    headers: { authorization: `Bearer ${token}` },
    body,
  });
}

const ok = (r: ProviderResponse) => r.status >= 200 && r.status < 300;

const PhoneNumber = z.looseObject({
  id: z.string().max(64),
  display_phone_number: z.string().max(64).optional(),
  verified_name: z.string().max(1000).optional(),
});
const PhoneNumbers = z.looseObject({ data: z.array(PhoneNumber).max(10_000) });

export interface BusinessConnectionCheck {
  valid: boolean;
  checks: {
    accessToken: 'ok' | 'invalid' | 'unchecked';
    phoneNumberId: 'ok' | 'not_found' | 'unchecked';
    businessAccountId: 'ok' | 'not_found' | 'mismatch' | 'unchecked';
  };
  problems: string[];
  phoneNumber: { id: string; displayPhoneNumber: string | null; verifiedName: string | null } | null;
}

/**
 * Checks a business connection's three values against the provider and reports everything wrong with them: the token
 * refused, the phone number id unknown (to this token), the business account unknown or not the number's. Refusals
 * are answers, never thrown; a network failure, a timeout, a rate limit or a provider failure (5xx) throws a
 * ProviderError, since nothing can be said about the values then.
 */
export async function validateBusinessConnection(
  config: ChannelsConfig,
  input: { accessToken: string; phoneNumberId: string; businessAccountId: string },
): Promise<BusinessConnectionCheck> {
  const checks: BusinessConnectionCheck['checks'] = { accessToken: 'unchecked', phoneNumberId: 'unchecked', businessAccountId: 'unchecked' };
  const problems: string[] = [];
  let phoneNumber: BusinessConnectionCheck['phoneNumber'] = null;
  const { accessToken, phoneNumberId, businessAccountId } = input;
  const tokenShape = TOKEN_FORMAT.test(accessToken ?? '');
  const phoneShape = ID_FORMAT.test(phoneNumberId ?? '');
  const accountShape = ID_FORMAT.test(businessAccountId ?? '');
  if (!tokenShape) {
    checks.accessToken = 'invalid';
    problems.push('the access token is empty or holds characters an access token never has');
  }
  if (!phoneShape) {
    checks.phoneNumberId = 'not_found';
    problems.push('the phone number id must be the numeric id the provider shows (not the phone number itself)');
  }
  if (!accountShape) {
    checks.businessAccountId = 'not_found';
    problems.push('the business account id must be the numeric id the provider shows');
  }
  const done = () => ({
    valid: checks.accessToken === 'ok' && checks.phoneNumberId === 'ok' && checks.businessAccountId === 'ok',
    checks,
    problems,
    phoneNumber,
  });
  if (!tokenShape) return done();

  if (phoneShape) {
    const r = await graph(config, accessToken, 'GET', `${phoneNumberId}?fields=display_phone_number,verified_name,id`);
    const number = ok(r) ? PhoneNumber.safeParse(r.json) : null;
    if (number?.success) {
      checks.accessToken = 'ok';
      checks.phoneNumberId = 'ok';
      phoneNumber = {
        id: phoneNumberId,
        displayPhoneNumber: number.data.display_phone_number ?? null,
        verifiedName: number.data.verified_name ?? null,
      };
    } else if (number && !number.success) {
      throw new ProviderError(`${NAME} answered the phone number lookup with something that is not a phone number`, {
        status: r.status,
        code: 'bad_response',
      });
    } else {
      const x = refusal(r, accessToken);
      if (x.kind === 'token') {
        checks.accessToken = 'invalid';
        problems.push(tokenRefused(x));
        return done();
      }
      if (x.kind === 'rate_limited' || x.kind === 'transient' || x.kind === 'not_graph') throw errorOf(x, 'the phone number lookup');
      checks.accessToken = 'ok';
      checks.phoneNumberId = 'not_found';
      problems.push(`phone number id ${phoneNumberId} was not found with this access token (${x.code ?? x.status}: ${x.message})`);
    }
  }

  if (accountShape) {
    const r = await graph(config, accessToken, 'GET', `${businessAccountId}/phone_numbers?fields=id,display_phone_number,verified_name&limit=100`);
    const list = ok(r) ? PhoneNumbers.safeParse(r.json) : null;
    if (list?.success) {
      checks.accessToken = 'ok';
      const owned = list.data.data.some((n) => n.id === phoneNumberId);
      if (owned || checks.phoneNumberId !== 'ok') checks.businessAccountId = 'ok';
      else {
        checks.businessAccountId = 'mismatch';
        problems.push(`phone number id ${phoneNumberId} does not belong to business account ${businessAccountId}`);
      }
    } else if (list && !list.success) {
      throw new ProviderError(`${NAME} answered the business account's phone numbers with something that is not a list`, {
        status: r.status,
        code: 'bad_response',
      });
    } else {
      const x = refusal(r, accessToken);
      if (x.kind === 'token') {
        checks.accessToken = 'invalid';
        problems.push(tokenRefused(x));
        return done();
      }
      if (x.kind === 'rate_limited' || x.kind === 'transient' || x.kind === 'not_graph') throw errorOf(x, "the business account's phone numbers");
      checks.accessToken = 'ok';
      checks.businessAccountId = 'not_found';
      problems.push(`business account ${businessAccountId} was not found with this access token (${x.code ?? x.status}: ${x.message})`);
    }
  }
  return done();
}

// ---- inbound -------------------------------------------------------------------------------------------------

const text = z.string().max(1_000_000);
const Media = z.looseObject({ caption: text.optional() }).optional();
const WaMessage = z.looseObject({
  from: z.string().max(64),
  id: z.string().min(1).max(512),
  timestamp: z.union([z.string().max(20), z.number()]).optional(),
  type: z.string().max(64),
  text: z.looseObject({ body: text }).optional(),
  image: Media,
  video: Media,
  document: Media,
  button: z.looseObject({ text: text.optional() }).optional(),
  interactive: z
    .looseObject({
      button_reply: z.looseObject({ title: text.optional() }).optional(),
      list_reply: z.looseObject({ title: text.optional() }).optional(),
    })
    .optional(),
});
const Value = z.looseObject({
  messaging_product: z.string().max(64).optional(),
  metadata: z.looseObject({ display_phone_number: z.string().max(64).optional(), phone_number_id: z.string().max(64) }).optional(),
  contacts: z
    .array(z.looseObject({ wa_id: z.string().max(64).optional(), profile: z.looseObject({ name: text.optional() }).optional() }))
    .max(1000)
    .optional(),
  messages: z.array(WaMessage).max(MAX_BUSINESS_MESSAGES).optional(),
  statuses: z.array(z.unknown()).max(10_000).optional(),
});
const Notification = z.looseObject({
  object: z.string().max(100),
  entry: z
    .array(
      z.looseObject({
        id: z.string().max(64).optional(),
        changes: z.array(z.looseObject({ field: z.string().max(100), value: z.unknown() })).max(1000),
      }),
    )
    .max(1000),
});

/** Message kinds that are not something to answer: a reaction to an earlier message, a system notice. */
const NOT_MESSAGES = new Set(['reaction', 'system', 'ephemeral', 'revoke']);

function describe(m: z.infer<typeof WaMessage>): string {
  if (m.type === 'text' && m.text) return m.text.body;
  if ((m.type === 'image' || m.type === 'video' || m.type === 'document') && m[m.type]?.caption) return m[m.type]!.caption!;
  if (m.type === 'button' && m.button?.text) return m.button.text;
  if (m.type === 'interactive') {
    const title = m.interactive?.button_reply?.title ?? m.interactive?.list_reply?.title;
    if (title) return title;
  }
  if (m.type === 'unsupported' || !/^[a-z_]{1,40}$/.test(m.type)) return '[unsupported message]';
  return `[${m.type.replace(/_/g, ' ')}]`;
}

function sentAt(timestamp: string | number | undefined): string | null {
  const seconds = typeof timestamp === 'number' ? timestamp : timestamp && /^\d{1,12}$/.test(timestamp) ? Number(timestamp) : Number.NaN;
  if (!Number.isFinite(seconds) || seconds < 0) return null;
  return new Date(seconds * 1000).toISOString();
}

function parseNotification(rawBody: Buffer): InboundResult {
  const body = parseInbound(rawBody, Notification, 'business messaging event');
  if (body.object !== 'whatsapp_business_account') return { kind: 'ignored', reason: `an event for ${truncate(body.object, 60)}` };
  const messages: InboundMessage[] = [];
  const seen = new Set<string>();
  let skipped = 0;
  for (const entry of body.entry) {
    for (const change of entry.changes) {
      if (change.field !== 'messages') continue;
      const value = Value.safeParse(change.value);
      if (!value.success) {
        const issue = value.error.issues[0];
        throw new InboundParseError(
          `the business messaging event body is not in the provider's format (value.${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid'})`,
        );
      }
      const v = value.data;
      const phoneNumberId = v.metadata?.phone_number_id;
      for (const m of v.messages ?? []) {
        if (!phoneNumberId) throw new InboundParseError('the business messaging event has a message without metadata.phone_number_id');
        if (NOT_MESSAGES.has(m.type) || seen.has(m.id)) {
          skipped++;
          continue;
        }
        seen.add(m.id);
        if (messages.length >= MAX_BUSINESS_MESSAGES)
          throw new InboundParseError(`the business messaging event holds more than ${MAX_BUSINESS_MESSAGES} messages`);
        const contact = v.contacts?.find((c) => c.wa_id === m.from) ?? (v.contacts?.length === 1 ? v.contacts[0] : undefined);
        const name = contact?.profile?.name?.trim();
        messages.push({
          providerMessageId: m.id,
          conversationId: m.from,
          conversationType: 'private',
          conversationName: null,
          senderId: m.from,
          senderName: name ? truncate(name, 256) : null,
          senderUsername: null,
          text: truncate(describe(m), MAX_INBOUND_TEXT),
          phoneNumberId,
          sentAt: sentAt(m.timestamp),
        });
      }
    }
  }
  if (messages.length > 0) return { kind: 'messages', messages };
  return { kind: 'ignored', reason: skipped > 0 ? 'reactions or system notices only' : 'no messages (status updates or other fields only)' };
}

/**
 * The webhook verification handshake: the challenge to echo when `hub.mode` is `subscribe` and `hub.verify_token`
 * matches the channel's token, else null (the route answers 403). A challenge that is not a short token is refused.
 */
export function verifyChallenge(
  query: { 'hub.mode'?: string; 'hub.verify_token'?: string; 'hub.challenge'?: string },
  verifyToken: string,
): string | null {
  const mode = query['hub.mode'];
  const token = query['hub.verify_token'];
  const challenge = query['hub.challenge'];
  if (!verifyToken || typeof token !== 'string' || !token || typeof challenge !== 'string') return null;
  if (!/^[A-Za-z0-9._~-]{1,512}$/.test(challenge)) return null;
  const matches = sameSecret(token, verifyToken);
  return mode === 'subscribe' && matches ? challenge : null;
}

function identityFrom(check: BusinessConnectionCheck): ProviderIdentity {
  if (!check.valid || !check.phoneNumber) throw new ProviderError(check.problems.join('; ') || `${NAME} refused the connection`, { permanent: true });
  return { accountId: check.phoneNumber.id, accountName: check.phoneNumber.displayPhoneNumber, displayName: check.phoneNumber.verifiedName };
}

export const businessAdapter: AdapterFactory = (config: ChannelsConfig): ChannelAdapter => ({
  provider: 'business_messaging_provider',
  maxMessageChars: MAX_MESSAGE_CHARS,

  async identify(creds) {
    return identityFrom(
      await validateBusinessConnection(config, {
        accessToken: creds.token,
        phoneNumberId: creds.phoneNumberId ?? '',
        businessAccountId: creds.businessAccountId ?? '',
      }),
    );
  },

  async registerWebhook(_creds, webhookUrl, secret) {
    return { webhookUrl, verifyToken: secret, registered: false };
  },

  async send(creds, conversationId, body) {
    if (!creds.token || !TOKEN_FORMAT.test(creds.token))
      throw new ProviderError('the access token is empty or holds characters an access token never has', {
        code: 'invalid_token_format',
        permanent: true,
      });
    if (!creds.phoneNumberId || !ID_FORMAT.test(creds.phoneNumberId))
      throw new ProviderError('the channel has no valid phone number id to send from', { code: 'invalid_phone_number_id', permanent: true });
    if (body.length > MAX_MESSAGE_CHARS)
      throw new ProviderError(`a business message holds at most ${MAX_MESSAGE_CHARS} characters (split it first)`, {
        code: 'too_long',
        permanent: true,
      });
    const r = await graph(config, creds.token, 'POST', `${creds.phoneNumberId}/messages`, {
      messaging_product: 'whatsapp',
      recipient_type: 'individual',
      to: conversationId,
      type: 'text',
      text: { body, preview_url: false },
    });
    const sent = z.looseObject({ messages: z.array(z.looseObject({ id: z.string().max(512) })).max(100) }).safeParse(r.json);
    if (r.status >= 200 && r.status < 300) {
      if (!sent.success)
        throw new ProviderError(`${NAME} answered the send with something that is not a send answer`, { status: r.status, code: 'bad_response' });
      return { providerMessageId: sent.data.messages[0]?.id ?? null };
    }
    throw errorOf(refusal(r, creds.token), 'the message');
  },

  verify(headers, rawBody, _secret, creds) {
    const appSecret = creds?.appSecret;
    if (!appSecret) return false;
    const header = headerOf(headers, 'x-hub-signature-256');
    const m = header ? /^sha256=([0-9a-fA-F]{64})$/.exec(header.trim()) : null;
    if (!m || !Buffer.isBuffer(rawBody)) return false;
    const given = Buffer.from(m[1]!, 'hex');
    const expected = createHmac('sha256', appSecret).update(rawBody).digest();
    return timingSafeEqual(given, expected);
  },

  parse: parseNotification,

  deepLink(identity, payload) {
    const digits = identity.accountName?.replace(/\D/g, '') ?? '';
    if (!digits) return null;
    return `${config.businessLinkUrl}/${digits}?text=${encodeURIComponent(payload)}`;
  },
});
