/**
 * Signed outbound webhooks of deployments (Standard Webhooks, PROTOCOLS.md "Webhooks in and out"): a delivery row is
 * written in the transaction of the change it reports (the outbox), its job is sent after commit; each attempt is a
 * job of its own, retried per HANGAR_WEBHOOKS_RETRY_SCHEDULE (the receiver's Retry-After wins when longer). Success
 * is 2xx only; 410 Gone disables the deployment's webhook; private addresses are refused unless configured.
 */
import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import type { Ctx, Deps } from '../../platform/context.js';
import { orgId, systemCtx, withTx } from '../../platform/context.js';
import { decrypt, deriveKey, encrypt } from '../../platform/crypto/index.js';
import { EgressError, egressRequest, type EgressPolicy } from '../../platform/http/egress.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { stateKey } from '../../platform/state.js';
import { recordActivity } from '../activity/index.js';
import * as repo from './repo.js';
import type { DeliveryRow, DeploymentRow } from './repo.js';
import type { WebhookEvent } from './schemas.js';

export const WEBHOOK_QUEUE = 'deployments.webhook';

export interface WebhookJob {
  orgId: string;
  deliveryId: string;
  /** 1-based number of this attempt in the delivery's life. */
  attempt: number;
  /** A redelivery: one attempt, no retries after it. */
  single?: boolean;
}

const secretKey = (deps: Deps) => deriveKey(deps.config.secretKey, 'deployments:webhook-secret');
const secretAad = (org: string, id: string) => `deployment:${org}:${id}`;

/** A new signing secret: `whsec_` and the base64 of 32 random bytes (the Standard Webhooks form). */
export const newSecret = (): string => `whsec_${randomBytes(32).toString('base64')}`;

export const sealSecret = (deps: Deps, org: string, id: string, secret: string): string => encrypt(secretKey(deps), secret, secretAad(org, id));

const openSecret = (deps: Deps, row: DeploymentRow, sealed: string): string => decrypt(secretKey(deps), sealed, secretAad(row.org_id, row.id));

/** The secrets a delivery is signed with now: the current one, and the previous one during the rotation overlap. */
export function signingSecrets(deps: Deps, row: DeploymentRow, now = Date.now()): string[] {
  const out = [openSecret(deps, row, row.webhook_secret_ciphertext)];
  if (row.webhook_previous_secret_ciphertext && row.webhook_previous_until && Date.parse(row.webhook_previous_until) > now)
    out.push(openSecret(deps, row, row.webhook_previous_secret_ciphertext));
  return out;
}

export const eventsOf = (row: DeploymentRow): WebhookEvent[] => JSON.parse(row.webhook_events) as WebhookEvent[];

/** A context of the deployment's organization for background work (no scopes: it reaches no verb). */
export const orgCtx = (deps: Deps, org: string, userId: string): Ctx =>
  systemCtx(deps, { userId, orgId: org, role: null, scopes: new Set(), apiKeyId: null });

/**
 * In the caller's transaction: a delivery of `event` when the deployment has a live webhook subscribed to it.
 * Returns the job to send once the transaction has committed (or null).
 */
export async function enqueueDelivery(tx: Ctx, dep: DeploymentRow, event: WebhookEvent, data: Record<string, unknown>): Promise<WebhookJob | null> {
  if (!dep.webhook_url || dep.webhook_disabled_at || !eventsOf(dep).includes(event)) return null;
  const id = prefixedId('msg');
  const now = nowIso();
  await repo.insertDelivery(tx, {
    id,
    org_id: orgId(tx),
    deployment_id: dep.id,
    event_type: event,
    payload: JSON.stringify({ type: event, timestamp: now, data }),
    status: 'pending',
    attempts: 0,
    next_attempt_at: now,
    last_status_code: null,
    last_error: null,
    created_at: now,
    delivered_at: null,
  });
  return { orgId: orgId(tx), deliveryId: id, attempt: 1 };
}

