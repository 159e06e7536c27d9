import type { Selectable } from 'kysely';
import type { TemplatesTable } from '../../database.js';
import { exec, orgId, requireScope, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { isUniqueViolation } from '../../platform/db/index.js';
import { errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { stateKey } from '../../platform/state.js';
import { OS_DEFINITIONS, requireFreeDisk, type Layer } from '../../platform/sandboxes/index.js';
import { recordActivity } from '../activity/index.js';
import { type BuildBase, type BuildPlan, checkOs, planFromBuilder, planFromDockerfile } from './plan.js';
import type { CreateTemplateBody, Template, TemplateCreated } from './schemas.js';

type Row = Selectable<TemplatesTable>;

export const SYSTEM = 'system';
export const BASE_ID = 'tpl_system_base_ubuntu';
export const DESKTOP_ID = 'tpl_system_desktop_ubuntu';

/** What desktop-ubuntu adds to the base: a virtual X display with a window manager, VNC and screenshot tools. */
export const DESKTOP_PACKAGES = ['xvfb', 'xauth', 'x11-utils', 'xdotool', 'openbox', 'x11vnc', 'imagemagick', 'fonts-dejavu-core'];
const DESKTOP_START = 'Xvfb :99 -screen 0 1280x800x24 -nolisten tcp >/tmp/xvfb.log 2>&1 & sleep 0.3; openbox >/tmp/openbox.log 2>&1 &';

export interface ResolvedTemplate {
  id: string;
  slug: string;
  status: Row['status'];
  env: Record<string, string>;
  workdir: string | null;
  /** Read-only layers, topmost first (the base layer is added below by the runtime). */
  layers: Layer[];
  /** The OS image below the layers (ADR 0022); null: the host's base layer. */
  image: Layer | null;
  /** Started in the background when a sandbox of this template starts (desktop-ubuntu's display). */
  startCmd: string | null;
  /** The node that holds its built layer (layers are host-local), or null when it has none (base-ubuntu: every node). */
  nodeId: string | null;
}

function startCmdOf(row: Row): string | null {
  return row.id === DESKTOP_ID ? DESKTOP_START : null;
}

const visible = (ctx: Ctx) => [SYSTEM, orgId(ctx)];

async function findBySlug(ctx: Ctx, slug: string): Promise<Row | undefined> {
  const rows = await exec(ctx).selectFrom('templates').selectAll().where('slug', '=', slug).where('owner', 'in', visible(ctx)).execute();
  return rows.find((r) => r.owner !== SYSTEM) ?? rows[0];
}

async function findRow(ctx: Ctx, slug: string): Promise<Row> {
  const row = await findBySlug(ctx, slug);
  if (!row) throw errors.notFound('template', slug);
  return row;
}

/** The template's own layer chain and its inherited env and workdir. */
async function chain(ctx: Ctx, row: Row): Promise<{ layers: Layer[]; env: Record<string, string>; workdir: string | null }> {
  const rows: Row[] = [];
  for (let r: Row | undefined = row; r; ) {
    rows.push(r);
    if (rows.length > 32) break;
    r = r.parent_id ? await exec(ctx).selectFrom('templates').selectAll().where('id', '=', r.parent_id).executeTakeFirst() : undefined;
  }
  const layers = rows.filter((r) => r.source !== 'base').map((r) => ctx.deps.sandboxes.layerOf(r.id));
  let env: Record<string, string> = {};
  let workdir: string | null = null;
  for (const r of [...rows].reverse()) {
    env = { ...env, ...(JSON.parse(r.env) as Record<string, string>) };
    workdir = r.workdir ?? workdir;
  }
  return { layers, env, workdir };
}

/** For a sandbox: the template by slug (the organization's own first, then the system's), or by id once chosen. */
export async function resolveTemplate(ctx: Ctx, slug: string, id?: string): Promise<ResolvedTemplate> {
  const row = id
    ? await exec(ctx).selectFrom('templates').selectAll().where('id', '=', id).where('owner', 'in', visible(ctx)).executeTakeFirst()
    : await findBySlug(ctx, slug);
  if (!row) throw errors.notFound('template', slug);
  if (row.id === DESKTOP_ID && (row.status === 'pending' || row.status === 'failed')) requestSystemBuild(ctx.deps);
  const c = await chain(ctx, row);
  const image = await imageOf(ctx.deps, row);
  return {
    id: row.id,
    slug: row.slug,
    status: row.status,
    ...c,
    image,
    startCmd: startCmdOf(row),
    nodeId: c.layers.length || image ? row.node_id : null,
  };
}

/** What a template stands on (the host's userland for plans from before OS images). */
export function baseOf(row: Pick<Row, 'plan' | 'os'>): BuildBase {
  return (JSON.parse(row.plan) as BuildPlan).base ?? { os: row.os, kind: 'host' };
}

/** The OS image a ready template was built on, null for one on the host's userland; 503 when it is gone from this node. */
async function imageOf(deps: Deps, row: Row): Promise<Layer | null> {
  const plan = JSON.parse(row.plan) as BuildPlan;
  if (plan.base?.kind !== 'image' || !plan.image) return null;
  const image = await deps.sandboxes.images.find(plan.image);
  if (!image) {
    throw errors.unavailable(
      `the ${plan.base.os} image template "${row.slug}" was built on (${plan.image}) is no longer on this server; build the template again`,
    );
  }
  return { root: image.root, usr: image.usr };
}

/**
 * The os of a template whose request leaves `os` out: the spec's default, ubuntu-24.04, when its image can be
 * built here (a keyring to verify its mirror with, and the mirror answers: the probe is cached for a minute);
 * else this server's own userland, as before OS images, with the reason kept for the template's `runs`.
 */
async function defaultBase(deps: Deps): Promise<BuildBase & { fallback?: string }> {
  const os = 'ubuntu-24.04';
  const images = deps.sandboxes.images;
  const why = (await images.buildable(os)) ?? (await images.probe(os));
  if (!why) return { os, kind: 'image' };
  return { os: deps.sandboxes.base.os, kind: 'host', fallback: `os left out and ${os} is not available here (${why})` };
}

/**
 * In the caller's transaction, where a sandbox is being made from the template (the sandbox row inserted in the
 * same transaction): the template still exists and is ready, and stays so until the transaction ends. On
 * PostgreSQL its row is taken FOR SHARE, which deleteTemplate's FOR UPDATE waits for; the delete then sees the
 * new sandbox and answers 409, or, when the delete went first, this finds no template (404). SQLite runs
 * transactions one at a time.
 */
export async function lockTemplateForUse(ctx: Ctx, template: { id: string; slug: string }): Promise<void> {
  if (!ctx.trx) throw new Error('lockTemplateForUse: call it inside withTx, with the write that uses the template');
  let q = exec(ctx).selectFrom('templates').select('status').where('id', '=', template.id).where('owner', 'in', visible(ctx));
  if (ctx.deps.db.dialect === 'postgres') q = q.forShare();
  const row = await q.executeTakeFirst();
  if (!row) throw errors.notFound('template', template.slug);
  if (row.status !== 'ready') {
    throw errors.invalidState(`template "${template.slug}" is ${row.status}; a sandbox can use it once it is ready`, row.status);
  }
}

function toTemplate(deps: Deps, row: Row, parentSlug: string | null): Template {
  const plan = JSON.parse(row.plan) as BuildPlan;
  const base = deps.sandboxes.base;
  const packages = { apt: plan.summary?.apt ?? [], npm: plan.summary?.npm ?? [], pip: plan.summary?.pip ?? [] };
  const on = plan.base ?? { os: row.os, kind: 'host' as const };
  let runs: string;
  if (row.source === 'base') runs = base.description;
  else {
    const adds = [
      packages.apt.length ? `apt: ${packages.apt.join(', ')}` : '',
      packages.npm.length ? `npm: ${packages.npm.join(', ')}` : '',
      packages.pip.length ? `pip: ${packages.pip.join(', ')}` : '',
      row.source === 'dockerfile' ? `${plan.steps.length} RUN step(s) from a Dockerfile` : '',
    ].filter(Boolean);
    const bottom =
      on.kind === 'image'
        ? `${OS_DEFINITIONS[on.os]?.name ?? on.os} (an image built from its distribution's mirror)`
        : `${base.osName} (this server's userland${plan.fallback ? `; ${plan.fallback}` : ''})`;
    runs = `${bottom} with ${parentSlug ? `template ${parentSlug}` : 'nothing else'} below${adds.length ? `, adding ${adds.join('; ')}` : ''}`;
    if (row.id === DESKTOP_ID) runs += '; each sandbox starts an X display :99 (Xvfb, 1280x800) with the openbox window manager';
  }
  return {
    id: row.id,
    slug: row.slug,
    name: row.name,
    status: row.status,
    progress: row.progress,
    buildLog: `${deps.config.urls.orchestrator}/v1/templates/${row.slug}/logs`,
    system: row.owner === SYSTEM,
    os: row.os,
    osImage: on.kind === 'image',
    runs,
    source: row.source,
    parent: parentSlug,
    packages,
    envKeys: Object.keys(JSON.parse(row.env) as Record<string, string>),
    workdir: row.workdir,
    error: row.error,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    buildStartedAt: row.build_started_at,
    buildFinishedAt: row.build_finished_at,
  };
}

async function parentSlugOf(ctx: Ctx, row: Row): Promise<string | null> {
  if (!row.parent_id) return defaultParent(row);
  const p = await exec(ctx).selectFrom('templates').select('slug').where('id', '=', row.parent_id).executeTakeFirst();
  return p?.slug ?? null;
}

export async function getTemplate(ctx: Ctx, slug: string): Promise<Template> {
  requireScope(ctx, 'templates:read');
  const row = await findRow(ctx, slug);
  return toTemplate(ctx.deps, row, await parentSlugOf(ctx, row));
}

export async function templateRow(ctx: Ctx, slug: string): Promise<Row> {
  requireScope(ctx, 'templates:read');
  return findRow(ctx, slug);
}

/** A visible template's build state, read fresh (the log stream reads it after subscribing); undefined once deleted. */
export async function templateBuildState(ctx: Ctx, id: string): Promise<Pick<Row, 'status' | 'progress' | 'error'> | undefined> {
  return exec(ctx)
    .selectFrom('templates')
    .select(['status', 'progress', 'error'])
    .where('id', '=', id)
    .where('owner', 'in', visible(ctx))
    .executeTakeFirst();
}

/** A system template's id and status (for start-up prebuilds), undefined when it does not exist. */
export async function systemTemplateState(deps: Deps, slug: string): Promise<Pick<Row, 'id' | 'status'> | undefined> {
  return deps.db.kysely.selectFrom('templates').select(['id', 'status']).where('slug', '=', slug).where('owner', '=', SYSTEM).executeTakeFirst();
}

export async function listTemplates(ctx: Ctx): Promise<Template[]> {
  requireScope(ctx, 'templates:read');
  const rows = await exec(ctx)
    .selectFrom('templates')
    .selectAll()
    .where('owner', 'in', visible(ctx))
    .orderBy('owner', 'desc')
    .orderBy('slug')
    .execute();
  const byId = new Map(rows.map((r) => [r.id, r]));
  return rows.map((r) => toTemplate(ctx.deps, r, r.parent_id ? (byId.get(r.parent_id)?.slug ?? null) : defaultParent(r)));
}

/** A template without a parent template stands on base-ubuntu (the host's userland) or on an OS image (no parent). */
function defaultParent(row: Row): string | null {
  return row.source === 'base' || baseOf(row).kind === 'image' ? null : 'base-ubuntu';
}

export type TemplateEvent = 'created' | 'build_started' | 'ready' | 'failed' | 'deleted';

/** Records a change of an organization's template in the caller's transaction (system templates have no organization). */
export async function templateActivity(
  ctx: Ctx,
  row: Pick<Row, 'id' | 'slug' | 'owner'>,
  event: TemplateEvent,
  error?: string | null,
): Promise<void> {
  if (row.owner === SYSTEM) return;
  const titles: Record<TemplateEvent, string> = {
    created: 'created',
    build_started: 'build started',
    ready: 'built and ready',
    failed: 'build failed',
    deleted: 'deleted',
  };
  await recordActivity(
    ctx,
    {
      resourceType: 'template',
      resourceId: row.id,
      eventType: `template.${event}`,
      status: event === 'failed' ? 'failed' : event === 'build_started' ? 'running' : 'completed',
      title: `Template ${row.slug} ${titles[event]}`,
      ...(error ? { summary: error } : {}),
      metadata: { slug: row.slug },
    },
    row.owner,
  );
}

export async function createTemplate(ctx: Ctx, body: CreateTemplateBody): Promise<Row> {
  requireScope(ctx, 'templates:write');
  const org = orgId(ctx);
  const { deps } = ctx;
  if (!deps.sandboxes.available) throw errors.unavailable(`templates cannot be built on this server: ${deps.sandboxes.unavailableReason}`);
  if (deps.sandboxes.networkReason)
    throw errors.unavailable(`templates cannot be built on this server (builds need network): ${deps.sandboxes.networkReason}`);
  const builderFields = (['os', 'runtimes', 'apt', 'npm', 'pip', 'env'] as const).filter((k) => body[k] !== undefined);
  let plan: BuildPlan;
  let parent: Row | null = null;
  if (body.dockerfile !== undefined) {
    if (builderFields.length) throw errors.invalidField(builderFields[0]!, 'give either "dockerfile" or the builder fields, not both');
    const first = planFromDockerfile(body.dockerfile);
    if (first.from && first.from !== 'base-ubuntu') {
      parent = (await findBySlug(ctx, first.from)) ?? null;
      if (!parent) throw errors.invalidField('dockerfile', `FROM ${first.from}: no such template`);
      if (parent.status !== 'ready')
        throw errors.invalidState(`FROM ${first.from}: that template is ${parent.status}; build on it once it is ready`, parent.status);
      const c = await chain(ctx, parent);
      plan = planFromDockerfile(body.dockerfile, { env: c.env, workdir: c.workdir });
      // A child stands on exactly what its parent stands on.
      const parentPlan = JSON.parse(parent.plan) as BuildPlan;
      plan.base = baseOf(parent);
      if (parentPlan.image) plan.image = parentPlan.image;
    } else {
      parent = first.from === 'base-ubuntu' ? ((await findBySlug(ctx, 'base-ubuntu')) ?? null) : null;
      plan = { ...first, base: { os: deps.sandboxes.base.os, kind: 'host' } };
    }
  } else {
    let base: BuildBase & { fallback?: string };
    if (body.os !== undefined) {
      base = { os: checkOs(body.os), kind: 'image' };
      const refused = await deps.sandboxes.images.buildable(base.os);
      if (refused) throw errors.unavailable(refused);
    } else base = await defaultBase(deps);
    const { fallback, ...on } = base;
    plan = planFromBuilder(body, on);
    if (fallback) plan.fallback = fallback;
  }
  if (parent?.source === 'base') parent = null;
  const now = nowIso();
  const row: Row = {
    id: prefixedId('tpl'),
    owner: org,
    slug: body.slug,
    name: body.name,
    status: 'pending',
    progress: 0,
    os: plan.base?.os ?? deps.sandboxes.base.os,
    source: body.dockerfile !== undefined ? 'dockerfile' : 'builder',
    request: JSON.stringify(body),
    plan: JSON.stringify(plan),
    parent_id: parent?.id ?? null,
    env: JSON.stringify(plan.env),
    workdir: plan.workdir,
    error: null,
    node_id: deps.config.sandboxes.nodeId,
    created_by_user_id: ctx.principal.userId,
    created_at: now,
    updated_at: now,
    build_started_at: null,
    build_finished_at: null,
  };
  const system = await exec(ctx).selectFrom('templates').select('id').where('owner', '=', SYSTEM).where('slug', '=', body.slug).executeTakeFirst();
  if (system) throw errors.conflict(`template slug "${body.slug}" is taken by a system template`);
  await requireFreeDisk(deps.config.sandboxes, 'no new template build');
  try {
    await withTx(ctx, async (tx) => {
      if (parent && ctx.deps.db.dialect === 'postgres') {
        // Hold the parent until this commits, so a delete of it waits (and then sees this child).
        const held = await exec(tx).selectFrom('templates').select('id').where('id', '=', parent.id).forShare().executeTakeFirst();
        if (!held) throw errors.invalidField('dockerfile', `FROM ${parent.slug}: no such template`);
      }
      await exec(tx).insertInto('templates').values(row).execute();
      await templateActivity(tx, row, 'created');
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw errors.conflict(`your organization already has a template "${body.slug}"`);
    throw err;
  }
  return row;
}

/** Answers which sandbox (if any) still uses a template; the sandboxes domain owns that table. */
export type TemplateUseCheck = (ctx: Ctx, templateId: string) => Promise<string | null>;
const USE_CHECK = stateKey('templates.useCheck', () => ({ check: null as TemplateUseCheck | null }));
/** buildApp registers the sandboxes domain's check per app (templates cannot import sandboxes: it imports templates). */
export function setTemplateUseCheck(deps: Deps, fn: TemplateUseCheck): void {
  deps.state.get(USE_CHECK).check = fn;
}

export async function deleteTemplate(ctx: Ctx, slug: string): Promise<Row> {
  requireScope(ctx, 'templates:write');
  // The checks and the delete in one transaction that locks the template's row (PostgreSQL), so a build on it
  // or a new child cannot slip in between; SQLite transactions already run one at a time.
  const row = await withTx(ctx, async (tx) => {
    const found = await findRow(tx, slug);
    if (found.owner === SYSTEM) throw errors.forbidden(`"${slug}" is a system template and cannot be deleted`);
    let lock = exec(tx).selectFrom('templates').selectAll().where('id', '=', found.id);
    if (ctx.deps.db.dialect === 'postgres') lock = lock.forUpdate();
    const row = await lock.executeTakeFirst();
    if (!row) throw errors.notFound('template', slug);
    if (row.status === 'building' || row.status === 'pending')
      throw errors.invalidState(`template "${slug}" is ${row.status}; delete it once its build has ended`, row.status);
    const templateUseCheck = ctx.deps.state.get(USE_CHECK).check;
    if (!templateUseCheck) throw new Error('deleteTemplate: no template use check is registered (buildApp registers the sandboxes domain’s)');
    const user = await templateUseCheck(tx, row.id);
    if (user) throw errors.conflict(`template "${slug}" is used by sandbox ${user}; destroy its sandboxes first`);
    const child = await exec(tx).selectFrom('templates').select('slug').where('parent_id', '=', row.id).limit(1).executeTakeFirst();
    if (child) throw errors.conflict(`template "${child.slug}" is built on "${slug}"; delete it first`);
    await exec(tx).deleteFrom('templates').where('id', '=', row.id).execute();
    await templateActivity(tx, row, 'deleted');
    return row;
  });
  await ctx.deps.sandboxes.removeLayer(row.id);
  await ctx.deps.blobs.delete(logKey(row.id)).catch(() => undefined);
  return row;
}

export const logKey = (id: string): string => `templates/${id}/build.log`;

/** Creates a custom template and queues its build (after the commit, so the builder finds the row). */
export async function submitTemplate(ctx: Ctx, body: CreateTemplateBody): Promise<TemplateCreated> {
  const row = await createTemplate(ctx, body);
  enqueueBuild(ctx.deps, row.id);
  return { id: row.id, slug: row.slug, name: row.name, status: row.status, createdAt: row.created_at };
}

// ---- system templates ------------------------------------------------------------------------

/**
 * The templates domain's state in one app: the running builder's queue (set by the templates' jobs; kept apart
 * from the builder to avoid an import cycle). Without one, a build stays pending.
 */
export const TEMPLATE_STATE = stateKey('templates', () => ({ enqueue: null as ((templateId: string) => void) | null }));

/** Queues a template's build on this app's builder. */
export function enqueueBuild(deps: Deps, templateId: string): void {
  deps.state.get(TEMPLATE_STATE).enqueue?.(templateId);
}
function requestSystemBuild(deps: Deps): void {
  enqueueBuild(deps, DESKTOP_ID);
}

/** Makes sure base-ubuntu and desktop-ubuntu exist; base is ready whenever the runtime is. */
export async function ensureSystemTemplates(deps: Deps): Promise<void> {
  const db = deps.db.kysely;
  const now = nowIso();
  const base = deps.sandboxes.base;
  const baseRow: Row = {
    id: BASE_ID,
    owner: SYSTEM,
    slug: 'base-ubuntu',
    name: 'Base',
    status: deps.sandboxes.available ? 'ready' : 'failed',
    progress: deps.sandboxes.available ? 100 : 0,
    os: base.os,
    source: 'base',
    request: '{}',
    plan: JSON.stringify({
      from: null,
      steps: [],
      env: {},
      workdir: null,
      labels: {},
      summary: { apt: [], npm: [], pip: [], runtimes: [], dockerfileInstructions: [] },
    }),
    parent_id: null,
    env: '{}',
    workdir: null,
    error: deps.sandboxes.available ? null : deps.sandboxes.unavailableReason,
    node_id: null,
    created_by_user_id: null,
    created_at: now,
    updated_at: now,
    build_started_at: null,
    build_finished_at: null,
  };
  await db
    .insertInto('templates')
    .values(baseRow)
    .onConflict((oc) =>
      oc.column('id').doUpdateSet({ status: baseRow.status, progress: baseRow.progress, os: base.os, error: baseRow.error, updated_at: now }),
    )
    .execute();
  const desktopPlan = planFromBuilder(
    { apt: DESKTOP_PACKAGES, env: { DISPLAY: ':99' } },
    { os: base.os === 'unknown' ? 'debian-12' : base.os, kind: 'host' },
  );
  await db
    .insertInto('templates')
    .values({
      ...baseRow,
      id: DESKTOP_ID,
      slug: 'desktop-ubuntu',
      name: 'Desktop',
      status: 'pending',
      progress: 0,
      error: null,
      source: 'builder',
      request: JSON.stringify({ apt: DESKTOP_PACKAGES, env: { DISPLAY: ':99' } }),
      plan: JSON.stringify(desktopPlan),
      env: JSON.stringify(desktopPlan.env),
    })
    .onConflict((oc) => oc.column('id').doNothing())
    .execute();
}
