/** The device mesh's SQL (its five tables); every query of an organization's rows is scoped by organization here. */
import type { Selectable } from 'kysely';
import type { RunmeshAuditTable, RunmeshLinksTable, RunmeshNodesTable } from '../../database.js';
import type { Executor } from '../../platform/db/index.js';
import { nowIso, prefixedId } from '../../platform/ids.js';

export type LinkRow = Selectable<RunmeshLinksTable>;
export type NodeRow = Selectable<RunmeshNodesTable>;
export type AuditRow = Selectable<RunmeshAuditTable>;

export const linkByCode = (db: Executor, code: string) => db.selectFrom('runmesh_links').selectAll().where('code', '=', code).executeTakeFirst();

export const pendingLinksFrom = async (db: Executor, sourceIp: string, now: string): Promise<number> => {
  const r = await db
    .selectFrom('runmesh_links')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('source_ip', '=', sourceIp)
    .where('status', '=', 'pending')
    .where('expires_at', '>', now)
    .executeTakeFirstOrThrow();
  return Number(r.n);
};

export const nodeInOrg = (db: Executor, org: string, id: string) =>
  db.selectFrom('runmesh_nodes').selectAll().where('org_id', '=', org).where('id', '=', id).executeTakeFirst();

export const nodeByCredential = (db: Executor, hash: string) =>
  db.selectFrom('runmesh_nodes').selectAll().where('credential_hash', '=', hash).executeTakeFirst();

export async function peerScope(db: Executor, org: string): Promise<'owner' | 'organization'> {
  const row = await db.selectFrom('runmesh_settings').select('peer_scope').where('org_id', '=', org).executeTakeFirst();
  return row?.peer_scope === 'organization' ? 'organization' : 'owner';
}

export async function setPeerScope(db: Executor, org: string, scope: 'owner' | 'organization'): Promise<void> {
  const now = nowIso();
  await db
    .insertInto('runmesh_settings')
    .values({ org_id: org, peer_scope: scope, updated_at: now })
    .onConflict((oc) => oc.column('org_id').doUpdateSet({ peer_scope: scope, updated_at: now }))
    .execute();
}

export interface AuditInput {
  nodeId?: string | null;
  linkId?: string | null;
  actor: 'user' | 'device' | 'system';
  actorUserId?: string | null;
  event: string;
  reason?: string | null;
  metadata?: Record<string, unknown>;
  at?: string;
}

export async function writeAudit(db: Executor, org: string, a: AuditInput): Promise<void> {
  await db
    .insertInto('runmesh_audit')
    .values({
      id: prefixedId('maud'),
      org_id: org,
      node_id: a.nodeId ?? null,
      link_id: a.linkId ?? null,
      actor: a.actor,
      actor_user_id: a.actorUserId ?? null,
      event: a.event,
      reason: a.reason ?? null,
      metadata: JSON.stringify(a.metadata ?? {}),
      created_at: a.at ?? nowIso(),
    })
    .execute();
}
