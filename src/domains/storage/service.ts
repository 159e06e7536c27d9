import type { Selectable } from 'kysely';
import mime from 'mime';
import type { Readable } from 'node:stream';
import type { WorkspaceFilesTable, WorkspacesTable } from '../../database.js';
import { BlobTooLargeError, type BlobSource } from '../../platform/blobs/index.js';
import { refuseDeclaredLength } from '../../platform/http/byte-limit.js';
import { exec, isOrgAdmin, orgId, requireAnyScope, requireScope, withTx, type Ctx } from '../../platform/context.js';
import { isUniqueViolation } from '../../platform/db/index.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { base62, nowIso, uuid } from '../../platform/ids.js';
import { listActivity, recordActivity, type ActivityQuery } from '../activity/index.js';
import { ancestorsOf, nameOf, normalizeEntryPath, normalizePath, parentOf } from './paths.js';
import type { MoveBody, Workspace, WorkspaceFileEntry } from './schemas.js';

const FOLDER_MIME = 'inode/directory';

// ---- workspaces -------------------------------------------------------------------------------

function toWorkspace(row: Selectable<WorkspacesTable>): Workspace {
  return {
    id: row.id,
    orgId: row.org_id,
    kind: row.kind as Workspace['kind'],
    name: row.name,
    ownerUserId: row.owner_user_id,
    projectId: row.project_id,
    createdAt: row.created_at,
  };
}

/** Creates a workspace inside the caller's transaction (used when organizations and projects are made). */
export async function createWorkspace(
  ctx: Ctx,
  input: { org: string; kind: 'personal' | 'project'; name: string; ownerUserId?: string; projectId?: string },
): Promise<string> {
  const id = uuid();
  await exec(ctx)
    .insertInto('workspaces')
    .values({
      id,
      org_id: input.org,
      kind: input.kind,
      name: input.name,
      owner_user_id: input.ownerUserId ?? null,
      project_id: input.projectId ?? null,
      created_at: nowIso(),
    })
    .execute();
  return id;
}

/** Starts the organization's storage meter at zero, accounted from now. */
export async function initStorage(ctx: Ctx, org: string): Promise<void> {
  await exec(ctx).insertInto('storage_usage').values({ org_id: org, used_bytes: 0, byte_seconds: 0, accounted_at: nowIso() }).execute();
}

export async function personalWorkspaceId(ctx: Ctx, org: string, userId: string): Promise<string | null> {
  const row = await exec(ctx)
    .selectFrom('workspaces')
    .select('id')
    .where('org_id', '=', org)
    .where('kind', '=', 'personal')
    .where('owner_user_id', '=', userId)
    .executeTakeFirst();
  return row?.id ?? null;
}

/** The user's Personal workspace in each of the given organizations (those that have one), by organization id. */
export async function personalWorkspaceIds(ctx: Ctx, userId: string, orgIds: readonly string[]): Promise<Map<string, string>> {
  if (!orgIds.length) return new Map();
  const rows = await exec(ctx)
    .selectFrom('workspaces')
    .select(['id', 'org_id'])
    .where('org_id', 'in', [...new Set(orgIds)])
    .where('kind', '=', 'personal')
    .where('owner_user_id', '=', userId)
    .execute();
  return new Map(rows.map((r) => [r.org_id, r.id]));
}

/** The workspace of each of the caller's organization's given projects (those that have one), by project id. */
export async function projectWorkspaceIds(ctx: Ctx, projectIds: readonly string[]): Promise<Map<string, string>> {
  if (!projectIds.length) return new Map();
  const rows = await exec(ctx)
    .selectFrom('workspaces')
    .select(['id', 'project_id'])
    .where('org_id', '=', orgId(ctx))
    .where('kind', '=', 'project')
    .where('project_id', 'in', [...new Set(projectIds)])
    .execute();
  return new Map(rows.filter((r) => r.project_id !== null).map((r) => [r.project_id as string, r.id]));
}

