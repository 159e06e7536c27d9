/**
 * Who may talk to a channel's agent (ADR 0030). `approved_only` (the default): a conversation needs a grant; an
 * unknown one makes one pending request (reused per conversation, expiring) and gets the unauthorized reply at
 * most once per window. `open`: everyone, within allowPrivateChats/allowGroups. `disabled`: nobody. Grants are per
 * conversation and per conversation type, so approving someone's private chat never opens a group to them.
 */
import { orgId, requireScope, withTx, type Ctx } from '../../platform/context.js';
import { uniqueAs } from '../../platform/db/errors.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import type { InboundMessage } from './providers/types.js';
import * as repo from './privacy-repo.js';
import type { GrantRow, RequestRow } from './privacy-repo.js';
import * as channels from './repo.js';
import type { ChannelRow } from './repo.js';
import type { Grant, GrantBody, Privacy, PrivacyBody, PrivacyRequest } from './schemas.js';
import { privacyOf } from './service.js';

export const DEFAULT_UNAUTHORIZED_MESSAGE =
  'This assistant only answers approved conversations. Your request was sent to its owner; you can chat here once they approve it.';

export function toRequest(r: RequestRow): PrivacyRequest {
  return {
    id: r.id,
    channelId: r.channel_id,
    status: r.status as PrivacyRequest['status'],
    externalConversationId: r.external_conversation_id,
    conversationType: r.conversation_type as PrivacyRequest['conversationType'],
    conversationDisplayName: r.conversation_display_name,
    externalUserId: r.external_user_id,
    displayName: r.display_name,
    username: r.username,
    firstMessage: r.first_message,
    grantId: r.grant_id,
    createdAt: r.created_at,
    expiresAt: r.expires_at,
    decidedAt: r.decided_at,
  };
}

export function toGrant(g: GrantRow): Grant {
  return {
    id: g.id,
    channelId: g.channel_id,
    scope: 'conversation',
    externalConversationId: g.external_conversation_id,
    conversationType: g.conversation_type as Grant['conversationType'],
    conversationDisplayName: g.conversation_display_name,
    status: g.status as Grant['status'],
    requestId: g.request_id,
    createdAt: g.created_at,
    revokedAt: g.revoked_at,
  };
}

async function channelOf(ctx: Ctx, id: string): Promise<ChannelRow> {
  const row = await channels.findChannel(ctx, id);
  if (!row) throw errors.notFound('channel', id);
  return row;
}

export async function getPrivacy(ctx: Ctx, channelId: string): Promise<Privacy> {
  requireScope(ctx, 'channels:read');
  return privacyOf(await channelOf(ctx, channelId));
}

export async function updatePrivacy(ctx: Ctx, channelId: string, body: PrivacyBody): Promise<Privacy> {
  requireScope(ctx, 'channels:write');
  const row = await channelOf(ctx, channelId);
  const set: Partial<ChannelRow> = { updated_at: nowIso() };
  if (body.mode !== undefined) set.privacy_mode = body.mode;
  if (body.allowPrivateChats !== undefined) set.allow_private_chats = body.allowPrivateChats ? 1 : 0;
  if (body.allowGroups !== undefined) set.allow_groups = body.allowGroups ? 1 : 0;
  if (body.unauthorizedReply !== undefined) set.unauthorized_reply = body.unauthorizedReply;
  if (body.unauthorizedMessage !== undefined) set.unauthorized_message = body.unauthorizedMessage;
  const next = { ...row, ...set };
  await withTx(ctx, async (tx) => {
    await channels.updateChannel(tx, channelId, set);
    await recordActivity(tx, {
      resourceType: 'agent_channel',
      resourceId: channelId,
      eventType: 'channel.privacy.updated',
      status: 'succeeded',
      title: `Privacy of ${row.account_name ?? row.account_id}: ${next.privacy_mode}`,
      metadata: { ...privacyOf(next), unauthorizedMessage: undefined },
    });
  });
  return privacyOf(next);
}

export async function listPrivacyRequests(ctx: Ctx, channelId: string, status?: string): Promise<PrivacyRequest[]> {
  requireScope(ctx, 'channels:read');
  await channelOf(ctx, channelId);
  const now = nowIso();
  // A pending request past its expiry reads as expired even before the sweep writes it.
  return (await repo.listRequests(ctx, channelId, status === 'expired' ? undefined : status))
    .map((r) => (r.status === 'pending' && r.expires_at <= now ? { ...r, status: 'expired' } : r))
    .filter((r) => !status || r.status === status)
    .map(toRequest);
}

export async function listGrants(ctx: Ctx, channelId: string, status?: string): Promise<Grant[]> {
  requireScope(ctx, 'channels:read');
  await channelOf(ctx, channelId);
  return (await repo.listGrants(ctx, channelId, status)).map(toGrant);
}

