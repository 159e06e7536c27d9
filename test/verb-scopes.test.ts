import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listActivity } from '../src/domains/activity/service.js';
import { installAgent } from '../src/domains/agents/installable.js';
import { createAgent, findAgentRow } from '../src/domains/agents/service.js';
import { getBalance } from '../src/domains/billing/service.js';
import { completeCheckout, getAutoTopup, putAutoTopup, startTopup } from '../src/domains/billing/topups.js';
import { executeCode } from '../src/domains/execute/service.js';
import { createApiKey, listApiKeys } from '../src/domains/identity/service.js';
import { availableModels } from '../src/domains/models/service.js';
import { getAccessToken } from '../src/domains/oauth/index.js';
import { listConfigs, listConnections, putConfig, startBrowserFlow } from '../src/domains/oauth/service.js';
import { removeMember } from '../src/domains/organizations/members.js';
import { replaceResourcePins } from '../src/domains/organizations/service.js';
import { cancelRun, getRun, startRun } from '../src/domains/runs/service.js';
import {
  agentOf,
  createSandbox,
  destroySandbox,
  getSandbox,
  listSandboxes,
  resumeSandbox,
  threadSandboxCtx,
} from '../src/domains/sandboxes/service.js';
import { listSecrets, putSecret } from '../src/domains/secrets/service.js';
import { getWorkspace, makeFolder } from '../src/domains/storage/service.js';
import { createTemplate, deleteTemplate } from '../src/domains/templates/service.js';
import { createThread, deleteThread, getThread } from '../src/domains/threads/service.js';
import { createCustomTool, listCustomTools, refreshCustomTool } from '../src/domains/tools/custom.js';
import { executeTool } from '../src/domains/tools/execute.js';
import { getTool, installTool, listTools, putToolCredentials } from '../src/domains/tools/service.js';
import { createChannel, deleteChannel, listChannels, registerWebhook, validateConnection } from '../src/domains/channels/service.js';
import { approveRequest, createGrant, getPrivacy, revokeGrant, updatePrivacy } from '../src/domains/channels/privacy.js';
import { listChannelMessages } from '../src/domains/channels/messages.js';
import { createApp, createBinding, createLinkSession, listApps, listLinks } from '../src/domains/channels/product.js';
import { addBlocks, listBlocks } from '../src/domains/sessions/blocks.js';
import { compactSession } from '../src/domains/sessions/compact.js';
import { openSessionForRun } from '../src/domains/sessions/runs.js';
import { createSession, deleteSession, forkSession, getSession, listSessions } from '../src/domains/sessions/service.js';
import {
  createDeployment,
  deleteDeployment,
  invokeDeployment,
  listDeployments,
  redeliver,
  triggerInvoker,
} from '../src/domains/deployments/service.js';
import { createTrigger, deleteTrigger, listTriggers, pauseTrigger } from '../src/domains/triggers/service.js';
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

/** The admin's context with every scope but `scopes` (several where a verb accepts any of them). */
const without = (...scopes: Scope[]): Ctx =>
  systemCtx(h.deps, {
    userId: admin.userId,
    orgId: admin.orgId,
    role: 'admin',
    scopes: new Set([...ROLE_SCOPES.admin].filter((s) => !scopes.includes(s))),
    apiKeyId: null,
  });

async function expectForbidden(scope: Scope | Scope[], call: (ctx: Ctx) => Promise<unknown>) {
  const scopes = Array.isArray(scope) ? scope : [scope];
  const err = await call(without(...scopes)).then(
    () => null,
    (e: unknown) => e,
  );
  expect(err, `a context without ${scopes.join(', ')} was let through`).toBeInstanceOf(AppError);
  expect((err as AppError).code).toBe('forbidden');
  for (const s of scopes) expect((err as AppError).message).toContain(s);
}

/** The verb accepts a context holding just one of `scopes` (of those it checks): it gets past the check. */
async function expectAccepted(scopes: Scope[], call: (ctx: Ctx) => Promise<unknown>) {
  for (const kept of scopes) {
    const err = await call(without(...scopes.filter((s) => s !== kept))).then(
      () => null,
      (e: unknown) => e,
    );
    expect((err as AppError | null)?.code, `a context with ${kept} was refused: ${(err as Error | null)?.message}`).not.toBe('forbidden');
  }
}