/** Workspaces the caller may use: project workspaces of the organization and the caller's own Personal one. */
function accessibleWorkspaces(ctx: Ctx) {
  const userId = ctx.principal.userId;
  return exec(ctx)
    .selectFrom('workspaces')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where((eb) => eb.or([eb('kind', '=', 'project'), eb('owner_user_id', '=', userId)]));
}

export async function listWorkspaces(ctx: Ctx): Promise<Workspace[]> {
  requireScope(ctx, 'storage:read');
  const rows = await accessibleWorkspaces(ctx).orderBy('kind').orderBy('created_at').execute();
  return rows.map(toWorkspace);
}

/**
 * A workspace the caller can access, or 404: another organization's or member's workspace is not found.
 * GET /v1/workspaces/{id} (storage:read) and its activity (activity:read) share it.
 */
export async function getWorkspace(ctx: Ctx, id: string): Promise<Workspace> {
  requireAnyScope(ctx, ['storage:read', 'activity:read']);
  return findWorkspace(ctx, id);
}

/** getWorkspace without its scope check, for the verbs here (each checked its own scope first). */
async function findWorkspace(ctx: Ctx, id: string): Promise<Workspace> {
  const row = await accessibleWorkspaces(ctx).where('id', '=', id).executeTakeFirst();
  if (!row) throw errors.notFound('workspace', id);
  return toWorkspace(row);
}

export async function canAccessWorkspace(ctx: Ctx, id: string): Promise<boolean> {
  return Boolean(await accessibleWorkspaces(ctx).where('id', '=', id).executeTakeFirst());
}

/**
 * Activity of a workspace: whoever can access it, and organization admins for any workspace of their
 * organization (they see every event of the organization anyway, so a filter must not hide them).
 */
export async function canSeeWorkspaceActivity(ctx: Ctx, id: string): Promise<boolean> {
  if (isOrgAdmin(ctx)) {
    const row = await exec(ctx).selectFrom('workspaces').select('id').where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();
    return Boolean(row);
  }
  return canAccessWorkspace(ctx, id);
}

// ---- files ------------------------------------------------------------------------------------

function toEntry(row: Selectable<WorkspaceFilesTable>): WorkspaceFileEntry {
  return {
    id: row.id,
    name: row.name,
    path: row.path,
    mimeType: row.mime_type,
    type: row.type as WorkspaceFileEntry['type'],
    size: Number(row.size),
    mtime: row.mtime,
  };
}

/**
 * One entry by path. `lock` takes the row lock on PostgreSQL so concurrent writers of the same path
 * wait and then see each other's result (SQLite already runs one transaction at a time).
 */
function findEntry(ctx: Ctx, workspaceId: string, path: string, opts: { lock?: boolean } = {}) {
  let q = exec(ctx).selectFrom('workspace_files').selectAll().where('workspace_id', '=', workspaceId).where('path', '=', path);
  if (opts.lock && ctx.deps.db.dialect === 'postgres') q = q.forUpdate();
  return q.executeTakeFirst();
}

/** Inserts a folder row unless the path is taken (also by a concurrent request); true when inserted. */
async function insertFolder(ctx: Ctx, row: ReturnType<typeof folderRow>): Promise<boolean> {
  const inserted = await exec(ctx)
    .insertInto('workspace_files')
    .values(row)
    .onConflict((oc) => oc.columns(['workspace_id', 'path']).doNothing())
    .returning('id')
    .execute();
  return inserted.length > 0;
}

/** Lists a folder (the root by default): folders first, then files, by name. */
export async function listFolder(ctx: Ctx, workspaceId: string, rawPath = ''): Promise<WorkspaceFileEntry[]> {
  requireScope(ctx, 'storage:read');
  await findWorkspace(ctx, workspaceId);
  const path = normalizePath(rawPath);
  if (path !== '') {
    const folder = await findEntry(ctx, workspaceId, path);
    if (!folder) throw errors.notFound('folder', path);
    if (folder.type !== 'folder') throw errors.invalidField('path', `"${path}" is a file, not a folder`);
  }
  const rows = await exec(ctx)
    .selectFrom('workspace_files')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('parent_path', '=', path)
    .orderBy('type', 'desc')
    .orderBy('name')
    .execute();
  return rows.map(toEntry);
}

