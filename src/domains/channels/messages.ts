/**
 * Inbound messages (ADR 0030): a webhook is verified before anything else is read, parsed, each message stored
 * once (the provider's id deduplicates its retries) and acknowledged; processing is asynchronous and durable. A
 * message is claimed from the database (a lease), so any replica may take it and a crashed one's work is taken
 * again; a conversation's messages are answered one after another (a second message waits while a run is active,
 * never dropped). Processing decides who may talk (product binding, else privacy), runs the agent on the
 * conversation's thread and sends the reply, split at the provider's limit, retried with backoff.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { stateKey } from '../../platform/state.js';
import { requireScope, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { KeyedQueue } from '../../platform/keyed-queue.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import type { Scope } from '../../platform/scopes.js';
import { recordActivity } from '../activity/index.js';
import { cancelRun, getRun, startRun } from '../runs/index.js';
import { failedToolCalls } from '../tools/index.js';
import * as msgs from './messages-repo.js';
import { decideAccess } from './privacy.js';
import { activeLink, bindingForChannel, endUserCtx, isLinkToken, presentLinkToken, unlinkedSenderReply } from './product.js';
import { adapterFor, splitMessage } from './providers/index.js';
import { verifyChallenge } from './providers/business.js';
import { InboundParseError } from './providers/errors.js';
import { ProviderError, type InboundMessage, type ProviderSlug } from './providers/types.js';
import * as repo from './repo.js';
import type { ChannelRow, MessageRow } from './repo.js';
import type { Message } from './schemas.js';
import { channelCredentials, webhookSecret } from './service.js';

/** Scopes a channel's own work holds (its creator's member scopes narrowed to what answering a message needs). */
const CHANNEL_SCOPES: readonly Scope[] = [
  'channels:read',
  'channels:write',
  'apps:read',
  'apps:write',
  'agent:read',
  'agent:run',
  'models:use',
  'tools:execute',
  'connections:use',
  'sandbox:read',
  'sandbox:write',
  'storage:read',
  'storage:write',
];

const LEASE_MS = 60_000;
/** How long a message waiting for its conversation's run (THREAD_BUSY elsewhere) waits before it is tried again. */
const BUSY_RETRY_MS = 1_000;
const TERMINAL = new Set(['completed', 'failed', 'cancelled', 'max_turns']);

export const CHANNELS_STATE = stateKey('channels', () => ({
  queue: new KeyedQueue(),
  queued: new Set<string>(),
  /** App secrets by channel and version, so a busy business webhook does not decrypt them on every request. */
  appSecrets: new Map<string, { value: string | null; until: number }>(),
  /** Runs answering messages now: aborted when the app closes (their messages are taken again later). */
  inflight: new Set<AbortController>(),
  closing: false,
}));

/** The context a channel's work acts in: its organization, as the member who connected it. */
export function channelCtx(deps: Deps, row: ChannelRow): Ctx {
  return systemCtx(deps, { userId: row.created_by_user_id, orgId: row.org_id, role: 'member', scopes: new Set(CHANNEL_SCOPES), apiKeyId: null });
}

type Headers = Record<string, string | string[] | undefined>;

async function appSecretOf(deps: Deps, row: ChannelRow): Promise<string | null> {
  const cache = deps.state.get(CHANNELS_STATE).appSecrets;
  const key = `${row.id}:${row.updated_at}`;
  const hit = cache.get(key);
  if (hit && hit.until > Date.now()) return hit.value;
  const value = (await channelCredentials(deps, row))?.appSecret ?? null;
  if (cache.size > 10_000) cache.clear();
  cache.set(key, { value, until: Date.now() + 30_000 });
  return value;
}

/** Whether a request is really from the provider for this channel (fail closed: no secret, no entry). */
async function verified(deps: Deps, row: ChannelRow, headers: Headers, raw: Buffer): Promise<boolean> {
  const adapter = adapterFor(deps.config.channels, row.provider as ProviderSlug);
  if (row.provider === 'business_messaging_provider') {
    const appSecret = await appSecretOf(deps, row);
    if (!appSecret) return false;
    return adapter.verify(headers, raw, '', { token: '', appSecret });
  }
  return adapter.verify(headers, raw, webhookSecret(deps, row), null);
}

