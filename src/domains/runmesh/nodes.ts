/**
 * Nodes of the device mesh: who sees them, renaming, revocation, peer configs, settings, the overview, the audit
 * log, and the device's own credential (ADR 0029).
 *
 * Who sees what: a node is its owner's, like a sandbox. Its owner and the organization's admins see and manage it;
 * when the organization shares peers (`peerScope: organization`), every member sees every active node (they are
 * each other's peers) but changes only their own. Everyone else gets 404.
 */
import {
  exec,
  hasScope,
  isOrgAdmin,
  orgId,
  requireOrgAdmin,
  requireScope,
  withTx,
  type Ctx,
  type Deps,
  type Principal,
} from '../../platform/context.js';
import { sha256Hex } from '../../platform/crypto/index.js';
import { decodeCursor, toPage } from '../../platform/http/pagination.js';
import { errors } from '../../platform/http/errors.js';
import { nowIso } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { membershipOf } from '../organizations/index.js';
import { failNodeRuns } from './dispatch.js';
import { pendingLinkCount } from './links.js';
import { nodeByCredential, nodeInOrg, peerScope, setPeerScope, writeAudit, type AuditRow, type NodeRow } from './repo.js';
import type { AuditEvent, AuditQuery, Node, NodesQuery, Settings } from './schemas.js';
import { parseEndpoint, renderPeerConfig } from './wireguard.js';

/** A node is online while it holds its dispatch connection and has been heard from within three heartbeats. */
export function isOnline(deps: Deps, row: NodeRow, now = Date.now()): boolean {
  if (row.status !== 'active' || !row.connected || !row.last_seen_at) return false;
  return now - Date.parse(row.last_seen_at) <= 3 * deps.config.runmesh.heartbeatSeconds * 1000;
}

