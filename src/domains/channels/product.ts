/**
 * Product channels (ADR 0030): a builder's product app, the channels bound to it, and the links between chat senders
 * and the product's own users. A bound channel answers only linked senders; each link's product end user is the user
 * id the sender's runs act as, with their own OAuth connections and never the builder's or the organization's.
 *
 * Two ways to link: the product's server opens a link session and hands its user the deep link (the sender presents
 * the `pcl_` token in chat), or an unlinked sender writes to the channel and gets a link to the product carrying a
 * session; either way the product's server, having verified its user, completes the session with the token.
 */
import { randomBytes } from 'node:crypto';
import { exec, hasScope, orgId, requireScope, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { safeEqual, sha256Hex } from '../../platform/crypto/index.js';
import { isUniqueViolation } from '../../platform/db/errors.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import type { Scope } from '../../platform/scopes.js';
import { recordActivity, type ActivityRegistry } from '../activity/index.js';
import { listConnections, startBrowserFlow, type OAuthConnection } from '../oauth/index.js';
import { findChannel, type ChannelRow } from './repo.js';
import { adapterFor, isProvider } from './providers/index.js';
import * as repo from './product-repo.js';
import type {
  App,
  Binding,
  CompleteSessionBody,
  CreateAppBody,
  CreateBindingBody,
  CreateSessionBody,
  EndUserConnectBody,
  ImportLinkBody,
  Link,
  LinkSession,
  LinksQuery,
} from './product-schemas.js';

export const LINK_TOKEN_PREFIX = 'pcl_';
/** `pcl_` + 43 characters of base64url (32 random bytes): 47 characters, inside a chat deep link's 64. */
const TOKEN_BYTES = 32;
const TOKEN_PATTERN = /^pcl_[A-Za-z0-9_-]{20,60}$/;

/** What a linked end user's runs may do: act, use models and tools, and connect their own accounts. */
const END_USER_SCOPES: readonly Scope[] = [
  'agent:run',
  'agent:read',
  'models:use',
  'tools:execute',
  'connections:use',
  'connections:read',
  'connections:write',
  'sandbox:read',
  'sandbox:write',
  'storage:read',
  'storage:write',
];

/**
 * The product-channel errors. The closed set of error codes has no product-specific ones yet, so each is the nearest
 * general code with a message naming the rule (the lead may give them their own codes in one place, here).
 */
const productErrors = {
  channelAlreadyBound: (channelId: string, appSlug: string) =>
    errors.conflict(`channel_already_bound: channel ${channelId} is already bound to the product app "${appSlug}"; delete that binding first`),
  channelNotBound: (channelId: string, appSlug: string) =>
    errors.conflict(
      `channel_not_bound: channel ${channelId} is not bound to the product app "${appSlug}"; bind it with POST /v1/apps/${appSlug}/channel-bindings`,
    ),
  invalidToken: () => errors.invalidField('token', 'invalid_token: does not match this link session'),
  expired: () => new AppError('link_expired', 'this link session expired; start a new one'),
  alreadyCompleted: () => errors.invalidState('already_completed: this link session was already used (each token links once)', 'completed'),
  wrongUser: () =>
    errors.forbidden('wrong_user: this link session was started for another product user; the user finishing a link must be the one who started it'),
  senderMismatch: (field: string) => errors.conflict(`sender_mismatch: ${field} is not the chat sender this link session was made for`),
};

// ---- records ----

const toApp = (r: repo.AppRow): App => ({ id: r.id, slug: r.slug, name: r.name, createdAt: r.created_at, updatedAt: r.updated_at });

const toBinding = (r: repo.BindingRow, appSlug: string): Binding => ({
  id: r.id,
  appSlug,
  agentChannelId: r.channel_id,
  identityPolicy: 'link_required',
  groupPolicy: r.group_policy as Binding['groupPolicy'],
  unknownSenderReply: r.unknown_sender_reply,
  metadata: JSON.parse(r.metadata) as Record<string, unknown>,
  createdAt: r.created_at,
});

const toLink = (r: repo.LinkRow, appSlug: string): Link => ({
  id: r.id,
  appSlug,
  agentChannelId: r.channel_id,
  productExternalUserId: r.product_external_user_id,
  providerExternalUserId: r.provider_external_user_id,
  externalConversationId: r.external_conversation_id,
  displayName: r.display_name,
  username: r.username,
  source: r.source as Link['source'],
  status: r.status as Link['status'],
  createdAt: r.created_at,
  revokedAt: r.revoked_at,
});

// ---- helpers ----

/** https anywhere, or http on this machine (a product developing locally). */
export function linkUrlAllowed(value: string): boolean {
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    return false;
  }
  if (u.protocol === 'https:') return true;
  return u.protocol === 'http:' && ['localhost', '127.0.0.1', '[::1]'].includes(u.hostname);
}

