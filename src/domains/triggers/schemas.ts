import { isIP } from 'node:net';
import { z } from 'zod';

export const SOURCES = ['webhook', 'code_host', 'payment_provider', 'chat_workspace'] as const;
export type TriggerSource = (typeof SOURCES)[number];

const Id = z.string().min(1).max(100);
export const TriggerParams = z.object({ triggerId: Id });

/** An IPv4/IPv6 address, or a CIDR range whose prefix fits its family. */
export function isIpOrCidr(value: string): boolean {
  const slash = value.indexOf('/');
  const addr = slash < 0 ? value : value.slice(0, slash);
  const family = isIP(addr);
  if (!family) return false;
  if (slash < 0) return true;
  const bits = value.slice(slash + 1);
  return /^\d{1,3}$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128);
}

const IpOrCidr = z.string().trim().min(1).max(64).refine(isIpOrCidr, 'must be an IP address or a CIDR range such as 203.0.113.0/24');
const Events = z.array(z.string().trim().min(1).max(200)).max(100);
const Message = z.string().min(1).max(20_000);
const AllowedIps = z.array(IpOrCidr).max(100);
const Repo = z
  .string()
  .trim()
  .regex(/^[A-Za-z0-9_.-]{1,100}\/[A-Za-z0-9_.-]{1,100}$/, 'must be "owner/name"');
const Secret = z.string().min(8).max(256);

export const CreateTriggerBody = z
  .object({
    deployment: z.string().trim().min(1).max(100).describe('The deployment to fire: its id or its apiSlug'),
    source: z.enum(SOURCES).default('webhook').describe('`webhook` (generic) or a native source: `code_host`, `payment_provider`, `chat_workspace`'),
    events: Events.default([]).describe('Event types that fire (the source’s own names); empty: every event'),
    message: Message.default('{{payload}}').describe('The prompt: `{{payload}}` is the whole payload as JSON, `{{payload.a.b.0}}` one value'),
    allowedIps: AllowedIps.default([]).describe('IPs and CIDR ranges allowed to call the trigger; empty: any'),
    repo: Repo.optional().describe('code_host only: the repository ("owner/name") whose events fire'),
    secret: Secret.optional().describe('The signing secret (8–256 characters); 32 random bytes (hex) are generated when omitted'),
  })
  .strict();
export type CreateTriggerBody = z.infer<typeof CreateTriggerBody>;

export const UpdateTriggerBody = z
  .object({
    deployment: z.string().trim().min(1).max(100).optional(),
    events: Events.optional(),
    message: Message.optional(),
    allowedIps: AllowedIps.optional(),
    repo: Repo.nullable().optional().describe('code_host only; null clears it'),
    secret: Secret.optional().describe('A new signing secret; never answered back'),
  })
  .strict();
export type UpdateTriggerBody = z.infer<typeof UpdateTriggerBody>;

export const TriggersQuery = z.object({ deployment: z.string().trim().min(1).max(100).optional().describe('A deployment id or apiSlug') }).strict();
export type TriggersQuery = z.infer<typeof TriggersQuery>;

export const Trigger = z
  .object({
    id: z.string(),
    webhookUrl: z.string().describe('Where the source POSTs: `{base_url}/v1/triggers/{id}/invoke`'),
    secret: z.string().optional().describe('Only in the answer to the create request'),
    deployment: z.string().describe('The deployment id'),
    source: z.enum(SOURCES),
    events: z.array(z.string()),
    message: z.string(),
    allowedIps: z.array(z.string()),
    repo: z.string().nullable(),
    status: z.enum(['active', 'paused']),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'Trigger' });
export type Trigger = z.infer<typeof Trigger>;

export const TriggerList = z.object({ triggers: z.array(Trigger) });

export const InvokeResult = z.union([
  z.object({ fired: z.literal(true), invocationId: z.string(), status: z.string() }),
  z.object({ fired: z.literal(false), reason: z.string() }),
]);
export type InvokeResult = z.infer<typeof InvokeResult>;
