import type { Selectable } from 'kysely';
import type { OrganizationsTable, ProjectsTable } from '../../database.js';
import { exec, orgId, requireScope, withTx, type Ctx } from '../../platform/context.js';
import { isUniqueViolation } from '../../platform/db/index.js';
import { errors } from '../../platform/http/errors.js';
import { base62, nowIso, uuid } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { grantSignupCredits, openBillingAccount } from '../billing/index.js';
import { getUserProfile, lockUser } from '../identity/index.js';
import { createWorkspace, initStorage, personalWorkspaceIds, projectWorkspaceIds } from '../storage/index.js';
import type { Me, Organization, Project, ResourcePins } from './schemas.js';

/**
 * The identity-provider adapter. The built-in provider is Hangar itself; an external one (an OIDC
 * provider with an organizations API) plugs in here and returns its own id.
 */
export const builtinIdentityProvider = {
  async createOrganization(_input: { name: string; slug: string }): Promise<string> {
    return `org_${base62(20)}`;
  },
};

function slugify(name: string): string {
  const base = name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 40);
  return base || 'org';
}

function toOrganization(row: Selectable<OrganizationsTable>, role: string, personal: string | null): Organization {
  return {
    id: row.id,
    idpOrgId: row.idp_org_id,
    name: row.name,
    slug: row.slug,
    plan: row.plan,
    enterprise: row.enterprise === 1,
    role,
    orgRole: role,
    settings: JSON.parse(row.settings),
    createdAt: row.created_at,
    defaultProjectId: row.default_project_id,
    personalWorkspaceId: personal,
  };
}

/**
 * Creates an organization for the calling user: registered at the identity provider, caller as admin,
 * a default project with its workspace, the caller's Personal workspace, and sign-up credits when it is
 * the user's first organization (once per user, even when retried: the ledger's idempotency key is the
 * user's). A user creates at most `maxOrgsPerUser` organizations (429 `limit_exceeded`), counted under a
 * lock of the user's row so concurrent creates on any replica cannot pass it together.
 */