/** Inserts missing parent folders of `path`; a file standing where a folder must be is a 409. */
async function ensureParents(ctx: Ctx, workspaceId: string, path: string, now: string): Promise<void> {
  for (const dir of ancestorsOf(path)) {
    const existing = await findEntry(ctx, workspaceId, dir);
    if (!existing && (await insertFolder(ctx, folderRow(orgId(ctx), workspaceId, dir, ctx.principal.userId, now)))) continue;
    // Found, or just created by a concurrent request: it must be a folder.
    const type = existing?.type ?? (await findEntry(ctx, workspaceId, dir))?.type;
    if (type !== 'folder') throw errors.conflict(`"${dir}" is a file, so "${path}" cannot be created under it`);
  }
}

function folderRow(org: string, workspaceId: string, path: string, userId: string, now: string) {
  return {
    id: uuid(),
    org_id: org,
    workspace_id: workspaceId,
    path,
    parent_path: parentOf(path),
    name: nameOf(path),
    type: 'folder',
    size: 0,
    mime_type: FOLDER_MIME,
    blob_key: null,
    sha256: null,
    created_by_user_id: userId,
    created_at: now,
    mtime: now,
  };
}

/**
 * Byte-seconds (ADR 0028): `byte_seconds` holds what was stored up to `accounted_at`. Whenever `used_bytes` changes,
 * and when billing takes the total, the bytes held since `accounted_at` are added first. The elapsed time is worked
 * out here (ISO text timestamps do not subtract alike in SQLite and PostgreSQL) and the row is written only if
 * nobody moved it since it was read (its `used_bytes` and `accounted_at` unchanged); otherwise it is read again.
 */
const METER_ATTEMPTS = 20;

interface MeterRow {
  used_bytes: number;
  byte_seconds: number;
  accounted_at: string | null;
}

async function meterRow(ctx: Ctx, org: string): Promise<MeterRow | undefined> {
  const row = await exec(ctx)
    .selectFrom('storage_usage')
    .select(['used_bytes', 'byte_seconds', 'accounted_at'])
    .where('org_id', '=', org)
    .executeTakeFirst();
  return row && { used_bytes: Number(row.used_bytes), byte_seconds: Number(row.byte_seconds), accounted_at: row.accounted_at };
}

/** The byte-seconds held from the row's `accounted_at` to `at`, and the new `accounted_at` (never moved backwards). */
function accrue(row: MeterRow, at: Date): { add: number; accountedAt: string } {
  if (!row.accounted_at) return { add: 0, accountedAt: at.toISOString() };
  const since = Date.parse(row.accounted_at);
  const seconds = Math.max(0, (at.getTime() - since) / 1000);
  return { add: row.used_bytes * seconds, accountedAt: at.getTime() > since ? at.toISOString() : row.accounted_at };
}

/** Moves the organization's storage meter by `delta` bytes, accruing the byte-seconds first; refuses to pass the quota. */
async function chargeStorage(ctx: Ctx, delta: number): Promise<void> {
  if (delta === 0) return;
  const quota = ctx.deps.config.storageQuotaBytes;
  const org = orgId(ctx);
  for (let attempt = 0; attempt < METER_ATTEMPTS; attempt++) {
    const row = await meterRow(ctx, org);
    if (!row) throw new Error(`organization ${org} has no storage meter`);
    if (delta > 0 && row.used_bytes + delta > quota) {
      throw errors.quotaExceeded(
        `storage quota of ${quota} bytes for this organization would be exceeded; delete files or raise HANGAR_STORAGE_QUOTA_BYTES`,
      );
    }
    const { add, accountedAt } = accrue(row, new Date());
    const result = await exec(ctx)
      .updateTable('storage_usage')
      .set((eb) => ({ used_bytes: eb('used_bytes', '+', delta), byte_seconds: eb('byte_seconds', '+', add), accounted_at: accountedAt }))
      .where('org_id', '=', org)
      .where('used_bytes', '=', row.used_bytes)
      .where((eb) => (row.accounted_at === null ? eb('accounted_at', 'is', null) : eb('accounted_at', '=', row.accounted_at)))
      .executeTakeFirst();
    if (Number(result.numUpdatedRows) > 0) return;
  }
  throw new AppError('conflict', 'the storage meter is busy; try again');
}