/** Inserts a grant (inside the caller's transaction), refusing a second live one for the conversation. */
async function insertGrant(
  tx: Ctx,
  channel: ChannelRow,
  g: { conversationId: string; type: string; displayName: string | null; requestId: string | null },
): Promise<GrantRow> {
  const live = await repo.liveGrant(tx, channel.id, g.conversationId);
  if (live)
    throw new AppError('conflict', `conversation ${g.conversationId} already has access (grant ${live.id}); revoke it first to change it`, {
      grantId: live.id,
    });
  const row: GrantRow = {
    id: prefixedId('cpg'),
    org_id: orgId(tx),
    channel_id: channel.id,
    scope: 'conversation',
    external_conversation_id: g.conversationId,
    conversation_type: g.type,
    conversation_display_name: g.displayName,
    status: 'granted',
    active_key: g.conversationId,
    request_id: g.requestId,
    created_by_user_id: tx.principal.userId,
    created_at: nowIso(),
    revoked_at: null,
    revoked_by_user_id: null,
  };
  await uniqueAs(
    () => repo.insertGrant(tx, row),
    () => new AppError('conflict', `conversation ${g.conversationId} already has access`),
  );
  await recordActivity(tx, {
    resourceType: 'agent_channel',
    resourceId: channel.id,
    eventType: 'channel.privacy_grant.created',
    status: 'succeeded',
    title: `Access granted to ${g.displayName ?? g.conversationId} (${g.type})`,
    metadata: { grantId: row.id, externalConversationId: g.conversationId, conversationType: g.type, requestId: g.requestId },
  });
  return row;
}

/** POST .../privacy/requests/{id}/approve: the pending request's conversation gets a grant. */
export async function approveRequest(ctx: Ctx, channelId: string, requestId: string): Promise<{ request: PrivacyRequest; grant: Grant }> {
  requireScope(ctx, 'channels:write');
  const channel = await channelOf(ctx, channelId);
  return withTx(ctx, async (tx) => {
    const req = await repo.findRequest(tx, channelId, requestId);
    if (!req) throw errors.notFound('privacy request', requestId);
    if (req.status === 'approved') throw new AppError('invalid_state', `privacy request ${requestId} was already approved (grant ${req.grant_id})`);
    const now = nowIso();
    if (req.status === 'expired' || req.expires_at <= now)
      throw new AppError('link_expired', `privacy request ${requestId} expired; the sender can ask again by writing, or grant access directly`);
    const grant = await insertGrant(tx, channel, {
      conversationId: req.external_conversation_id,
      type: req.conversation_type,
      displayName: req.conversation_display_name ?? req.display_name,
      requestId,
    });
    const set = { status: 'approved', decided_at: now, decided_by_user_id: tx.principal.userId, grant_id: grant.id, updated_at: now };
    if (!(await repo.updateRequestFrom(tx, requestId, 'pending', set)))
      throw new AppError('invalid_state', `privacy request ${requestId} is no longer pending`);
    await recordActivity(tx, {
      resourceType: 'agent_channel',
      resourceId: channelId,
      eventType: 'channel.privacy_request.approved',
      status: 'succeeded',
      title: `Access request of ${req.display_name ?? req.external_user_id} approved`,
      metadata: { requestId, grantId: grant.id, externalConversationId: req.external_conversation_id },
    });
    return { request: toRequest({ ...req, ...set }), grant: toGrant(grant) };
  });
}

/** POST .../privacy/grants: access for a conversation directly (a pending request of it is approved with it). */
export async function createGrant(ctx: Ctx, channelId: string, body: GrantBody): Promise<Grant> {
  requireScope(ctx, 'channels:write');
  const channel = await channelOf(ctx, channelId);
  return withTx(ctx, async (tx) => {
    const pending = await repo.requestFor(tx, channelId, body.externalConversationId);
    const matches = pending?.status === 'pending' && pending.conversation_type === body.conversationType;
    const grant = await insertGrant(tx, channel, {
      conversationId: body.externalConversationId,
      type: body.conversationType,
      displayName: body.conversationDisplayName ?? null,
      requestId: matches ? pending.id : null,
    });
    if (matches) {
      const now = nowIso();
      await repo.updateRequestFrom(tx, pending.id, 'pending', {
        status: 'approved',
        decided_at: now,
        decided_by_user_id: tx.principal.userId,
        grant_id: grant.id,
        updated_at: now,
      });
    }
    return toGrant(grant);
  });
}

