import { nowIso } from '../../platform/ids.js';
import { KeyedQueue } from '../../platform/keyed-queue.js';
import { exec, systemCtx, withTx, type Deps } from '../../platform/context.js';
import { type Layer, requireFreeDisk } from '../../platform/sandboxes/index.js';
import type { BuildPlan } from './plan.js';
import { logKey, resolveTemplate, SYSTEM, templateActivity } from './service.js';

/** A message on a template's build channel; SSE clients of /logs relay them. */
export type BuildMessage =
  | { type: 'log'; n: number; line: string }
  | { type: 'progress'; progress: number; step: number; steps: number }
  | { type: 'status'; status: 'building' | 'ready' | 'failed'; progress: number; error: string | null };

export const buildChannel = (id: string): string => `template-build:${id}`;

/** The build container of a template (its folder and disk image live under the runtime's containers). */
const buildIdOf = (templateId: string): string => `bld_${templateId.replace(/^tpl_/, '')}`;

const MAX_LOG_LINES = 50_000;
const MAX_LINE_CHARS = 4000;

/**
 * Runs template builds one at a time on this node (a build saturates a small host). A build runs its plan's
 * steps as root in a build container (network on, Docker's default capabilities) whose writable layer is a disk
 * image of HANGAR_TEMPLATE_BUILD_DISK_MB (writing past it fails the step with ENOSPC); once every step has
 * passed, that layer is copied out of the image into the template's layer folder, read-only from then on.
 */
export class TemplateBuilder {
  /** One key: builds run one at a time on this node. */
  private readonly builds = new KeyedQueue();
  private readonly queued = new Set<string>();
  private closed = false;
  private readonly aborts = new Map<string, AbortController>();

  constructor(private readonly deps: Deps) {}