/**
 * Takes the organization's workspace byte-seconds up to `until` for billing (inside the caller's transaction): the
 * total accrued since the last take, which is reset to zero. `from` is when the meter was last brought up to date
 * before this take (null when it never was).
 */
export async function takeStorageByteSeconds(ctx: Ctx, org: string, until: Date): Promise<{ byteSeconds: number; from: string | null }> {
  for (let attempt = 0; attempt < METER_ATTEMPTS; attempt++) {
    const row = await meterRow(ctx, org);
    if (!row) return { byteSeconds: 0, from: null };
    const { add, accountedAt } = accrue(row, until);
    const result = await exec(ctx)
      .updateTable('storage_usage')
      .set({ byte_seconds: 0, accounted_at: accountedAt })
      .where('org_id', '=', org)
      .where('used_bytes', '=', row.used_bytes)
      .where((eb) => (row.accounted_at === null ? eb('accounted_at', 'is', null) : eb('accounted_at', '=', row.accounted_at)))
      .executeTakeFirst();
    if (Number(result.numUpdatedRows) > 0) return { byteSeconds: row.byte_seconds + add, from: row.accounted_at };
  }
  throw new AppError('conflict', 'the storage meter is busy; try again');
}

/** The organizations with a storage meter (for billing's storage charge). */
export async function storageOrgs(ctx: Ctx): Promise<string[]> {
  const rows = await exec(ctx).selectFrom('storage_usage').select('org_id').orderBy('org_id').execute();
  return rows.map((r) => r.org_id);
}

export async function storageUsage(ctx: Ctx) {
  requireScope(ctx, 'storage:read');
  const row = await exec(ctx).selectFrom('storage_usage').select('used_bytes').where('org_id', '=', orgId(ctx)).executeTakeFirst();
  return { usedBytes: Number(row?.used_bytes ?? 0), quotaBytes: ctx.deps.config.storageQuotaBytes };
}

function mimeFor(path: string, declared: string | undefined): string {
  const type = declared?.split(';')[0]?.trim().toLowerCase();
  if (type && type !== 'application/octet-stream' && type !== 'application/x-www-form-urlencoded' && /^[\w.+-]+\/[\w.+-]+$/.test(type)) {
    return type;
  }
  return mime.getType(path) ?? 'application/octet-stream';
}

/** One part of an upload form, as the HTTP layer reads it. */
export type FormPart =
  | { type: 'field'; fieldname: string; value: unknown }
  | { type: 'file'; fieldname: string; filename: string; file: Readable; mimetype: string };

/**
 * Writes each file part of a form under the folder named by a `path` field sent before it. Earlier parts
 * stay committed when one fails, and the error says which part failed and what was stored; a form without
 * file parts is a 400.
 */
