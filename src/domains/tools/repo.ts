/** The tools domain's SQL: installs, stored credentials, custom tools and execution records, scoped by organization. */
import type { Insertable, Selectable, Updateable } from 'kysely';
import type { CustomToolsTable, ToolCredentialsTable, ToolExecutionsTable, ToolInstallsTable } from '../../database.js';
import { exec, orgId, type Ctx } from '../../platform/context.js';

export type InstallRow = Selectable<ToolInstallsTable>;
export type CredentialsRow = Selectable<ToolCredentialsTable>;
export type CustomRow = Selectable<CustomToolsTable>;

/** '' is the organization-wide owner of installs and credentials. */
export const ORG_OWNER = '';

// ---- installs ----

/** The caller's own installs and the organization's. */
export const visibleInstalls = (ctx: Ctx) =>
  exec(ctx)
    .selectFrom('tool_installs')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('user_id', 'in', [ORG_OWNER, ctx.principal.userId])
    .orderBy('created_at')
    .orderBy('id')
    .execute();

export const installsOf = (ctx: Ctx, slugs: readonly string[]) =>
  slugs.length
    ? exec(ctx)
        .selectFrom('tool_installs')
        .selectAll()
        .where('org_id', '=', orgId(ctx))
        .where('user_id', 'in', [ORG_OWNER, ctx.principal.userId])
        .where('slug', 'in', slugs)
        .execute()
    : Promise.resolve([] as InstallRow[]);

export const findInstall = (ctx: Ctx, owner: string, slug: string) =>
  exec(ctx)
    .selectFrom('tool_installs')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('user_id', '=', owner)
    .where('slug', '=', slug)
    .executeTakeFirst();

export const insertInstall = (ctx: Ctx, row: Insertable<ToolInstallsTable>) => exec(ctx).insertInto('tool_installs').values(row).execute();

export const deleteInstall = async (ctx: Ctx, owner: string, slug: string) =>
  Number(
    (
      await exec(ctx)
        .deleteFrom('tool_installs')
        .where('org_id', '=', orgId(ctx))
        .where('user_id', '=', owner)
        .where('slug', '=', slug)
        .executeTakeFirst()
    ).numDeletedRows,
  );

/** Every member's installs of these slugs (a custom tool that disappears takes its installs with it). */
export const deleteInstallsOfSlugs = (ctx: Ctx, slugs: readonly string[]) =>
  slugs.length ? exec(ctx).deleteFrom('tool_installs').where('org_id', '=', orgId(ctx)).where('slug', 'in', slugs).execute() : Promise.resolve();

// ---- stored credentials ----

export const findCredentials = (ctx: Ctx, owner: string, slug: string) =>
  exec(ctx)
    .selectFrom('tool_credentials')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('user_id', '=', owner)
    .where('slug', '=', slug)
    .executeTakeFirst();

/** The caller's own and the organization's stored credentials of a slug, the caller's first. */
export const credentialsFor = async (ctx: Ctx, slug: string) => {
  const rows = await exec(ctx)
    .selectFrom('tool_credentials')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('user_id', 'in', [ORG_OWNER, ctx.principal.userId])
    .where('slug', '=', slug)
    .execute();
  return rows.sort((a, b) => (a.user_id === ORG_OWNER ? 1 : 0) - (b.user_id === ORG_OWNER ? 1 : 0));
};

export const insertCredentials = (ctx: Ctx, row: Insertable<ToolCredentialsTable>) => exec(ctx).insertInto('tool_credentials').values(row).execute();

export const updateCredentials = (ctx: Ctx, id: string, set: Updateable<ToolCredentialsTable>) =>
  exec(ctx).updateTable('tool_credentials').set(set).where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

export const deleteCredentialsRow = (ctx: Ctx, id: string) =>
  exec(ctx).deleteFrom('tool_credentials').where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

export const deleteCredentialsOfSlugs = (ctx: Ctx, slugs: readonly string[]) =>
  slugs.length ? exec(ctx).deleteFrom('tool_credentials').where('org_id', '=', orgId(ctx)).where('slug', 'in', slugs).execute() : Promise.resolve();

// ---- custom tools ----

export const listCustomRows = (ctx: Ctx) =>
  exec(ctx).selectFrom('custom_tools').selectAll().where('org_id', '=', orgId(ctx)).orderBy('slug').execute();

export const findCustomBySlug = (ctx: Ctx, slug: string) =>
  exec(ctx).selectFrom('custom_tools').selectAll().where('org_id', '=', orgId(ctx)).where('slug', '=', slug).executeTakeFirst();

export const findCustom = (ctx: Ctx, id: string) =>
  exec(ctx).selectFrom('custom_tools').selectAll().where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();

export const insertCustom = (ctx: Ctx, row: Insertable<CustomToolsTable>) => exec(ctx).insertInto('custom_tools').values(row).execute();

export const updateCustom = (ctx: Ctx, id: string, set: Updateable<CustomToolsTable>) =>
  exec(ctx).updateTable('custom_tools').set(set).where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

export const deleteCustomRow = (ctx: Ctx, id: string) =>
  exec(ctx).deleteFrom('custom_tools').where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

/** MCP servers of every organization due for a refresh (the refresh job's list; each is then refreshed in its own org). */
export const mcpServersDue = (ctx: Ctx, before: string) =>
  exec(ctx)
    .selectFrom('custom_tools')
    .select(['id', 'org_id', 'created_by_user_id'])
    .where('kind', '=', 'mcp')
    .where((eb) => eb.or([eb('last_refreshed_at', 'is', null), eb('last_refreshed_at', '<', before)]))
    .limit(100)
    .execute();

// ---- execution records ----

export const insertExecution = (ctx: Ctx, row: Insertable<ToolExecutionsTable>) => exec(ctx).insertInto('tool_executions').values(row).execute();

export const failedExecutionsOfRun = (ctx: Ctx, runId: string) =>
  exec(ctx)
    .selectFrom('tool_executions')
    .select(['tool', 'error_code as errorCode'])
    .where('org_id', '=', orgId(ctx))
    .where('run_id', '=', runId)
    .where('status', '=', 'failed')
    .orderBy('created_at')
    .execute();