export interface ReceiveResult {
  accepted: number;
  duplicates: number;
  dropped: number;
}

/**
 * POST /v1/agent-channels/{id}/webhook: 404 for an unknown channel, 403 unless the request verifies, 400 for a
 * body that is not the provider's format; else every new message is stored (with its activity) and queued.
 */
export async function receiveWebhook(deps: Deps, channelId: string, headers: Headers, raw: Buffer): Promise<ReceiveResult> {
  const row = await repo.channelById(deps.db.kysely, channelId);
  if (!row) throw errors.notFound('channel', channelId);
  if (!(await verified(deps, row, headers, raw))) throw errors.forbidden('the webhook request did not verify against this channel’s secret');
  const adapter = adapterFor(deps.config.channels, row.provider as ProviderSlug);
  let parsed: ReturnType<typeof adapter.parse>;
  try {
    parsed = adapter.parse(raw);
  } catch (err) {
    if (err instanceof InboundParseError) throw errors.invalid(`not a ${row.provider} update: ${err.message}`);
    throw err;
  }
  if (parsed.kind === 'ignored') return { accepted: 0, duplicates: 0, dropped: 0 };
  const ctx = channelCtx(deps, row);
  // Business events name their phone number: each goes to the channel bound to it in this organization, verified
  // again with that channel's own app secret; events for a number no channel holds are dropped (and logged).
  const byChannel = new Map<string, { row: ChannelRow; messages: InboundMessage[] }>();
  let dropped = 0;
  for (const m of parsed.messages) {
    let target: ChannelRow | undefined = row;
    if (m.phoneNumberId !== undefined && m.phoneNumberId !== row.account_id) {
      const other = await repo.channelByAccount(ctx, row.provider, m.phoneNumberId);
      target = other && (await verified(deps, other, headers, raw)) ? other : undefined;
    }
    if (!target) {
      dropped++;
      deps.log.warn({ channelId, phoneNumberId: m.phoneNumberId }, 'channel webhook: an event for a phone number no channel is bound to was dropped');
      continue;
    }
    const entry = byChannel.get(target.id) ?? { row: target, messages: [] };
    entry.messages.push(m);
    byChannel.set(target.id, entry);
  }
  const fresh: { id: string; channelId: string; conversationId: string }[] = [];
  let duplicates = 0;
  await withTx(ctx, async (tx) => {
    for (const { row: ch, messages } of byChannel.values()) {
      for (const m of messages) {
        const id = prefixedId('chm');
        const now = nowIso();
        const inserted = await msgs.insertMessage(tx, {
          id,
          org_id: ch.org_id,
          channel_id: ch.id,
          provider_message_id: m.providerMessageId,
          external_conversation_id: m.conversationId,
          conversation_type: m.conversationType,
          conversation_name: m.conversationName,
          sender_id: m.senderId,
          sender_name: m.senderName,
          sender_username: m.senderUsername,
          text: m.text,
          status: 'received',
          outcome: null,
          attempts: 0,
          next_attempt_at: now,
          lease_until: null,
          thread_id: null,
          run_id: null,
          reply_text: null,
          reply_parts_sent: 0,
          error: null,
          received_at: now,
          updated_at: now,
        });
        if (!inserted) {
          duplicates++;
          continue;
        }
        fresh.push({ id, channelId: ch.id, conversationId: m.conversationId });
        await recordActivity(tx, {
          resourceType: 'agent_channel',
          resourceId: ch.id,
          eventType: 'channel.message.received',
          status: 'succeeded',
          title: `Message from ${m.senderName ?? m.senderId}`,
          metadata: { messageId: id, externalConversationId: m.conversationId, conversationType: m.conversationType, senderId: m.senderId },
        });
      }
    }
  });
  for (const f of fresh) enqueue(deps, f.id, f.channelId, f.conversationId);
  return { accepted: fresh.length, duplicates, dropped };
}