/**
 * After commit: the attempt's job (keyed by delivery and attempt, so it is sent once however often this runs). A
 * send that fails is logged, not thrown: the delivery is committed `pending`, and the sweep (jobs.ts) sends it.
 */
export async function sendDeliveryJob(deps: Deps, job: WebhookJob | null, delayMs = 0): Promise<void> {
  if (!job) return;
  await sendOrLeaveForSweep(deps, { deliveryId: job.deliveryId, attempt: job.attempt }, () =>
    deps.jobs.send(WEBHOOK_QUEUE, job, { key: `${job.deliveryId}:${job.attempt}`, ...(delayMs > 0 ? { delayMs } : {}) }),
  );
}

/**
 * Sends a job for work a transaction has committed. The work is durable already, so a failed send (the engine's
 * database unreachable for a moment) is logged and left to the sweep, which finds committed work without a job.
 */
export async function sendOrLeaveForSweep(deps: Deps, what: Record<string, unknown>, send: () => Promise<unknown>): Promise<void> {
  try {
    await send();
  } catch (err) {
    deps.log.warn({ err, ...what }, 'deployments: a job could not be sent; the sweep sends it within %d s', SWEEP_AFTER_MS / 1000 + 60);
  }
}

/** Work still waiting this long after it was due, with no job, is sent again by the sweep. */
export const SWEEP_AFTER_MS = 30_000;

const POLICY = stateKey('deployments.egress', () => ({ policy: null as EgressPolicy | null }));

/** One policy object per app: the egress agent (and its keep-alive connections) is cached per policy object. */
function policyOf(deps: Deps): EgressPolicy {
  const slot = deps.state.get(POLICY);
  slot.policy ??= {
    allowPrivateNetworks: deps.config.deployments.webhooksAllowPrivateNetworks,
    timeoutMs: deps.config.deployments.webhookTimeoutMs,
    maxResponseBytes: 64 * 1024,
    // A signed delivery goes to the URL configured, never on to where a redirect points.
    maxRedirects: 0,
  };
  return slot.policy;
}

/** `Retry-After` as milliseconds from now (delta seconds or an HTTP date), or 0. */
/** The longest Retry-After honoured. */
const RETRY_AFTER_CAP_MS = 86_400_000;

export function retryAfterMs(value: string | undefined, now = Date.now()): number {
  if (!value) return 0;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? 0 : Math.max(0, at - now);
}

/** The signed request of one attempt: the stored payload, the stable `webhook-id`, a fresh timestamp. */
export function signedHeaders(secrets: string[], deliveryId: string, body: string, at = new Date()): Record<string, string> {
  const signature = secrets.map((s) => new Webhook(s).sign(deliveryId, at, body)).join(' ');
  return {
    'content-type': 'application/json',
    'user-agent': 'Hangar-Webhooks/1.0',
    'webhook-id': deliveryId,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': signature,
  };
}

