import { exec, orgId, requireScope, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import { markRevocation } from '../../platform/revocations.js';
import { scopesNow, type Role } from '../../platform/scopes.js';
import { recordActivity } from '../activity/index.js';
import { INVITED_ISSUER, revokeMemberKeys, userForEmail, userProfiles } from '../identity/index.js';
import type { Member } from './schemas.js';
import { addMember } from './service.js';

/**
 * Member management of an organization (admins only, `org:admin`). The organization in the path must be the
 * one the request acts in (an API key's, or a session token's `X-Org-Id`); any other is 404.
 */
function sameOrg(ctx: Ctx, id: string): string {
  const org = orgId(ctx);
  if (id !== org) throw errors.notFound('organization', id);
  return org;
}

function membershipsQuery(ctx: Ctx, org: string) {
  return exec(ctx).selectFrom('memberships as m').select(['m.user_id', 'm.role', 'm.created_at']).where('m.org_id', '=', org);
}

/** A membership with its user's profile (read through identity, which owns users). */
interface MemberRow {
  user_id: string;
  role: string;
  created_at: string;
  email: string | null;
  name: string | null;
  idp_issuer: string;
}

async function withProfiles(ctx: Ctx, rows: { user_id: string; role: string; created_at: string }[]): Promise<MemberRow[]> {
  const profiles = await userProfiles(
    ctx,
    rows.map((r) => r.user_id),
  );
  const out: MemberRow[] = [];
  for (const r of rows) {
    const p = profiles.get(r.user_id);
    if (p) out.push({ ...r, email: p.email, name: p.name, idp_issuer: p.idpIssuer });
  }
  return out;
}

function toMember(r: MemberRow): Member {
  return { userId: r.user_id, email: r.email, name: r.name, role: r.role as Role, joinedAt: r.created_at, invited: r.idp_issuer === INVITED_ISSUER };
}

export async function listMembers(ctx: Ctx, id: string): Promise<Member[]> {
  requireScope(ctx, 'org:admin');
  const org = sameOrg(ctx, id);
  const rows = await membershipsQuery(ctx, org).orderBy('m.created_at').orderBy('m.user_id').execute();
  return (await withProfiles(ctx, rows)).map(toMember);
}

/**
 * Member changes of one organization run one at a time across replicas: the organization's row is locked
 * (PostgreSQL; SQLite serializes writers), so two admins demoting each other cannot leave it without one.
 */
async function lockOrg(ctx: Ctx, org: string): Promise<void> {
  let q = exec(ctx).selectFrom('organizations').select('id').where('id', '=', org);
  if (ctx.deps.db.dialect === 'postgres') q = q.forUpdate();
  await q.executeTakeFirstOrThrow();
}

async function findMember(ctx: Ctx, org: string, userId: string): Promise<MemberRow> {
  const membership = await membershipsQuery(ctx, org).where('m.user_id', '=', userId).executeTakeFirst();
  const [row] = membership ? await withProfiles(ctx, [membership]) : [];
  if (!row) throw errors.notFound('member', userId);
  return row;
}

async function refuseLastAdmin(ctx: Ctx, org: string, member: MemberRow, action: string): Promise<void> {
  if (member.role !== 'admin') return;
  const admins = await exec(ctx)
    .selectFrom('memberships')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('org_id', '=', org)
    .where('role', '=', 'admin')
    .executeTakeFirstOrThrow();
  if (Number(admins.n) <= 1) throw errors.conflict(`cannot ${action} the organization’s last admin; make another member admin first`);
}

function memberActivity(ctx: Ctx, org: string, eventType: string, title: string, metadata: Record<string, unknown>) {
  return recordActivity(ctx, { resourceType: 'organization', resourceId: org, eventType, status: 'completed', title, metadata }, org);
}

/**
 * Adds a user by email with a role: an existing user, or a new invited record that their first sign-in with
 * that verified email takes over (an OIDC issuer's `email_verified`). 409 when already a member.
 */
export async function addMemberByEmail(ctx: Ctx, id: string, input: { email: string; role: Role }): Promise<Member> {
  requireScope(ctx, 'org:admin');
  const org = sameOrg(ctx, id);
  return withTx(ctx, async (tx) => {
    await lockOrg(tx, org);
    const user = await userForEmail(tx, input.email);
    await addMember(tx, org, user.id, input.role);
    await memberActivity(tx, org, 'member.added', `${user.email ?? user.id} added as ${input.role}`, {
      userId: user.id,
      email: user.email,
      role: input.role,
      invited: user.invited,
    });
    return toMember(await findMember(tx, org, user.id));
  });
}

/** A new role applies to the member's next request; their open sockets close (4401) so a reconnect gets the new view. */
export async function changeMemberRole(ctx: Ctx, id: string, userId: string, role: Role): Promise<Member> {
  requireScope(ctx, 'org:admin');
  const org = sameOrg(ctx, id);
  let changed = false;
  const result = await withTx(ctx, async (tx) => {
    await lockOrg(tx, org);
    const member = await findMember(tx, org, userId);
    if (member.role === role) return toMember(member);
    changed = true;
    if (role !== 'admin') await refuseLastAdmin(tx, org, member, 'demote');
    await exec(tx).updateTable('memberships').set({ role }).where('org_id', '=', org).where('user_id', '=', userId).execute();
    await markRevocation(exec(tx));
    await memberActivity(tx, org, 'member.role_changed', `${member.email ?? userId} is now ${role}`, {
      userId,
      email: member.email,
      from: member.role,
      to: role,
    });
    return toMember({ ...member, role });
  });
  if (changed) await ctx.deps.live.publish({ kind: 'membership', userId, orgId: org, removed: false });
  return result;
}

/**
 * Removes a member: their API keys in this organization are revoked in the same transaction, and their open
 * sockets in it (keys and session tokens) close on every replica once it committed. What they created stays.
 */
export async function removeMember(ctx: Ctx, id: string, userId: string): Promise<void> {
  requireScope(ctx, 'org:admin');
  const org = sameOrg(ctx, id);
  await withTx(ctx, async (tx) => {
    await lockOrg(tx, org);
    const member = await findMember(tx, org, userId);
    await refuseLastAdmin(tx, org, member, 'remove');
    await exec(tx).deleteFrom('memberships').where('org_id', '=', org).where('user_id', '=', userId).execute();
    await markRevocation(exec(tx));
    const revoked = await revokeMemberKeys(tx, org, userId);
    await memberActivity(tx, org, 'member.removed', `${member.email ?? userId} removed`, {
      userId,
      email: member.email,
      role: member.role,
      revokedApiKeys: revoked,
    });
  });
  await ctx.deps.live.publish({ kind: 'membership', userId, orgId: org, removed: true });
}

/**
 * A user's membership for the authenticator (app.ts passes this to identity's `createAuthenticator`): in `org`
 * when given, else the user's oldest (ties broken by organization id); null when there is none.
 */
export async function membershipOf(deps: Deps, userId: string, org?: string): Promise<{ orgId: string; role: Role } | null> {
  let q = deps.db.kysely.selectFrom('memberships').select(['org_id', 'role']).where('user_id', '=', userId);
  if (org) q = q.where('org_id', '=', org);
  const m = await q.orderBy('created_at').orderBy('org_id').limit(1).executeTakeFirst();
  return m ? { orgId: m.org_id, role: m.role as Role } : null;
}

/**
 * Work done later for a member (a queued deployment invocation, a trigger firing, a workflow step): their context in
 * `org` with the scopes the asking credential held, within what their role grants now (a demotion or a narrower key
 * both narrow it); null when they are no longer a member.
 */
export async function laterMemberCtx(
  deps: Deps,
  userId: string,
  org: string,
  granted: readonly string[],
  kind: 'session' | 'system' = 'session',
): Promise<Ctx | null> {
  const m = await membershipOf(deps, userId, org);
  if (!m) return null;
  return systemCtx(deps, { kind, userId, orgId: org, role: m.role, scopes: scopesNow(m.role, granted), apiKeyId: null });
}

/**
 * The oldest membership matching the filter, for the CLI acting as a member (`keys create`): of the given
 * organization and/or user, or else the first admin's. Undefined when none matches.
 */
export async function firstMembership(
  deps: Deps,
  filter: { orgId?: string; userId?: string },
): Promise<{ orgId: string; userId: string; role: Role } | undefined> {
  let q = deps.db.kysely.selectFrom('memberships').select(['org_id', 'user_id', 'role']).orderBy('created_at');
  if (filter.orgId) q = q.where('org_id', '=', filter.orgId);
  if (filter.userId) q = q.where('user_id', '=', filter.userId);
  else q = q.where('role', '=', 'admin');
  const m = await q.executeTakeFirst();
  return m && { orgId: m.org_id, userId: m.user_id, role: m.role as Role };
}