/** Queues a message for processing in this process, in its conversation's order (a second enqueue is a no-op). */
export function enqueue(deps: Deps, id: string, channelId: string, conversationId: string): void {
  const state = deps.state.get(CHANNELS_STATE);
  if (state.closing || state.queued.has(id)) return;
  state.queued.add(id);
  void state.queue
    .run(`${channelId}:${conversationId}`, async () => {
      state.queued.delete(id);
      if (state.closing) return;
      await processMessage(deps, id);
      // The next message of the conversation (one that arrived while this one's run was active) goes now.
      const next = await msgs.nextOfConversation(deps.db.kysely, channelId, conversationId, nowIso());
      if (next) enqueue(deps, next.id, next.channel_id, next.external_conversation_id);
    })
    .catch((err) => deps.log.error({ err, messageId: id }, 'channel message processing failed'));
}

/** Queues every message that is due (retries, messages a stopped process held): the channels job calls it. */
export async function pump(deps: Deps): Promise<number> {
  const due = await msgs.dueMessages(deps.db.kysely, nowIso(), 200);
  for (const m of due) enqueue(deps, m.id, m.channel_id, m.external_conversation_id);
  return due.length;
}

function backoffMs(deps: Deps, attempts: number, retryAfterMs?: number): number {
  const base = deps.config.channels.retryBaseMs * 2 ** Math.max(0, attempts - 1);
  const jittered = Math.round(base * (0.8 + Math.random() * 0.4));
  return Math.min(Math.max(jittered, retryAfterMs ?? 0), 6 * 3600_000);
}

type Held = { row: MessageRow; channel: ChannelRow; ctx: Ctx };

async function finishMessage(h: Held, status: 'replied' | 'ignored' | 'failed', set: Partial<MessageRow> = {}): Promise<void> {
  const now = nowIso();
  await withTx(h.ctx, async (tx) => {
    await msgs.updateHeld(tx.trx!, h.row.id, { status, lease_until: null, updated_at: now, ...set });
    if (status === 'ignored') return;
    await recordActivity(tx, {
      resourceType: 'agent_channel',
      resourceId: h.channel.id,
      eventType: status === 'replied' ? 'channel.message.replied' : 'channel.message.failed',
      status: status === 'replied' ? 'succeeded' : 'failed',
      title: status === 'replied' ? `Replied to ${h.row.sender_name ?? h.row.sender_id}` : `Could not answer ${h.row.sender_name ?? h.row.sender_id}`,
      summary: status === 'failed' ? (set.error ?? h.row.error ?? '').slice(0, 500) : '',
      threadId: set.thread_id ?? h.row.thread_id ?? undefined,
      agentRunId: set.run_id ?? h.row.run_id ?? undefined,
      metadata: {
        messageId: h.row.id,
        externalConversationId: h.row.external_conversation_id,
        parts: set.reply_parts_sent ?? h.row.reply_parts_sent,
      },
    });
  });
}

/** Puts a held message back in the queue for later (a busy thread, a provider failure). */
async function retryLater(deps: Deps, h: Held, delayMs: number, set: Partial<MessageRow> = {}): Promise<void> {
  const now = Date.now();
  await msgs.updateHeld(deps.db.kysely, h.row.id, {
    status: 'received',
    lease_until: null,
    next_attempt_at: new Date(now + delayMs).toISOString(),
    updated_at: new Date(now).toISOString(),
    ...set,
  });
}

