import type { Selectable } from 'kysely';
import type { SandboxesTable, SandboxState } from '../../database.js';
import { exec, isOrgAdmin, orgId, requireAnyScope, requireScope, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { isUniqueViolation } from '../../platform/db/index.js';
import { newestFirstPage } from '../../platform/db/pages.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { KeyedQueue } from '../../platform/keyed-queue.js';
import { stateKey } from '../../platform/state.js';
import { ROLE_SCOPES } from '../../platform/scopes.js';
import { getNode } from '../../platform/nodes/index.js';
import { requireFreeDisk, type AgentClient, type ContainerSpec } from '../../platform/sandboxes/index.js';
import { recordActivity } from '../activity/index.js';
import { finishRuntime, planLimits, recordUsage, requireCredits, settleAfterCommit } from '../billing/index.js';
import { lockTemplateForUse, resolveTemplate, type ResolvedTemplate } from '../templates/index.js';
import { makeRoomForMemory, pooledUids, releasePooled, takePooled, wakeRefill, type PoolEntry } from './pool.js';
import type { CreateSandboxBody, Sandbox } from './schemas.js';

export type Row = Selectable<SandboxesTable>;

/** Host uids of sandbox users: UID_BASE + n, unique among a node's live sandboxes (a unique index guards it). */
const UID_BASE = 200_000;
const UID_COUNT = 50_000;
/** A command's last-use time is written at most this often (it drives the idle timeout). */
const TOUCH_EVERY_MS = 5_000;

// ---- runtime state and serialization of lifecycle changes ------------------------------------

/** The sandboxes domain's state in one app (see platform/state.ts). */
export const SANDBOX_STATE = stateKey('sandboxes', () => ({
  /** Lifecycle changes of one sandbox run one at a time in this process (a pause during a resume waits its turn). */
  lifecycles: new KeyedQueue(),
  /** Admission (limit check + insert) one at a time per organization in this process. */
  admissions: new KeyedQueue(),
  /** When each sandbox's last use was written (it drives the idle timeout). */
  touched: new Map<string, number>(),
  /** A ready template never changes, so its WORKDIR is looked up once per app. */
  workdirs: new Map<string, string | undefined>(),
}));

const serialized = <T>(deps: Deps, id: string, fn: () => Promise<T>) => deps.state.get(SANDBOX_STATE).lifecycles.run(id, fn);
const admit = <T>(deps: Deps, org: string, fn: () => Promise<T>) => deps.state.get(SANDBOX_STATE).admissions.run(org, fn);

// ---- records ---------------------------------------------------------------------------------

function toSandbox(row: Row, runningSeconds: number, diskBytes: number | null): Sandbox {
  return {
    id: row.id,
    name: row.name,
    ownerUserId: row.created_by_user_id,
    template: row.template_slug,
    templateId: row.template_id,
    state: row.state,
    cpu: row.cpu,
    memoryMb: row.memory_mb,
    diskMb: row.disk_mb,
    network: row.network === 1,
    idleTimeoutSeconds: row.idle_timeout_seconds,
    envKeys: Object.keys(JSON.parse(row.env) as Record<string, string>),
    metadata: JSON.parse(row.metadata) as Record<string, string>,
    error: row.error,
    nodeId: row.node_id,
    usage: { runningSeconds: Math.round(runningSeconds * 1000) / 1000, diskBytes },
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    lastActiveAt: row.last_active_at,
    destroyedAt: row.destroyed_at,
  };
}

async function runningSeconds(ctx: Ctx, ids: string[]): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  if (!ids.length) return out;
  const rows = await exec(ctx).selectFrom('sandbox_runtime').select(['sandbox_id', 'started_at', 'seconds']).where('sandbox_id', 'in', ids).execute();
  const now = Date.now();
  for (const r of rows) {
    const s = r.seconds ?? Math.max(0, (now - Date.parse(r.started_at)) / 1000);
    out.set(r.sandbox_id, (out.get(r.sandbox_id) ?? 0) + s);
  }
  return out;
}

/** Bytes in use on a sandbox's disk: only a local one that is mounted (running or paused) can say. */
async function diskBytes(ctx: Ctx, row: Row): Promise<number | null> {
  if (row.node_id !== ctx.deps.config.sandboxes.nodeId || (row.state !== 'running' && row.state !== 'paused')) return null;
  return ctx.deps.sandboxes.diskUsage(row.id).catch(() => null);
}

async function present(ctx: Ctx, row: Row): Promise<Sandbox> {
  return toSandbox(row, (await runningSeconds(ctx, [row.id])).get(row.id) ?? 0, await diskBytes(ctx, row));
}

async function findRow(ctx: Ctx, id: string): Promise<Row> {
  const row = await exec(ctx).selectFrom('sandboxes').selectAll().where('id', '=', id).where('org_id', '=', orgId(ctx)).executeTakeFirst();
  if (!row) throw errors.notFound('sandbox', id);
  return row;
}

