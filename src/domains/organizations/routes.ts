import { z } from 'zod';
import { envelope, errorResponses, ok } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import {
  AddMemberBody,
  CreateOrganizationBody,
  Me,
  Member,
  MemberParams,
  MemberRoleBody,
  Organization,
  OrgParam,
  Project,
  ResourcePins,
  ResourcePinsBody,
} from './schemas.js';
import { addMemberByEmail, changeMemberRole, listMembers, removeMember } from './members.js';
import {
  createOrganization,
  getMe,
  getOrganization,
  getProject,
  getResourcePins,
  listMyOrganizations,
  listProjects,
  replaceResourcePins,
} from './service.js';

const IdParam = z.object({ id: z.string().min(1).max(100) });

export async function organizationRoutes(app: App) {
  app.post(
    '/v1/organizations',
    {
      config: { scope: 'org:create', allowNoOrg: true },
      schema: {
        tags: ['organizations'],
        summary: 'Create an organization',
        description:
          'Registers the organization at the identity provider, adds the caller as admin, creates a default project and the caller’s Personal workspace, and grants sign-up credits on the caller’s first organization.',
        body: CreateOrganizationBody,
        response: { 201: envelope(Organization), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createOrganization(req.ctx, req.body))),
  );

  app.get(
    '/v1/organizations',
    {
      config: { allowNoOrg: true },
      schema: {
        tags: ['organizations'],
        summary: 'Organizations of the caller',
        description: 'With an API key, only the key’s organization.',
        response: { 200: envelope(z.array(Organization)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listMyOrganizations(req.ctx)),
  );

  app.get(
    '/v1/organizations/:id',
    {
      config: { scope: 'org:read' },
      schema: {
        tags: ['organizations'],
        summary: 'Get an organization',
        params: IdParam,
        response: { 200: envelope(Organization), ...errorResponses },
      },
    },
    async (req) => ok(req, await getOrganization(req.ctx, req.params.id)),
  );

  const membersTags = ['organizations'];
  const inOrg =
    'The organization in the path must be the one the request acts in (an API key’s; `X-Org-Id` for a session token); another is 404. Organization admins only.';

  app.get(
    '/v1/organizations/:id/members',
    {
      config: { scope: 'org:admin' },
      schema: {
        tags: membersTags,
        summary: 'List members',
        description: `Every member with their role, oldest first. ${inOrg}`,
        params: OrgParam,
        response: { 200: envelope(z.array(Member)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listMembers(req.ctx, req.params.id)),
  );

  app.post(
    '/v1/organizations/:id/members',
    {
      config: { scope: 'org:admin' },
      schema: {
        tags: membersTags,
        summary: 'Add a member by email',
        description: [
          'Adds the user with that email with the role (default `member`) and gives them a Personal workspace. ',
          'When no user has the email yet, an invited user record is made (`invited: true`): their first sign-in through the configured OIDC issuer ',
          'with that email, verified by the issuer (`email_verified`), becomes this user, membership included. ',
          `409 when already a member (or when several users share the email). Activity \`member.added\`. ${inOrg}`,
        ].join(''),
        params: OrgParam,
        body: AddMemberBody,
        response: { 201: envelope(Member), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await addMemberByEmail(req.ctx, req.params.id, req.body))),
  );

  app.patch(
    '/v1/organizations/:id/members/:userId',
    {
      config: { scope: 'org:admin' },
      schema: {
        tags: membersTags,
        summary: 'Change a member’s role',
        description: `Applies to the member’s next request; their open WebSockets in the organization close with 4401 so a reconnect gets the new view. 409 when it would leave the organization without an admin. Activity \`member.role_changed\`. ${inOrg}`,
        params: MemberParams,
        body: MemberRoleBody,
        response: { 200: envelope(Member), ...errorResponses },
      },
    },
    async (req) => ok(req, await changeMemberRole(req.ctx, req.params.id, req.params.userId, req.body.role)),
  );

  app.delete(
    '/v1/organizations/:id/members/:userId',
    {
      config: { scope: 'org:admin' },
      schema: {
        tags: membersTags,
        summary: 'Remove a member',
        description: [
          'Their API keys in this organization are revoked and their open WebSockets in it (API key or session token) close with 4401 on every replica. ',
          `What they created (sandboxes, threads, files) stays. 409 for the last admin. Activity \`member.removed\`. ${inOrg}`,
        ].join(''),
        params: MemberParams,
        response: { 204: z.null(), ...errorResponses },
      },
    },
    async (req, reply) => {
      await removeMember(req.ctx, req.params.id, req.params.userId);
      return reply.status(204).send(null);
    },
  );

  app.get(
    '/v1/me',
    {
      config: { allowNoOrg: true },
      schema: {
        tags: ['organizations'],
        summary: 'Current profile',
        description:
          'The user, the organizations with the caller’s role, the organization this request acts in (`X-Org-Id` for session tokens) and its default project.',
        response: { 200: envelope(Me), ...errorResponses },
      },
    },
    async (req) => ok(req, await getMe(req.ctx)),
  );

  app.get(
    '/v1/projects',
    {
      config: { scope: 'projects:read' },
      schema: { tags: ['projects'], summary: 'List projects', response: { 200: envelope(z.array(Project)), ...errorResponses } },
    },
    async (req) => ok(req, await listProjects(req.ctx)),
  );

  app.get(
    '/v1/projects/:id',
    {
      config: { scope: 'projects:read' },
      schema: { tags: ['projects'], summary: 'Get a project', params: IdParam, response: { 200: envelope(Project), ...errorResponses } },
    },
    async (req) => ok(req, await getProject(req.ctx, req.params.id)),
  );

  app.get(
    '/v1/projects/:id/resource-pins',
    {
      config: { scope: 'projects:read' },
      schema: {
        tags: ['projects'],
        summary: 'Pinned resources of a project',
        params: IdParam,
        response: { 200: envelope(ResourcePins), ...errorResponses },
      },
    },
    async (req) => ok(req, await getResourcePins(req.ctx, req.params.id)),
  );

  app.put(
    '/v1/projects/:id/resource-pins',
    {
      config: { scope: 'projects:write' },
      schema: {
        tags: ['projects'],
        summary: 'Replace the pinned resources of a project',
        description: 'The list given replaces the previous one, in order. Keys are free-form resource references, unique within the list.',
        params: IdParam,
        body: ResourcePinsBody,
        response: { 200: envelope(ResourcePins), ...errorResponses },
      },
    },
    async (req) => ok(req, await replaceResourcePins(req.ctx, req.params.id, req.body.items)),
  );
}