/** Processes one message if it can be claimed (else another process has it, or an earlier one comes first). */
export async function processMessage(deps: Deps, id: string): Promise<void> {
  const now = Date.now();
  const row = await msgs.claimMessage(deps.db.kysely, id, new Date(now).toISOString(), new Date(now + LEASE_MS).toISOString());
  if (!row) return;
  const channel = await repo.channelById(deps.db.kysely, row.channel_id);
  if (!channel) return; // deleted meanwhile: its messages went with it
  const h: Held = { row, channel, ctx: channelCtx(deps, channel) };
  const renew = setInterval(() => {
    void msgs.updateHeld(deps.db.kysely, id, { lease_until: new Date(Date.now() + LEASE_MS).toISOString() }).catch(() => undefined);
  }, LEASE_MS / 3);
  try {
    // A reply already decided (a process stopped, or the provider failed, while sending it) is only sent.
    if (row.reply_text !== null) return await deliver(deps, h, row.reply_text, resumedStatus(row), {});
    if (channel.status === 'paused') return await finishMessage(h, 'ignored', { outcome: 'paused' });
    const decision = await decide(deps, h);
    if (decision.kind === 'reply') return await deliver(deps, h, decision.text, 'ignored', { outcome: decision.outcome });
    if (decision.kind === 'ignore') return await finishMessage(h, 'ignored', { outcome: decision.outcome });
    await answer(deps, h, decision.runCtx, decision.owner, decision.senderScope, decision.connectHint);
  } catch (err) {
    const message = err instanceof AppError || err instanceof ProviderError ? err.message : 'unexpected error';
    if (!(err instanceof AppError) && !(err instanceof ProviderError)) deps.log.error({ err, messageId: id }, 'channel message failed');
    if (row.attempts >= deps.config.channels.maxAttempts) await finishMessage(h, 'failed', { error: message }).catch(() => undefined);
    else await retryLater(deps, h, backoffMs(deps, row.attempts), { error: message }).catch(() => undefined);
  } finally {
    clearInterval(renew);
  }
}

/** What a message whose reply was decided before ends as, once that reply is out. */
function resumedStatus(row: MessageRow): 'replied' | 'ignored' | 'failed' {
  if (row.outcome === 'run_failed' || row.outcome === 'run_not_started') return 'failed';
  return row.outcome ? 'ignored' : 'replied';
}

type Decision =
  | { kind: 'ignore'; outcome: string }
  | { kind: 'reply'; outcome: string; text: string }
  | { kind: 'run'; runCtx: Ctx; owner: string; senderScope: string; connectHint: string | null };

const inbound = (row: MessageRow): InboundMessage => ({
  providerMessageId: row.provider_message_id,
  conversationId: row.external_conversation_id,
  conversationType: row.conversation_type as InboundMessage['conversationType'],
  conversationName: row.conversation_name,
  senderId: row.sender_id,
  senderName: row.sender_name,
  senderUsername: row.sender_username,
  text: row.text,
  sentAt: null,
});

/** Who answers: a channel bound to a product app acts for the linked product user only; else the privacy rules. */
async function decide(deps: Deps, h: Held): Promise<Decision> {
  const { ctx, channel, row } = h;
  const binding = await bindingForChannel(ctx, channel.id);
  if (binding) {
    const token = isLinkToken(row.text);
    if (token) {
      const text = await presentLinkToken(
        ctx,
        channel.id,
        { senderId: row.sender_id, conversationId: row.external_conversation_id, senderName: row.sender_name, username: row.sender_username },
        token,
      );
      return { kind: 'reply', outcome: 'link_token', text };
    }
    if (row.conversation_type === 'group' && binding.groupPolicy === 'disabled') return { kind: 'ignore', outcome: 'group_disabled' };
    const link = await activeLink(ctx, channel.id, row.sender_id);
    if (!link) {
      const text = await unlinkedSenderReply(ctx, binding, channel.id, { senderId: row.sender_id, conversationId: row.external_conversation_id });
      return { kind: 'reply', outcome: 'unlinked', text };
    }
    const runCtx = endUserCtx(deps, channel.org_id, link.endUser, ctx.requestId);
    const where =
      typeof binding.metadata.connectUrl === 'string'
        ? binding.metadata.connectUrl
        : typeof binding.metadata.linkUrl === 'string'
          ? binding.metadata.linkUrl
          : null;
    const hint = `Connect the account it needs in ${binding.appName}${where ? `: ${where}` : ''}`;
    return { kind: 'run', runCtx, owner: link.endUser.id, senderScope: row.conversation_type === 'group' ? row.sender_id : '', connectHint: hint };
  }
  const access = await decideAccess(ctx, channel, inbound(row));
  if (!access.allowed)
    return access.reply ? { kind: 'reply', outcome: access.outcome, text: access.reply } : { kind: 'ignore', outcome: access.outcome };
  return { kind: 'run', runCtx: ctx, owner: channel.created_by_user_id, senderScope: '', connectHint: null };
}

