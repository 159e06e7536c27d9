/**
 * The warm pool (ADR 0023): ready, unassigned sandboxes of one system template, without and with network, that
 * POST /v1/sandboxes takes instead of building one. A pooled sandbox is a started container (disk image, layers,
 * agent up, network attached or not) under a sandbox id and host uid of its own that no record names yet: no
 * tenant has touched it. Taking one is an atomic in-memory take (JavaScript runs one take at a time, so two
 * creates never get the same entry); the create then gives it the caller's settings and inserts its record in
 * one transaction (service.ts, claimPooled). A taken entry never comes back: if its claim fails it is destroyed.
 *
 * Memory: a pooled sandbox counts with its memory limit. The pool only grows while the host's available memory
 * (MemAvailable) covers the floor, the pool's limits and one more; a create built without the pool first evicts
 * pooled sandboxes until the same sum leaves room for it. The refill loop is background work started by app.ts
 * (SERVICE_JOBS); it also keeps the runtime's spare network namespaces (cheap network for builds without a pool).
 * On stop every pooled sandbox is destroyed; one left by a crash has no record, so start-up reconciliation
 * (reconcile in service.ts) removes it as it removes any container without a live record.
 */
import fs from 'node:fs/promises';
import { systemCtx, type Ctx, type Deps } from '../../platform/context.js';
import { prefixedId } from '../../platform/ids.js';
import { nothingToStop, type Stoppable } from '../../platform/jobs.js';
import { requireFreeDisk } from '../../platform/sandboxes/index.js';
import { stateKey } from '../../platform/state.js';
import { resolveTemplate } from '../templates/index.js';
import { defaultName, freeUid, hostnameOf, specOf } from './service.js';

export interface PoolEntry {
  /** The container's id: the sandbox id its record gets when claimed. */
  id: string;
  uid: number;
  templateId: string;
  network: boolean;
  diskMb: number;
  /** What it was started with; a claim asking for other limits or another hostname applies them. */
  cpu: number;
  memoryMb: number;
  hostname: string;
}

/** How long the refill loop sleeps when there is nothing to do (a take wakes it). */
const IDLE_MS = 1_000;
/**
 * A take wakes the refill loop this much later: starting a container (mkfs, mounts, runc) takes CPU that the
 * claimed sandbox's first commands, which typically follow at once, would otherwise compete with.
 */
const REFILL_DELAY_MS = 250;

async function memAvailableMb(): Promise<number> {
  const info = await fs.readFile('/proc/meminfo', 'utf8');
  const kb = Number(/^MemAvailable:\s+(\d+)/m.exec(info)?.[1] ?? Number.NaN);
  return Number.isFinite(kb) ? Math.floor(kb / 1024) : 0;
}

export const POOL_STATE = stateKey('sandbox-pool', () => ({
  ready: [] as PoolEntry[],
  /** Being started by the refill loop. */
  building: [] as PoolEntry[],
  /** Taken by a create whose record is not written yet: their uids stay reserved. */
  claiming: new Set<PoolEntry>(),
  /** Wakes the refill loop (set while it sleeps). */
  wake: null as (() => void) | null,
  /** The host's available memory in MiB (tests put their own reading here). */
  memAvailableMb,
  /** Why the pool is not filling, logged once per change. */
  holdingBack: null as string | null,
}));

const poolOf = (deps: Deps) => deps.state.get(POOL_STATE);
const reservedMb = (st: ReturnType<typeof poolOf>) => [...st.ready, ...st.building].reduce((n, e) => n + e.memoryMb, 0);

/** Takes a pooled sandbox of this template, network mode and disk size, if there is one. Synchronous: one take at a time. */
export function takePooled(deps: Deps, want: { templateId: string; network: boolean; diskMb: number }): PoolEntry | null {
  const st = poolOf(deps);
  const i = st.ready.findIndex((e) => e.templateId === want.templateId && e.network === want.network && e.diskMb === want.diskMb);
  if (i < 0) return null;
  const [entry] = st.ready.splice(i, 1);
  st.claiming.add(entry!);
  wakeRefill(deps);
  return entry!;
}

/** Wakes the refill loop (if it runs) shortly: a create took a pooled sandbox or a spare network namespace. */
export function wakeRefill(deps: Deps): void {
  const st = poolOf(deps);
  if (!st.wake) return;
  setTimeout(() => st.wake?.(), REFILL_DELAY_MS).unref();
}

/** The claim of a taken entry is over (its record holds its uid now, or it was destroyed). */
export function releasePooled(deps: Deps, entry: PoolEntry): void {
  poolOf(deps).claiming.delete(entry);
}

/** Host uids the pool holds (ready, being started, being claimed): no new sandbox may get one. */
export function pooledUids(deps: Deps): number[] {
  const st = poolOf(deps);
  return [...st.ready, ...st.building, ...st.claiming].map((e) => e.uid);
}

/** Pooled sandboxes ready now, by network mode (for tests and the benchmark; not part of the API). */
export function poolCounts(deps: Deps): { network: number; offline: number; building: number } {
  const st = poolOf(deps);
  return {
    network: st.ready.filter((e) => e.network).length,
    offline: st.ready.filter((e) => !e.network).length,
    building: st.building.length,
  };
}

/**
 * Before a sandbox is built without the pool: pooled sandboxes are destroyed (oldest first) until the host's
 * available memory, less the floor and what the rest of the pool reserves, covers the new one's limit.
 */