  enqueue(id: string): void {
    if (this.queued.has(id) || this.closed) return;
    this.queued.add(id);
    void this.builds
      .run('node', () => this.build(id).finally(() => this.queued.delete(id)))
      .catch((err) => this.deps.log.error({ err, templateId: id }, 'template build failed'));
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const a of this.aborts.values()) a.abort();
    await this.builds.drain();
  }

  /** Builds left `building` by a process that is gone fail with that reason; pending ones are queued again. */
  async recover(): Promise<void> {
    const db = this.deps.db.kysely;
    const stale = await db
      .selectFrom('templates')
      .select(['id', 'slug', 'owner', 'created_by_user_id'])
      .where('status', '=', 'building')
      .where('node_id', '=', this.deps.config.sandboxes.nodeId)
      .execute();
    for (const row of stale) {
      const { id } = row;
      // Its build container and disk image (after a reboot nothing mounted, but the image would stay on disk).
      await this.deps.sandboxes.destroy(buildIdOf(id)).catch(() => undefined);
      await this.deps.sandboxes.removeLayer(id).catch(() => undefined);
      const error = 'the build was interrupted by a restart of Hangar';
      await withTx(this.ownerCtx(row), async (tx) => {
        await exec(tx)
          .updateTable('templates')
          .set({ status: 'failed', error, updated_at: nowIso(), build_finished_at: nowIso() })
          .where('id', '=', id)
          .execute();
        await templateActivity(tx, row, 'failed', error);
      });
      await this.deps.blobs.append(logKey(id), 'error: the build was interrupted by a restart of Hangar\n').catch(() => undefined);
    }
    const pending = await db
      .selectFrom('templates')
      .select(['id'])
      .where('status', '=', 'pending')
      .where('owner', '!=', SYSTEM)
      .where('node_id', '=', this.deps.config.sandboxes.nodeId)
      .orderBy('created_at')
      .execute();
    for (const { id } of pending) this.enqueue(id);
  }

  /** The context a build acts in: the template's creator, in its organization (none for a system template). */
  private ownerCtx(row: { owner: string; created_by_user_id: string | null }) {
    return systemCtx(this.deps, {
      userId: row.created_by_user_id ?? 'system',
      orgId: row.owner === SYSTEM ? null : row.owner,
      role: null,
      scopes: new Set(),
      apiKeyId: null,
    });
  }

  /**
   * The OS image a build stands on: the one its plan names (a Dockerfile child: its parent's), else the os's
   * current image, built first when there is none (an unreachable mirror fails the build here, with the reason).
   * The image's id is written into the template's plan, so its sandboxes stand on exactly that image.
   */
  private async imageFor(id: string, os: string, plan: BuildPlan, log: (line: string) => Promise<void>, signal: AbortSignal): Promise<Layer> {
    const images = this.deps.sandboxes.images;
    if (plan.image) {
      const found = await images.find(plan.image);
      if (!found) throw new Error(`the ${os} image the parent template was built on (${plan.image}) is no longer on this server`);
      return { root: found.root, usr: found.usr };
    }
    const image = await images.ensure(os, log, signal);
    await this.deps.db.kysely
      .updateTable('templates')
      .set({ plan: JSON.stringify({ ...plan, image: image.id } satisfies BuildPlan), updated_at: nowIso() })
      .where('id', '=', id)
      .execute();
    return { root: image.root, usr: image.usr };
  }

  private async build(id: string): Promise<void> {
    const { deps } = this;
    const db = deps.db.kysely;
    const row = await db.selectFrom('templates').selectAll().where('id', '=', id).executeTakeFirst();
    if (!row || this.closed) return;
    const plan = JSON.parse(row.plan) as BuildPlan;
    const abort = new AbortController();
    this.aborts.set(id, abort);
    let n = 0;
    let dropped = false;
    const log = async (line: string) => {
      if (n >= MAX_LOG_LINES) {
        if (!dropped) {
          dropped = true;
          await deps.blobs.append(logKey(id), `… log cut at ${MAX_LOG_LINES} lines\n`);
        }
        return;
      }
      const text = line.length > MAX_LINE_CHARS ? `${line.slice(0, MAX_LINE_CHARS)}…` : line;
      await deps.blobs.append(logKey(id), `${text}\n`);
      await deps.bus.publish(buildChannel(id), { type: 'log', n: n++, line: text } satisfies BuildMessage);
    };
    const setStatus = async (status: 'building' | 'ready' | 'failed', progress: number, error: string | null) => {
      const now = nowIso();
      await withTx(this.ownerCtx(row), async (tx) => {
        await exec(tx)
          .updateTable('templates')
          .set({
            status,
            progress,
            error,
            updated_at: now,
            node_id: deps.config.sandboxes.nodeId,
            ...(status === 'building' ? { build_started_at: now, build_finished_at: null } : { build_finished_at: now }),
          })
          .where('id', '=', id)
          .execute();
        await templateActivity(tx, row, status === 'building' ? 'build_started' : status, error);
      });
      await deps.bus.publish(buildChannel(id), { type: 'status', status, progress, error } satisfies BuildMessage);
    };

    await deps.blobs.delete(logKey(id)).catch(() => undefined);
    await setStatus('building', 0, null);
    const buildId = buildIdOf(id);
    const started = Date.now();
    const deadline = started + deps.config.sandboxes.buildTimeoutSeconds * 1000;
    try {
      const ctx = this.ownerCtx(row);
      const parent = row.parent_id
        ? await resolveTemplate({ ...ctx, principal: { ...ctx.principal, orgId: row.owner === SYSTEM ? 'system' : row.owner } }, '', row.parent_id)
        : { layers: [], env: {} as Record<string, string> };
      const on = plan.base ?? { os: row.os, kind: 'host' as const };
      await log(
        `==> Building template ${row.slug} on ${on.kind === 'image' ? `an image of ${on.os}` : deps.sandboxes.base.osName} (${plan.steps.length} step${plan.steps.length === 1 ? '' : 's'})`,
      );
      await requireFreeDisk(deps.config.sandboxes, 'the build cannot start');
      const image = on.kind === 'image' ? await this.imageFor(id, on.os, plan, log, abort.signal) : null;
      await deps.sandboxes.newLayer(id);
      if (plan.steps.length) {
        await deps.sandboxes.start({
          id: buildId,
          layers: parent.layers,
          image,
          uid: 0,
          hostname: 'build',
          env: {
            PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
            HOME: '/root',
            LANG: 'C.UTF-8',
            DEBIAN_FRONTEND: 'noninteractive',
            ...parent.env,
          },
          workdir: '/',
          cpu: deps.config.sandboxes.maxCpu,
          memoryMb: Math.max(2048, deps.config.sandboxes.maxMemoryMb),
          diskMb: deps.config.sandboxes.buildDiskMb,
          pids: 4096,
          network: true,
          build: true,
        });
        const agent = deps.sandboxes.agent(buildId);
        for (const [i, step] of plan.steps.entries()) {
          await log(`==> Step ${i + 1}/${plan.steps.length}: ${step.title}`);
          const remaining = deadline - Date.now();
          if (remaining <= 0) throw new Error(`the build took longer than ${deps.config.sandboxes.buildTimeoutSeconds} s`);
          const { pid } = await agent.startProcess({ args: ['/bin/sh', '-ec', step.script], cwd: '/', timeoutMs: remaining });
          const carry = { stdout: '', stderr: '' };
          let exit: { exitCode: number | null; signal: string | null; timedOut: boolean } | null = null;
          for await (const ev of agent.output(pid, { follow: true, signal: abort.signal })) {
            if (ev.type === 'exit') {
              exit = ev;
              break;
            }
            carry[ev.type] += Buffer.from(ev.data, 'base64').toString('utf8');
            const lines = carry[ev.type].split(/\r?\n|\r/);
            carry[ev.type] = lines.pop()!;
            for (const line of lines) await log(line);
          }
          for (const rest of [carry.stdout, carry.stderr]) if (rest) await log(rest);
          if (!exit) throw new Error('the build was cancelled');
          if (exit.timedOut)
            throw new Error(`step ${i + 1} (${step.title}) ran past the build timeout of ${deps.config.sandboxes.buildTimeoutSeconds} s`);
          if (exit.exitCode !== 0) {
            throw new Error(`step ${i + 1} (${step.title}) failed: ${exit.signal ? `killed by ${exit.signal}` : `exit code ${exit.exitCode}`}`);
          }
          const progress = Math.floor(((i + 1) * 100) / plan.steps.length);
          await db
            .updateTable('templates')
            .set({ progress: Math.min(progress, 99), updated_at: nowIso() })
            .where('id', '=', id)
            .execute();
          await deps.bus.publish(buildChannel(id), {
            type: 'progress',
            progress: Math.min(progress, 99),
            step: i + 1,
            steps: plan.steps.length,
          } satisfies BuildMessage);
        }
        await log('==> Saving the layer');
        await deps.sandboxes.saveLayer(buildId, id);
      }
      await log(`==> Template ${row.slug} is ready (${((Date.now() - started) / 1000).toFixed(1)} s)`);
      await setStatus('ready', 100, null);
    } catch (err) {
      const message = (err as Error).message ?? String(err);
      await deps.sandboxes.destroy(buildId).catch(() => undefined);
      await deps.sandboxes.removeLayer(id).catch(() => undefined);
      await log(`error: ${message}`).catch(() => undefined);
      const current = await db.selectFrom('templates').select('progress').where('id', '=', id).executeTakeFirst();
      await setStatus('failed', current?.progress ?? 0, message).catch(() => undefined);
    } finally {
      this.aborts.delete(id);
    }
  }
}
