import { exec, type Ctx, type Deps } from '../../platform/context.js';
import { nowIso } from '../../platform/ids.js';
import { markRevocation } from '../../platform/revocations.js';

/**
 * Identity's verbs over its own tables (users, api_keys) for the domains that need a user's profile or a
 * member's keys; they never query these tables themselves.
 */
export interface UserProfile {
  id: string;
  email: string | null;
  name: string | null;
  idpIssuer: string;
  createdAt: string;
}

function toProfile(r: { id: string; email: string | null; name: string | null; idp_issuer: string; created_at: string }): UserProfile {
  return { id: r.id, email: r.email, name: r.name, idpIssuer: r.idp_issuer, createdAt: r.created_at };
}

/** One user's profile; undefined when there is no such user. */
export async function getUserProfile(ctx: Ctx, userId: string): Promise<UserProfile | undefined> {
  const row = await exec(ctx)
    .selectFrom('users')
    .select(['id', 'email', 'name', 'idp_issuer', 'created_at'])
    .where('id', '=', userId)
    .executeTakeFirst();
  return row && toProfile(row);
}

/** The profiles of the given users (those that exist), by id. */
export async function userProfiles(ctx: Ctx, userIds: readonly string[]): Promise<Map<string, UserProfile>> {
  if (!userIds.length) return new Map();
  const rows = await exec(ctx)
    .selectFrom('users')
    .select(['id', 'email', 'name', 'idp_issuer', 'created_at'])
    .where('id', 'in', [...new Set(userIds)])
    .execute();
  return new Map(rows.map((r) => [r.id, toProfile(r)]));
}

/**
 * Locks the user's row until the caller's transaction ends (PostgreSQL; SQLite serializes writers), so that
 * per-user limits checked inside it hold across replicas. Call it inside withTx.
 */
export async function lockUser(ctx: Ctx, userId: string): Promise<void> {
  let q = exec(ctx).selectFrom('users').select('id').where('id', '=', userId);
  if (ctx.deps.db.dialect === 'postgres') q = q.forUpdate();
  await q.executeTakeFirst();
}

/** Revokes every live API key the user holds in the organization (a member removed); answers how many. */
export async function revokeMemberKeys(ctx: Ctx, org: string, userId: string): Promise<number> {
  const result = await exec(ctx)
    .updateTable('api_keys')
    .set({ revoked_at: nowIso() })
    .where('org_id', '=', org)
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  const revoked = Number(result.numUpdatedRows);
  // Cached keys are trusted only while the mark stands (key-cache.ts).
  if (revoked > 0) await markRevocation(exec(ctx));
  return revoked;
}

/** True once the database has any user (the CLI's `init` refuses to run twice). */
export async function hasUsers(deps: Deps): Promise<boolean> {
  return Boolean(await deps.db.kysely.selectFrom('users').select('id').limit(1).executeTakeFirst());
}

/** True when the user exists (the CLI's `token --user`). */
export async function userExists(deps: Deps, userId: string): Promise<boolean> {
  return Boolean(await deps.db.kysely.selectFrom('users').select('id').where('id', '=', userId).executeTakeFirst());
}