async function requireApp(ctx: Ctx, slug: string): Promise<repo.AppRow> {
  const app = await repo.appBySlug(ctx, slug);
  if (!app) throw errors.notFound('product app', slug);
  return app;
}

async function requireChannel(ctx: Ctx, channelId: string): Promise<ChannelRow> {
  const channel = await findChannel(ctx, channelId);
  if (!channel) throw errors.notFound('channel', channelId);
  return channel;
}

/** The channel, which must be bound to `app`. */
async function requireBoundChannel(ctx: Ctx, app: repo.AppRow, channelId: string): Promise<ChannelRow> {
  const channel = await requireChannel(ctx, channelId);
  const binding = await repo.bindingByChannel(ctx, channelId);
  if (binding?.app_id !== app.id) throw productErrors.channelNotBound(channelId, app.slug);
  return channel;
}

const newToken = () => `${LINK_TOKEN_PREFIX}${randomBytes(TOKEN_BYTES).toString('base64url')}`;

/** The chat deep link carrying `payload`, in the channel's provider's format (its adapter builds it). */
function deepLinkFor(deps: Deps, channel: ChannelRow, payload: string): string | null {
  if (!isProvider(channel.provider)) return null;
  return adapterFor(deps.config.channels, channel.provider).deepLink({ accountName: channel.account_name }, payload);
}

const sessionExpired = (s: repo.SessionRow, now = Date.now()) =>
  s.status === 'expired' || (s.status === 'created' && Date.parse(s.expires_at) <= now);

// ---- apps ----