export async function makeRoomForMemory(deps: Deps, memoryMb: number): Promise<void> {
  const st = poolOf(deps);
  const floor = deps.config.sandboxes.pool.minFreeMemoryMb;
  while (st.ready.length > 0 && (await st.memAvailableMb()) - floor - reservedMb(st) < memoryMb) {
    const entry = st.ready.shift()!;
    deps.log.info({ sandboxId: entry.id }, 'pooled sandbox evicted: a new sandbox needs its memory');
    await destroyEntry(deps, entry);
  }
}

async function destroyEntry(deps: Deps, entry: PoolEntry): Promise<void> {
  await deps.sandboxes.destroy(entry.id).catch((err) => deps.log.warn({ err, sandboxId: entry.id }, 'could not remove a pooled sandbox'));
}

/** The context the pool acts in: no organization (only system templates resolve), no scopes. */
function poolCtx(deps: Deps): Ctx {
  return systemCtx(deps, { userId: 'system', orgId: 'system', role: null, scopes: new Set(), apiKeyId: null });
}

function holdBack(deps: Deps, reason: string | null): void {
  const st = poolOf(deps);
  if (st.holdingBack === reason) return;
  st.holdingBack = reason;
  if (reason) deps.log.info({ reason }, 'sandbox pool is not filling');
}

/** One step of refilling: a spare network namespace, or one pooled sandbox started, or one evicted. True when it did something. */
async function refillOnce(deps: Deps): Promise<boolean> {
  const cfg = deps.config.sandboxes;
  const st = poolOf(deps);
  if (!deps.sandboxes.networkReason && (await deps.sandboxes.spareNetworks(cfg.spareNetworks))) return true;
  const { pool } = cfg;
  if (pool.size === 0 && pool.networkSize === 0) return false;
  const free = (await st.memAvailableMb()) - pool.minFreeMemoryMb - reservedMb(st);
  if (free < 0 && st.ready.length > 0) {
    const entry = st.ready.shift()!;
    holdBack(deps, `host memory is below HANGAR_SANDBOX_POOL_MIN_FREE_MEMORY_MB (${pool.minFreeMemoryMb} MiB) plus the pool's limits`);
    await destroyEntry(deps, entry);
    return true;
  }
  for (const network of [false, true]) {
    const target = network ? pool.networkSize : pool.size;
    const have = [...st.ready, ...st.building].filter((e) => e.network === network).length;
    if (have >= target || (network && deps.sandboxes.networkReason)) continue;
    if (free < cfg.defaultMemoryMb) {
      holdBack(deps, `host memory is below HANGAR_SANDBOX_POOL_MIN_FREE_MEMORY_MB (${pool.minFreeMemoryMb} MiB) plus the pool's limits`);
      return false;
    }
    const ctx = poolCtx(deps);
    const template = await resolveTemplate(ctx, pool.template);
    if (template.status !== 'ready') {
      holdBack(deps, `template "${pool.template}" is ${template.status}`);
      return false;
    }
    if (template.startCmd) {
      holdBack(deps, `template "${pool.template}" starts a program of its own in each sandbox; it cannot be pooled`);
      return false;
    }
    try {
      await requireFreeDisk(cfg, 'no pooled sandbox');
    } catch (err) {
      holdBack(deps, (err as Error).message);
      return false;
    }
    holdBack(deps, null);
    const id = prefixedId('sbx');
    const uid = await freeUid(ctx);
    // Reserved at once (no await between): freeUid skips the pool's uids.
    const entry: PoolEntry = {
      id,
      uid,
      templateId: template.id,
      network,
      diskMb: cfg.defaultDiskMb,
      cpu: cfg.defaultCpu,
      memoryMb: cfg.defaultMemoryMb,
      hostname: hostnameOf(defaultName(id)),
    };
    st.building.push(entry);
    try {
      await deps.sandboxes.start(
        specOf(
          deps,
          {
            id,
            uid,
            name: defaultName(id),
            env: '{}',
            cpu: entry.cpu,
            memory_mb: entry.memoryMb,
            disk_mb: entry.diskMb,
            network: network ? 1 : 0,
          },
          template,
        ),
      );
    } catch (err) {
      await destroyEntry(deps, entry);
      throw err;
    } finally {
      st.building.splice(st.building.indexOf(entry), 1);
    }
    st.ready.push(entry);
    return true;
  }
  return false;
}

/**
 * The refill loop: one step after another while there is work, else a sleep a take cuts short. Stopping it
 * destroys every pooled sandbox and spare namespace.
 */
export async function startSandboxPool(deps: Deps): Promise<Stoppable> {
  if (!deps.sandboxes.available) return nothingToStop;
  const st = poolOf(deps);
  let stopped = false;
  let lastError = '';
  const loop = (async () => {
    while (!stopped) {
      let worked = false;
      try {
        worked = await refillOnce(deps);
        lastError = '';
      } catch (err) {
        const message = (err as Error).message;
        if (message !== lastError) deps.log.warn({ err }, 'sandbox pool refill failed');
        lastError = message;
      }
      if (worked || stopped) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, IDLE_MS);
        timer.unref();
        st.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      st.wake = null;
    }
  })();
  return {
    async stop() {
      stopped = true;
      st.wake?.();
      await loop;
      for (const entry of st.ready.splice(0)) await destroyEntry(deps, entry);
      await deps.sandboxes.spareNetworks(0).catch((err) => deps.log.warn({ err }, 'could not remove spare network namespaces'));
    },
  };
}
