/**
 * POST /v1/triggers/{id}/invoke: a source's request, with no credential but the trigger's secret. In order, and
 * the first three before the body is read: paused (409), IP allowlist (403), then over the raw body the signature
 * (401), then the delivery id (a replay is 409 `replayed`), the event filter, the message, and the deployment is
 * invoked as the member who created the trigger. Every refusal is recorded as `trigger.rejected` with its reason
 * (never the secret or the body) and changes nothing else.
 */
import { BlockList, isIP } from 'node:net';
import { exec, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { isUniqueViolation } from '../../platform/db/errors.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { jsonDepth, MAX_BODY_DEPTH } from '../../platform/http/json-depth.js';
import { nowIso } from '../../platform/ids.js';
import { rejectionBudget } from '../../platform/rejections.js';
import { recordActivity } from '../activity/index.js';
import { laterMemberCtx } from '../organizations/index.js';
import * as repo from './repo.js';
import type { TriggerRow } from './repo.js';
import type { InvokeResult, TriggerSource } from './schemas.js';
import { deploymentInvoker, triggerSecret } from './service.js';
import { verifySignature, type Headers } from './signatures.js';
import { renderMessage } from '../../platform/template.js';

/** The rendered prompt handed to the deployment is cut at this size. */
export const MAX_PROMPT_BYTES = 1024 * 1024;

export type RejectReason = 'paused' | 'ip_not_allowed' | 'bad_signature' | 'stale_timestamp' | 'replayed' | 'too_large' | 'creator_not_member';

/** The trigger's organization, as its creator, for recording what happened to it (holds no scope). */
const recorderCtx = (deps: Deps, row: TriggerRow): Ctx =>
  systemCtx(deps, { userId: row.created_by_user_id, orgId: row.org_id, role: null, scopes: new Set(), apiKeyId: null });

/** Refusals recorded as activity per trigger per minute (per process); the rest are counted into the next one. */
export const REJECTIONS_RECORDED_PER_MINUTE = 10;
async function reject(deps: Deps, row: TriggerRow, reason: RejectReason, err: AppError, extra: Record<string, unknown> = {}): Promise<never> {
  const budget = rejectionBudget(deps, `trigger:${row.id}`, REJECTIONS_RECORDED_PER_MINUTE);
  if (budget.record)
    await withTx(recorderCtx(deps, row), (tx) =>
      recordActivity(tx, {
        resourceType: 'trigger',
        resourceId: row.id,
        eventType: 'trigger.rejected',
        status: 'failed',
        severity: 'warning',
        title: `Trigger ${row.id} refused a request (${reason})`,
        metadata: { reason, source: row.source, ...extra, ...(budget.suppressed ? { unrecordedBefore: budget.suppressed } : {}) },
      }),
    ).catch((e) => deps.log.warn({ err: e, triggerId: row.id }, 'recording a refused trigger request failed'));
  throw err;
}

/** `::ffff:203.0.113.7` is 203.0.113.7. */
const normalizeIp = (ip: string): string => {
  const t = ip.trim();
  return /^::ffff:\d+\.\d+\.\d+\.\d+$/i.test(t) ? t.slice(7) : t;
};

function blockListOf(entries: readonly string[]): BlockList {
  const list = new BlockList();
  for (const e of entries) {
    const [addr, bits] = e.split('/');
    const family = isIP(addr ?? '');
    if (!family) continue;
    const type = family === 4 ? 'ipv4' : 'ipv6';
    if (bits === undefined) list.addAddress(addr!, type);
    else list.addSubnet(addr!, Number(bits), type);
  }
  return list;
}

const inList = (list: BlockList, ip: string): boolean => {
  const family = isIP(ip);
  if (!family) return false;
  try {
    return list.check(ip, family === 4 ? 'ipv4' : 'ipv6');
  } catch {
    return false; // an address BlockList cannot read (a zone id) is in no list
  }
};

/**
 * The caller's address: the socket's, unless that is a trusted proxy (HANGAR_TRIGGERS_TRUSTED_PROXIES); then the
 * right-most X-Forwarded-For entry that is not a trusted proxy (entries left of it could be forged by the caller).
 */
export function clientIp(deps: Deps, socketIp: string | undefined, forwardedFor: string | string[] | undefined): string {
  const socket = normalizeIp(socketIp ?? '');
  const trusted = blockListOf(deps.config.deployments.trustedProxies);
  if (!forwardedFor || !inList(trusted, socket)) return socket;
  const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor).split(',').map(normalizeIp).filter(Boolean);
  for (let i = hops.length - 1; i >= 0; i--) if (!inList(trusted, hops[i]!)) return hops[i]!;
  return hops[0] ?? socket;
}

