import type { Kysely } from 'kysely';

// The device mesh (issue 16, ADR 0029).
// - runmesh_links: a device link code from start to its end. Public (no auth) start stores only hashes of the
//   code's start secret; `status` pending -> approved (into org_id by approved_by_user_id) -> completed (the device
//   collected its credential, once) or pending -> expired. `opened_org_id` is the organization whose member looked
//   the code up (the approval page), so admins can list links waiting for them.
// - runmesh_nodes: a linked device. Public key only (the private key never leaves the device), its mesh address
//   (unique: two replicas never hand out the same one), the sha256 of its credential, and state active|revoked.
// - runmesh_settings: the organization's peer rule (which nodes see each other in their peer configs).
// - runmesh_audit: what happened to links and nodes, with the actor and the reason (revocation).
// - runmesh_dispatches: a local-device run on its way to its node: queued -> delivered -> accepted -> done; the
//   device's own frame counter (`device_seq`) makes its retried POST /v1/thread-events idempotent.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('runmesh_links')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('code', 'text', (c) => c.notNull().unique())
    .addColumn('secret_hash', 'text', (c) => c.notNull())
    .addColumn('public_key', 'text', (c) => c.notNull())
    .addColumn('device_label', 'text', (c) => c.notNull())
    .addColumn('os', 'text', (c) => c.notNull())
    .addColumn('app_version', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('org_id', 'text', (c) => c.references('organizations.id').onDelete('cascade'))
    .addColumn('opened_org_id', 'text', (c) => c.references('organizations.id').onDelete('set null'))
    .addColumn('approved_by_user_id', 'text')
    .addColumn('node_id', 'text')
    .addColumn('interval_seconds', 'integer', (c) => c.notNull())
    .addColumn('last_polled_at', 'text')
    .addColumn('source_ip', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .addColumn('approved_at', 'text')
    .addColumn('completed_at', 'text')
    .execute();
  await db.schema.createIndex('runmesh_links_status_expires').on('runmesh_links').columns(['status', 'expires_at']).execute();
  await db.schema.createIndex('runmesh_links_org').on('runmesh_links').columns(['org_id']).execute();

  await db.schema
    .createTable('runmesh_nodes')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('owner_user_id', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('os', 'text', (c) => c.notNull())
    .addColumn('app_version', 'text', (c) => c.notNull())
    .addColumn('public_key', 'text', (c) => c.notNull())
    .addColumn('mesh_ip', 'text', (c) => c.notNull().unique())
    .addColumn('credential_hash', 'text', (c) => c.notNull().unique())
    .addColumn('status', 'text', (c) => c.notNull()) // active | revoked
    .addColumn('endpoints', 'text', (c) => c.notNull()) // JSON array of "host:port" the device reported
    .addColumn('connected', 'integer', (c) => c.notNull()) // holds a dispatch connection now (to connected_via)
    .addColumn('connected_via', 'text') // the replica (node id of this installation) holding it
    .addColumn('last_seen_at', 'text')
    .addColumn('link_id', 'text')
    .addColumn('revoked_at', 'text')
    .addColumn('revoked_by_user_id', 'text')
    .addColumn('revoked_reason', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('runmesh_nodes_org_owner').on('runmesh_nodes').columns(['org_id', 'owner_user_id']).execute();

  await db.schema
    .createTable('runmesh_settings')
    .addColumn('org_id', 'text', (c) => c.primaryKey().references('organizations.id').onDelete('cascade'))
    .addColumn('peer_scope', 'text', (c) => c.notNull()) // owner | organization
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('runmesh_audit')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('node_id', 'text')
    .addColumn('link_id', 'text')
    .addColumn('actor_user_id', 'text')
    .addColumn('actor', 'text', (c) => c.notNull()) // user | device | system
    .addColumn('event', 'text', (c) => c.notNull())
    .addColumn('reason', 'text')
    .addColumn('metadata', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('runmesh_audit_org_created').on('runmesh_audit').columns(['org_id', 'created_at', 'id']).execute();

  await db.schema
    .createTable('runmesh_dispatches')
    .addColumn('run_id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('node_id', 'text', (c) => c.notNull())
    .addColumn('thread_id', 'text', (c) => c.notNull())
    .addColumn('state', 'text', (c) => c.notNull()) // queued | delivered | accepted | done
    .addColumn('attempts', 'integer', (c) => c.notNull())
    .addColumn('device_seq', 'integer', (c) => c.notNull())
    .addColumn('deadline_at', 'text', (c) => c.notNull()) // fails the run when it is not accepted (or the device stays away) by then
    .addColumn('delivered_at', 'text')
    .addColumn('accepted_at', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('runmesh_dispatches_node_state').on('runmesh_dispatches').columns(['node_id', 'state']).execute();
  await db.schema.createIndex('runmesh_dispatches_state_deadline').on('runmesh_dispatches').columns(['state', 'deadline_at']).execute();
}
