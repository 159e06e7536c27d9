import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listActivity } from '../src/domains/activity/service.js';
import { createAgent } from '../src/domains/agents/service.js';
import { getBalance } from '../src/domains/billing/service.js';
import { executeCode } from '../src/domains/execute/service.js';
import { createApiKey, listApiKeys } from '../src/domains/identity/service.js';
import { availableModels } from '../src/domains/models/service.js';
import { removeMember } from '../src/domains/organizations/members.js';
import { replaceResourcePins } from '../src/domains/organizations/service.js';
import { destroySandbox, listSandboxes } from '../src/domains/sandboxes/service.js';
import { listSecrets, putSecret } from '../src/domains/secrets/service.js';
import { makeFolder } from '../src/domains/storage/service.js';
import { createTemplate, deleteTemplate } from '../src/domains/templates/service.js';
import { createThread, deleteThread } from '../src/domains/threads/service.js';
import { systemCtx, type Ctx } from '../src/platform/context.js';
import { AppError } from '../src/platform/http/errors.js';
import { ROLE_SCOPES, type Scope } from '../src/platform/scopes.js';
import { addOrgMember, createHarness, createOrgAdmin, json, type Actor, type Harness } from './harness.js';

// The verbs check their scope themselves, so the CLI, the WebSocket and background jobs get the HTTP hook's rule:
// an organization admin's context with every scope but the one a verb needs is refused with `forbidden`.

let h: Harness;
let admin: Actor;
let member: Actor;

beforeAll(async () => {
  h = await createHarness();
  admin = await createOrgAdmin(h);
  member = await addOrgMember(h, admin);
});
afterAll(() => h?.close());

const without = (scope: Scope): Ctx =>
  systemCtx(h.deps, {
    userId: admin.userId,
    orgId: admin.orgId,
    role: 'admin',
    scopes: new Set([...ROLE_SCOPES.admin].filter((s) => s !== scope)),
    apiKeyId: null,
  });

async function expectForbidden(scope: Scope, call: (ctx: Ctx) => Promise<unknown>) {
  const err = await call(without(scope)).then(
    () => null,
    (e: unknown) => e,
  );
  expect(err, `a context without ${scope} was let through`).toBeInstanceOf(AppError);
  expect((err as AppError).code).toBe('forbidden');
  expect((err as AppError).message).toContain(scope);
}

describe('verbs check their scope, whoever calls them', () => {
  it('secrets: put and list', async () => {
    await expectForbidden('secrets:write', (ctx) => putSecret(ctx, { name: 'NOPE', value: 'v', scope: 'user' }));
    await expectForbidden('secrets:read', (ctx) => listSecrets(ctx));
    // nothing was stored: the admin's own listing (the control) is empty
    const res = await h.app.inject({ method: 'GET', url: '/v1/secrets', headers: admin.headers });
    expect(res.statusCode).toBe(200);
    expect(json(res).data).toEqual([]);
  });

  it('templates: create and delete', async () => {
    await expectForbidden('templates:write', (ctx) => createTemplate(ctx, { slug: 'nope', name: 'Nope', apt: ['cowsay'] } as never));
    await expectForbidden('templates:write', (ctx) => deleteTemplate(ctx, 'nope'));
  });

  it('threads: create and delete', async () => {
    await expectForbidden('agent:run', (ctx) => createThread(ctx, { executionMode: 'cloud' }));
    const created = await h.app.inject({ method: 'POST', url: '/v1/threads', headers: admin.headers, payload: {} });
    expect(created.statusCode, created.body).toBe(201);
    const id = json(created).data.id as string;
    await expectForbidden('agent:run', (ctx) => deleteThread(ctx, id));
    expect((await h.app.inject({ method: 'GET', url: `/v1/threads/${id}`, headers: admin.headers })).statusCode).toBe(200);
  });

  it('sandboxes: list and destroy', async () => {
    await expectForbidden('sandbox:read', (ctx) => listSandboxes(ctx, { limit: 10 }));
    await expectForbidden('sandbox:write', (ctx) => destroySandbox(ctx, 'sbx_nope'));
  });

  it('agents: create', async () => {
    await expectForbidden('agent:write', (ctx) => createAgent(ctx, { slug: 'nope', name: 'Nope' } as never));
    const res = await h.app.inject({ method: 'GET', url: '/v1/agents/nope', headers: admin.headers });
    expect(res.statusCode).toBe(404);
  });

  it('organizations: resource pins and members', async () => {
    await expectForbidden('projects:write', (ctx) => replaceResourcePins(ctx, admin.projectId, []));
    await expectForbidden('org:admin', (ctx) => removeMember(ctx, admin.orgId, member.userId));
    const members = await h.app.inject({ method: 'GET', url: `/v1/organizations/${admin.orgId}/members`, headers: admin.headers });
    expect(json(members).data.map((m: { userId: string }) => m.userId)).toContain(member.userId);
  });

  it('identity: API keys', async () => {
    await expectForbidden('api_keys:write', (ctx) => createApiKey(ctx, { name: 'nope', scopes: ['*'], environment: 'live' }));
    await expectForbidden('api_keys:read', (ctx) => listApiKeys(ctx, { limit: 10 } as never));
  });

  it('storage: make a folder', async () => {
    await expectForbidden('storage:write', (ctx) => makeFolder(ctx, admin.personalWorkspaceId, 'nope'));
  });

  it('activity, billing, models and execute', async () => {
    await expectForbidden('activity:read', (ctx) => listActivity(ctx, { limit: 10 } as never));
    await expectForbidden('billing:read', (ctx) => getBalance(ctx));
    await expectForbidden('models:use', (ctx) => availableModels(ctx));
    await expectForbidden('execute:run', (ctx) => executeCode(ctx, null as never, { language: 'python', code: 'print(1)' } as never));
  });
});