/** The checks made before the body is read: the trigger exists (404), is active (409), and the caller's address is allowed (403). */
export async function admitInvocation(
  deps: Deps,
  triggerId: string,
  from: { socketIp: string | undefined; forwardedFor: string | string[] | undefined },
): Promise<TriggerRow> {
  const row = triggerId.length <= 100 ? await repo.triggerById(deps.db.kysely, triggerId) : undefined;
  if (!row) throw errors.notFound('trigger', triggerId);
  if (row.status !== 'active')
    await reject(deps, row, 'paused', errors.invalidState(`trigger ${row.id} is paused; resume it to accept events`, row.status));
  const allowed = JSON.parse(row.allowed_ips) as string[];
  if (allowed.length) {
    const ip = clientIp(deps, from.socketIp, from.forwardedFor);
    if (!inList(blockListOf(allowed), ip))
      await reject(deps, row, 'ip_not_allowed', errors.forbidden('this address may not call the trigger (allowedIps)'), { ip });
  }
  return row;
}

/** A body over HANGAR_TRIGGERS_MAX_BODY_BYTES was refused (413): recorded against the trigger when it exists. */
export async function recordTooLarge(deps: Deps, triggerId: string): Promise<void> {
  const row = triggerId.length <= 100 ? await repo.triggerById(deps.db.kysely, triggerId).catch(() => undefined) : undefined;
  if (row) await reject(deps, row, 'too_large', errors.tooLarge('')).catch(() => undefined);
}

/** The member who created the trigger: the creating credential's scopes within their role now; null when no longer in the organization. */
function creatorCtx(deps: Deps, row: TriggerRow): Promise<Ctx | null> {
  return laterMemberCtx(deps, row.created_by_user_id, row.org_id, JSON.parse(row.scopes) as string[], 'system');
}

const NOT_JSON = Symbol('not json');

function parsePayload(text: string): unknown {
  try {
    const v: unknown = JSON.parse(text);
    return jsonDepth(v, MAX_BODY_DEPTH) > MAX_BODY_DEPTH ? NOT_JSON : v;
  } catch {
    return NOT_JSON;
  }
}

const field = (v: unknown, key: string): unknown =>
  v !== null && typeof v === 'object' && !Array.isArray(v) && Object.hasOwn(v, key) ? (v as Record<string, unknown>)[key] : undefined;
const str = (v: unknown): string | undefined => (typeof v === 'string' && v.length > 0 && v.length <= 256 ? v : undefined);

export type InvokeAnswer = { status: 200 | 202; data: InvokeResult } | { status: 200; challenge: string };