export async function createOrganization(ctx: Ctx, input: { name: string }): Promise<Organization> {
  requireScope(ctx, 'org:create');
  const userId = ctx.principal.userId;
  const base = slugify(input.name);
  const taken = await exec(ctx).selectFrom('organizations').select('id').where('slug', '=', base).executeTakeFirst();
  const slug = taken ? `${base}-${base62(6).toLowerCase()}` : base;
  const idpOrgId = await builtinIdentityProvider.createOrganization({ name: input.name, slug });
  try {
    return await withTx(ctx, async (tx) => {
      const max = tx.deps.config.maxOrgsPerUser;
      await lockUser(tx, userId);
      const created = await exec(tx)
        .selectFrom('organizations')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('created_by_user_id', '=', userId)
        .executeTakeFirstOrThrow();
      if (Number(created.n) >= max) {
        throw errors.limitExceeded(
          `you have created ${max} organizations, the most this server allows one user; ask an admin of an existing one to add you instead`,
        );
      }
      const now = nowIso();
      const id = uuid();
      const projectId = uuid();
      const firstOrg = !(await exec(tx).selectFrom('memberships').select('org_id').where('user_id', '=', userId).executeTakeFirst());
      const row = {
        id,
        idp_org_id: idpOrgId,
        name: input.name,
        slug,
        plan: 'free',
        enterprise: 0,
        settings: '{}',
        default_project_id: projectId,
        created_by_user_id: userId,
        created_at: now,
      };
      await exec(tx).insertInto('organizations').values(row).execute();
      await exec(tx).insertInto('memberships').values({ org_id: id, user_id: userId, role: 'admin', created_at: now }).execute();
      await exec(tx)
        .insertInto('projects')
        .values({ id: projectId, org_id: id, name: 'Default', is_default: 1, resource_pins: '[]', created_at: now, updated_at: now })
        .execute();
      await initStorage(tx, id);
      await createWorkspace(tx, { org: id, kind: 'project', name: 'Default', projectId });
      const personal = await createWorkspace(tx, { org: id, kind: 'personal', name: 'Personal', ownerUserId: userId });
      await openBillingAccount(tx, id);
      const granted = firstOrg ? await grantSignupCredits(tx, id, userId, tx.deps.config.signupCreditsCents) : false;
      await recordActivity(
        tx,
        {
          resourceType: 'organization',
          resourceId: id,
          eventType: 'organization.created',
          status: 'created',
          title: `Organization "${input.name}" created`,
          summary: granted ? `sign-up credits of ${tx.deps.config.signupCreditsCents} cents granted` : '',
        },
        id,
      );
      return toOrganization(row, 'admin', personal);
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw errors.conflict(`an organization with slug "${slug}" was created at the same time; retry`);
    throw err;
  }
}

/** The caller's organizations with their role, oldest membership first. */
export async function listMyOrganizations(ctx: Ctx): Promise<Organization[]> {
  const userId = ctx.principal.userId;
  let q = exec(ctx)
    .selectFrom('memberships as m')
    .innerJoin('organizations as o', 'o.id', 'm.org_id')
    .selectAll('o')
    .select(['m.role'])
    .where('m.user_id', '=', userId);
  // An API key belongs to one organization and sees only that one.
  if (ctx.principal.kind === 'api_key') q = q.where('o.id', '=', orgId(ctx));
  const rows = await q.orderBy('m.created_at').orderBy('o.id').execute();
  const personal = await personalWorkspaceIds(
    ctx,
    userId,
    rows.map((r) => r.id),
  );
  return rows.map((r) => toOrganization(r, r.role, personal.get(r.id) ?? null));
}

export async function getOrganization(ctx: Ctx, id: string): Promise<Organization> {
  requireScope(ctx, 'org:read');
  const org = (await listMyOrganizations(ctx)).find((o) => o.id === id);
  if (!org) throw errors.notFound('organization', id);
  return org;
}

export async function getMe(ctx: Ctx): Promise<Me> {
  const user = await getUserProfile(ctx, ctx.principal.userId);
  if (!user) throw errors.unauthenticated('the credential names an unknown user');
  const organizations = await listMyOrganizations(ctx);
  const current = organizations.find((o) => o.id === ctx.principal.orgId) ?? null;
  return {
    user: { id: user.id, email: user.email, name: user.name, createdAt: user.createdAt },
    authType: ctx.principal.kind === 'api_key' ? 'api_key' : 'session',
    currentOrganizationId: current?.id ?? null,
    scopes: [...ctx.principal.scopes].sort(),
    organizations,
    defaultProjectId: current?.defaultProjectId ?? null,
  };
}

function toProject(row: Selectable<ProjectsTable> & { workspace_id: string | null }): Project {
  return {
    id: row.id,
    orgId: row.org_id,
    name: row.name,
    isDefault: row.is_default === 1,
    workspaceId: row.workspace_id,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

function projectsInOrg(ctx: Ctx) {
  return exec(ctx).selectFrom('projects as p').selectAll('p').where('p.org_id', '=', orgId(ctx));
}

/** Projects with their workspace id (storage owns workspaces and answers it). */
async function withWorkspaces(ctx: Ctx, rows: Selectable<ProjectsTable>[]): Promise<Project[]> {
  const workspaces = await projectWorkspaceIds(
    ctx,
    rows.map((r) => r.id),
  );
  return rows.map((r) => toProject({ ...r, workspace_id: workspaces.get(r.id) ?? null }));
}

export async function listProjects(ctx: Ctx): Promise<Project[]> {
  requireScope(ctx, 'projects:read');
  return withWorkspaces(ctx, await projectsInOrg(ctx).orderBy('p.created_at').execute());
}

export async function getProject(ctx: Ctx, id: string): Promise<Project> {
  requireScope(ctx, 'projects:read');
  const row = await projectsInOrg(ctx).where('p.id', '=', id).executeTakeFirst();
  if (!row) throw errors.notFound('project', id);
  return (await withWorkspaces(ctx, [row]))[0];
}

export async function getResourcePins(ctx: Ctx, projectId: string): Promise<ResourcePins> {
  requireScope(ctx, 'projects:read');
  const row = await exec(ctx)
    .selectFrom('projects')
    .select(['id', 'resource_pins', 'updated_at'])
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', projectId)
    .executeTakeFirst();
  if (!row) throw errors.notFound('project', projectId);
  return { projectId: row.id, items: JSON.parse(row.resource_pins), updatedAt: row.updated_at };
}

/** Replaces the project's pinned resources as a whole, in the order given. */
export async function replaceResourcePins(ctx: Ctx, projectId: string, items: { key: string }[]): Promise<ResourcePins> {
  requireScope(ctx, 'projects:write');
  return withTx(ctx, async (tx) => {
    await getResourcePins(tx, projectId);
    const now = nowIso();
    const pins = items.map((i) => ({ key: i.key }));
    await exec(tx)
      .updateTable('projects')
      .set({ resource_pins: JSON.stringify(pins), updated_at: now })
      .where('id', '=', projectId)
      .where('org_id', '=', orgId(tx))
      .execute();
    await recordActivity(tx, {
      resourceType: 'project',
      resourceId: projectId,
      eventType: 'project.resource_pins.updated',
      status: 'updated',
      title: 'Pinned resources replaced',
      summary: `${pins.length} pinned`,
      metadata: { keys: pins.map((p) => p.key) },
    });
    return { projectId, items: pins, updatedAt: now };
  });
}

/** Adds a user to an organization with a role and gives them a Personal workspace there. */
export async function addMember(ctx: Ctx, org: string, userId: string, role: 'admin' | 'member'): Promise<{ personalWorkspaceId: string }> {
  return withTx(ctx, async (tx) => {
    const exists = await exec(tx).selectFrom('memberships').select('role').where('org_id', '=', org).where('user_id', '=', userId).executeTakeFirst();
    if (exists) throw errors.conflict(`user ${userId} is already a member of organization ${org}`);
    await exec(tx).insertInto('memberships').values({ org_id: org, user_id: userId, role, created_at: nowIso() }).execute();
    const personal = await createWorkspace(tx, { org, kind: 'personal', name: 'Personal', ownerUserId: userId });
    return { personalWorkspaceId: personal };
  });
}
