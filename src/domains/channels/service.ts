/**
 * Messaging channels (ADR 0030): an agent's connection to a chat provider account. Creating one checks the
 * credentials with the provider's identity call before anything is saved; one agent per provider account (the
 * spec's one-agent-per-number rule for business phone numbers). Secrets are named, resolved at use, never stored.
 */
import { randomBytes } from 'node:crypto';
import type { Deps } from '../../platform/context.js';
import { orgId, requireScope, withTx, type Ctx } from '../../platform/context.js';
import { decrypt, deriveKey, encrypt } from '../../platform/crypto/index.js';
import { uniqueAs } from '../../platform/db/errors.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { getAgent } from '../agents/index.js';
import { normalizeSecretName, resolveSecret } from '../secrets/index.js';
import { adapterFor } from './providers/index.js';
import { validateBusinessConnection } from './providers/business.js';
import { PLANNED_PROVIDERS, PROVIDERS, ProviderError, type ProviderCredentials, type ProviderSlug } from './providers/types.js';
import * as repo from './repo.js';
import type { ChannelRow } from './repo.js';
import type { Channel, ChannelsQuery, CreateChannelBody, Privacy, UpdateChannelBody, ValidateBody, ValidateResult } from './schemas.js';

const PROVIDER_NAMES: Record<ProviderSlug, string> = {
  chatbot_provider: 'the chat-bot provider',
  business_messaging_provider: 'the business messaging provider',
};

/** The provider named, or a 400 saying which are built (a planned one gets `provider_not_supported`). */
export function providerOf(value: string): ProviderSlug {
  if ((PROVIDERS as readonly string[]).includes(value)) return value as ProviderSlug;
  if ((PLANNED_PROVIDERS as readonly string[]).includes(value))
    throw new AppError(
      'provider_not_supported',
      `provider "${value}" is not built in this version; channels can use ${PROVIDERS.join(' or ')} (README, "Messaging channels")`,
    );
  throw errors.invalidField('provider', `must be one of ${PROVIDERS.join(', ')}`);
}

const webhookKey = (deps: Deps) => deriveKey(deps.config.secretKey, 'channels:webhook-secret');
const secretAad = (org: string, id: string) => `channel:${org}:${id}`;

/** The secret Hangar generated for the channel's inbound requests (chat-bot secret token; business verify token). */
export const webhookSecret = (deps: Deps, row: ChannelRow): string =>
  decrypt(webhookKey(deps), row.webhook_secret_ciphertext, secretAad(row.org_id, row.id));

/** Where the provider sends the channel's updates. */
export const webhookUrl = (deps: Deps, channelId: string, origin?: string): string =>
  `${deps.config.publicBaseUrl ?? origin ?? deps.config.urls.orchestrator}/v1/agent-channels/${channelId}/webhook`;

export function privacyOf(row: ChannelRow): Privacy {
  return {
    mode: row.privacy_mode as Privacy['mode'],
    allowPrivateChats: row.allow_private_chats === 1,
    allowGroups: row.allow_groups === 1,
    unauthorizedReply: row.unauthorized_reply as Privacy['unauthorizedReply'],
    unauthorizedMessage: row.unauthorized_message,
  };
}