export function toNode(deps: Deps, row: NodeRow): Node {
  return {
    id: row.id,
    organizationId: row.org_id,
    ownerUserId: row.owner_user_id,
    name: row.name,
    os: row.os,
    appVersion: row.app_version,
    publicKey: row.public_key,
    meshAddress: row.mesh_ip,
    endpoints: JSON.parse(row.endpoints) as string[],
    status: row.status as Node['status'],
    online: isOnline(deps, row),
    lastSeenAt: row.last_seen_at,
    revokedAt: row.revoked_at,
    revokedReason: row.revoked_reason,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** A node the caller may see (owner, admin, or a peer when the organization shares peers); others' are 404. */
async function findVisible(ctx: Ctx, id: string): Promise<NodeRow> {
  const row = await nodeInOrg(exec(ctx), orgId(ctx), id);
  if (!row) throw errors.notFound('node', id);
  if (row.owner_user_id === ctx.principal.userId || isOrgAdmin(ctx)) return row;
  if (row.status === 'active' && (await peerScope(exec(ctx), row.org_id)) === 'organization') return row;
  throw errors.notFound('node', id);
}

/** A node the caller may change: its owner's or, for admins, any; a peer's is 403, the rest 404. */
async function findManageable(ctx: Ctx, id: string): Promise<NodeRow> {
  const row = await findVisible(ctx, id);
  if (row.owner_user_id !== ctx.principal.userId && !isOrgAdmin(ctx))
    throw errors.forbidden('only the node’s owner or an organization admin can change it');
  return row;
}

/** Whether the caller may see the node (activity filters and the activity shortcut). */
export async function canSeeNode(ctx: Ctx, id: string): Promise<boolean> {
  try {
    await findVisible(ctx, id);
    return true;
  } catch {
    return false;
  }
}

/** The node a local-device agent targets must be an active node of the organization the caller may use. */
export async function requireTargetNode(ctx: Ctx, id: string): Promise<NodeRow> {
  const row = await findVisible(ctx, id);
  if (row.status !== 'active') throw errors.invalidState(`node ${id} was revoked`, row.status);
  return row;
}

export async function getNode(ctx: Ctx, id: string): Promise<Node> {
  requireScope(ctx, 'runmesh:read');
  return toNode(ctx.deps, await findVisible(ctx, id));
}

/** GET /v1/runmesh/nodes: the caller's own nodes; `all` every node they can see. */
export async function listNodes(ctx: Ctx, q: NodesQuery): Promise<Node[]> {
  requireScope(ctx, 'runmesh:read');
  const org = orgId(ctx);
  let query = exec(ctx).selectFrom('runmesh_nodes').selectAll().where('org_id', '=', org);
  if (q.owner === 'me' || !q.all) query = query.where('owner_user_id', '=', ctx.principal.userId);
  else if (!isOrgAdmin(ctx)) {
    const shared = (await peerScope(exec(ctx), org)) === 'organization';
    query = shared
      ? query.where((eb) => eb.or([eb('owner_user_id', '=', ctx.principal.userId), eb('status', '=', 'active')]))
      : query.where('owner_user_id', '=', ctx.principal.userId);
  }
  if (q.status) query = query.where('status', '=', q.status);
  const rows = await query.orderBy('created_at').orderBy('id').limit(1000).execute();
  return rows.map((r) => toNode(ctx.deps, r));
}

/** PATCH /v1/runmesh/nodes/{id} `{ name }`. */
export async function renameNode(ctx: Ctx, id: string, name: string): Promise<Node> {
  requireScope(ctx, 'runmesh:write');
  const row = await findManageable(ctx, id);
  if (row.status !== 'active') throw errors.invalidState(`node ${id} was revoked`, row.status);
  const now = nowIso();
  await withTx(ctx, async (tx) => {
    await exec(tx).updateTable('runmesh_nodes').set({ name, updated_at: now }).where('id', '=', id).where('org_id', '=', row.org_id).execute();
    await writeAudit(exec(tx), row.org_id, {
      nodeId: id,
      actor: 'user',
      actorUserId: ctx.principal.userId,
      event: 'node.renamed',
      metadata: { from: row.name, to: name },
    });
    await recordActivity(tx, {
      resourceType: 'runmesh_device',
      resourceId: id,
      runmeshNodeId: id,
      eventType: 'runmesh.node.renamed',
      status: 'completed',
      title: `Node renamed to ${name}`,
      metadata: { from: row.name, to: name },
    });
  });
  return toNode(ctx.deps, { ...row, name, updated_at: now });
}

/**
 * Revokes a node at once: its credential stops working on every replica (each request checks it; its dispatch
 * socket is closed over the bus), it leaves every peer config, and its queued and running runs fail. Audited with
 * the reason. `actor` is the device itself for `hangar device unlink`.
 */
export async function revokeNode(ctx: Ctx, id: string, reason: string, actor: 'user' | 'device' = 'user'): Promise<Node> {
  if (actor === 'user') requireScope(ctx, 'runmesh:write');
  const row = actor === 'device' ? await nodeInOrg(exec(ctx), orgId(ctx), id) : await findManageable(ctx, id);
  if (!row) throw errors.notFound('node', id);
  if (row.status === 'revoked') throw errors.invalidState(`node ${id} is already revoked`, 'revoked');
  const now = nowIso();
  await withTx(ctx, async (tx) => {
    const took = await exec(tx)
      .updateTable('runmesh_nodes')
      .set({
        status: 'revoked',
        revoked_at: now,
        revoked_by_user_id: ctx.principal.userId,
        revoked_reason: reason,
        connected: 0,
        updated_at: now,
      })
      .where('id', '=', id)
      .where('org_id', '=', row.org_id)
      .where('status', '=', 'active')
      .executeTakeFirst();
    if (Number(took.numUpdatedRows) !== 1) throw errors.invalidState(`node ${id} is already revoked`, 'revoked');
    await writeAudit(exec(tx), row.org_id, { nodeId: id, actor, actorUserId: ctx.principal.userId, event: 'node.revoked', reason });
    await recordActivity(tx, {
      resourceType: 'runmesh_device',
      resourceId: id,
      runmeshNodeId: id,
      eventType: 'runmesh.node.revoked',
      status: 'completed',
      severity: 'warning',
      title: `Node ${row.name} revoked`,
      summary: reason,
    });
  });
  // After commit: every replica closes the device's socket; its runs fail.
  await ctx.deps.live.publish({ kind: 'device', nodeId: id });
  await failNodeRuns(ctx.deps, id, `the device was revoked (${reason})`);
  return toNode(ctx.deps, { ...row, status: 'revoked', revoked_at: now, revoked_reason: reason, connected: 0, updated_at: now });
}

/** GET /v1/runmesh/overview: node counts by state among the nodes the caller sees with `all=true`, and links waiting. */
export async function overview(ctx: Ctx) {
  requireScope(ctx, 'runmesh:read');
  const nodes = await listNodes(ctx, { all: true });
  const online = nodes.filter((n) => n.online).length;
  const revoked = nodes.filter((n) => n.status === 'revoked').length;
  return {
    online,
    offline: nodes.length - online - revoked,
    revoked,
    pendingLinks: isOrgAdmin(ctx) ? await pendingLinkCount(ctx) : 0,
    total: nodes.length,
  };
}

/** GET /v1/runmesh/nodes/{id}/config: the node's wg-quick file (no private key) with its peers by the organization's rule. */
export async function nodeConfig(ctx: Ctx, id: string) {
  requireScope(ctx, 'runmesh:read');
  const row = await findManageable(ctx, id);
  if (row.status !== 'active') throw errors.invalidState(`node ${id} was revoked`, row.status);
  const scope = await peerScope(exec(ctx), row.org_id);
  let q = exec(ctx).selectFrom('runmesh_nodes').selectAll().where('org_id', '=', row.org_id).where('status', '=', 'active').where('id', '!=', id);
  if (scope === 'owner') q = q.where('owner_user_id', '=', row.owner_user_id);
  const peers = (await q.orderBy('created_at').orderBy('id').execute()).map((p) => ({
    nodeId: p.id,
    publicKey: p.public_key,
    meshAddress: p.mesh_ip,
    endpoint: (JSON.parse(p.endpoints) as string[]).map(parseEndpoint).find((e): e is string => e !== null) ?? null,
  }));
  const config = renderPeerConfig({
    address: row.mesh_ip,
    peers: peers.map((p) => ({ publicKey: p.publicKey, address: p.meshAddress, endpoint: p.endpoint })),
  });
  await withTx(ctx, async (tx) => {
    await writeAudit(exec(tx), row.org_id, {
      nodeId: id,
      actor: ctx.principal.kind === 'device' ? 'device' : 'user',
      actorUserId: ctx.principal.userId,
      event: 'config.fetched',
      metadata: { peers: peers.length, peerScope: scope },
    });
    await recordActivity(tx, {
      resourceType: 'runmesh_device',
      resourceId: id,
      runmeshNodeId: id,
      eventType: 'runmesh.config.fetched',
      status: 'completed',
      title: `Peer config of ${row.name} fetched`,
      metadata: { peers: peers.length },
    });
  });
  return { nodeId: id, meshAddress: row.mesh_ip, peers, config };
}

export async function getSettings(ctx: Ctx): Promise<Settings> {
  requireScope(ctx, 'runmesh:read');
  return { peerScope: await peerScope(exec(ctx), orgId(ctx)) };
}

/** PATCH /v1/runmesh/settings (admins): which nodes see each other. */
export async function updateSettings(ctx: Ctx, input: Settings): Promise<Settings> {
  requireScope(ctx, 'runmesh:write');
  requireOrgAdmin(ctx);
  const org = orgId(ctx);
  await withTx(ctx, async (tx) => {
    const before = await peerScope(exec(tx), org);
    await setPeerScope(exec(tx), org, input.peerScope);
    await writeAudit(exec(tx), org, {
      actor: 'user',
      actorUserId: ctx.principal.userId,
      event: 'settings.updated',
      metadata: { peerScope: { from: before, to: input.peerScope } },
    });
    await recordActivity(tx, {
      resourceType: 'runmesh_device',
      resourceId: org,
      eventType: 'runmesh.settings.updated',
      status: 'completed',
      title: `Device mesh peers: ${input.peerScope === 'organization' ? 'the whole organization' : 'same owner'}`,
    });
  });
  return { peerScope: input.peerScope };
}

function toAudit(row: AuditRow): AuditEvent {
  return {
    id: row.id,
    event: row.event,
    nodeId: row.node_id,
    linkId: row.link_id,
    actor: row.actor as AuditEvent['actor'],
    actorUserId: row.actor_user_id,
    reason: row.reason,
    metadata: JSON.parse(row.metadata) as Record<string, unknown>,
    createdAt: row.created_at,
  };
}

/** GET /v1/runmesh/audit: newest first; admins see the organization's, members what concerns their nodes or them. */
export async function listAudit(ctx: Ctx, q: AuditQuery) {
  requireScope(ctx, 'runmesh:read');
  const org = orgId(ctx);
  const db = exec(ctx);
  if (q.node_id) await findVisible(ctx, q.node_id);
  let query = db.selectFrom('runmesh_audit').selectAll().where('org_id', '=', org);
  if (!isOrgAdmin(ctx)) {
    const own = db.selectFrom('runmesh_nodes').select('id').where('org_id', '=', org).where('owner_user_id', '=', ctx.principal.userId);
    query = query.where((eb) => eb.or([eb('node_id', 'in', own), eb('actor_user_id', '=', ctx.principal.userId)]));
  }
  if (q.node_id) query = query.where('node_id', '=', q.node_id);
  if (q.event) query = query.where('event', '=', q.event);
  if (q.cursor) {
    const [at, id] = decodeCursor(q.cursor, 2) as [string, string];
    query = query.where((eb) => eb.or([eb('created_at', '<', at), eb.and([eb('created_at', '=', at), eb('id', '<', id)])]));
  }
  const rows = await query
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(q.limit + 1)
    .execute();
  const p = toPage(rows, q.limit, (r) => [r.created_at, r.id]);
  return { events: p.items.map(toAudit), hasMore: p.hasMore, nextCursor: p.nextCursor };
}

// ---- the device's own credential -----------------------------------------------------------------

/**
 * Resolves a device credential (`hgd_…`) to its principal: the node's owner in the node's organization, holding
 * only `runmesh:device`. A revoked node, or an owner who left the organization, is a 401 at once.
 */
export async function authenticateDevice(deps: Deps, secret: string): Promise<Principal> {
  if (!/^hgd_[A-Za-z0-9]{48}$/.test(secret)) throw errors.unauthenticated('device credential is malformed');
  const row = await nodeByCredential(deps.db.kysely, sha256Hex(secret));
  if (row?.status !== 'active') throw errors.unauthenticated('device credential is invalid or the device was revoked');
  if (!(await membershipOf(deps, row.owner_user_id, row.org_id)))
    throw errors.unauthenticated('the owner of this device is no longer a member of its organization');
  return {
    kind: 'device',
    userId: row.owner_user_id,
    orgId: row.org_id,
    role: null,
    scopes: new Set(['runmesh:device']),
    apiKeyId: null,
    deviceNodeId: row.id,
  };
}

/** The node a device credential is (its own routes). */
export function deviceNodeId(ctx: Ctx): string {
  requireScope(ctx, 'runmesh:device');
  if (ctx.principal.kind !== 'device' || !ctx.principal.deviceNodeId) throw errors.forbidden('this route is for a linked device’s own credential');
  return ctx.principal.deviceNodeId;
}

/** GET /v1/runmesh/device: the calling device's node. */
export async function deviceSelf(ctx: Ctx): Promise<Node> {
  const id = deviceNodeId(ctx);
  const row = await nodeInOrg(exec(ctx), orgId(ctx), id);
  if (!row) throw errors.notFound('node', id);
  return toNode(ctx.deps, row);
}

/** POST /v1/runmesh/device/unlink: the device gives up its credential (revoked, reason recorded). */
export async function unlinkSelf(ctx: Ctx): Promise<Node> {
  return revokeNode(ctx, deviceNodeId(ctx), 'unlinked by the device', 'device');
}

/** Whether a principal is a person allowed to read the mesh (for the activity shortcut). */
export const canReadMesh = (ctx: Ctx): boolean => hasScope(ctx, 'runmesh:read');