/** The `deployments.webhook` job: one attempt of one delivery, then what follows from its answer. */
export async function attemptDelivery(deps: Deps, job: WebhookJob): Promise<void> {
  const base = orgCtx(deps, job.orgId, 'system');
  const delivery = await repo.deliveryById(base, job.deliveryId);
  if (delivery?.status !== 'pending' || delivery.attempts >= job.attempt) return;
  const dep = await repo.findDeployment(base, delivery.deployment_id);
  if (!dep) return;
  const ctx = orgCtx(deps, job.orgId, dep.created_by_user_id);
  if (!dep.webhook_url || dep.webhook_disabled_at) {
    await repo.updateDelivery(ctx, delivery.id, {
      status: 'disabled',
      next_attempt_at: null,
      last_error: dep.webhook_url ? 'the deployment’s webhook is disabled' : 'the deployment has no webhook URL',
    });
    return;
  }
  const started = Date.now();
  let status: number | null = null;
  let error: string | null = null;
  let retryAfter = 0;
  try {
    const res = await egressRequest(policyOf(deps), {
      method: 'POST',
      url: dep.webhook_url,
      headers: signedHeaders(signingSecrets(deps, dep), delivery.id, delivery.payload),
      body: delivery.payload,
    });
    status = res.status;
    retryAfter = retryAfterMs(res.headers['retry-after']);
    if (status < 200 || status >= 300) error = `the receiver answered ${status}`;
  } catch (err) {
    error = err instanceof EgressError ? `${err.code}: ${err.message}` : (err as Error).message;
  }
  const durationMs = Date.now() - started;
  const at = nowIso();
  const schedule = deps.config.deployments.webhookRetryScheduleMs;
  const ok = status !== null && status >= 200 && status < 300;
  const gone = status === 410;
  const retryIndex = job.attempt - 1;
  const retry = !ok && !gone && !job.single && retryIndex < schedule.length;
  // The schedule's delay with ±20 % jitter (receivers recovering from an outage are not hit all at once); a
  // receiver's Retry-After wins when longer, up to a day.
  const jittered = retry ? Math.round(schedule[retryIndex]! * (0.8 + Math.random() * 0.4)) : 0;
  const delayMs = retry ? Math.max(jittered, Math.min(retryAfter, RETRY_AFTER_CAP_MS)) : 0;
  const meta = { deliveryId: delivery.id, eventType: delivery.event_type, attempt: job.attempt, statusCode: status };
  await withTx(ctx, async (tx) => {
    await repo.insertAttempt(tx, {
      id: prefixedId('wda'),
      org_id: job.orgId,
      delivery_id: delivery.id,
      attempt: job.attempt,
      status_code: status,
      error,
      duration_ms: durationMs,
      at,
    });
    const common = { attempts: job.attempt, last_status_code: status, last_error: error };
    if (ok) {
      await repo.updateDelivery(tx, delivery.id, { ...common, status: 'delivered', delivered_at: at, next_attempt_at: null });
      await recordActivity(tx, {
        resourceType: 'deployment',
        resourceId: dep.id,
        eventType: 'deployment.webhook.delivered',
        status: 'succeeded',
        title: `Webhook ${delivery.event_type} of ${dep.api_slug} delivered`,
        metadata: meta,
      });
    } else if (gone) {
      const reason = 'the receiver answered 410 Gone';
      await repo.updateDelivery(tx, delivery.id, { ...common, status: 'disabled', next_attempt_at: null });
      await repo.updateDeployment(tx, dep.id, { webhook_disabled_at: at, webhook_disabled_reason: reason });
      await recordActivity(tx, {
        resourceType: 'deployment',
        resourceId: dep.id,
        eventType: 'deployment.webhook.disabled',
        status: 'failed',
        title: `Webhook of ${dep.api_slug} disabled: ${reason}`,
        metadata: { ...meta, reason },
      });
    } else if (retry) {
      await repo.updateDelivery(tx, delivery.id, { ...common, next_attempt_at: new Date(Date.now() + delayMs).toISOString() });
    } else {
      await repo.updateDelivery(tx, delivery.id, { ...common, status: 'failed', next_attempt_at: null });
      await recordActivity(tx, {
        resourceType: 'deployment',
        resourceId: dep.id,
        eventType: 'deployment.webhook.failed',
        status: 'failed',
        title: `Webhook ${delivery.event_type} of ${dep.api_slug} failed after ${job.attempt} attempt(s)`,
        metadata: { ...meta, error },
      });
    }
  });
  if (retry) await sendDeliveryJob(deps, { orgId: job.orgId, deliveryId: delivery.id, attempt: job.attempt + 1 }, delayMs);
}

/** For redelivery: the delivery pending again, its next attempt's job (a single attempt). */
export async function redeliveryJob(tx: Ctx, delivery: DeliveryRow): Promise<WebhookJob> {
  await repo.updateDelivery(tx, delivery.id, { status: 'pending', next_attempt_at: nowIso() });
  return { orgId: orgId(tx), deliveryId: delivery.id, attempt: delivery.attempts + 1, single: true };
}