export async function writeFormFiles(ctx: Ctx, workspaceId: string, parts: AsyncIterable<FormPart>): Promise<WorkspaceFileEntry[]> {
  requireScope(ctx, 'storage:write');
  let folder = '';
  const written: WorkspaceFileEntry[] = [];
  for await (const part of parts) {
    if (part.type === 'field') {
      if (part.fieldname === 'path') folder = normalizePath(String(part.value));
      continue;
    }
    if (!part.filename) throw errors.invalidField(part.fieldname, 'file part needs a filename');
    const target = folder ? `${folder}/${part.filename}` : part.filename;
    try {
      written.push((await writeFile(ctx, workspaceId, target, part.file, { contentType: part.mimetype })).entry);
    } catch (err) {
      if (!(err instanceof AppError)) throw err;
      const stored = written.length ? ` (already stored: ${written.map((e) => e.path).join(', ')})` : '';
      throw new AppError(err.code, `${target}: ${err.message}${stored}`, err.details, err.headers);
    }
  }
  if (written.length === 0) throw errors.invalid('the form has no file parts');
  return written;
}

/**
 * Writes a file: the bytes go to a new blob first (atomically), then one transaction creates parent
 * folders, records the entry, charges the quota and the activity. A failure leaves nothing behind.
 */
export async function writeFile(
  ctx: Ctx,
  workspaceId: string,
  rawPath: string,
  body: BlobSource,
  opts: { contentType?: string; contentLength?: number } = {},
): Promise<{ entry: WorkspaceFileEntry; created: boolean }> {
  requireScope(ctx, 'storage:write');
  const org = orgId(ctx);
  await findWorkspace(ctx, workspaceId);
  const path = normalizeEntryPath(rawPath);
  const { uploadLimitBytes, storageQuotaBytes } = ctx.deps.config;
  refuseDeclaredLength(opts.contentLength, uploadLimitBytes, `file is larger than the upload limit of ${uploadLimitBytes} bytes`);
  if (opts.contentLength !== undefined && opts.contentLength > storageQuotaBytes) {
    throw errors.quotaExceeded(`file is larger than the storage quota of ${storageQuotaBytes} bytes`);
  }
  const blobKey = `orgs/${org}/${workspaceId}/${uuid()}-${base62(6)}`;
  let put: Awaited<ReturnType<typeof ctx.deps.blobs.put>>;
  try {
    put = await ctx.deps.blobs.put(blobKey, body, { maxBytes: uploadLimitBytes });
  } catch (err) {
    if (err instanceof BlobTooLargeError) throw errors.tooLarge(`file is larger than the upload limit of ${uploadLimitBytes} bytes`);
    throw err;
  }
  let oldBlob: string | null = null;
  try {
    const result = await withTx(ctx, async (tx) => {
      const now = nowIso();
      const existing = await findEntry(tx, workspaceId, path, { lock: true });
      if (existing?.type === 'folder') throw errors.conflict(`"${path}" is a folder`);
      await ensureParents(tx, workspaceId, path, now);
      await chargeStorage(tx, put.size - Number(existing?.size ?? 0));
      const mimeType = mimeFor(path, opts.contentType);
      let id: string;
      if (existing) {
        id = existing.id;
        oldBlob = existing.blob_key;
        await exec(tx)
          .updateTable('workspace_files')
          .set({ size: put.size, mime_type: mimeType, blob_key: blobKey, sha256: put.sha256, mtime: now })
          .where('id', '=', id)
          .execute();
      } else {
        id = uuid();
        await exec(tx)
          .insertInto('workspace_files')
          .values({
            id,
            org_id: org,
            workspace_id: workspaceId,
            path,
            parent_path: parentOf(path),
            name: nameOf(path),
            type: 'file',
            size: put.size,
            mime_type: mimeType,
            blob_key: blobKey,
            sha256: put.sha256,
            created_by_user_id: tx.principal.userId,
            created_at: now,
            mtime: now,
          })
          .execute();
      }
      await recordActivity(tx, {
        resourceType: 'workspace',
        resourceId: workspaceId,
        workspaceId,
        eventType: existing ? 'workspace.file.updated' : 'workspace.file.added',
        status: existing ? 'updated' : 'added',
        title: `${existing ? 'Updated' : 'Added'} ${path}`,
        summary: `${put.size} bytes, ${mimeType}`,
        metadata: { path, size: put.size },
      });
      const entry: WorkspaceFileEntry = { id, name: nameOf(path), path, mimeType, type: 'file', size: put.size, mtime: now };
      return { entry, created: !existing };
    });
    if (oldBlob) await ctx.deps.blobs.delete(oldBlob).catch(() => undefined);
    return result;
  } catch (err) {
    await ctx.deps.blobs.delete(blobKey).catch(() => undefined);
    if (isUniqueViolation(err)) throw errors.conflict(`"${path}" was written by another request at the same time; retry`);
    throw err;
  }
}

