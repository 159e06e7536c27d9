import { z } from 'zod';
import { limitParam, queryBool } from '../../platform/http/pagination.js';

/** A WireGuard Curve25519 public key: base64 of 32 bytes (checked again, exactly, by `parseWireguardKey`). */
const PublicKey = z
  .string()
  .trim()
  .regex(/^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$/, 'must be a WireGuard public key (base64 of 32 bytes, e.g. from `wg pubkey`)');
/** Free text a device reports about itself: shown to approvers (escaped), never put into a generated config. */
const DeviceText = (max: number) =>
  z
    .string()
    .trim()
    .max(max)
    .regex(/^[^\p{Cc}]*$/u, 'must not contain control characters');

export const LinkStartBody = z
  .object({
    publicKey: PublicKey,
    deviceLabel: DeviceText(100).optional(),
    os: DeviceText(100).optional(),
    appVersion: DeviceText(50).optional(),
  })
  .strict();
export type LinkStartBody = z.infer<typeof LinkStartBody>;

export const LinkCode = z
  .object({
    code: z.string().describe('`XXXX-XXXX`: eight of A-Z and 2-9 without 0/O/1/I; the dash and case are optional'),
    url: z.string().describe('The approval page: shows the device’s label, OS and app version before anyone approves'),
    expiresAt: z.string(),
    pollSecret: z.string().describe('Proves the poller is the device that started the link; keep it on the device'),
    interval: z.number().int().describe('Seconds between polls'),
  })
  .meta({ id: 'DeviceLinkCode' });
export type LinkCode = z.infer<typeof LinkCode>;

const CodeField = z.string().trim().min(1).max(20);

export const LinkPollBody = z.object({ code: CodeField, pollSecret: z.string().min(1).max(200) }).strict();
export type LinkPollBody = z.infer<typeof LinkPollBody>;

export const LinkPollResult = z
  .object({
    status: z.enum(['pending', 'slow_down', 'approved', 'completed', 'expired']),
    interval: z.number().int().optional(),
    expiresAt: z.string().optional(),
    nodeId: z.string().optional(),
    deviceToken: z.string().optional().describe('`hgd_…`: the device’s credential, given once (status approved)'),
    meshAddress: z.string().optional(),
    organizationId: z.string().optional(),
  })
  .meta({ id: 'DeviceLinkPoll' });
export type LinkPollResult = z.infer<typeof LinkPollResult>;

export const LinkApproveBody = z.object({ code: CodeField }).strict();

export const LinkCodeParams = z.object({ code: CodeField });

export const Link = z
  .object({
    id: z.string(),
    code: z.string(),
    status: z.enum(['pending', 'approved', 'completed', 'expired']),
    deviceLabel: z.string(),
    os: z.string(),
    appVersion: z.string(),
    publicKey: z.string(),
    nodeId: z.string().nullable(),
    approvedByUserId: z.string().nullable(),
    createdAt: z.string(),
    expiresAt: z.string(),
    approvedAt: z.string().nullable(),
    completedAt: z.string().nullable(),
  })
  .meta({ id: 'DeviceLink' });
export type Link = z.infer<typeof Link>;

export const LinksQuery = z.object({ status: z.enum(['pending', 'approved', 'completed', 'expired']).optional() }).strict();

export const Node = z
  .object({
    id: z.string().describe('`node_` prefix; an agent’s `targetDeviceId`'),
    organizationId: z.string(),
    ownerUserId: z.string(),
    name: z.string(),
    os: z.string(),
    appVersion: z.string(),
    publicKey: z.string(),
    meshAddress: z.string(),
    endpoints: z.array(z.string()),
    status: z.enum(['active', 'revoked']),
    online: z.boolean(),
    lastSeenAt: z.string().nullable(),
    revokedAt: z.string().nullable(),
    revokedReason: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'DeviceNode' });
export type Node = z.infer<typeof Node>;

export const NodeParams = z.object({ id: z.string().min(1).max(100) });

export const NodesQuery = z
  .object({
    all: queryBool
      .optional()
      .describe('Every node of the organization you can see (admins: all; members: theirs, and their peers when the organization shares peers)'),
    owner: z.enum(['me']).optional().describe('`me`: only your own nodes (the default)'),
    status: z.enum(['active', 'revoked']).optional(),
  })
  .strict();
export type NodesQuery = z.infer<typeof NodesQuery>;

export const RenameBody = z.object({ name: DeviceText(100).pipe(z.string().min(1, 'must not be empty')) }).strict();

export const RevokeBody = z.object({ reason: z.string().trim().min(1).max(500).optional() }).strict();

export const Overview = z
  .object({
    online: z.number().int(),
    offline: z.number().int(),
    revoked: z.number().int(),
    pendingLinks: z.number().int().describe('Links your organization opened or approved that the device has not collected yet'),
    total: z.number().int(),
  })
  .meta({ id: 'DeviceMeshOverview' });

export const Settings = z
  .object({
    peerScope: z.enum(['owner', 'organization']).describe('Which nodes see each other: the same owner’s (default) or the whole organization’s'),
  })
  .meta({ id: 'DeviceMeshSettings' });
export type Settings = z.infer<typeof Settings>;

export const PeerConfig = z
  .object({
    nodeId: z.string(),
    meshAddress: z.string(),
    peers: z.array(z.object({ nodeId: z.string(), publicKey: z.string(), meshAddress: z.string(), endpoint: z.string().nullable() })),
    config: z.string().describe('wg-quick file without PrivateKey (the device adds its own)'),
  })
  .meta({ id: 'DevicePeerConfig' });

export const AuditEvent = z
  .object({
    id: z.string(),
    event: z.string(),
    nodeId: z.string().nullable(),
    linkId: z.string().nullable(),
    actor: z.enum(['user', 'device', 'system']),
    actorUserId: z.string().nullable(),
    reason: z.string().nullable(),
    metadata: z.record(z.string(), z.unknown()),
    createdAt: z.string(),
  })
  .meta({ id: 'DeviceMeshAuditEvent' });
export type AuditEvent = z.infer<typeof AuditEvent>;

export const AuditQuery = z
  .object({
    node_id: z.string().min(1).max(100).optional(),
    event: z.string().min(1).max(100).optional(),
    limit: limitParam(50, 200),
    cursor: z.string().max(500).optional(),
  })
  .strict();
export type AuditQuery = z.infer<typeof AuditQuery>;