describe('verbs check their scope, whoever calls them', () => {
  it('channels: connect, read, privacy, webhooks and messages', async () => {
    await expectForbidden('channels:write', (ctx) =>
      createChannel(ctx, { agent: 'x', provider: 'chatbot_provider', mode: 'byok', botTokenSecretName: 'X' }),
    );
    await expectForbidden('channels:read', (ctx) => listChannels(ctx, {}));
    await expectForbidden('channels:write', (ctx) => deleteChannel(ctx, 'ach_nope'));
    await expectForbidden('channels:write', (ctx) => registerWebhook(ctx, 'ach_nope'));
    await expectForbidden('channels:write', (ctx) =>
      validateConnection(ctx, 'business_messaging_provider', { agent: 'x', accessToken: 't', phoneNumberId: '1', businessAccountId: '2' }),
    );
    await expectForbidden('channels:read', (ctx) => getPrivacy(ctx, 'ach_nope'));
    await expectForbidden('channels:write', (ctx) => updatePrivacy(ctx, 'ach_nope', { mode: 'open' }));
    await expectForbidden('channels:write', (ctx) => approveRequest(ctx, 'ach_nope', 'cpr_nope'));
    await expectForbidden('channels:write', (ctx) =>
      createGrant(ctx, 'ach_nope', { scope: 'conversation', externalConversationId: '1', conversationType: 'private' }),
    );
    await expectForbidden('channels:write', (ctx) => revokeGrant(ctx, 'ach_nope', 'cpg_nope'));
    await expectForbidden('channels:read', (ctx) => listChannelMessages(ctx, 'ach_nope', { limit: 10 }));
    const res = await h.app.inject({ method: 'GET', url: '/v1/agent-channels', headers: admin.headers });
    expect(res.statusCode).toBe(200);
    expect(json(res).data.channels).toEqual([]);
  });

  it('context sessions: sessions, blocks, forks, compaction and runs on them', async () => {
    await expectForbidden('sessions:write', (ctx) => createSession(ctx, { name: 'x', tags: [], includePinned: true }));
    await expectForbidden('sessions:read', (ctx) => listSessions(ctx, { limit: 20 }));
    await expectForbidden('sessions:read', (ctx) => getSession(ctx, 'sess_nope'));
    await expectForbidden('sessions:write', (ctx) => deleteSession(ctx, 'sess_nope'));
    await expectForbidden('sessions:write', (ctx) => forkSession(ctx, 'sess_nope', { name: 'f', includePinned: true, includeSummaries: true }));
    await expectForbidden('sessions:write', (ctx) =>
      compactSession(ctx, 'sess_nope', { preservePinned: true, preserveRecent: 5, summarizer: 'auto' }),
    );
    await expectForbidden('sessions:write', (ctx) => addBlocks(ctx, 'sess_nope', [{ kind: 'note', content: 'x', tags: [], pinned: false }]));
    await expectForbidden('sessions:read', (ctx) => listBlocks(ctx, 'sess_nope', { limit: 10 }));
    await expectForbidden('sessions:write', (ctx) =>
      openSessionForRun(ctx, 'sess_nope', { runId: 'r', modelWindow: null, onOverflow: 'fail', includeToolResults: false }),
    );
    const res = await h.app.inject({ method: 'GET', url: '/v1/aip/sessions', headers: member.headers });
    expect(res.statusCode).toBe(200);
  });

  it('deployments and triggers', async () => {
    await expectForbidden('deployments:write', (ctx) => createDeployment(ctx, { runtimeSlug: 'x', apiSlug: 'xx' } as never));
    await expectForbidden('deployments:read', (ctx) => listDeployments(ctx));
    await expectForbidden('deployments:write', (ctx) => deleteDeployment(ctx, 'dep_nope'));
    await expectForbidden('deployments:invoke', (ctx) => invokeDeployment(ctx, 'dep_nope', { input: 'x', wait: false }));
    await expectForbidden('deployments:write', (ctx) => redeliver(ctx, 'dep_nope', 'msg_nope'));
    await expectForbidden('deployments:invoke', (ctx) => triggerInvoker.invoke(ctx, 'dep_nope', { input: 'x', triggerId: 'trg_nope' }));
    await expectForbidden(['triggers:read', 'triggers:write'], (ctx) => triggerInvoker.find(ctx, 'dep_nope'));
    await expectForbidden('triggers:write', (ctx) => createTrigger(ctx, { deployment: 'x' } as never));
    await expectForbidden('triggers:read', (ctx) => listTriggers(ctx, {} as never));
    await expectForbidden('triggers:write', (ctx) => pauseTrigger(ctx, 'trg_nope'));
    await expectForbidden('triggers:write', (ctx) => deleteTrigger(ctx, 'trg_nope'));
    const res = await h.app.inject({ method: 'GET', url: '/v1/deployments', headers: member.headers });
    expect(res.statusCode).toBe(200);
  });

  it('product apps: apps, bindings, link sessions and links', async () => {
    await expectForbidden('apps:write', (ctx) => createApp(ctx, { slug: 'nope', name: 'Nope' }));
    await expectForbidden('apps:read', (ctx) => listApps(ctx));
    await expectForbidden('apps:write', (ctx) =>
      createBinding(ctx, 'nope', { agentChannelId: 'ach_nope', identityPolicy: 'link_required', groupPolicy: 'disabled' } as never),
    );
    await expectForbidden('apps:write', (ctx) => createLinkSession(ctx, 'nope', { agentChannelId: 'ach_nope' } as never));
    await expectForbidden('apps:read', (ctx) => listLinks(ctx, 'nope', {} as never));
    const res = await h.app.inject({ method: 'GET', url: '/v1/apps', headers: admin.headers });
    expect(res.statusCode).toBe(200);
  });

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

  it('sandboxes: create, resume, get and reach inside', async () => {
    await expectForbidden('sandbox:write', (ctx) => createSandbox(ctx, { template: 'base-ubuntu' } as never));
    await expectForbidden('sandbox:write', (ctx) => resumeSandbox(ctx, 'sbx_nope'));
    // Read by GET /v1/sandboxes/{id} and by its activity listing: either scope will do, neither will not.
    await expectForbidden(['sandbox:read', 'activity:read'], (ctx) => getSandbox(ctx, 'sbx_nope'));
    await expectAccepted(['sandbox:read', 'activity:read'], (ctx) => getSandbox(ctx, 'sbx_nope'));
    // Inside a sandbox: reading routes (sandbox:read) and changing ones (sandbox:write).
    await expectForbidden(['sandbox:read', 'sandbox:write'], (ctx) => agentOf(ctx, 'sbx_nope'));
    await expectAccepted(['sandbox:read', 'sandbox:write'], (ctx) => agentOf(ctx, 'sbx_nope'));
    // A run reaches its thread's sandbox with agent:run alone; the context it derives needs agent:run.
    await expectForbidden('agent:run', async (ctx) => threadSandboxCtx(ctx));
    const derived = threadSandboxCtx(without('sandbox:read', 'sandbox:write'));
    expect([...derived.principal.scopes]).toEqual(expect.arrayContaining(['sandbox:read', 'sandbox:write']));
    // A member's context gains what the member role grants, and nothing beyond the sandbox scopes.
    const memberCtx = systemCtx(h.deps, {
      userId: member.userId,
      orgId: member.orgId,
      role: 'member',
      scopes: new Set(['agent:run'] as const),
      apiKeyId: null,
    });
    expect([...threadSandboxCtx(memberCtx).principal.scopes].sort()).toEqual(['agent:run', 'sandbox:read', 'sandbox:write']);
  });

  it('runs: start, get and cancel', async () => {
    const signal = new AbortController().signal;
    await expectForbidden('agent:run', (ctx) => startRun(ctx, { agent: 'nope', prompt: 'hi' } as never, { signal }));
    await expectForbidden('agent:run', (ctx) => cancelRun(ctx, 'nope'));
    // GET /v1/runs/{id} (agent:read); cancel (agent:run) answers with the run too.
    await expectForbidden(['agent:read', 'agent:run'], (ctx) => getRun(ctx, 'nope'));
    await expectAccepted(['agent:read', 'agent:run'], (ctx) => getRun(ctx, 'nope'));
  });

  it('reads shared with activity listings: threads, workspaces and agents', async () => {
    await expectForbidden(['agent:read', 'activity:read'], (ctx) => getThread(ctx, 'nope'));
    await expectAccepted(['agent:read', 'activity:read'], (ctx) => getThread(ctx, 'nope'));
    await expectForbidden(['storage:read', 'activity:read'], (ctx) => getWorkspace(ctx, admin.personalWorkspaceId));
    await expectAccepted(['storage:read', 'activity:read'], (ctx) => getWorkspace(ctx, admin.personalWorkspaceId));
    await expectForbidden(['agent:run', 'activity:read', 'sessions:read', 'sessions:write'], (ctx) => findAgentRow(ctx, 'nope'));
    await expectAccepted(['agent:run', 'activity:read', 'sessions:read', 'sessions:write'], (ctx) => findAgentRow(ctx, 'nope'));
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
    await expectForbidden('billing:read', (ctx) => getAutoTopup(ctx));
    await expectForbidden('billing:write', (ctx) => startTopup(ctx, { amountCents: 1000 }));
    await expectForbidden('billing:write', (ctx) => completeCheckout(ctx, 'cs_test_x'));
    await expectForbidden('billing:write', (ctx) => putAutoTopup(ctx, { enabled: false, thresholdCents: 0, topupAmountCents: 1000 }));
    await expectForbidden('models:use', (ctx) => availableModels(ctx));
    await expectForbidden('execute:run', (ctx) => executeCode(ctx, null as never, { language: 'python', code: 'print(1)' } as never));
  });
  it('oauth: connections, configs and the internal token verb', async () => {
    await expectForbidden('connections:read', (ctx) => listConnections(ctx));
    await expectForbidden('connections:write', (ctx) => startBrowserFlow(ctx, { provider: 'github' }));
    await expectForbidden('connections:use', (ctx) => getAccessToken(ctx, { provider: 'github' }));
    await expectForbidden('credentials:admin', (ctx) => listConfigs(ctx));
    await expectForbidden('credentials:admin', (ctx) => putConfig(ctx, { provider: 'github', clientId: 'a', clientSecret: 'b' }));
    // nothing was stored: the admin's own listing (the control) is empty
    const res = await h.app.inject({ method: 'GET', url: '/v1/oauth/configs', headers: admin.headers });
    expect(res.statusCode).toBe(200);
    expect(json(res).data).toEqual([]);
  });
  it('tools: catalogue, installs, credentials, execution and custom tools', async () => {
    await expectForbidden('tools:read', (ctx) => listTools(ctx, { limit: 10 }));
    await expectForbidden('tools:read', (ctx) => getTool(ctx, 'web_search'));
    await expectForbidden('tools:write', (ctx) => installTool(ctx, 'http_request', 'user'));
    await expectForbidden('tools:admin', (ctx) => installTool(ctx, 'http_request', 'organization'));
    await expectForbidden('credentials:admin', (ctx) => putToolCredentials(ctx, 'openweathermap_current', 'organization', { apiKey: 'k' }));
    await expectForbidden('tools:execute', (ctx) => executeTool(ctx, 'http_request', { arguments: { url: 'https://example.com' } }, { via: 'api' }));
    await expectForbidden('tools:read', (ctx) => listCustomTools(ctx));
    await expectForbidden('tools:admin', (ctx) =>
      createCustomTool(ctx, { kind: 'mcp', slug: 'nope', url: 'http://127.0.0.1:9/mcp', headers: {}, credentials: [] }),
    );
    await expectForbidden('tools:admin', (ctx) => refreshCustomTool(ctx, 'ctl_missing'));
    await expectForbidden('agent:write', (ctx) => installAgent(ctx, 'weather-reporter', {} as never));
    // nothing was installed or created: the admin's own listings (the control) are empty
    const installed = await h.app.inject({ method: 'GET', url: '/v1/tools/installed', headers: admin.headers });
    expect(json(installed).data).toEqual([]);
    const custom = await h.app.inject({ method: 'GET', url: '/v1/tools/custom', headers: admin.headers });
    expect(json(custom).data).toEqual([]);
  });
});