export async function makeFolder(ctx: Ctx, workspaceId: string, rawPath: string): Promise<{ entry: WorkspaceFileEntry; created: boolean }> {
  requireScope(ctx, 'storage:write');
  await findWorkspace(ctx, workspaceId);
  const path = normalizeEntryPath(rawPath);
  try {
    return await withTx(ctx, async (tx) => {
      const found = async () => {
        const existing = await findEntry(tx, workspaceId, path);
        if (existing && existing.type !== 'folder') throw errors.conflict(`"${path}" is a file`);
        return existing && { entry: toEntry(existing), created: false };
      };
      const existing = await found();
      if (existing) return existing;
      const now = nowIso();
      await ensureParents(tx, workspaceId, path, now);
      const row = folderRow(orgId(tx), workspaceId, path, tx.principal.userId, now);
      if (!(await insertFolder(tx, row))) {
        // A concurrent request made it first: answer as if it had existed.
        const raced = await found();
        if (!raced) throw errors.conflict(`"${path}" was created by another request at the same time; retry`);
        return raced;
      }
      await recordActivity(tx, {
        resourceType: 'workspace',
        resourceId: workspaceId,
        workspaceId,
        eventType: 'workspace.folder.created',
        status: 'added',
        title: `Created folder ${path}`,
        metadata: { path },
      });
      return { entry: toEntry(row), created: true };
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw errors.conflict(`"${path}" was created by another request at the same time; retry`);
    throw err;
  }
}

/** The entry and everything below it. */
function subtree(ctx: Ctx, workspaceId: string, path: string) {
  // SQL substr counts code points, JS length counts UTF-16 units: an emoji is one, not two.
  const prefixLength = [...path].length + 1;
  return exec(ctx)
    .selectFrom('workspace_files')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where((eb) => eb.or([eb('path', '=', path), eb(eb.fn('substr', ['path', eb.val(1), eb.val(prefixLength)]), '=', `${path}/`)]));
}

export async function moveEntry(ctx: Ctx, workspaceId: string, input: MoveBody): Promise<WorkspaceFileEntry> {
  requireScope(ctx, 'storage:write');
  await findWorkspace(ctx, workspaceId);
  const from = normalizeEntryPath(input.from, 'from');
  const to = normalizeEntryPath(input.to, 'to');
  if (from === to) throw errors.invalidField('to', 'is the same as from');
  if (to.startsWith(`${from}/`)) throw errors.invalidField('to', 'cannot move a folder into itself');
  let replacedBlob: string | null = null;
  const entry = await withTx(ctx, async (tx) => {
    const source = await findEntry(tx, workspaceId, from, { lock: true });
    if (!source) throw errors.notFound('file', from);
    const target = await findEntry(tx, workspaceId, to, { lock: true });
    if (target) {
      if (target.type === 'folder' || source.type === 'folder') throw errors.conflict(`"${to}" already exists`);
      if (!input.overwrite) throw errors.conflict(`"${to}" already exists; pass overwrite: true to replace it`);
      await exec(tx).deleteFrom('workspace_files').where('id', '=', target.id).execute();
      await chargeStorage(tx, -Number(target.size));
      replacedBlob = target.blob_key;
    }
    const now = nowIso();
    await ensureParents(tx, workspaceId, to, now);
    const rows = await subtree(tx, workspaceId, from).execute();
    for (const row of rows) {
      const newPath = to + row.path.slice(from.length);
      await exec(tx)
        .updateTable('workspace_files')
        .set({ path: newPath, parent_path: parentOf(newPath), name: nameOf(newPath), ...(row.id === source.id ? { mtime: now } : {}) })
        .where('id', '=', row.id)
        .execute();
    }
    await recordActivity(tx, {
      resourceType: 'workspace',
      resourceId: workspaceId,
      workspaceId,
      eventType: 'workspace.file.moved',
      status: 'moved',
      title: `Moved ${from} to ${to}`,
      metadata: { from, to, entries: rows.length },
    });
    return toEntry({ ...source, path: to, parent_path: parentOf(to), name: nameOf(to), mtime: now });
  });
  if (replacedBlob) await ctx.deps.blobs.delete(replacedBlob).catch(() => undefined);
  return entry;
}

export async function deleteEntry(ctx: Ctx, workspaceId: string, rawPath: string, recursive: boolean) {
  requireScope(ctx, 'storage:write');
  await findWorkspace(ctx, workspaceId);
  const path = normalizeEntryPath(rawPath);
  const { rows, bytes } = await withTx(ctx, async (tx) => {
    const entry = await findEntry(tx, workspaceId, path, { lock: true });
    if (!entry) throw errors.notFound('file', path);
    const found = await subtree(tx, workspaceId, path).execute();
    if (entry.type === 'folder' && found.length > 1 && !recursive) {
      throw errors.conflict(`folder "${path}" is not empty; pass recursive=true to delete it with its contents`);
    }
    // Count what this statement removed, not what was read: a concurrent delete must not be credited twice.
    const rows = await exec(tx)
      .deleteFrom('workspace_files')
      .where(
        'id',
        'in',
        found.map((r) => r.id),
      )
      .returning(['size', 'blob_key'])
      .execute();
    const bytes = rows.reduce((n, r) => n + Number(r.size), 0);
    await chargeStorage(tx, -bytes);
    await recordActivity(tx, {
      resourceType: 'workspace',
      resourceId: workspaceId,
      workspaceId,
      eventType: entry.type === 'folder' ? 'workspace.folder.deleted' : 'workspace.file.deleted',
      status: 'deleted',
      title: `Deleted ${path}`,
      summary: rows.length > 1 ? `${rows.length} entries, ${bytes} bytes` : `${bytes} bytes`,
      metadata: { path, entries: rows.length, bytes },
    });
    return { rows, bytes };
  });
  await Promise.all(rows.filter((r) => r.blob_key).map((r) => ctx.deps.blobs.delete(r.blob_key!).catch(() => undefined)));
  return { deleted: true as const, path, entries: rows.length, bytes };
}

/** A file's metadata and a way to read its bytes (whole or a range). */
export async function openFile(ctx: Ctx, workspaceId: string, rawPath: string) {
  requireScope(ctx, 'storage:read');
  await findWorkspace(ctx, workspaceId);
  const path = normalizeEntryPath(rawPath);
  const row = await findEntry(ctx, workspaceId, path);
  if (!row) throw errors.notFound('file', path);
  if (row.type !== 'file' || !row.blob_key) {
    throw errors.invalidField('path', `"${path}" is a folder; list it with GET /v1/workspaces/${workspaceId}/files?path=${encodeURIComponent(path)}`);
  }
  const blobKey = row.blob_key;
  return {
    entry: toEntry(row),
    sha256: row.sha256,
    read: (range?: { start: number; end: number }) => ctx.deps.blobs.get(blobKey, range),
  };
}

/** A workspace's activity: anyone who can access the workspace sees all its events. */
export async function workspaceActivity(ctx: Ctx, workspaceId: string, query: Omit<ActivityQuery, 'workspace_id'>) {
  await getWorkspace(ctx, workspaceId);
  return listActivity(ctx, { ...query, workspace_id: workspaceId }, { resourceAuthorized: true });
}
