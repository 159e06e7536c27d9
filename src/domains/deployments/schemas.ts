import { z } from 'zod';
import { limitParam } from '../../platform/http/pagination.js';

export const WEBHOOK_EVENTS = ['run.started', 'run.completed', 'run.failed', 'run.cancelled', 'run.timed_out'] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];
export const DEFAULT_WEBHOOK_EVENTS: WebhookEvent[] = ['run.completed', 'run.failed', 'run.timed_out'];

export const INVOCATION_STATUSES = ['queued', 'running', 'completed', 'failed', 'cancelled', 'timed_out'] as const;
export type InvocationStatus = (typeof INVOCATION_STATUSES)[number];
export const DELIVERY_STATUSES = ['pending', 'delivered', 'failed', 'disabled'] as const;

const Id = z.string().min(1).max(100);
const Slug = z.string().regex(/^[a-z0-9][a-z0-9-]{1,62}$/, 'must be 2 to 63 lower-case letters, digits or hyphens, starting with a letter or digit');
const WebhookUrl = z
  .string()
  .trim()
  .max(2048)
  .refine((v) => {
    try {
      const u = new URL(v);
      return (u.protocol === 'https:' || u.protocol === 'http:') && u.hostname !== '' && u.username === '' && u.password === '';
    } catch {
      return false;
    }
  }, 'must be an http or https URL without credentials')
  .describe('Where the deployment’s signed events are POSTed (Standard Webhooks)');
const Events = z
  .array(z.enum(WEBHOOK_EVENTS))
  .min(1)
  .max(WEBHOOK_EVENTS.length)
  .refine((a) => new Set(a).size === a.length, 'must not repeat an event')
  .describe(`A subset of ${WEBHOOK_EVENTS.join(', ')}`);
const MaxConcurrent = z.number().int().min(1).max(100).describe('Invocations of the deployment running at once (1 to 100)');
const Timeout = z.number().int().min(1).max(3600).describe('Seconds an invocation’s run may take before it ends `timed_out` (1 to 3600)');

export const CreateDeploymentBody = z
  .object({
    runtimeSlug: z.string().trim().min(1).max(100).describe('The agent the deployment runs (its slug)'),
    templateSlug: z.string().trim().min(1).max(100).optional().describe('The sandbox template of its in_sandbox runs'),
    apiSlug: Slug.describe('The deployment’s public name, unique in the organization'),
    webhookUrl: WebhookUrl.optional(),
    webhookEvents: Events.default(DEFAULT_WEBHOOK_EVENTS),
    maxConcurrent: MaxConcurrent.default(1),
    timeout: Timeout.default(300),
  })
  .strict();
export type CreateDeploymentBody = z.infer<typeof CreateDeploymentBody>;

export const UpdateDeploymentBody = z
  .object({
    runtimeSlug: z.string().trim().min(1).max(100).optional(),
    templateSlug: z.string().trim().min(1).max(100).nullable().optional(),
    apiSlug: Slug.optional(),
    webhookUrl: WebhookUrl.nullable().optional().describe('A URL (re-enables a webhook disabled by a 410), or null to stop sending'),
    webhookEvents: Events.optional(),
    maxConcurrent: MaxConcurrent.optional(),
    timeout: Timeout.optional(),
  })
  .strict();
export type UpdateDeploymentBody = z.infer<typeof UpdateDeploymentBody>;

export const Deployment = z
  .object({
    id: z.string(),
    apiSlug: z.string(),
    runtimeSlug: z.string(),
    templateSlug: z.string().nullable(),
    webhookUrl: z.string().nullable(),
    webhookEvents: z.array(z.enum(WEBHOOK_EVENTS)),
    webhookStatus: z.enum(['none', 'active', 'disabled']).describe('`none`: no webhook URL; `disabled`: the receiver answered 410 Gone'),
    webhookDisabledReason: z.string().nullable(),
    webhookDisabledAt: z.string().nullable(),
    webhookSecret: z.string().optional().describe('The signing secret (`whsec_…`): shown only on creation and on rotation'),
    maxConcurrent: z.number().int(),
    timeout: z.number().int().describe('Seconds'),
    invokeUrl: z.string(),
    createdByUserId: z.string(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'Deployment' });
export type Deployment = z.infer<typeof Deployment>;

export const DeploymentParams = z.object({ deploymentId: Id.describe('The deployment’s id or apiSlug') });
export const InvocationParams = z.object({ deploymentId: Id, invocationId: Id });
export const DeliveryParams = z.object({ deploymentId: Id, deliveryId: Id });

export const InvokeBody = z
  .object({
    input: z
      .union([z.string().min(1).max(1_000_000), z.record(z.string(), z.unknown())])
      .describe('The prompt: a string, or an object sent as its JSON text'),
    wait: z.boolean().default(false).describe('Answer when the invocation ends (up to the deployment’s timeout), with its run’s result'),
    threadId: Id.optional().describe('Continue this thread of yours'),
  })
  .strict();
export type InvokeBody = z.infer<typeof InvokeBody>;

const Usage = z.record(z.string(), z.number());

export const Invocation = z
  .object({
    id: z.string(),
    deploymentId: z.string(),
    status: z.enum(INVOCATION_STATUSES),
    source: z.string(),
    input: z.string(),
    runId: z.string().nullable(),
    threadId: z.string().nullable(),
    error: z.string().nullable(),
    createdByUserId: z.string(),
    createdAt: z.string(),
    startedAt: z.string().nullable(),
    finishedAt: z.string().nullable(),
    result: z.unknown().optional().describe('With `wait: true`, and for its invoker: the run’s final answer'),
    usage: Usage.nullable().optional(),
  })
  .meta({ id: 'DeploymentInvocation' });
export type Invocation = z.infer<typeof Invocation>;

export const PageQuery = z
  .object({
    limit: limitParam(50, 200),
    cursor: z.string().max(500).optional(),
  })
  .strict();
export type PageQuery = z.infer<typeof PageQuery>;

export const DeliveryAttempt = z
  .object({
    attempt: z.number().int(),
    statusCode: z.number().int().nullable(),
    error: z.string().nullable(),
    durationMs: z.number().int(),
    at: z.string(),
  })
  .meta({ id: 'WebhookDeliveryAttempt' });

export const Delivery = z
  .object({
    id: z.string().describe('The `webhook-id` header: the same on every attempt'),
    deploymentId: z.string(),
    eventType: z.string(),
    status: z.enum(DELIVERY_STATUSES),
    attempts: z.number().int(),
    nextAttemptAt: z.string().nullable(),
    lastStatusCode: z.number().int().nullable(),
    lastError: z.string().nullable(),
    payload: z.unknown(),
    createdAt: z.string(),
    deliveredAt: z.string().nullable(),
    attemptLog: z.array(DeliveryAttempt).optional(),
  })
  .meta({ id: 'WebhookDelivery' });
export type Delivery = z.infer<typeof Delivery>;
