import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { expectActivity } from '../../../test/activity.js';
import { securitySuite } from '../../../test/security.js';

const MODELS = { HANGAR_OPENAI_BASE_URL: 'http://127.0.0.1:9/v1', HANGAR_OPENAI_MODELS: 'model-a,model-b' };

describe('agents', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness(MODELS);
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h?.close());

  const call = (actor: Actor, method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: unknown) =>
    h.app.inject({ method, url, headers: actor.headers, payload: payload as object });

  it('creates an agent with defaults, reads, lists and deletes it', async () => {
    const res = await call(admin, 'POST', '/v1/agents', { slug: 'helper', model: 'model-a', instructions: 'Be brief.' });
    expect(res.statusCode, res.body).toBe(201);
    expect(json(res).data).toMatchObject({
      slug: 'helper',
      name: 'helper',
      executionMode: 'managed',
      targetDeviceId: null,
      model: 'model-a',
      instructions: 'Be brief.',
      tools: [],
      config: {},
      sandboxTemplate: null,
      metadata: {},
      createdByUserId: admin.userId,
    });
    expect(json(await call(admin, 'GET', '/v1/agents/helper')).data.model).toBe('model-a');
    expect(json(await call(admin, 'GET', '/v1/agents')).data.map((a: { slug: string }) => a.slug)).toContain('helper');
    expect((await call(admin, 'DELETE', '/v1/agents/helper')).statusCode).toBe(204);
    expect((await call(admin, 'GET', '/v1/agents/helper')).statusCode).toBe(404);
    expect((await call(admin, 'DELETE', '/v1/agents/helper')).statusCode).toBe(404);
  });

  it('an in_sandbox agent takes sandbox tools and a template; a slug is unique per organization', async () => {
    const body = {
      slug: 'coder',
      executionMode: 'in_sandbox',
      tools: ['exec_command', 'apply_patch', 'write_stdin', 'view_image'],
      sandboxTemplate: 'base-ubuntu',
      config: { maxTurns: 8, maxTokens: 2000, temperature: 0.2 },
    };
    const res = await call(admin, 'POST', '/v1/agents', body);
    expect(res.statusCode, res.body).toBe(201);
    expect(json(res).data).toMatchObject({
      executionMode: 'in_sandbox',
      sandboxTemplate: 'base-ubuntu',
      config: { maxTurns: 8, maxTokens: 2000, temperature: 0.2 },
    });
    const again = await call(admin, 'POST', '/v1/agents', body);
    expect(again.statusCode).toBe(409);
    expect(json(again).error.code).toBe('conflict');
    const other = await createOrgAdmin(h);
    expect((await call(other, 'POST', '/v1/agents', body)).statusCode).toBe(201);
    expect((await call(other, 'GET', '/v1/agents')).body).not.toContain(json(res).data.id);
  });

  it('refuses definitions that cannot run, naming the field', async () => {
    const cases: [unknown, string][] = [
      [{ slug: 'Bad Slug' }, 'slug'],
      [{ slug: 'dev', executionMode: 'local-desktop' }, 'targetDeviceId'],
      [{ slug: 'dev2', targetDeviceId: 'dev_1' }, 'targetDeviceId'],
      [{ slug: 'm', tools: ['exec_command'] }, 'tools'],
      [{ slug: 'm2', tools: ['rm_rf'] }, 'tools'],
      [{ slug: 'm3', model: 'no-such-model' }, 'model'],
      [{ slug: 'm4', executionMode: 'in_sandbox', sandboxTemplate: 'no-such-template' }, 'sandboxTemplate'],
      [{ slug: 'm5', sandboxTemplate: 'base-ubuntu' }, 'sandboxTemplate'],
      [{ slug: 'm6', config: { maxTurns: 0 } }, 'config'],
      [{ slug: 'm7', surprise: true }, ''],
    ];
    for (const [body, field] of cases) {
      const res = await call(admin, 'POST', '/v1/agents', body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(json(res).error.code).toBe('invalid_request');
      if (field) expect(json(res).error.message).toContain(field);
    }
    const local = await call(admin, 'POST', '/v1/agents', { slug: 'desk', executionMode: 'local-desktop', targetDeviceId: 'dev_laptop' });
    expect(local.statusCode, local.body).toBe(201);
    expect(json(local).data.targetDeviceId).toBe('dev_laptop');
  });

  it('PATCH changes fields, re-validates the whole definition, and clears what no longer applies', async () => {
    await call(admin, 'POST', '/v1/agents', { slug: 'shifty', executionMode: 'in_sandbox', tools: ['exec_command'], sandboxTemplate: 'base-ubuntu' });
    const refused = await call(admin, 'PATCH', '/v1/agents/shifty', { executionMode: 'managed' });
    expect(refused.statusCode).toBe(400);
    expect(json(refused).error.message).toContain('exec_command');
    const res = await call(admin, 'PATCH', '/v1/agents/shifty', {
      executionMode: 'managed',
      tools: ['web_search'],
      name: 'Shifty',
      model: 'model-b',
      description: null,
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data).toMatchObject({
      name: 'Shifty',
      executionMode: 'managed',
      tools: ['web_search'],
      model: 'model-b',
      sandboxTemplate: null,
    });
    expect(json(await call(admin, 'GET', '/v1/agents/shifty')).data.name).toBe('Shifty');
    expect((await call(admin, 'PATCH', '/v1/agents/nope', { name: 'x' })).statusCode).toBe(404);
  });

  it('records agent.created, .updated and .deleted, listed by GET /v1/agents/{slug}/activity', async () => {
    await call(admin, 'POST', '/v1/agents', { slug: 'logged' });
    await call(admin, 'PATCH', '/v1/agents/logged', { name: 'Logged' });
    const res = await call(admin, 'GET', '/v1/agents/logged/activity');
    expect(res.statusCode).toBe(200);
    expect(json(res).data.events.map((e: { eventType: string }) => e.eventType)).toEqual(['agent.updated', 'agent.created']);
    expect(json(res).data.events[0]).toMatchObject({ resourceType: 'agent', metadata: { slug: 'logged', fields: ['name'] } });
    await expectActivity(h, admin, { eventType: 'agent.updated', resourceType: 'agent', metadata: { slug: 'logged', fields: ['name'] } });
    await expectActivity(h, admin, { eventType: 'agent.created', resourceType: 'agent', metadata: { slug: 'logged' } });
    // A member with activity:read sees the agent's events through the shortcut (access by resource).
    const member = await addOrgMember(h, admin);
    expect(json(await call(member, 'GET', '/v1/agents/logged/activity')).data.events).toHaveLength(2);
  });

  it('members read agents; a key without agent:write cannot change them', async () => {
    const member = await addOrgMember(h, admin);
    expect((await call(member, 'GET', '/v1/agents')).statusCode).toBe(200);
    const readOnly = await keyFor(h, member, ['agent:read']);
    const res = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: { 'x-api-key': readOnly }, payload: { slug: 'nope' } });
    expect(res.statusCode).toBe(403);
  });
});

let seq = 0;
securitySuite('agents', [
  { method: 'POST', url: () => '/v1/agents', scope: 'agent:write', body: { slug: 'sec-new' } },
  { method: 'GET', url: () => '/v1/agents', scope: 'agent:read' },
  ...(['GET', 'PATCH', 'DELETE'] as const).map((method) => ({
    method,
    scope: method === 'GET' ? ('agent:read' as const) : ('agent:write' as const),
    crossOrg: true,
    body: method === 'PATCH' ? { name: 'x' } : undefined,
    url: async (owner: Actor, hh: Harness) => {
      const slug = `sec-${++seq}`;
      await hh.app.inject({ method: 'POST', url: '/v1/agents', headers: owner.headers, payload: { slug } });
      return `/v1/agents/${slug}`;
    },
  })),
  {
    method: 'GET',
    scope: 'activity:read',
    crossOrg: true,
    url: async (owner, hh) => {
      const slug = `sec-${++seq}`;
      await hh.app.inject({ method: 'POST', url: '/v1/agents', headers: owner.headers, payload: { slug } });
      return `/v1/agents/${slug}/activity`;
    },
  },
]);