/** POST /v1/apps: a product app; its slug is unique in the organization. */
export async function createApp(ctx: Ctx, body: CreateAppBody): Promise<App> {
  requireScope(ctx, 'apps:write');
  const now = nowIso();
  const row = {
    id: prefixedId('app'),
    org_id: orgId(ctx),
    slug: body.slug,
    name: body.name,
    created_by_user_id: ctx.principal.userId,
    created_at: now,
    updated_at: now,
  };
  try {
    await withTx(ctx, async (tx) => {
      await repo.insertApp(tx, row);
      await recordActivity(tx, {
        resourceType: 'product_app',
        resourceId: row.id,
        eventType: 'app.created',
        status: 'created',
        title: `Product app ${row.name} (${row.slug}) created`,
        metadata: { slug: row.slug },
      });
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw errors.conflict(`a product app with slug "${body.slug}" already exists in this organization`);
    throw err;
  }
  return toApp(row);
}

export async function listApps(ctx: Ctx): Promise<App[]> {
  requireScope(ctx, 'apps:read');
  return (await repo.listAppRows(ctx)).map(toApp);
}

export async function getApp(ctx: Ctx, slug: string): Promise<App> {
  requireScope(ctx, 'apps:read');
  return toApp(await requireApp(ctx, slug));
}

/** DELETE /v1/apps/{appSlug}: the app with its bindings, link sessions, links and end users. */
export async function deleteApp(ctx: Ctx, slug: string): Promise<{ deleted: true }> {
  requireScope(ctx, 'apps:write');
  await withTx(ctx, async (tx) => {
    const app = await requireApp(tx, slug);
    await repo.deleteAppRows(tx, app.id);
    await recordActivity(tx, {
      resourceType: 'product_app',
      resourceId: app.id,
      eventType: 'app.deleted',
      status: 'deleted',
      title: `Product app ${app.name} (${app.slug}) deleted`,
      metadata: { slug: app.slug },
    });
  });
  return { deleted: true };
}

// ---- bindings ----

/** POST /v1/apps/{appSlug}/channel-bindings: binds a channel of the organization to the app (one app per channel). */
export async function createBinding(ctx: Ctx, slug: string, body: CreateBindingBody): Promise<Binding> {
  requireScope(ctx, 'apps:write');
  const app = await requireApp(ctx, slug);
  await requireChannel(ctx, body.agentChannelId);
  const linkUrl = body.metadata.linkUrl;
  if (linkUrl !== undefined && (typeof linkUrl !== 'string' || !linkUrlAllowed(linkUrl)))
    throw errors.invalidField('metadata.linkUrl', 'must be an absolute https URL (http only on localhost, 127.0.0.1 or [::1])');
  if (body.unknownSenderReply.includes('{linkUrl}') && linkUrl === undefined)
    throw errors.invalidField(
      'metadata.linkUrl',
      'is required when unknownSenderReply contains {linkUrl}: the page of your product where a sender links',
    );
  const existing = await repo.bindingByChannel(ctx, body.agentChannelId);
  if (existing) throw productErrors.channelAlreadyBound(body.agentChannelId, existing.app_slug);
  const row = {
    id: prefixedId('cbd'),
    org_id: orgId(ctx),
    app_id: app.id,
    channel_id: body.agentChannelId,
    identity_policy: body.identityPolicy,
    group_policy: body.groupPolicy,
    unknown_sender_reply: body.unknownSenderReply,
    metadata: JSON.stringify(body.metadata),
    created_by_user_id: ctx.principal.userId,
    created_at: nowIso(),
  };
  try {
    await withTx(ctx, async (tx) => {
      await repo.insertBinding(tx, row);
      await recordActivity(tx, {
        resourceType: 'product_app',
        resourceId: app.id,
        eventType: 'channel.binding.created',
        status: 'created',
        title: `Channel ${row.channel_id} bound to product app ${app.slug}`,
        metadata: { bindingId: row.id, channelId: row.channel_id, groupPolicy: row.group_policy },
      });
    });
  } catch (err) {
    if (isUniqueViolation(err)) {
      const other = await repo.bindingByChannel(ctx, body.agentChannelId);
      throw productErrors.channelAlreadyBound(body.agentChannelId, other?.app_slug ?? 'another app');
    }
    throw err;
  }
  return toBinding(row, app.slug);
}

export async function listBindings(ctx: Ctx, slug: string): Promise<Binding[]> {
  requireScope(ctx, 'apps:read');
  const app = await requireApp(ctx, slug);
  return (await repo.listBindingRows(ctx, app.id)).map((r) => toBinding(r, app.slug));
}

/** DELETE .../channel-bindings/{bindingId}: the channel stops answering as the product (its links stay, inert). */
export async function deleteBinding(ctx: Ctx, slug: string, bindingId: string): Promise<{ deleted: true }> {
  requireScope(ctx, 'apps:write');
  await withTx(ctx, async (tx) => {
    const app = await requireApp(tx, slug);
    const binding = await repo.bindingById(tx, app.id, bindingId);
    if (!binding) throw errors.notFound('channel binding', bindingId);
    await repo.deleteBindingRow(tx, app.id, bindingId);
    await recordActivity(tx, {
      resourceType: 'product_app',
      resourceId: app.id,
      eventType: 'channel.binding.deleted',
      status: 'deleted',
      title: `Channel ${binding.channel_id} unbound from product app ${app.slug}`,
      metadata: { bindingId, channelId: binding.channel_id },
    });
  });
  return { deleted: true };
}

// ---- link sessions ----

async function insertSessionRow(
  ctx: Ctx,
  app: repo.AppRow,
  channelId: string,
  input: {
    origin: 'api' | 'chat';
    externalUserId: string | null;
    conversationId: string | null;
    returnUrl: string | null;
    productExternalUserId: string | null;
  },
) {
  const token = newToken();
  const now = new Date();
  const row = {
    id: prefixedId('cls'),
    org_id: orgId(ctx),
    app_id: app.id,
    channel_id: channelId,
    token_hash: sha256Hex(token),
    product_external_user_id: input.productExternalUserId ?? null,
    external_user_id: input.externalUserId,
    external_conversation_id: input.conversationId,
    return_url: input.returnUrl,
    origin: input.origin,
    status: 'created',
    link_id: null,
    expires_at: new Date(now.getTime() + ctx.deps.config.channels.linkTtlSeconds * 1000).toISOString(),
    created_at: now.toISOString(),
    completed_at: null,
  };
  await withTx(ctx, async (tx) => {
    await repo.insertSession(tx, row);
    await recordActivity(tx, {
      resourceType: 'product_app',
      resourceId: app.id,
      eventType: 'channel.link_session.created',
      status: 'created',
      title: `Link session opened on channel ${channelId} (${input.origin === 'chat' ? 'an unlinked sender wrote' : 'the product asked'})`,
      metadata: { sessionId: row.id, channelId, origin: input.origin },
    });
  });
  return { row, token };
}

/** POST /v1/apps/{appSlug}/channel-link-sessions: a single-use `pcl_` token and the chat deep link carrying it. */
export async function createLinkSession(ctx: Ctx, slug: string, body: CreateSessionBody): Promise<LinkSession> {
  requireScope(ctx, 'apps:write');
  const app = await requireApp(ctx, slug);
  const channel = await requireBoundChannel(ctx, app, body.agentChannelId);
  if (body.returnUrl !== undefined && !linkUrlAllowed(body.returnUrl))
    throw errors.invalidField('returnUrl', 'must be an absolute https URL (http only on localhost, 127.0.0.1 or [::1])');
  const { row, token } = await insertSessionRow(ctx, app, channel.id, {
    origin: 'api',
    externalUserId: body.externalUserId ?? null,
    conversationId: null,
    returnUrl: body.returnUrl ?? null,
    productExternalUserId: body.productExternalUserId ?? null,
  });
  return {
    id: row.id,
    token,
    deepLink: deepLinkFor(ctx.deps, channel, token),
    expiresAt: row.expires_at,
    status: 'created',
    agentChannelId: channel.id,
    externalUserId: row.external_user_id,
    returnUrl: row.return_url,
  };
}

/** Gets (or makes) the app's end user for a product user id, inside the caller's transaction. */
async function endUserFor(tx: Ctx, app: repo.AppRow, productExternalUserId: string): Promise<repo.EndUserRow> {
  await exec(tx)
    .insertInto('product_end_users')
    .values({ id: prefixedId('peu'), org_id: orgId(tx), app_id: app.id, product_external_user_id: productExternalUserId, created_at: nowIso() })
    .onConflict((oc) => oc.columns(['app_id', 'product_external_user_id']).doNothing())
    .execute();
  return (await repo.endUserByExternalId(tx, app.id, productExternalUserId))!;
}

/**
 * Links a chat sender to a product user inside `tx`: the sender's earlier active link on the channel is revoked (one
 * active link per sender and channel); the same link again is answered as it is.
 */
async function writeLink(
  tx: Ctx,
  app: repo.AppRow,
  input: {
    channelId: string;
    productExternalUserId: string;
    providerExternalUserId: string;
    conversationId: string | null;
    displayName: string | null;
    username: string | null;
    source: 'session' | 'import';
    sessionId: string | null;
    linkId?: string;
  },
): Promise<repo.LinkRow> {
  const now = nowIso();
  const current = await repo.activeLinkRow(tx, input.channelId, input.providerExternalUserId);
  if (current && input.source === 'import' && current.app_id === app.id && current.product_external_user_id === input.productExternalUserId) {
    const { app_slug: _slug, ...row } = current;
    return row;
  }
  const endUser = await endUserFor(tx, app, input.productExternalUserId);
  const revoked = await repo.revokeActiveLinkOf(tx, input.channelId, input.providerExternalUserId, now);
  if (revoked)
    await recordActivity(tx, {
      resourceType: 'product_app',
      resourceId: revoked.app_id,
      eventType: 'channel.link.revoked',
      status: 'revoked',
      title: `Channel link of sender ${revoked.provider_external_user_id} replaced by a new link`,
      metadata: { linkId: revoked.id, channelId: revoked.channel_id, reason: 'replaced' },
    });
  const row: repo.LinkRow = {
    id: input.linkId ?? prefixedId('cln'),
    org_id: orgId(tx),
    app_id: app.id,
    channel_id: input.channelId,
    end_user_id: endUser.id,
    product_external_user_id: input.productExternalUserId,
    provider_external_user_id: input.providerExternalUserId,
    external_conversation_id: input.conversationId,
    display_name: input.displayName,
    username: input.username,
    source: input.source,
    session_id: input.sessionId,
    status: 'active',
    active_key: input.providerExternalUserId,
    created_by_user_id: tx.principal.userId,
    created_at: now,
    revoked_at: null,
  };
  try {
    await repo.insertLink(tx, row);
  } catch (err) {
    if (isUniqueViolation(err)) throw errors.conflict('this sender was linked by another request at the same moment; try again');
    throw err;
  }
  await recordActivity(tx, {
    resourceType: 'product_app',
    resourceId: app.id,
    eventType: 'channel.link.created',
    status: 'created',
    title: `Chat sender ${input.providerExternalUserId} linked to product user ${input.productExternalUserId} (${input.source === 'session' ? 'link session' : 'import'})`,
    metadata: {
      linkId: row.id,
      channelId: input.channelId,
      source: input.source,
      endUserId: endUser.id,
      ...(input.sessionId ? { sessionId: input.sessionId } : {}),
    },
  });
  return row;
}

/**
 * POST .../channel-link-sessions/{sessionId}/complete, called by the product's server once it verified its user:
 * the token must match (timing-safe), the session be unused and unexpired, started for this product user (when it
 * names one) and for this chat sender (when it knows one). Single use: one of two racing completes wins.
 */
export async function completeLinkSession(ctx: Ctx, slug: string, sessionId: string, body: CompleteSessionBody): Promise<Link> {
  requireScope(ctx, 'apps:write');
  const app = await requireApp(ctx, slug);
  const session = await repo.sessionById(ctx, app.id, sessionId);
  if (!session) throw errors.notFound('channel link session', sessionId);
  if (!safeEqual(sha256Hex(body.token), session.token_hash)) throw productErrors.invalidToken();
  if (session.status === 'completed') throw productErrors.alreadyCompleted();
  if (sessionExpired(session)) {
    await repo.expireSession(ctx, session.id);
    throw productErrors.expired();
  }
  if (session.product_external_user_id !== null && body.productExternalUserId !== session.product_external_user_id) throw productErrors.wrongUser();
  // The binding may have gone (or moved to another app) since the session was opened.
  await requireBoundChannel(ctx, app, session.channel_id);
  const known = session.external_user_id;
  if (known && body.providerExternalUserId !== undefined && body.providerExternalUserId !== known)
    throw productErrors.senderMismatch('providerExternalUserId');
  const sender = known ?? body.providerExternalUserId;
  if (!sender)
    throw errors.invalidField(
      'providerExternalUserId',
      'is required: this link session does not know the chat sender yet (none was given when it was created and nobody presented its token in chat)',
    );
  const row = await withTx(ctx, async (tx) => {
    const linkId = prefixedId('cln');
    if (!(await repo.claimSession(tx, session.id, linkId, nowIso()))) throw productErrors.alreadyCompleted();
    return writeLink(tx, app, {
      channelId: session.channel_id,
      productExternalUserId: body.productExternalUserId,
      providerExternalUserId: sender,
      conversationId: body.externalConversationId ?? session.external_conversation_id,
      displayName: body.displayName ?? null,
      username: body.username ?? null,
      source: 'session',
      sessionId: session.id,
      linkId,
    });
  });
  return toLink(row, app.slug);
}

// ---- links ----

/** POST /v1/apps/{appSlug}/channel-links: a trusted direct import of a link the product already knows. */
export async function importLink(ctx: Ctx, slug: string, body: ImportLinkBody): Promise<Link> {
  requireScope(ctx, 'apps:write');
  const app = await requireApp(ctx, slug);
  const channel = await requireBoundChannel(ctx, app, body.agentChannelId);
  const row = await withTx(ctx, (tx) =>
    writeLink(tx, app, {
      channelId: channel.id,
      productExternalUserId: body.productExternalUserId,
      providerExternalUserId: body.externalUserId,
      conversationId: body.externalConversationId ?? null,
      displayName: null,
      username: null,
      source: 'import',
      sessionId: null,
    }),
  );
  return toLink(row, app.slug);
}

export async function listLinks(ctx: Ctx, slug: string, query: LinksQuery): Promise<Link[]> {
  requireScope(ctx, 'apps:read');
  const app = await requireApp(ctx, slug);
  const rows = await repo.listLinkRows(ctx, app.id, {
    channelId: query.agentChannelId,
    productExternalUserId: query.productExternalUserId,
    status: query.status,
  });
  return rows.map((r) => toLink(r, app.slug));
}

/** POST .../channel-links/{linkId}/revoke: the sender is no longer linked (a revoked link answers as it is). */
export async function revokeLink(ctx: Ctx, slug: string, linkId: string): Promise<Link> {
  requireScope(ctx, 'apps:write');
  const row = await withTx(ctx, async (tx) => {
    const app = await requireApp(tx, slug);
    const link = await repo.linkById(tx, app.id, linkId);
    if (!link) throw errors.notFound('channel link', linkId);
    if (link.status === 'revoked') return link;
    const now = nowIso();
    await repo.revokeLinkRow(tx, link.id, now);
    await recordActivity(tx, {
      resourceType: 'product_app',
      resourceId: app.id,
      eventType: 'channel.link.revoked',
      status: 'revoked',
      title: `Channel link of sender ${link.provider_external_user_id} revoked`,
      metadata: { linkId: link.id, channelId: link.channel_id, reason: 'revoked' },
    });
    return { ...link, status: 'revoked', active_key: null, revoked_at: now };
  });
  return toLink(row, slug);
}

// ---- end users ----

export interface EndUser {
  id: string;
  appId: string;
  appSlug: string;
  productExternalUserId: string;
}

/**
 * The context a linked sender's runs act in: the product end user's own user id in the channel's organization, with
 * only the scopes a run needs (no role, no API key). Credential resolution sees `endUser` and uses nothing of the
 * organization's or the builder's.
 */
export function endUserCtx(deps: Deps, orgId: string, endUser: EndUser, requestId: string): Ctx {
  return {
    deps,
    requestId,
    principal: {
      kind: 'system',
      userId: endUser.id,
      orgId,
      role: null,
      scopes: new Set(END_USER_SCOPES),
      apiKeyId: null,
      endUser: { appId: endUser.appId, appSlug: endUser.appSlug, productExternalUserId: endUser.productExternalUserId },
    },
  };
}

/**
 * The OAuth domain's question at a browser flow's callback when the flow's user is no member of the organization:
 * is it a product end user (who then finishes their flow in their own context)? Registered by app.ts.
 */
export async function endUserFlowOwner(deps: Deps, userId: string, org: string, requestId: string): Promise<Ctx | null> {
  if (!userId.startsWith('peu_')) return null;
  const probe: Ctx = { deps, requestId, principal: { kind: 'system', userId, orgId: org, role: null, scopes: new Set(), apiKeyId: null } };
  const endUser = await repo.endUserById(probe, userId);
  if (!endUser) return null;
  const app = await repo.appById(probe, endUser.app_id);
  if (!app) return null;
  return endUserCtx(
    deps,
    org,
    { id: endUser.id, appId: app.id, appSlug: app.slug, productExternalUserId: endUser.product_external_user_id },
    requestId,
  );
}

async function requireEndUser(ctx: Ctx, slug: string, productExternalUserId: string): Promise<EndUser> {
  const app = await requireApp(ctx, slug);
  const endUser = await repo.endUserByExternalId(ctx, app.id, productExternalUserId);
  if (!endUser) throw errors.notFound('product end user', productExternalUserId);
  return { id: endUser.id, appId: app.id, appSlug: app.slug, productExternalUserId };
}

/**
 * POST /v1/apps/{appSlug}/end-users/{productExternalUserId}/connections/{provider}/start: the product's server lets
 * its (linked) user connect an account of their own; the flow runs as the end user, so the connection is theirs.
 */
export async function startEndUserConnection(ctx: Ctx, slug: string, productExternalUserId: string, provider: string, body: EndUserConnectBody) {
  requireScope(ctx, 'apps:write');
  const endUser = await requireEndUser(ctx, slug, productExternalUserId);
  return startBrowserFlow(endUserCtx(ctx.deps, orgId(ctx), endUser, ctx.requestId), {
    provider,
    ...(body.scopes ? { scopes: body.scopes } : {}),
    ...(body.returnUrl !== undefined ? { returnUrl: body.returnUrl } : {}),
  });
}

/** GET /v1/apps/{appSlug}/end-users/{productExternalUserId}/connections: the end user's own connected accounts. */
export async function listEndUserConnections(ctx: Ctx, slug: string, productExternalUserId: string): Promise<OAuthConnection[]> {
  requireScope(ctx, 'apps:read');
  const endUser = await requireEndUser(ctx, slug, productExternalUserId);
  return listConnections(endUserCtx(ctx.deps, orgId(ctx), endUser, ctx.requestId));
}

// ---- for message processing ----

export interface ChannelBindingInfo {
  id: string;
  appId: string;
  appSlug: string;
  appName: string;
  groupPolicy: 'disabled' | 'sender_scoped';
  unknownSenderReply: string;
  metadata: Record<string, unknown>;
}

/** The product binding of a channel of the caller's organization, or null for a channel no app is bound to. */
export async function bindingForChannel(ctx: Ctx, channelId: string): Promise<ChannelBindingInfo | null> {
  requireScope(ctx, 'apps:read');
  const b = await repo.bindingByChannel(ctx, channelId);
  if (!b) return null;
  return {
    id: b.id,
    appId: b.app_id,
    appSlug: b.app_slug,
    appName: b.app_name,
    groupPolicy: b.group_policy as ChannelBindingInfo['groupPolicy'],
    unknownSenderReply: b.unknown_sender_reply,
    metadata: JSON.parse(b.metadata) as Record<string, unknown>,
  };
}

/** The sender's active link on the channel, for the app the channel is bound to now, with its end user. */
export async function activeLink(ctx: Ctx, channelId: string, providerUserId: string): Promise<{ id: string; endUser: EndUser } | null> {
  requireScope(ctx, 'apps:read');
  const binding = await repo.bindingByChannel(ctx, channelId);
  if (!binding) return null;
  const link = await repo.activeLinkRow(ctx, channelId, providerUserId);
  if (link?.app_id !== binding.app_id) return null;
  return {
    id: link.id,
    endUser: { id: link.end_user_id, appId: link.app_id, appSlug: link.app_slug, productExternalUserId: link.product_external_user_id },
  };
}

/**
 * The reply to an unlinked sender: a chat-origin link session for them and this conversation, and the binding's
 * text with `{linkUrl}` (the product's link page, carrying `linkSession` and `token`) and `{appName}` filled in.
 */
export async function unlinkedSenderReply(
  ctx: Ctx,
  binding: ChannelBindingInfo,
  channelId: string,
  sender: { senderId: string; conversationId: string },
): Promise<string> {
  requireScope(ctx, 'apps:write');
  const app = await repo.appById(ctx, binding.appId);
  if (!app) throw errors.notFound('product app', binding.appSlug);
  const { row, token } = await insertSessionRow(ctx, app, channelId, {
    origin: 'chat',
    externalUserId: sender.senderId,
    conversationId: sender.conversationId,
    returnUrl: null,
    productExternalUserId: null,
  });
  let linkUrl = '';
  if (typeof binding.metadata.linkUrl === 'string') {
    const u = new URL(binding.metadata.linkUrl);
    u.searchParams.set('linkSession', row.id);
    u.searchParams.set('token', token);
    linkUrl = u.toString();
  }
  return binding.unknownSenderReply.replaceAll('{appName}', binding.appName).replaceAll('{linkUrl}', linkUrl);
}

/** The `pcl_` token of a `/start <token>` (chat-bot deep link) or bare-token (business) message, else null. */
export function isLinkToken(text: string): string | null {
  const t = text.trim();
  const m = /^\/start(?:@\S+)?\s+(\S+)$/.exec(t);
  const candidate = m ? m[1]! : t;
  return TOKEN_PATTERN.test(candidate) ? candidate : null;
}

/**
 * A sender presented a session's token in chat: the live session on this channel records them as its sender (unless
 * it was made for someone else), and the reply tells them where to finish linking.
 */
export async function presentLinkToken(
  ctx: Ctx,
  channelId: string,
  sender: { senderId: string; conversationId: string; senderName: string | null; username: string | null },
  token: string,
): Promise<string> {
  requireScope(ctx, 'apps:write');
  const binding = await repo.bindingByChannel(ctx, channelId);
  const appName = binding?.app_name ?? 'the app';
  const session = await repo.sessionByTokenHash(ctx, channelId, sha256Hex(token));
  if (!session || session.app_id !== binding?.app_id || session.status !== 'created' || sessionExpired(session))
    return `This link is invalid or has expired. Start linking again from ${appName}.`;
  if (session.external_user_id && session.external_user_id !== sender.senderId)
    return 'This link was made for another account. Open it from the chat account you want to link.';
  const recorded = await repo.recordSessionSender(ctx, session.id, { externalUserId: sender.senderId, conversationId: sender.conversationId });
  if (Number(recorded.numUpdatedRows) !== 1) return `This link is invalid or has expired. Start linking again from ${appName}.`;
  if (session.return_url) {
    const u = new URL(session.return_url);
    u.searchParams.set('linkSession', session.id);
    return `Almost done: finish linking your ${appName} account here: ${u.toString()}`;
  }
  return `Almost done: go back to ${appName} to finish linking your account.`;
}

// ---- activity ----

/**
 * Activity filters on `product_app` resources: apps belong to the whole organization, so a caller with apps:read
 * sees every event of one (the listing is scoped to the organization; a deleted app's events stay readable).
 */
export function registerProductActivity(registry: ActivityRegistry): void {
  registry.resource('product_app', async (ctx) => hasScope(ctx, 'apps:read'));
}