/**
 * How the caller sees a sandbox. Its owner (the user who created it; a thread's sandbox is created by a run
 * of the thread's owner, the only one who may run on it) sees and does everything; an organization admin
 * sees its metadata and may pause or destroy it; to any other member it does not exist.
 */
export type SandboxView = 'owner' | 'metadata';

async function findVisible(ctx: Ctx, id: string): Promise<{ row: Row; view: SandboxView }> {
  const row = await findRow(ctx, id);
  if (row.created_by_user_id === ctx.principal.userId) return { row, view: 'owner' };
  if (isOrgAdmin(ctx)) return { row, view: 'metadata' };
  throw errors.notFound('sandbox', id); // another member's sandbox does not exist for this caller
}

/** The sandbox for a verb that is its owner's alone: 404 to other members, 403 (saying why) to admins. */
async function findOwned(ctx: Ctx, id: string, action: string): Promise<Row> {
  const { row, view } = await findVisible(ctx, id);
  if (view !== 'owner')
    throw errors.forbidden(`only the sandbox’s owner can ${action}; organization admins see its metadata and may pause or destroy it`);
  return row;
}

/** A sandbox as its owner or an admin sees it (GET /v1/sandboxes/{id}, sandbox:read; its activity, activity:read). */
export async function getSandbox(ctx: Ctx, id: string): Promise<Sandbox> {
  requireAnyScope(ctx, ['sandbox:read', 'activity:read']);
  return view(ctx, id);
}

/** getSandbox without its scope check, for the verbs here that answer with the sandbox they changed. */
async function view(ctx: Ctx, id: string): Promise<Sandbox> {
  return present(ctx, (await findVisible(ctx, id)).row);
}

/**
 * A run acts on its thread's sandbox as the thread's owner. Runs reach that sandbox (create, get, resume, its
 * agent) through the context this returns: the caller's, which must hold `agent:run`, plus the sandbox scopes the
 * caller's role grants. A key limited to `agent:run` can so run an `in_sandbox` agent without holding sandbox
 * scopes itself; ownership is checked as for any caller (only the sandbox's creator reaches inside it).
 */
export function threadSandboxCtx(ctx: Ctx): Ctx {
  requireScope(ctx, 'agent:run');
  const role = ctx.principal.role;
  const added = (['sandbox:read', 'sandbox:write'] as const).filter((s) => role && ROLE_SCOPES[role].has(s));
  return { ...ctx, principal: { ...ctx.principal, scopes: new Set([...ctx.principal.scopes, ...added]) } };
}

export async function canSeeSandbox(ctx: Ctx, id: string): Promise<boolean> {
  try {
    await findVisible(ctx, id);
    return true;
  } catch {
    return false;
  }
}

/** True when the sandbox exists in the caller's organization and is another member's (for activity filters). */
export async function sandboxHidden(ctx: Ctx, id: string): Promise<boolean> {
  if (isOrgAdmin(ctx)) return false;
  const row = await exec(ctx)
    .selectFrom('sandboxes')
    .select('created_by_user_id')
    .where('id', '=', id)
    .where('org_id', '=', orgId(ctx))
    .executeTakeFirst();
  return Boolean(row && row.created_by_user_id !== ctx.principal.userId);
}

/**
 * The id of a sandbox of the caller's organization (any member's) that still uses the template, or null. The
 * templates domain asks this before deleting a template (registered by buildApp: templates cannot import
 * sandboxes, which resolves templates).
 */
export async function sandboxUsingTemplate(ctx: Ctx, templateId: string): Promise<string | null> {
  const row = await exec(ctx)
    .selectFrom('sandboxes')
    .select('id')
    .where('org_id', '=', orgId(ctx))
    .where('template_id', '=', templateId)
    .where('state', '!=', 'destroyed')
    .limit(1)
    .executeTakeFirst();
  return row?.id ?? null;
}

/** An admin lists every sandbox of the organization (metadata); a member only their own. */
export async function listSandboxes(ctx: Ctx, q: { limit: number; cursor?: string; state?: SandboxState }) {
  requireScope(ctx, 'sandbox:read');
  let query = exec(ctx).selectFrom('sandboxes').selectAll().where('org_id', '=', orgId(ctx));
  if (!isOrgAdmin(ctx)) query = query.where('created_by_user_id', '=', ctx.principal.userId);
  query = q.state ? query.where('state', '=', q.state) : query.where('state', '!=', 'destroyed');
  const page = await newestFirstPage(query, { time: 'created_at', id: 'id' }, q);
  const seconds = await runningSeconds(
    ctx,
    page.items.map((r) => r.id),
  );
  const disk = await Promise.all(page.items.map((r) => diskBytes(ctx, r)));
  return { ...page, items: page.items.map((r, i) => toSandbox(r, seconds.get(r.id) ?? 0, disk[i]!)) };
}

// ---- transitions -----------------------------------------------------------------------------

function stateError(row: Pick<Row, 'id' | 'state'>, action: string): AppError {
  return errors.invalidState(`cannot ${action} sandbox ${row.id}: it is ${row.state}`, row.state);
}