export function toChannel(deps: Deps, row: ChannelRow, origin?: string): Channel {
  const secrets: Channel['secrets'] = {};
  if (row.bot_token_secret) secrets.botToken = row.bot_token_secret;
  if (row.access_token_secret) secrets.accessToken = row.access_token_secret;
  if (row.app_secret_secret) secrets.appSecret = row.app_secret_secret;
  return {
    id: row.id,
    agent: row.agent_slug,
    provider: row.provider as ProviderSlug,
    mode: 'byok',
    status: row.status as Channel['status'],
    account: { id: row.account_id, name: row.account_name },
    businessAccountId: row.business_account_id,
    secrets,
    webhook: { url: webhookUrl(deps, row.id, origin), registeredAt: row.webhook_registered_at },
    privacy: privacyOf(row),
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

async function secretValue(deps: Deps, org: string, userId: string, field: string, name: string | null | undefined): Promise<string> {
  if (!name) throw errors.invalidField(field, 'is required for this provider');
  const value = await resolveSecret(deps, org, userId, normalizeSecretName(name));
  if (value === null) throw errors.invalidField(field, `no secret named "${normalizeSecretName(name)}" (create it with POST /v1/secrets)`);
  return value;
}

/**
 * The credentials a channel acts with, read from its named secrets (the creator's own, else the organization's).
 * `null` when a secret was deleted since: the channel cannot act until it is set again.
 */
export async function channelCredentials(deps: Deps, row: ChannelRow): Promise<ProviderCredentials | null> {
  const get = (name: string | null) => (name ? resolveSecret(deps, row.org_id, row.created_by_user_id, normalizeSecretName(name)) : null);
  if (row.provider === 'chatbot_provider') {
    const token = await get(row.bot_token_secret);
    return token ? { token } : null;
  }
  const [token, appSecret] = await Promise.all([get(row.access_token_secret), get(row.app_secret_secret)]);
  if (!token) return null;
  return { token, appSecret: appSecret ?? undefined, phoneNumberId: row.account_id, businessAccountId: row.business_account_id ?? undefined };
}

/** A provider refusing credentials is the caller's 400; a provider that cannot be reached is a 502/504. */
function providerProblem(err: unknown, provider: ProviderSlug, field: string): never {
  if (err instanceof ProviderError) {
    if (err.opts.permanent) throw errors.invalidField(field, err.message);
    if (err.name === 'TimeoutError' || /timed out/i.test(err.message))
      throw new AppError('provider_timeout', `${PROVIDER_NAMES[provider]} did not answer in time: ${err.message}`);
    throw new AppError('provider_error', `${PROVIDER_NAMES[provider]} failed: ${err.message}`);
  }
  throw err;
}

const accountTaken = (provider: ProviderSlug, row: { account_id: string; account_name: string | null; agent_slug: string }) =>
  provider === 'business_messaging_provider'
    ? new AppError(
        'phone_number_in_use',
        `phone number ${row.account_name ?? row.account_id} is already connected to agent "${row.agent_slug}": a phone number connects to one agent at a time (one-agent-per-number rule); move it with PATCH on that channel, or delete it first`,
      )
    : new AppError(
        'conflict',
        `bot ${row.account_name ?? row.account_id} is already connected to agent "${row.agent_slug}": a bot delivers its updates to one channel; move it with PATCH on that channel, or delete it first`,
      );

/** POST /v1/agent-channels: checks the credentials with the provider, then saves the channel. */
export async function createChannel(ctx: Ctx, body: CreateChannelBody, origin?: string): Promise<Channel> {
  requireScope(ctx, 'channels:write');
  const provider = providerOf(body.provider);
  const agent = await getAgent(ctx, body.agent);
  const org = orgId(ctx);
  const user = ctx.principal.userId;
  const adapter = adapterFor(ctx.deps.config.channels, provider);
  let creds: ProviderCredentials;
  if (provider === 'chatbot_provider') {
    for (const f of ['accessTokenSecretName', 'appSecretSecretName', 'phoneNumberId', 'businessAccountId'] as const)
      if (body[f] !== undefined) throw errors.invalidField(f, 'belongs to business_messaging_provider channels');
    creds = { token: await secretValue(ctx.deps, org, user, 'botTokenSecretName', body.botTokenSecretName) };
  } else {
    if (body.botTokenSecretName !== undefined) throw errors.invalidField('botTokenSecretName', 'belongs to chatbot_provider channels');
    if (!body.phoneNumberId) throw errors.invalidField('phoneNumberId', 'is required for business_messaging_provider');
    if (!body.businessAccountId) throw errors.invalidField('businessAccountId', 'is required for business_messaging_provider');
    creds = {
      token: await secretValue(ctx.deps, org, user, 'accessTokenSecretName', body.accessTokenSecretName),
      appSecret: await secretValue(ctx.deps, org, user, 'appSecretSecretName', body.appSecretSecretName),
      phoneNumberId: body.phoneNumberId,
      businessAccountId: body.businessAccountId,
    };
  }
  // The one-agent-per-number rule is checked before the provider is asked (a clear 409 even offline) and again on insert.
  if (body.phoneNumberId) {
    const taken = await repo.channelByAccount(ctx, provider, body.phoneNumberId);
    if (taken) throw accountTaken(provider, taken);
  }
  const identity = await adapter
    .identify(creds)
    .catch((err) => providerProblem(err, provider, provider === 'chatbot_provider' ? 'botTokenSecretName' : 'accessTokenSecretName'));
  const id = prefixedId('ach');
  const now = nowIso();
  const row: ChannelRow = {
    id,
    org_id: org,
    agent_id: agent.id,
    agent_slug: agent.slug,
    provider,
    mode: 'byok',
    status: 'active',
    account_id: identity.accountId,
    account_name: identity.accountName,
    business_account_id: body.businessAccountId ?? null,
    bot_token_secret: body.botTokenSecretName ? normalizeSecretName(body.botTokenSecretName) : null,
    access_token_secret: body.accessTokenSecretName ? normalizeSecretName(body.accessTokenSecretName) : null,
    app_secret_secret: body.appSecretSecretName ? normalizeSecretName(body.appSecretSecretName) : null,
    webhook_secret_ciphertext: encrypt(webhookKey(ctx.deps), randomBytes(32).toString('base64url'), secretAad(org, id)),
    webhook_registered_at: null,
    privacy_mode: 'approved_only',
    allow_private_chats: 1,
    allow_groups: 0,
    unauthorized_reply: 'message',
    unauthorized_message: null,
    created_by_user_id: user,
    created_at: now,
    updated_at: now,
  };
  await withTx(ctx, async (tx) => {
    const taken = await repo.channelByAccount(tx, provider, identity.accountId);
    if (taken) throw accountTaken(provider, taken);
    await uniqueAs(
      () => repo.insertChannel(tx, row),
      () => accountTaken(provider, { account_id: identity.accountId, account_name: identity.accountName, agent_slug: 'another agent' }),
    );
    await recordActivity(tx, {
      resourceType: 'agent_channel',
      resourceId: id,
      eventType: 'channel.created',
      status: 'succeeded',
      title: `Channel ${identity.accountName ?? identity.accountId} connected to ${agent.slug}`,
      metadata: { provider, agent: agent.slug, accountId: identity.accountId },
    });
  });
  return toChannel(ctx.deps, row, origin);
}

async function channelRow(ctx: Ctx, id: string): Promise<ChannelRow> {
  const row = await repo.findChannel(ctx, id);
  if (!row) throw errors.notFound('channel', id);
  return row;
}

/** A channel of the organization (channels are shared by its members, like agents). */
export async function getChannelRow(ctx: Ctx, id: string): Promise<ChannelRow> {
  requireScope(ctx, 'channels:read');
  return channelRow(ctx, id);
}

export async function getChannel(ctx: Ctx, id: string, origin?: string): Promise<Channel> {
  return toChannel(ctx.deps, await getChannelRow(ctx, id), origin);
}

/** GET /v1/agent-channels: by agent and/or provider; `provider` alone lists the organization's connected accounts. */
export async function listChannels(
  ctx: Ctx,
  query: ChannelsQuery,
  origin?: string,
): Promise<
  | { kind: 'channels'; channels: Channel[] }
  | { kind: 'accounts'; accounts: { provider: ProviderSlug; accountId: string; accountName: string | null; channelId: string; agent: string }[] }
> {
  requireScope(ctx, 'channels:read');
  const provider = query.provider === undefined ? undefined : providerOf(query.provider);
  const agentId = query.agent ? (await getAgent(ctx, query.agent)).id : undefined;
  const rows = await repo.listChannelRows(ctx, { agentId, provider });
  if (provider && !query.agent)
    return {
      kind: 'accounts',
      accounts: rows.map((r) => ({ provider, accountId: r.account_id, accountName: r.account_name, channelId: r.id, agent: r.agent_slug })),
    };
  return { kind: 'channels', channels: rows.map((r) => toChannel(ctx.deps, r, origin)) };
}

/** PATCH /v1/agent-channels/{id}: another agent, paused/active, or other secret names (checked: same account). */
export async function updateChannel(ctx: Ctx, id: string, body: UpdateChannelBody, origin?: string): Promise<Channel> {
  requireScope(ctx, 'channels:write');
  const row = await channelRow(ctx, id);
  const provider = row.provider as ProviderSlug;
  const set: Partial<ChannelRow> = {};
  if (body.agent !== undefined && body.agent !== row.agent_slug) {
    const agent = await getAgent(ctx, body.agent);
    set.agent_id = agent.id;
    set.agent_slug = agent.slug;
  }
  if (body.status !== undefined) set.status = body.status;
  const chatbotOnly = body.accessTokenSecretName !== undefined || body.appSecretSecretName !== undefined;
  if (provider === 'chatbot_provider' && chatbotOnly)
    throw errors.invalidField(
      body.accessTokenSecretName !== undefined ? 'accessTokenSecretName' : 'appSecretSecretName',
      'belongs to business_messaging_provider channels',
    );
  if (provider === 'business_messaging_provider' && body.botTokenSecretName !== undefined)
    throw errors.invalidField('botTokenSecretName', 'belongs to chatbot_provider channels');
  if (body.botTokenSecretName !== undefined) set.bot_token_secret = normalizeSecretName(body.botTokenSecretName);
  if (body.accessTokenSecretName !== undefined) set.access_token_secret = normalizeSecretName(body.accessTokenSecretName);
  if (body.appSecretSecretName !== undefined) set.app_secret_secret = normalizeSecretName(body.appSecretSecretName);
  if (set.bot_token_secret !== undefined || set.access_token_secret !== undefined || set.app_secret_secret !== undefined) {
    const next = { ...row, ...set };
    const org = orgId(ctx);
    const user = ctx.principal.userId;
    const creds: ProviderCredentials =
      provider === 'chatbot_provider'
        ? { token: await secretValue(ctx.deps, org, user, 'botTokenSecretName', next.bot_token_secret) }
        : {
            token: await secretValue(ctx.deps, org, user, 'accessTokenSecretName', next.access_token_secret),
            appSecret: await secretValue(ctx.deps, org, user, 'appSecretSecretName', next.app_secret_secret),
            phoneNumberId: row.account_id,
            businessAccountId: row.business_account_id ?? undefined,
          };
    const field = provider === 'chatbot_provider' ? 'botTokenSecretName' : 'accessTokenSecretName';
    const identity = await adapterFor(ctx.deps.config.channels, provider)
      .identify(creds)
      .catch((err) => providerProblem(err, provider, field));
    if (identity.accountId !== row.account_id)
      throw errors.invalidField(
        field,
        `the new credentials belong to another account (${identity.accountName ?? identity.accountId}); connect it as a new channel`,
      );
    // The secrets now resolve for the caller: the channel acts as the member who last set them.
    set.created_by_user_id = user;
  }
  if (!Object.keys(set).length) return toChannel(ctx.deps, row, origin);
  set.updated_at = nowIso();
  await withTx(ctx, async (tx) => {
    await repo.updateChannel(tx, id, set);
    await recordActivity(tx, {
      resourceType: 'agent_channel',
      resourceId: id,
      eventType: 'channel.updated',
      status: 'succeeded',
      title: `Channel ${row.account_name ?? row.account_id} updated`,
      metadata: { fields: Object.keys(body), agent: set.agent_slug ?? row.agent_slug },
    });
  });
  return toChannel(ctx.deps, { ...row, ...set }, origin);
}

/** DELETE /v1/agent-channels/{id}: the channel and everything of it (messages, privacy, bindings, links) go. */
export async function deleteChannel(ctx: Ctx, id: string): Promise<void> {
  requireScope(ctx, 'channels:write');
  const row = await channelRow(ctx, id);
  await withTx(ctx, async (tx) => {
    await repo.deleteChannelRow(tx, id);
    await recordActivity(tx, {
      resourceType: 'agent_channel',
      resourceId: id,
      eventType: 'channel.deleted',
      status: 'succeeded',
      title: `Channel ${row.account_name ?? row.account_id} deleted`,
      metadata: { provider: row.provider, agent: row.agent_slug, accountId: row.account_id },
    });
  });
}

/**
 * POST /v1/agent-channels/{provider}/validate-connection: every input checked against the provider before any
 * secret is saved, and whether the number is free (one agent per number). Reports, never throws for refusals.
 */
export async function validateConnection(ctx: Ctx, providerParam: string, body: ValidateBody): Promise<ValidateResult> {
  requireScope(ctx, 'channels:write');
  const provider = providerOf(providerParam);
  const checks: ValidateResult['checks'] = {};
  const problems: string[] = [];
  await getAgent(ctx, body.agent)
    .then(() => {
      checks.agent = 'ok';
    })
    .catch((err) => {
      if (!(err instanceof AppError) || err.code !== 'not_found') throw err;
      checks.agent = 'not_found';
      problems.push(`agent "${body.agent}" was not found`);
    });
  if (provider === 'chatbot_provider') {
    if (!body.botToken) throw errors.invalidField('botToken', 'is required for chatbot_provider');
    try {
      const identity = await adapterFor(ctx.deps.config.channels, provider).identify({ token: body.botToken });
      checks.botToken = 'ok';
      const taken = await repo.channelByAccount(ctx, provider, identity.accountId);
      if (taken) {
        checks.botToken = 'in_use';
        problems.push(accountTaken(provider, taken).message);
      }
      return {
        valid: problems.length === 0,
        checks,
        problems,
        account: { id: identity.accountId, name: identity.accountName, displayName: identity.displayName },
      };
    } catch (err) {
      if (!(err instanceof ProviderError) || !err.opts.permanent) providerProblem(err, provider, 'botToken');
      checks.botToken = 'invalid';
      problems.push((err as Error).message);
      return { valid: false, checks, problems, account: null };
    }
  }
  for (const f of ['accessToken', 'phoneNumberId', 'businessAccountId'] as const)
    if (!body[f]) throw errors.invalidField(f, 'is required for business_messaging_provider');
  const result = await validateBusinessConnection(ctx.deps.config.channels, {
    accessToken: body.accessToken!,
    phoneNumberId: body.phoneNumberId!,
    businessAccountId: body.businessAccountId!,
  }).catch((err) => providerProblem(err, provider, 'accessToken'));
  Object.assign(checks, result.checks);
  problems.push(...result.problems);
  const taken = await repo.channelByAccount(ctx, provider, body.phoneNumberId!);
  if (taken) {
    checks.phoneNumberId = 'in_use';
    problems.push(accountTaken(provider, taken).message);
  }
  const n = result.phoneNumber;
  return {
    valid: problems.length === 0,
    checks,
    problems,
    account: n ? { id: n.id, name: n.displayPhoneNumber, displayName: n.verifiedName } : null,
  };
}

/**
 * POST /v1/agent-channels/{id}/register-webhook: the chat-bot provider's webhook is set here with the channel's
 * secret token; the business provider's is pasted by the user into its dashboard (`setup`).
 */
export async function registerWebhook(ctx: Ctx, id: string, origin?: string) {
  requireScope(ctx, 'channels:write');
  const row = await channelRow(ctx, id);
  const provider = row.provider as ProviderSlug;
  const creds = await channelCredentials(ctx.deps, row);
  if (!creds)
    throw errors.invalid(
      `the channel's secrets (${[row.bot_token_secret, row.access_token_secret].filter(Boolean).join(', ')}) no longer exist; set them again`,
    );
  const url = webhookUrl(ctx.deps, id, origin);
  const secret = webhookSecret(ctx.deps, row);
  const setup = await adapterFor(ctx.deps.config.channels, provider)
    .registerWebhook(creds, url, secret)
    .catch((err) => providerProblem(err, provider, 'channel'));
  const now = nowIso();
  await withTx(ctx, async (tx) => {
    await repo.updateChannel(tx, id, { webhook_registered_at: now, updated_at: now });
    await recordActivity(tx, {
      resourceType: 'agent_channel',
      resourceId: id,
      eventType: 'channel.webhook.registered',
      status: 'succeeded',
      title: setup.registered
        ? `Webhook of ${row.account_name ?? row.account_id} set at the provider`
        : `Webhook set-up of ${row.account_name ?? row.account_id} issued`,
      metadata: { provider, webhookUrl: url, registered: setup.registered },
    });
  });
  return {
    channelId: id,
    provider,
    registered: setup.registered,
    setup: { webhookUrl: setup.webhookUrl, ...(setup.verifyToken ? { verifyToken: setup.verifyToken } : {}) },
  };
}

/** Activity filters on `agent_channel` resources: channels are the organization's, readable with channels:read. */
export async function canSeeChannel(ctx: Ctx, id: string): Promise<boolean> {
  return Boolean(await repo.findChannel(ctx, id));
}