/** The conversation's thread (made by the first run on it), per peer or per group, and per product user. */
async function conversationOf(ctx: Ctx, h: Held, owner: string, senderScope: string) {
  const key = { channelId: h.channel.id, conversationId: h.row.external_conversation_id, senderScope, owner };
  const found = await msgs.findConversation(ctx, key);
  if (found) return found;
  const now = nowIso();
  await msgs.insertConversation(ctx, {
    id: prefixedId('chc'),
    org_id: h.channel.org_id,
    channel_id: h.channel.id,
    external_conversation_id: key.conversationId,
    sender_scope: senderScope,
    conversation_type: h.row.conversation_type,
    display_name: h.row.conversation_name ?? h.row.sender_name,
    thread_id: null,
    owner_user_id: owner,
    created_at: now,
    updated_at: now,
  });
  return (await msgs.findConversation(ctx, key))!;
}

/** Runs the agent on the conversation's thread and sends its answer. */
async function answer(deps: Deps, h: Held, runCtx: Ctx, owner: string, senderScope: string, connectHint: string | null): Promise<void> {
  const { channel, row } = h;
  const conv = await conversationOf(h.ctx, h, owner, senderScope);
  const metadata = {
    channel: {
      id: channel.id,
      provider: channel.provider,
      messageId: row.id,
      externalConversationId: row.external_conversation_id,
      senderId: row.sender_id,
    },
  };
  const controller = new AbortController();
  const state = deps.state.get(CHANNELS_STATE);
  state.inflight.add(controller);
  const start = (threadId: string | undefined) =>
    startRun(runCtx, { agent: channel.agent_slug, prompt: row.text, threadId, stream: false, config: {}, metadata }, { signal: controller.signal });
  let result: Awaited<ReturnType<typeof startRun>>;
  try {
    result = await start(conv.thread_id ?? undefined).catch((err) => {
      // The thread was deleted by its owner: the conversation starts a new one.
      if (err instanceof AppError && err.code === 'not_found' && conv.thread_id) return start(undefined);
      throw err;
    });
  } catch (err) {
    state.inflight.delete(controller);
    if (err instanceof AppError && err.code === 'THREAD_BUSY') {
      // Another run holds the thread (a run started elsewhere): this message waits its turn, not counted as an attempt.
      return retryLater(deps, h, BUSY_RETRY_MS, { attempts: Math.max(0, row.attempts - 1) });
    }
    if (err instanceof AppError && ['not_found', 'invalid_request', 'insufficient_credits', 'forbidden', 'connect_required'].includes(err.code)) {
      // The run cannot start (agent gone, no model, no credits): the sender is told, the message fails with why.
      await deliver(deps, h, 'Sorry, this assistant cannot answer right now.', 'failed', { outcome: 'run_not_started', error: err.message });
      return;
    }
    throw err;
  }
  state.inflight.delete(controller);
  if (result.threadId !== conv.thread_id) await msgs.setConversationThread(h.ctx, conv.id, result.threadId, nowIso());
  // Stopped by the app closing: the message is answered again after a restart (or by another replica).
  if (state.closing && result.status === 'cancelled') return retryLater(deps, h, 0, { attempts: Math.max(0, row.attempts - 1) });
  // A local-device run answers when its device is done with it.
  while (!TERMINAL.has(result.status)) {
    await sleep(500);
    result = await getRun(runCtx, result.runId).catch(async (err) => {
      await cancelRun(runCtx, result.runId).catch(() => undefined);
      throw err;
    });
  }
  const set = { run_id: result.runId, thread_id: result.threadId };
  let text = typeof result.result === 'string' && result.result.trim() ? result.result : null;
  if (connectHint) {
    const failures = await failedToolCalls(runCtx, result.runId);
    if (failures.some((f) => f.errorCode === 'connect_required')) text = `${text ? `${text}\n\n` : ''}${connectHint}`;
  }
  if (result.status === 'completed' || result.status === 'max_turns') {
    return deliver(deps, h, text ?? '(no answer)', 'replied', set);
  }
  return deliver(deps, h, text ?? 'Sorry, something went wrong while answering; please try again.', 'failed', {
    ...set,
    outcome: 'run_failed',
    error: result.error ?? `run ${result.status}`,
  });
}

