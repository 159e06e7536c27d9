import type { SandboxState } from '../../database.js';
import { exec, orgId, requireScope, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import { declareDead, getNode, liveNodes, silentNodes, type NodeLoad } from '../../platform/nodes/index.js';
import { resolveTemplate } from '../templates/index.js';
import type { CreateSandboxBody } from './schemas.js';
import { activity, closeInterval, ownerCtx, setState } from './service.js';

// Sandboxes across replicas (ADR 0024): which node a request for a sandbox belongs to, where a new one goes, and
// what becomes of a silent node's sandboxes. The HTTP side (forwarding) is forward.ts.

/** States that hold a container on their node (and count against its room). */
const ON_NODE: SandboxState[] = ['starting', 'running', 'paused'];

/**
 * The live node other than this one that holds the sandbox, when the sandbox is the caller's organization's; null
 * when this node should answer (it is here, unknown, another organization's: the verbs then answer 404 or 503).
 */
export async function remoteNodeOf(ctx: Ctx, id: string): Promise<{ id: string; url: string } | null> {
  const row = await exec(ctx).selectFrom('sandboxes').select('node_id').where('id', '=', id).where('org_id', '=', orgId(ctx)).executeTakeFirst();
  if (!row || row.node_id === ctx.deps.config.sandboxes.nodeId) return null;
  const node = await getNode(ctx.deps, row.node_id);
  return node?.live && node.url ? { id: node.id, url: node.url } : null;
}

/** Running (or starting) sandboxes and their memory limits per node, counted now (fresher than the heartbeats). */
async function loads(deps: Deps): Promise<Map<string, NodeLoad>> {
  const rows = await deps.db.kysely
    .selectFrom('sandboxes')
    .select((eb) => ['node_id', eb.fn.countAll<number>().as('n'), eb.fn.sum<number>('memory_mb').as('mb')])
    .where('state', 'in', ['starting', 'running'])
    .groupBy('node_id')
    .execute();
  return new Map(rows.map((r) => [r.node_id, { running: Number(r.n), memoryCommittedMb: Number(r.mb ?? 0) }]));
}

/** This node's load, for its heartbeat. */
export async function nodeLoad(deps: Deps): Promise<NodeLoad> {
  return (await loads(deps)).get(deps.config.sandboxes.nodeId) ?? { running: 0, memoryCommittedMb: 0 };
}

/**
 * Where a new sandbox goes: null for this node, else the live node to forward its creation to. A template with a
 * built layer lives on the node that built it, so its sandboxes go there; otherwise among the live nodes that run
 * sandboxes, those with room for its memory limit (capacity minus the limits of their running sandboxes), the one
 * with the fewest running, then the most free memory, this node first on a tie. With no node having room, the one
 * with the most free memory (limits are ceilings, not reservations). With no other node it is always this one.
 */
export async function placeSandbox(ctx: Ctx, body: CreateSandboxBody): Promise<{ id: string; url: string } | null> {
  requireScope(ctx, 'sandbox:write');
  const { deps } = ctx;
  const self = deps.config.sandboxes.nodeId;
  const others = (await liveNodes(deps)).filter((n) => n.id !== self && n.sandboxesAvailable && n.url);
  if (others.length === 0) return null;
  const template = await resolveTemplate(ctx, body.template);
  if (template.nodeId) {
    if (template.nodeId === self) return null;
    const home = others.find((n) => n.id === template.nodeId);
    if (home) return { id: home.id, url: home.url! };
    throw errors.unavailable(
      `template "${template.slug}" was built on node "${template.nodeId}", which is not answering; its sandboxes run there (template layers stay on the node that built them)`,
    );
  }
  const now = await loads(deps);
  const memory = body.memoryMb ?? deps.config.sandboxes.defaultMemoryMb;
  const candidates = [
    ...(deps.sandboxes.available ? [{ id: self, url: null as string | null, capacity: deps.config.nodes.memoryMb }] : []),
    ...others.map((n) => ({ id: n.id, url: n.url, capacity: n.memoryCapacityMb })),
  ].map((n) => {
    const load = now.get(n.id) ?? { running: 0, memoryCommittedMb: 0 };
    return { ...n, running: load.running, free: n.capacity - load.memoryCommittedMb };
  });
  if (candidates.length === 0) return null; // no node runs sandboxes: this one answers why
  const roomy = candidates.filter((n) => n.free >= memory);
  const pick = roomy.length
    ? roomy.sort((a, b) => a.running - b.running || b.free - a.free || Number(b.id === self) - Number(a.id === self))[0]!
    : candidates.sort((a, b) => b.free - a.free || Number(b.id === self) - Number(a.id === self))[0]!;
  return pick.id === self ? null : { id: pick.id, url: pick.url! };
}

/**
 * Run by a sweep on every live node: the sandboxes of a node silent for longer than HANGAR_NODE_DEAD_AFTER_MS become
 * `stopped` (runtime metering ends; their files stay on that node; resume starts them there once it is back). Each
 * change is conditional on the state read, so of several replicas sweeping at once one makes it (and its activity row).
 */
export async function stopSandboxesOfSilentNodes(deps: Deps): Promise<number> {
  let stopped = 0;
  for (const nodeId of await silentNodes(deps)) {
    const rows = await deps.db.kysely.selectFrom('sandboxes').selectAll().where('node_id', '=', nodeId).where('state', 'in', ON_NODE).execute();
    if (rows.length === 0) continue;
    await declareDead(deps, nodeId); // before the changes: the node, when back, reconciles whatever was stopped
    for (const row of rows) {
      const summary = `its node "${nodeId}" stopped answering (no heartbeat for ${Math.round(deps.config.nodes.deadAfterMs / 1000)} s); its files are kept there: resume starts it again once the node is back`;
      const changed = await withTx(ownerCtx(deps, row), async (tx) => {
        if (!(await setState(tx, row.id, [row.state], 'stopped'))) return false;
        // The platform lost the node: its sandboxes' running time is forgiven (see IntervalEnd in service.ts).
        await closeInterval(tx, row.id, 'forgiven');
        await activity(tx, row, 'sandbox.stopped', `Sandbox ${row.name} stopped`, {
          status: 'failed',
          summary,
          metadata: { trigger: 'node_dead', node: nodeId },
        });
        return true;
      });
      if (changed) stopped++;
    }
    deps.log.warn({ node: nodeId, stopped }, 'a silent node’s sandboxes were marked stopped');
  }
  return stopped;
}
