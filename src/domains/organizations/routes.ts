import { z } from 'zod';
import { envelope, errorResponses, ok } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import { CreateOrganizationBody, Me, Organization, Project, ResourcePins, ResourcePinsBody } from './schemas.js';
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
      schema: { tags: ['organizations'], summary: 'Get an organization', params: IdParam, response: { 200: envelope(Organization), ...errorResponses } },
    },
    async (req) => ok(req, await getOrganization(req.ctx, req.params.id)),
  );

  app.get(
    '/v1/me',
    {
      config: { allowNoOrg: true },
      schema: {
        tags: ['organizations'],
        summary: 'Current profile',
        description: 'The user, the organizations with the caller’s role, the organization this request acts in (`X-Org-Id` for session tokens) and its default project.',
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
      schema: { tags: ['projects'], summary: 'Pinned resources of a project', params: IdParam, response: { 200: envelope(ResourcePins), ...errorResponses } },
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