/** Moves a sandbox from one of `from` to `to` only if it is still there (another replica may have moved it). */
export async function setState(ctx: Ctx, id: string, from: readonly SandboxState[], to: SandboxState, extra: Partial<Row> = {}): Promise<boolean> {
  const res = await exec(ctx)
    .updateTable('sandboxes')
    .set({ state: to, updated_at: nowIso(), ...extra })
    .where('id', '=', id)
    .where('state', 'in', from as SandboxState[])
    .executeTakeFirst();
  return Number(res.numUpdatedRows) === 1;
}

/**
 * Opens a running interval and, in the same transaction, its pending runtime charge (billing re-estimates it while
 * it runs; see billing/runtime.ts). The charge is the sandbox creator's.
 */
async function openInterval(ctx: Ctx, row: Row): Promise<void> {
  const id = prefixedId('srt');
  const startedAt = nowIso();
  await exec(ctx)
    .insertInto('sandbox_runtime')
    .values({
      id,
      org_id: row.org_id,
      sandbox_id: row.id,
      cpu: row.cpu,
      memory_mb: row.memory_mb,
      started_at: startedAt,
      ended_at: null,
      seconds: null,
    })
    .execute();
  await recordUsage(ctx, {
    kind: 'sandbox_runtime',
    orgId: row.org_id,
    userId: row.created_by_user_id,
    sourceId: id,
    sandboxId: row.id,
    cpu: row.cpu,
    memoryMb: row.memory_mb,
    seconds: 0,
    startedAt,
    endedAt: null,
    state: 'pending',
  });
}

/**
 * Why a running interval ends, which decides its charge:
 * - `due`: the customer's sandbox stopped running as the customer's use of it goes (pause, idle pause, destroy), or
 *   for a cause the platform cannot tell from the customer's doing: an agent that broke the protocol. The agent runs
 *   inside the sandbox, whose user may have reached it (agent-client.ts: it is untrusted), so forgiving its failure
 *   would let a tenant erase a sandbox's runtime by breaking its own agent; the sandbox was usable until it stopped.
 * - `forgiven`: the platform failed the sandbox: its node was declared dead (nodes.ts), or at start-up its container
 *   was gone (a host restart) or found paused by a pause the crash kept from being recorded (`reconcile`). The interval is forgiven whole, not charged up to a
 *   last sign of life: the pending estimate is refreshed by whichever replica runs billing's jobs, whether or not the
 *   sandbox's node is alive, so it says nothing about when the sandbox stopped being usable, and the platform cannot
 *   know that moment. Erring toward the customer keeps the bill honest; the period split bounds what is forgiven to
 *   the current billing period.
 */
export type IntervalEnd = 'due' | 'forgiven';

/**
 * Closes the sandbox's open interval and finishes its charge, in the caller's transaction. Returns the charges
 * this call made due: the caller hands them to `settleAfterCommit` after its commit (the billing sweep charges
 * them anyway if the process dies in between).
 */
export async function closeInterval(ctx: Ctx, sandboxId: string, end: IntervalEnd): Promise<string[]> {
  const org = orgId(ctx);
  const open = await exec(ctx)
    .selectFrom('sandbox_runtime')
    .select(['id', 'started_at'])
    .where('org_id', '=', org)
    .where('sandbox_id', '=', sandboxId)
    .where('ended_at', 'is', null)
    .execute();
  const now = new Date();
  const endedAt = now.toISOString();
  const due: string[] = [];
  for (const r of open) {
    await exec(ctx)
      .updateTable('sandbox_runtime')
      .set({ ended_at: endedAt, seconds: Math.max(0, (now.getTime() - Date.parse(r.started_at)) / 1000) })
      .where('id', '=', r.id)
      .where('org_id', '=', org)
      .execute();
    const moved = await finishRuntime(ctx, org, r.id, { endedAt, outcome: end });
    if (moved && end === 'due') due.push(moved);
  }
  return due;
}

export function activity(
  ctx: Ctx,
  row: Row,
  eventType: string,
  title: string,
  opts: { status?: string; summary?: string; metadata?: Record<string, unknown> } = {},
) {
  return recordActivity(
    ctx,
    {
      resourceType: 'sandbox',
      resourceId: row.id,
      sandboxId: row.id,
      eventType,
      status: opts.status ?? 'completed',
      title,
      summary: opts.summary,
      metadata: { name: row.name, template: row.template_slug, ...opts.metadata },
    },
    row.org_id,
  );
}

/** A sandbox's hostname: its name as a DNS label. */
export function hostnameOf(name: string): string {
  return (
    name
      .toLowerCase()
      .replace(/[^a-z0-9-]/g, '-')
      .replace(/^-+|-+$/g, '')
      .slice(0, 63) || 'sandbox'
  );
}

/** The name a sandbox gets when the request names none. */
export const defaultName = (id: string) => `sandbox-${id.slice(-6).toLowerCase()}`;

type SpecFields = Pick<Row, 'id' | 'uid' | 'name' | 'env' | 'cpu' | 'memory_mb' | 'disk_mb' | 'network'>;