/** The checks over the raw body and the firing: see the module comment. */
export async function invokeTrigger(deps: Deps, row: TriggerRow, headers: Headers, raw: Buffer): Promise<InvokeAnswer> {
  const source = row.source as TriggerSource;
  const secret = triggerSecret(deps, row);
  const tolerance = deps.config.deployments.triggerToleranceSeconds;
  const verdict = secret
    ? verifySignature(source, secret, headers, raw, { now: Date.now(), toleranceSeconds: tolerance })
    : ({ ok: false, reason: 'bad_signature' } as const);
  if (!verdict.ok)
    await reject(
      deps,
      row,
      verdict.reason,
      errors.unauthenticated(
        verdict.reason === 'stale_timestamp'
          ? `the signature's timestamp is more than ${tolerance} seconds from now`
          : 'the request is not signed with the trigger’s secret',
      ),
    );
  const okVerdict = verdict as Extract<typeof verdict, { ok: true }>;

  const ctx = await creatorCtx(deps, row);
  if (!ctx)
    await reject(
      deps,
      row,
      'creator_not_member',
      errors.invalidState(`the member who created trigger ${row.id} has left the organization; create it again`, 'orphaned'),
    );

  let payload = parsePayload(raw.toString('utf8'));
  if (payload === NOT_JSON) {
    if (source !== 'webhook') throw errors.invalidField('body', 'is not valid JSON');
    payload = raw.toString('utf8');
  }

  let event: string | undefined;
  let deliveryId: string | undefined;
  switch (source) {
    case 'webhook':
      event = okVerdict.event ?? str(field(payload, 'type'));
      deliveryId = okVerdict.deliveryId;
      break;
    case 'code_host':
      event = okVerdict.event;
      deliveryId = okVerdict.deliveryId;
      if (event === 'ping') return { status: 200, data: { fired: false, reason: 'ping' } };
      break;
    case 'payment_provider':
      event = str(field(payload, 'type'));
      deliveryId = str(field(payload, 'id'));
      break;
    case 'chat_workspace':
      if (field(payload, 'type') === 'url_verification') return { status: 200, challenge: String(field(payload, 'challenge') ?? '').slice(0, 1000) };
      event = str(field(field(payload, 'event'), 'type'));
      deliveryId = str(field(payload, 'event_id'));
      break;
  }

  // A delivery that fires is recorded in the invocation's transaction (below); one that does not is recorded here,
  // so a replay of it is refused all the same.
  const events = JSON.parse(row.events) as string[];
  let notFired: string | null = null;
  if (events.length && (!event || !events.includes(event)))
    notFired = event ? `event "${event}" is not one the trigger fires on` : 'the request names no event';
  else if (source === 'code_host' && row.repo) {
    const repoName = str(field(field(payload, 'repository'), 'full_name'));
    if (repoName?.toLowerCase() !== row.repo.toLowerCase()) notFired = `the event is not from repository ${row.repo}`;
  }
  const replayed = (err: unknown): Promise<never> => {
    if (!isUniqueViolation(err)) throw err;
    return reject(deps, row, 'replayed', new AppError('replayed', `delivery ${deliveryId} was already received`), { deliveryId });
  };
  const delivery = deliveryId ? { trigger_id: row.id, delivery_id: deliveryId, org_id: row.org_id, received_at: nowIso() } : null;
  if (notFired) {
    if (delivery) await repo.insertDelivery(deps.db.kysely, delivery).catch(replayed);
    return { status: 200, data: { fired: false, reason: notFired } };
  }

  const input = renderMessage(row.message, payload, MAX_PROMPT_BYTES);
  // One transaction: the invocation, its activity, the delivery id (a replay rolls all back) and trigger.fired. A
  // refusal of the deployment (429) records no delivery, so the sender's retry is not taken for a replay.
  const invocation = await deploymentInvoker(deps)
    .invoke(ctx!, row.deployment_id, {
      input,
      triggerId: row.id,
      alsoInTx: async (tx, invocationId) => {
        if (delivery) await repo.insertDelivery(exec(tx), delivery);
        await recordActivity(tx, {
          resourceType: 'trigger',
          resourceId: row.id,
          eventType: 'trigger.fired',
          status: 'succeeded',
          title: `Trigger ${row.id} fired its deployment`,
          metadata: { invocationId, deployment: row.deployment_id, ...(event ? { event } : {}), ...(deliveryId ? { deliveryId } : {}) },
        });
      },
    })
    .catch(replayed);
  return { status: 202, data: { fired: true, invocationId: invocation.id, status: invocation.status } };
}