/** DELETE .../privacy/grants/{id}: access ends at once (the next message is treated as from a stranger). */
export async function revokeGrant(ctx: Ctx, channelId: string, grantId: string): Promise<Grant> {
  requireScope(ctx, 'channels:write');
  await channelOf(ctx, channelId);
  return withTx(ctx, async (tx) => {
    const g = await repo.findGrant(tx, channelId, grantId);
    if (!g) throw errors.notFound('grant', grantId);
    if (g.status === 'revoked') return toGrant(g);
    const now = nowIso();
    const set = { status: 'revoked', active_key: null, revoked_at: now, revoked_by_user_id: tx.principal.userId };
    if (await repo.revokeGrantRow(tx, grantId, set))
      await recordActivity(tx, {
        resourceType: 'agent_channel',
        resourceId: channelId,
        eventType: 'channel.privacy_grant.revoked',
        status: 'succeeded',
        title: `Access of ${g.conversation_display_name ?? g.external_conversation_id} revoked`,
        metadata: { grantId, externalConversationId: g.external_conversation_id },
      });
    return toGrant({ ...g, ...set });
  });
}

export type AccessDecision = { allowed: true } | { allowed: false; outcome: string; reply: string | null };

/**
 * Whether a message may reach the agent, under the channel's privacy settings; for a stranger under
 * `approved_only`, records (or renews) their conversation's pending request and claims the once-per-window reply.
 * Runs as the channel's system context (its verbs' callers hold channels:write).
 */
export async function decideAccess(ctx: Ctx, channel: ChannelRow, msg: InboundMessage): Promise<AccessDecision> {
  requireScope(ctx, 'channels:write');
  const p = privacyOf(channel);
  if (p.mode === 'disabled') return { allowed: false, outcome: 'privacy_disabled', reply: null };
  if (msg.conversationType === 'private' && !p.allowPrivateChats) return { allowed: false, outcome: 'private_chats_off', reply: null };
  if (msg.conversationType === 'group' && !p.allowGroups) return { allowed: false, outcome: 'groups_off', reply: null };
  if (p.mode === 'open') return { allowed: true };
  if (await repo.activeGrant(ctx, channel.id, msg.conversationId, msg.conversationType)) return { allowed: true };

  const cfg = ctx.deps.config.channels;
  const now = new Date();
  const nowS = now.toISOString();
  const expiresAt = new Date(now.getTime() + cfg.requestTtlSeconds * 1000).toISOString();
  const request = await withTx(ctx, async (tx) => {
    const existing = await repo.requestFor(tx, channel.id, msg.conversationId);
    const fields = {
      conversation_type: msg.conversationType,
      conversation_display_name: msg.conversationName,
      external_user_id: msg.senderId,
      display_name: msg.senderName,
      username: msg.senderUsername,
      first_message: msg.text.slice(0, 500),
      status: 'pending',
      expires_at: expiresAt,
      decided_at: null,
      decided_by_user_id: null,
      grant_id: null,
      updated_at: nowS,
    };
    let row: RequestRow | undefined = existing;
    let created = false;
    if (!existing) {
      await repo.insertRequest(tx, {
        id: prefixedId('cpr'),
        org_id: orgId(tx),
        channel_id: channel.id,
        external_conversation_id: msg.conversationId,
        replied_at: null,
        created_at: nowS,
        ...fields,
      });
      row = await repo.requestFor(tx, channel.id, msg.conversationId);
      created = row?.created_at === nowS;
    } else if (existing.status !== 'pending' || existing.expires_at <= nowS) {
      // Expired, or approved once and revoked since: the conversation asks again (a new pending period).
      if (await repo.updateRequestFrom(tx, existing.id, existing.status, { ...fields, created_at: nowS })) {
        row = { ...existing, ...fields, created_at: nowS };
        created = true;
      }
    }
    if (created && row)
      await recordActivity(tx, {
        resourceType: 'agent_channel',
        resourceId: channel.id,
        eventType: 'channel.privacy_request.created',
        status: 'pending',
        title: `${msg.senderName ?? msg.senderId} asked to chat with ${channel.agent_slug}`,
        metadata: {
          requestId: row.id,
          externalConversationId: msg.conversationId,
          conversationType: msg.conversationType,
          externalUserId: msg.senderId,
        },
      });
    return row;
  });
  if (!request || p.unauthorizedReply === 'silent') return { allowed: false, outcome: 'privacy_pending', reply: null };
  const windowStart = new Date(now.getTime() - cfg.replyWindowSeconds * 1000).toISOString();
  const reply = (await repo.claimReply(ctx, request.id, nowS, windowStart)) ? (p.unauthorizedMessage ?? DEFAULT_UNAUTHORIZED_MESSAGE) : null;
  return { allowed: false, outcome: 'privacy_pending', reply };
}