export function specOf(deps: Deps, row: SpecFields, template: ResolvedTemplate): ContainerSpec {
  const env = {
    PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    HOME: '/home/user',
    USER: 'user',
    LOGNAME: 'user',
    SHELL: '/bin/bash',
    LANG: 'C.UTF-8',
    TERM: 'xterm-256color',
    HANGAR_SANDBOX_ID: row.id,
    ...template.env,
    ...(JSON.parse(row.env) as Record<string, string>),
  };
  return {
    id: row.id,
    layers: template.layers,
    image: template.image,
    uid: row.uid!,
    hostname: hostnameOf(row.name),
    env,
    workdir: template.workdir ?? '/home/user',
    cpu: row.cpu,
    memoryMb: row.memory_mb,
    diskMb: row.disk_mb,
    pids: deps.config.sandboxes.maxProcesses,
    network: row.network === 1,
  };
}

/** Starts the container, then the template's own background start command (desktop-ubuntu's display). */
async function startContainer(deps: Deps, row: Row, template: ResolvedTemplate): Promise<void> {
  await deps.sandboxes.start(specOf(deps, row, template));
  if (template.startCmd) await deps.sandboxes.agent(row.id).startProcess({ cmd: template.startCmd });
}

async function countRunning(ctx: Ctx, org: string): Promise<number> {
  const r = await exec(ctx)
    .selectFrom('sandboxes')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('org_id', '=', org)
    .where('state', 'in', ['starting', 'running'])
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

function requireRuntime(deps: Deps, network: boolean): void {
  const rt = deps.sandboxes;
  if (!rt.available) throw errors.unavailable(`persistent sandboxes are unavailable on this server: ${rt.unavailableReason}`);
  if (network && rt.networkReason)
    throw errors.unavailable(`sandboxes with network are unavailable on this server: ${rt.networkReason}; create it with "network": false`);
}

function limitError(max: number): AppError {
  return errors.limitExceeded(
    `your organization already has ${max} running sandbox${max === 1 ? '' : 'es'}, the most its plan allows; pause or destroy one first`,
  );
}

/** Refuses one more running sandbox past the organization's plan limit (inside `admit`). */
async function requireRunningRoom(ctx: Ctx, org: string): Promise<void> {
  const { runningSandboxes: max } = await planLimits(ctx, org);
  if ((await countRunning(ctx, org)) >= max) throw limitError(max);
}

export async function createSandbox(ctx: Ctx, body: CreateSandboxBody): Promise<Sandbox> {
  requireScope(ctx, 'sandbox:write');
  const { deps } = ctx;
  const cfg = deps.config.sandboxes;
  const org = orgId(ctx);
  const template = await resolveTemplate(ctx, body.template);
  if (template.status !== 'ready') {
    throw errors.invalidState(`template "${template.slug}" is ${template.status}; a sandbox can use it once it is ready`, template.status);
  }
  const cpu = body.cpu ?? cfg.defaultCpu;
  if (cpu > cfg.maxCpu) throw errors.invalidField('cpu', `must be at most ${cfg.maxCpu} on this server`);
  const memoryMb = body.memoryMb ?? cfg.defaultMemoryMb;
  if (memoryMb > cfg.maxMemoryMb) throw errors.invalidField('memoryMb', `must be at most ${cfg.maxMemoryMb} on this server`);
  const diskMb = body.diskMb ?? cfg.defaultDiskMb;
  if (diskMb > cfg.maxDiskMb) throw errors.invalidField('diskMb', `must be at most ${cfg.maxDiskMb} on this server`);
  const idle = body.idleTimeoutSeconds ?? cfg.defaultIdleSeconds;
  if (cfg.maxIdleSeconds > 0 && (idle > cfg.maxIdleSeconds || idle === 0)) {
    throw errors.invalidField('idleTimeoutSeconds', `must be between 1 and ${cfg.maxIdleSeconds} on this server`);
  }
  await requireCredits(ctx, org, 'a new sandbox');
  requireRuntime(deps, body.network);
  await requireFreeDisk(cfg, 'no new sandbox');

  // A warm sandbox of this template, network mode and disk size, if the pool has one (ADR 0023).
  const pooled = takePooled(deps, { templateId: template.id, network: body.network, diskMb });
  if (pooled) {
    const claimed = await claimPooled(ctx, pooled, template, body, { cpu, memoryMb, diskMb, idle });
    if (claimed) return claimed;
  } else await makeRoomForMemory(deps, memoryMb);

  const id = prefixedId('sbx');
  const now = nowIso();
  const row = await admit(deps, org, async () => {
    await requireRunningRoom(ctx, org);
    for (let attempt = 0; attempt < 20; attempt++) {
      const uid = await freeUid(ctx);
      const values: Row = {
        id,
        org_id: org,
        name: body.name ?? defaultName(id),
        template_id: template.id,
        template_slug: template.slug,
        state: 'starting',
        node_id: cfg.nodeId,
        uid,
        network: body.network ? 1 : 0,
        cpu,
        memory_mb: memoryMb,
        disk_mb: diskMb,
        idle_timeout_seconds: idle,
        env: JSON.stringify(body.env ?? {}),
        metadata: JSON.stringify(body.metadata ?? {}),
        error: null,
        created_by_user_id: ctx.principal.userId,
        created_at: now,
        updated_at: now,
        last_active_at: now,
        destroyed_at: null,
      };
      try {
        // The template cannot be deleted between the check above and this insert (see lockTemplateForUse).
        await withTx(ctx, async (tx) => {
          await lockTemplateForUse(tx, template);
          await exec(tx).insertInto('sandboxes').values(values).execute();
        });
        return values;
      } catch (err) {
        if (!isUniqueViolation(err)) throw err;
      }
    }
    throw errors.unavailable('no free sandbox user id on this node');
  });

  return serialized(deps, id, async () => {
    try {
      await startContainer(deps, row, template);
      if (body.network) wakeRefill(deps); // it took a spare network namespace
    } catch (err) {
      const message = errMessage(err);
      deps.log.error({ err, sandboxId: id }, 'sandbox failed to start');
      await deps.sandboxes.destroy(id).catch(() => undefined);
      await withTx(ctx, async (tx) => {
        await setState(tx, id, ['starting'], 'error', { error: message, uid: null });
        await activity(tx, row, 'sandbox.failed', `Sandbox ${row.name} failed to start`, { status: 'failed', summary: message });
      });
      throw errors.unavailable(`sandbox ${id} could not start: ${message}`);
    }
    await withTx(ctx, async (tx) => {
      await setState(tx, id, ['starting'], 'running');
      await openInterval(tx, row);
      await activity(tx, row, 'sandbox.created', `Sandbox ${row.name} created`, { metadata: { cpu, memoryMb, diskMb, network: body.network } });
    });
    return view(ctx, id);
  });
}

/**
 * A pooled sandbox becomes the caller's: its per-request settings (environment, hostname, limits) are applied
 * while no record of it exists, then one transaction inserts it as `running` with its runtime interval and
 * activity row, so nobody ever sees it half claimed. The container is never given back to the pool: if
 * anything fails it is destroyed, and the create is refused (the organization's limit, a template deleted
 * meanwhile) or, for a failure of the container itself, built the usual way (null).
 */
async function claimPooled(
  ctx: Ctx,
  entry: PoolEntry,
  template: ResolvedTemplate,
  body: CreateSandboxBody,
  want: { cpu: number; memoryMb: number; diskMb: number; idle: number },
): Promise<Sandbox | null> {
  const { deps } = ctx;
  const cfg = deps.config.sandboxes;
  const org = orgId(ctx);
  const id = entry.id;
  const now = nowIso();
  const row: Row = {
    id,
    org_id: org,
    name: body.name ?? defaultName(id),
    template_id: template.id,
    template_slug: template.slug,
    state: 'running',
    node_id: cfg.nodeId,
    uid: entry.uid,
    network: body.network ? 1 : 0,
    cpu: want.cpu,
    memory_mb: want.memoryMb,
    disk_mb: want.diskMb,
    idle_timeout_seconds: want.idle,
    env: JSON.stringify(body.env ?? {}),
    metadata: JSON.stringify(body.metadata ?? {}),
    error: null,
    created_by_user_id: ctx.principal.userId,
    created_at: now,
    updated_at: now,
    last_active_at: now,
    destroyed_at: null,
  };
  try {
    await admit(deps, org, async () => {
      await requireRunningRoom(ctx, org);
      const spec = specOf(deps, row, template);
      await deps.sandboxes
        .assign(id, {
          env: spec.env,
          hostname: spec.hostname === entry.hostname ? undefined : spec.hostname,
          limits:
            want.cpu === entry.cpu && want.memoryMb === entry.memoryMb ? undefined : { cpu: want.cpu, memoryMb: want.memoryMb, pids: spec.pids },
        })
        .catch((err: unknown) => {
          throw new ContainerFailed(err);
        });
      await withTx(ctx, async (tx) => {
        await lockTemplateForUse(tx, template);
        await exec(tx).insertInto('sandboxes').values(row).execute();
        await openInterval(tx, row);
        await activity(tx, row, 'sandbox.created', `Sandbox ${row.name} created`, {
          metadata: { cpu: want.cpu, memoryMb: want.memoryMb, diskMb: want.diskMb, network: body.network },
        });
      });
    });
  } catch (err) {
    await deps.sandboxes.destroy(id).catch((e) => deps.log.warn({ err: e, sandboxId: id }, 'could not remove a pooled sandbox'));
    releasePooled(deps, entry);
    if (err instanceof ContainerFailed) {
      deps.log.warn({ err: err.cause, sandboxId: id }, 'a pooled sandbox could not be given its settings; building one');
      return null;
    }
    if (isUniqueViolation(err)) return null; // its uid was taken meanwhile (see freeUid): build one
    throw err;
  }
  releasePooled(deps, entry);
  return view(ctx, id);
}

class ContainerFailed extends Error {
  constructor(readonly cause: unknown) {
    super(errMessage(cause));
  }
}

/** A host uid for a new sandbox (or a pooled one): none of this node's live sandboxes' nor the pool's. */
export async function freeUid(ctx: Ctx): Promise<number> {
  const used = await exec(ctx)
    .selectFrom('sandboxes')
    .select('uid')
    .where('node_id', '=', ctx.deps.config.sandboxes.nodeId)
    .where('uid', 'is not', null)
    .execute();
  const taken = new Set<number | null>(used.map((r) => r.uid));
  for (const uid of pooledUids(ctx.deps)) taken.add(uid);
  const start = Math.floor(Math.random() * UID_COUNT);
  for (let i = 0; i < UID_COUNT; i++) {
    const uid = UID_BASE + ((start + i) % UID_COUNT);
    if (!taken.has(uid)) return uid;
  }
  throw errors.unavailable('no free sandbox user id on this node');
}

/**
 * The node check: a sandbox's container lives on the host that created it. Requests for a sandbox of another live
 * node are forwarded there before they reach a verb (forward.ts); one that gets here has a node that is not answering.
 */
async function local(ctx: Ctx, row: Row): Promise<void> {
  if (row.node_id === ctx.deps.config.sandboxes.nodeId) return;
  const node = await getNode(ctx.deps, row.node_id);
  const since = node ? `; last heard from at ${node.heartbeatAt}` : '';
  throw errors.unavailable(
    `sandbox ${row.id} lives on node "${row.node_id}", which is not answering${since}; once it is back, any replica forwards this request to it`,
  );
}

export type PauseReason = 'request' | 'idle_timeout' | 'credits_exhausted';

const PAUSE_SUMMARY: Record<PauseReason, (row: Row) => string | undefined> = {
  request: () => undefined,
  idle_timeout: (row) => `no API use for ${row.idle_timeout_seconds} s`,
  credits_exhausted: () =>
    'the organization ran out of credits and its grace period is over; its files are kept, and it can be resumed once credits are added',
};

export async function pauseSandbox(ctx: Ctx, id: string, reason: PauseReason = 'request'): Promise<Sandbox> {
  requireScope(ctx, 'sandbox:write');
  const { row: first } = await findVisible(ctx, id);
  await local(ctx, first);
  return serialized(ctx.deps, id, async () => {
    const row = await findRow(ctx, id);
    if (row.state !== 'running') throw stateError(row, 'pause');
    await ctx.deps.sandboxes.pause(id);
    const charges = await withTx(ctx, async (tx) => {
      await setState(tx, id, ['running'], 'paused');
      const due = await closeInterval(tx, id, 'due');
      await activity(tx, row, 'sandbox.paused', `Sandbox ${row.name} paused`, {
        summary: PAUSE_SUMMARY[reason](row),
        metadata: { trigger: reason },
      });
      return due;
    });
    await settleAfterCommit(ctx.deps, charges);
    return view(ctx, id);
  });
}

export async function resumeSandbox(ctx: Ctx, id: string): Promise<Sandbox> {
  requireScope(ctx, 'sandbox:write');
  const first = await findOwned(ctx, id, 'resume it');
  await local(ctx, first);
  const cfg = ctx.deps.config.sandboxes;
  return serialized(ctx.deps, id, async () => {
    const row = await findRow(ctx, id);
    // An `error` sandbox whose agent failed kept its files (and uid): resume starts a new container over them,
    // as for `stopped`. One that failed to start has neither and can only be destroyed.
    const restartable = row.state === 'stopped' || (row.state === 'error' && row.uid !== null);
    if (row.state !== 'paused' && !restartable) throw stateError(row, 'resume');
    await requireCredits(ctx, row.org_id, `resuming sandbox ${id}`);
    await requireFreeDisk(cfg, `sandbox ${id} cannot resume`);
    await admit(ctx.deps, row.org_id, async () => {
      await requireRunningRoom(ctx, row.org_id);
      // Claimed before the slow part so a concurrent create counts it.
      if (!(await setState(ctx, id, [row.state], 'starting'))) throw stateError(await findRow(ctx, id), 'resume');
    });
    try {
      if (row.state === 'paused') await ctx.deps.sandboxes.resume(id);
      else {
        requireRuntime(ctx.deps, row.network === 1);
        const template = await resolveTemplate(ctx, row.template_slug, row.template_id);
        await startContainer(ctx.deps, row, template);
      }
    } catch (err) {
      await setState(ctx, id, ['starting'], row.state);
      throw err instanceof AppError ? err : errors.unavailable(`sandbox ${id} could not resume: ${errMessage(err)}`);
    }
    await withTx(ctx, async (tx) => {
      await setState(tx, id, ['starting'], 'running', { last_active_at: nowIso(), error: null });
      await openInterval(tx, row);
      await activity(tx, row, 'sandbox.resumed', `Sandbox ${row.name} resumed`, { metadata: { from: row.state } });
    });
    return view(ctx, id);
  });
}

export async function destroySandbox(ctx: Ctx, id: string): Promise<void> {
  requireScope(ctx, 'sandbox:write');
  const { row: first } = await findVisible(ctx, id);
  await local(ctx, first);
  await serialized(ctx.deps, id, async () => {
    const row = await findRow(ctx, id);
    if (row.state === 'destroyed') throw stateError(row, 'destroy');
    await ctx.deps.sandboxes.destroy(id);
    const charges = await withTx(ctx, async (tx) => {
      await setState(tx, id, [row.state], 'destroyed', { uid: null, destroyed_at: nowIso() });
      const due = await closeInterval(tx, id, 'due');
      await activity(tx, row, 'sandbox.destroyed', `Sandbox ${row.name} destroyed`);
      return due;
    });
    await settleAfterCommit(ctx.deps, charges);
  });
}

// ---- inside a running sandbox ----------------------------------------------------------------

/**
 * The agent of a running, local sandbox, for its owner only (files, processes, output, commands: everything
 * inside); records the use for the idle timeout. Reading routes (sandbox:read) and changing ones (sandbox:write,
 * which check their own scope first) share it.
 */
export async function agentOf(ctx: Ctx, id: string): Promise<{ agent: AgentClient; row: Row }> {
  requireAnyScope(ctx, ['sandbox:read', 'sandbox:write']);
  const row = await findOwned(ctx, id, 'reach its files, processes and commands');
  if (row.state !== 'running') throw stateError(row, 'use');
  await local(ctx, row);
  const now = Date.now();
  const { touched } = ctx.deps.state.get(SANDBOX_STATE);
  if (now - (touched.get(id) ?? 0) > TOUCH_EVERY_MS) {
    touched.set(id, now);
    await exec(ctx)
      .updateTable('sandboxes')
      .set({ last_active_at: new Date(now).toISOString() })
      .where('id', '=', id)
      .execute();
  }
  const agent = ctx.deps.sandboxes.agent(id);
  if (!agent.onViolation) {
    const deps = ctx.deps;
    agent.onViolation = (reason) => {
      agent.onViolation = null; // once per client: the container is stopped and the client closed
      void agentFailed(deps, row, reason).catch((err) => deps.log.error({ err, sandboxId: id }, 'could not mark a sandbox whose agent failed'));
    };
  }
  return { agent, row };
}

/**
 * The sandbox's agent broke the protocol (an answer over its size cap, not JSON, past its deadline; see
 * agent-client.ts): it is not to be trusted with more requests. The container is stopped (files kept) and
 * the sandbox becomes `error` with the reason; it can be destroyed, or resumed (a new container and agent
 * over its files).
 */
async function agentFailed(deps: Deps, first: Row, reason: string): Promise<void> {
  const ctx = ownerCtx(deps, first);
  await serialized(deps, first.id, async () => {
    const row = await findRow(ctx, first.id);
    if (row.state !== 'running') return; // paused, destroyed or already failed meanwhile
    deps.log.warn({ sandboxId: row.id, reason }, 'sandbox agent misbehaved; stopping the sandbox');
    await deps.sandboxes.stop(row.id).catch((err) => deps.log.warn({ err, sandboxId: row.id }, 'could not stop a sandbox whose agent failed'));
    const message = `its agent misbehaved (${reason}); the sandbox was stopped, its files are kept: resume starts it again`;
    const charges = await withTx(ctx, async (tx) => {
      if (!(await setState(tx, row.id, ['running'], 'error', { error: message }))) return [];
      // Charged up to the stop: the agent is the tenant's side (see IntervalEnd).
      const due = await closeInterval(tx, row.id, 'due');
      await activity(tx, row, 'sandbox.failed', `Sandbox ${row.name} failed`, {
        status: 'failed',
        summary: message,
        metadata: { trigger: 'agent_error' },
      });
      return due;
    });
    await settleAfterCommit(deps, charges);
  });
}

// ---- housekeeping ----------------------------------------------------------------------------

/** Housekeeping acts as the sandbox's creator, with the sandbox scopes its verbs check (nothing else). */
export function ownerCtx(deps: Deps, row: Row): Ctx {
  return systemCtx(deps, {
    userId: row.created_by_user_id,
    orgId: row.org_id,
    role: null,
    scopes: new Set(['sandbox:read', 'sandbox:write'] as const),
    apiKeyId: null,
  });
}

/**
 * Start-up reconciliation of this node's records with what runc reports: a record whose container is gone
 * (the host rebooted) becomes `stopped` (its files are kept; resume starts it again); a container without a
 * live record (destroyed while Hangar was down, or a crash mid-create) is removed with its layers.
 */
export async function reconcile(deps: Deps): Promise<{ stopped: number; removed: number; adopted: number }> {
  const result = { stopped: 0, removed: 0, adopted: 0 };
  if (!deps.sandboxes.available) return result;
  const containers = await deps.sandboxes.list();
  const rows = await deps.db.kysely
    .selectFrom('sandboxes')
    .selectAll()
    .where('node_id', '=', deps.config.sandboxes.nodeId)
    .where('state', 'in', ['starting', 'running', 'paused'])
    .execute();
  const live = new Set<string>();
  for (const row of rows) {
    const ctx = ownerCtx(deps, row);
    const status = containers.get(row.id);
    if (row.state !== 'starting' && (status === 'running' || status === 'paused')) {
      live.add(row.id);
      result.adopted++;
      if (status !== row.state) {
        // A pause or resume that reached runc but not the database before the process died. A paused container
        // stopped running at a moment the platform lost with its crash: charging up to now would bill the time it
        // was down, so its interval is forgiven (see IntervalEnd). A resumed one is charged from now on.
        await withTx(ctx, async (tx) => {
          await setState(tx, row.id, [row.state], status);
          if (status === 'paused') await closeInterval(tx, row.id, 'forgiven');
          else await openInterval(tx, row);
        });
      }
      continue;
    }
    await deps.sandboxes.stop(row.id).catch(() => undefined);
    await withTx(ctx, async (tx) => {
      await setState(tx, row.id, [row.state], 'stopped');
      // The container died with the host or the process: the platform failed it (see IntervalEnd).
      await closeInterval(tx, row.id, 'forgiven');
      await activity(tx, row, 'sandbox.stopped', `Sandbox ${row.name} stopped`, {
        status: 'failed',
        summary: 'its container was gone when Hangar started (host restart?); its files are kept, resume starts it again',
      });
    });
    result.stopped++;
  }
  for (const id of containers.keys()) {
    if (live.has(id)) continue;
    const row = await deps.db.kysely.selectFrom('sandboxes').select(['state', 'uid']).where('id', '=', id).executeTakeFirst();
    if (row && (row.state === 'stopped' || (row.state === 'error' && row.uid !== null))) {
      await deps.sandboxes.stop(id).catch(() => undefined);
      continue;
    }
    if (row && row.state !== 'destroyed' && row.state !== 'error') continue;
    await deps.sandboxes.destroy(id).catch((err) => deps.log.warn({ err, id }, 'could not remove a leftover container'));
    result.removed++;
  }
  return result;
}

/** Pauses running sandboxes of this node that have not been used for their idle timeout. */
export async function pauseIdle(deps: Deps): Promise<number> {
  const rows = await deps.db.kysely
    .selectFrom('sandboxes')
    .selectAll()
    .where('node_id', '=', deps.config.sandboxes.nodeId)
    .where('state', '=', 'running')
    .where('idle_timeout_seconds', '>', 0)
    .execute();
  let paused = 0;
  const now = Date.now();
  for (const row of rows) {
    if (now - Date.parse(row.last_active_at) < row.idle_timeout_seconds * 1000) continue;
    try {
      await pauseSandbox(ownerCtx(deps, row), row.id, 'idle_timeout');
      paused++;
    } catch (err) {
      if (!(err instanceof AppError && err.code === 'invalid_state')) deps.log.warn({ err, id: row.id }, 'idle pause failed');
    }
  }
  return paused;
}

/**
 * Pauses (never destroys) the organization's running sandboxes on this node once its credits ran out and the
 * grace is over (billing calls it, registered by app.ts). It acts as the system, through the normal pause path,
 * so each pause has its `sandbox.paused` activity row saying why. A sandbox still starting is paused once it is up
 * (a pause waits its turn behind a start); one that stopped or failed meanwhile is left as it is.
 */
export async function pauseRunningForBilling(deps: Deps, org: string): Promise<void> {
  if (!deps.sandboxes.available) return;
  const ctx = systemCtx(deps, {
    userId: 'system',
    orgId: org,
    role: null,
    // org:admin: the system sees every member's sandbox as an admin does (metadata, pause), nothing more.
    scopes: new Set(['sandbox:read', 'sandbox:write', 'org:admin'] as const),
    apiKeyId: null,
  });
  const rows = await exec(ctx)
    .selectFrom('sandboxes')
    .select('id')
    .where('org_id', '=', org)
    .where('node_id', '=', deps.config.sandboxes.nodeId)
    .where('state', 'in', ['starting', 'running'])
    .execute();
  for (const { id } of rows) {
    try {
      await pauseSandbox(ctx, id, 'credits_exhausted');
    } catch (err) {
      if (!(err instanceof AppError && (err.code === 'invalid_state' || err.code === 'not_found'))) throw err;
    }
  }
}

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Sandboxes by state across the installation, read at each scrape of `GET /metrics` (ADR 0040): the operator's
 * view, never a tenant's (no organization label), and answered from the `sandboxes_state` index.
 */
export function registerSandboxMetrics(deps: Deps): void {
  deps.metrics.gauge('hangar_sandboxes', 'Persistent sandboxes by state (destroyed ones not counted)', ['state'], async () => {
    const rows = await deps.db.kysely
      .selectFrom('sandboxes')
      .select(['state', (eb) => eb.fn.countAll<number | string>().as('n')])
      .where('state', '!=', 'destroyed')
      .groupBy('state')
      .execute();
    return rows.map((r) => [{ state: r.state }, Number(r.n)] as [{ state: string }, number]);
  });
}