/**
 * Sends `text` (split at the provider's limit), resuming after the parts already sent; the message ends as
 * `status` once all are out. A rate limit or a provider failure is retried later with backoff (the reply is kept,
 * so the agent is not asked again); a permanent refusal fails the message.
 */
async function deliver(deps: Deps, h: Held, text: string, status: 'replied' | 'ignored' | 'failed', set: Partial<MessageRow>): Promise<void> {
  const { channel, row } = h;
  const adapter = adapterFor(deps.config.channels, channel.provider as ProviderSlug);
  const parts = splitMessage(text, adapter.maxMessageChars);
  let sent = row.reply_text === text ? row.reply_parts_sent : 0;
  if (row.reply_text !== text) await msgs.updateHeld(deps.db.kysely, row.id, { reply_text: text, reply_parts_sent: 0, ...set });
  const creds = await channelCredentials(deps, channel);
  if (!creds) return finishMessage(h, 'failed', { ...set, error: 'the channel’s secrets no longer exist; set them again (PATCH the channel)' });
  try {
    for (; sent < parts.length; sent++) {
      await adapter.send(creds, row.external_conversation_id, parts[sent]!);
      await msgs.updateHeld(deps.db.kysely, row.id, { reply_parts_sent: sent + 1 });
    }
  } catch (err) {
    if (!(err instanceof ProviderError)) throw err;
    const error = `sending the reply failed: ${err.message}`;
    if (err.opts.permanent || row.attempts >= deps.config.channels.maxAttempts)
      return finishMessage(h, 'failed', { ...set, reply_parts_sent: sent, error });
    return retryLater(deps, h, backoffMs(deps, row.attempts, err.opts.retryAfterMs), { ...set, reply_parts_sent: sent, error });
  }
  await finishMessage(h, status, { ...set, reply_parts_sent: parts.length, ...(status === 'failed' ? {} : { error: null }) });
}

/** Stops taking new work (app close); work in progress finishes or is taken again after its lease. */
export async function stopProcessing(deps: Deps): Promise<void> {
  const state = deps.state.get(CHANNELS_STATE);
  state.closing = true;
  for (const c of state.inflight) c.abort();
  await Promise.race([state.queue.drain(), sleep(10_000)]);
}

/**
 * GET /v1/agent-channels/{id}/webhook: the business provider's verification handshake. The challenge is echoed
 * only for `hub.mode=subscribe` with the channel's verify token; anything else is 403.
 */
export async function verifySubscription(deps: Deps, channelId: string, query: Record<string, string | undefined>): Promise<string> {
  const row = await repo.channelById(deps.db.kysely, channelId);
  if (!row) throw errors.notFound('channel', channelId);
  if (row.provider !== 'business_messaging_provider') throw errors.forbidden('this channel’s provider has no verification handshake');
  const challenge = verifyChallenge(query, webhookSecret(deps, row));
  if (challenge === null) throw errors.forbidden('hub.verify_token does not match this channel’s verify token');
  return challenge;
}

/** GET /v1/agent-channels/{id}/messages: the channel's recent inbound messages and what became of them. */
export async function listChannelMessages(ctx: Ctx, channelId: string, q: { status?: string; limit: number }): Promise<Message[]> {
  requireScope(ctx, 'channels:read');
  if (!(await repo.findChannel(ctx, channelId))) throw errors.notFound('channel', channelId);
  return (await msgs.listMessages(ctx, channelId, q)).map((m) => ({
    id: m.id,
    channelId: m.channel_id,
    externalConversationId: m.external_conversation_id,
    conversationType: m.conversation_type as Message['conversationType'],
    senderId: m.sender_id,
    senderName: m.sender_name,
    text: m.text,
    status: m.status as Message['status'],
    outcome: m.outcome,
    threadId: m.thread_id,
    runId: m.run_id,
    attempts: m.attempts,
    error: m.error,
    receivedAt: m.received_at,
    updatedAt: m.updated_at,
  }));
}
