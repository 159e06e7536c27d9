import { z } from 'zod';

export const Organization = z
  .object({
    id: z.string(),
    idpOrgId: z.string().describe('Identifier of the organization at the identity provider'),
    name: z.string(),
    slug: z.string(),
    plan: z.string(),
    enterprise: z.boolean(),
    role: z.string().describe('The caller’s role: `admin` or `member`'),
    orgRole: z.string().describe('Same as `role`'),
    settings: z.record(z.string(), z.unknown()),
    createdAt: z.string(),
    defaultProjectId: z.string(),
    personalWorkspaceId: z.string().nullable().describe('The caller’s Personal workspace in this organization'),
  })
  .meta({ id: 'Organization' });
export type Organization = z.infer<typeof Organization>;

export const CreateOrganizationBody = z.object({ name: z.string().trim().min(1).max(100) });

export const Project = z
  .object({
    id: z.string(),
    orgId: z.string(),
    name: z.string(),
    isDefault: z.boolean(),
    workspaceId: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'Project' });
export type Project = z.infer<typeof Project>;

export const ResourcePins = z
  .object({
    projectId: z.string(),
    items: z.array(z.object({ key: z.string() })),
    updatedAt: z.string(),
  })
  .meta({ id: 'ResourcePins' });
export type ResourcePins = z.infer<typeof ResourcePins>;

export const ResourcePinsBody = z.object({
  items: z
    .array(z.object({ key: z.string().trim().min(1).max(300).describe('e.g. `sandbox:<id>`, `agent:<slug>`, `thread:<id>`') }))
    .max(200)
    .refine((items) => new Set(items.map((i) => i.key)).size === items.length, 'keys must be unique'),
});

export const Me = z
  .object({
    user: z.object({ id: z.string(), email: z.string().nullable(), name: z.string().nullable(), createdAt: z.string() }),
    authType: z.enum(['api_key', 'session']),
    currentOrganizationId: z.string().nullable(),
    scopes: z.array(z.string()),
    organizations: z.array(Organization),
    defaultProjectId: z.string().nullable(),
  })
  .meta({ id: 'Me' });
export type Me = z.infer<typeof Me>;

const RoleName = z.enum(['admin', 'member']).describe('`admin` (every scope, member management) or `member`');

export const Member = z
  .object({
    userId: z.string(),
    email: z.string().nullable(),
    name: z.string().nullable(),
    role: RoleName,
    joinedAt: z.string().describe('When the user became a member'),
    invited: z.boolean().describe('Added by email and not signed in yet: their first sign-in with that verified email takes this membership'),
  })
  .meta({ id: 'Member' });
export type Member = z.infer<typeof Member>;

export const AddMemberBody = z
  .object({
    email: z.email().max(320).describe('An existing user’s email, or the email a new user will sign in with'),
    role: RoleName.default('member'),
  })
  .strict();

export const MemberRoleBody = z.object({ role: RoleName }).strict();

export const OrgParam = z.object({ id: z.string().min(1).max(100) });
export const MemberParams = z.object({ id: z.string().min(1).max(100), userId: z.string().min(1).max(100) });
