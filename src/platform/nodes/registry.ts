import { hostname } from 'node:os';
import type { AddressInfo } from 'node:net';
import type { Deps } from '../context.js';
import { nowIso } from '../ids.js';
import { every, type StartJobs } from '../jobs.js';
import { stateKey } from '../state.js';

/**
 * The node registry (ADR 0024). Every Hangar process that serves the orchestrator writes its row in `nodes` each
 * heartbeat: its internal address, whether it can run sandboxes, and its load. Other replicas read it to forward a
 * sandbox's requests to the node that holds its container, to place new sandboxes, and to notice a silent node.
 */
export interface NodeInfo {
  id: string;
  url: string | null;
  sandboxesAvailable: boolean;
  running: number;
  memoryCapacityMb: number;
  memoryCommittedMb: number;
  heartbeatAt: string;
  /** Heard from within the dead-after window. */
  live: boolean;
}

/** What a node reports about its sandboxes each heartbeat (the sandboxes domain counts them). */
export interface NodeLoad {
  running: number;
  memoryCommittedMb: number;
}

export const NODES_STATE = stateKey('nodes', () => ({
  /** The address this process listens on, once it does (the default internal URL). */
  listenUrl: null as string | null,
  /** Beats now (set while the heartbeat job runs), so a node that starts listening registers its URL at once. */
  beat: null as (() => Promise<void>) | null,
  startedAt: nowIso(),
}));

/** This node's internal URL: HANGAR_NODE_URL, else the address it listens on (a wildcard bind names the host). */
export function nodeUrl(deps: Deps): string | null {
  return deps.config.nodes.url ?? deps.state.get(NODES_STATE).listenUrl;
}

/** Called by app.ts when the server listens: the address becomes this node's default URL, registered at once. */
export function nodeListening(deps: Deps, address: string | AddressInfo | null): void {
  if (!address || typeof address === 'string') return;
  const wildcard = address.address === '0.0.0.0' || address.address === '::';
  const host = wildcard ? hostname() : address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const state = deps.state.get(NODES_STATE);
  state.listenUrl = `http://${host}:${address.port}`;
  void state.beat?.().catch((err) => deps.log.warn({ err }, 'node heartbeat failed'));
}

const deadline = (deps: Deps) => new Date(Date.now() - deps.config.nodes.deadAfterMs).toISOString();

function toInfo(
  deps: Deps,
  r: {
    id: string;
    url: string | null;
    sandboxes_available: number;
    running_sandboxes: number;
    memory_capacity_mb: number;
    memory_committed_mb: number;
    heartbeat_at: string;
  },
): NodeInfo {
  return {
    id: r.id,
    url: r.url,
    sandboxesAvailable: r.sandboxes_available === 1,
    running: Number(r.running_sandboxes),
    memoryCapacityMb: Number(r.memory_capacity_mb),
    memoryCommittedMb: Number(r.memory_committed_mb),
    heartbeatAt: r.heartbeat_at,
    live: r.heartbeat_at >= deadline(deps),
  };
}

/** One node's entry, or undefined for a node that never registered (a sandbox made before the registry). */
export async function getNode(deps: Deps, id: string): Promise<NodeInfo | undefined> {
  const row = await deps.db.kysely.selectFrom('nodes').selectAll().where('id', '=', id).executeTakeFirst();
  return row ? toInfo(deps, row) : undefined;
}

/** Nodes heard from within the dead-after window that other replicas can reach (their URL is known). */
export async function liveNodes(deps: Deps): Promise<NodeInfo[]> {
  const rows = await deps.db.kysely
    .selectFrom('nodes')
    .selectAll()
    .where('heartbeat_at', '>=', deadline(deps))
    .where('url', 'is not', null)
    .execute();
  return rows.map((r) => toInfo(deps, r));
}

/** Other nodes silent for longer than the dead-after window. */
export async function silentNodes(deps: Deps): Promise<string[]> {
  const rows = await deps.db.kysely
    .selectFrom('nodes')
    .select('id')
    .where('heartbeat_at', '<', deadline(deps))
    .where('id', '!=', deps.config.sandboxes.nodeId)
    .execute();
  return rows.map((r) => r.id);
}

/** Notes that a silent node's sandboxes were stopped, so the node reconciles its containers when it is back. */
export async function declareDead(deps: Deps, id: string): Promise<void> {
  await deps.db.kysely.updateTable('nodes').set({ declared_dead_at: nowIso() }).where('id', '=', id).where('declared_dead_at', 'is', null).execute();
}

/**
 * Writes this node's row (insert or update). Answers `revived` when another replica had declared this node dead
 * meanwhile (the mark is cleared in the same statement that reads it: one heartbeat sees it).
 */
export async function heartbeat(deps: Deps, load: NodeLoad): Promise<{ revived: boolean }> {
  const db = deps.db.kysely;
  const id = deps.config.sandboxes.nodeId;
  const values = {
    url: nodeUrl(deps),
    sandboxes_available: deps.sandboxes.available ? 1 : 0,
    running_sandboxes: load.running,
    memory_capacity_mb: deps.config.nodes.memoryMb,
    memory_committed_mb: load.memoryCommittedMb,
    heartbeat_at: nowIso(),
  };
  const revived = await db
    .updateTable('nodes')
    .set({ declared_dead_at: null })
    .where('id', '=', id)
    .where('declared_dead_at', 'is not', null)
    .executeTakeFirst();
  await db
    .insertInto('nodes')
    .values({ id, started_at: deps.state.get(NODES_STATE).startedAt, declared_dead_at: null, ...values })
    .onConflict((oc) => oc.column('id').doUpdateSet(values))
    .execute();
  return { revived: Number(revived.numUpdatedRows) > 0 };
}

/**
 * The heartbeat job (started first among the orchestrator's jobs): beats at start, then every HANGAR_NODE_HEARTBEAT_MS.
 * `load` counts this node's sandboxes; `onRevived` runs when the node learns it had been declared dead (its sandboxes
 * were marked stopped while it was away: the sandboxes domain reconciles its containers with that).
 */
export function startNodeHeartbeat(opts: { load: (deps: Deps) => Promise<NodeLoad>; onRevived: (deps: Deps) => Promise<unknown> }): StartJobs {
  return async (deps) => {
    const state = deps.state.get(NODES_STATE);
    const beat = async () => {
      const { revived } = await heartbeat(deps, await opts.load(deps));
      if (revived) {
        deps.log.warn({ node: deps.config.sandboxes.nodeId }, 'this node had been declared dead by another replica; reconciling its sandboxes');
        await opts.onRevived(deps);
      }
    };
    await beat();
    state.beat = beat;
    const job = every(deps, deps.config.nodes.heartbeatMs, 'node heartbeat', beat);
    return {
      async stop() {
        state.beat = null;
        await job.stop();
      },
    };
  };
}
