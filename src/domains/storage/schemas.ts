import { z } from 'zod';

export const WorkspaceFileEntry = z
  .object({
    id: z.string(),
    name: z.string(),
    path: z.string().describe('Relative to the workspace root, e.g. `docs/report.pdf`'),
    mimeType: z.string().describe('`inode/directory` for folders'),
    type: z.enum(['file', 'folder']),
    size: z.number().int().describe('Bytes; 0 for folders'),
    mtime: z.string(),
  })
  .meta({ id: 'WorkspaceFileEntry' });
export type WorkspaceFileEntry = z.infer<typeof WorkspaceFileEntry>;

export const Workspace = z
  .object({
    id: z.string(),
    orgId: z.string(),
    kind: z.enum(['personal', 'project']),
    name: z.string(),
    ownerUserId: z.string().nullable(),
    projectId: z.string().nullable(),
    createdAt: z.string(),
  })
  .meta({ id: 'Workspace' });
export type Workspace = z.infer<typeof Workspace>;

export const WorkspaceParams = z.object({ id: z.string().min(1).max(100) });
export const FileParams = z.object({ id: z.string().min(1).max(100), '*': z.string().max(4096) });

export const ListFilesQuery = z.object({
  path: z.string().max(4096).optional().describe('Folder to list; the root when omitted'),
});

export const MakeFolderBody = z.object({ path: z.string().min(1).max(4096) });
export const MoveBody = z.object({
  from: z.string().min(1).max(4096),
  to: z.string().min(1).max(4096),
  overwrite: z.boolean().default(false).describe('Replace an existing file at `to` (never a folder)'),
});
export type MoveBody = z.infer<typeof MoveBody>;

export const DeleteQuery = z.object({
  recursive: z
    .enum(['true', 'false', '1', '0'])
    .transform((v) => v === 'true' || v === '1')
    .default(false)
    .describe('Required to delete a folder that is not empty'),
});

export const DeleteResult = z.object({ deleted: z.literal(true), path: z.string(), entries: z.number().int(), bytes: z.number().int() });
export const StorageUsage = z.object({ usedBytes: z.number().int(), quotaBytes: z.number().int() }).meta({ id: 'StorageUsage' });
