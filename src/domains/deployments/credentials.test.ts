import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { expectError, until } from '../../../test/helpers.js';
import { startDeploymentJobs } from './jobs.js';

// Work done later for a member acts with what the asking credential held (within the member's role), and work
// a stopped process committed but never queued is queued again at start.
describe('deployments: credentials of later work, and work left unqueued', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let admin: Actor;
  const headers = (key: string) => ({ 'x-api-key': key });

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness({ HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_OPENAI_MODELS: 'm1' });
    admin = await createOrgAdmin(h);
    let res = await h.app.inject({ method: 'POST', url: '/v1/agents', headers: admin.headers, payload: { slug: 'helper', model: 'm1' } });
    expect(res.statusCode, res.body).toBe(201);
    res = await h.app.inject({ method: 'POST', url: '/v1/deployments', headers: admin.headers, payload: { runtimeSlug: 'helper', apiSlug: 'api' } });
    expect(res.statusCode, res.body).toBe(201);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('a key holding only deployments:invoke runs the deployment, with just what it holds plus running the agent', async () => {
    const key = await keyFor(h, admin, ['deployments:invoke']);
    fake.script({ text: 'done' });
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/deployments/api/invoke',
      headers: headers(key),
      payload: { input: 'go', wait: true },
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data.status).toBe('completed');
    const row = await h.deps.db.kysely
      .selectFrom('deployment_invocations')
      .select('scopes')
      .where('id', '=', json(res).data.id)
      .executeTakeFirstOrThrow();
    expect(JSON.parse(row.scopes)).toEqual(['deployments:invoke']);
  });

  it('making a trigger needs deployments:invoke as well, since it fires the deployment later', async () => {
    const key = await keyFor(h, admin, ['triggers:write', 'triggers:read']);
    expectError(await h.app.inject({ method: 'POST', url: '/v1/triggers', headers: headers(key), payload: { deployment: 'api' } }), 403, 'forbidden');
    const both = await keyFor(h, admin, ['triggers:write', 'triggers:read', 'deployments:invoke']);
    const ok = await h.app.inject({ method: 'POST', url: '/v1/triggers', headers: headers(both), payload: { deployment: 'api' } });
    expect(ok.statusCode, ok.body).toBe(201);
  });

  it('an invocation committed but never queued (its process stopped in between) runs after the next start', async () => {
    const id = 'dpi_orphan000000000000000001';
    const dep = await h.deps.db.kysely.selectFrom('deployments').select(['id', 'org_id']).where('api_slug', '=', 'api').executeTakeFirstOrThrow();
    await h.deps.db.kysely
      .insertInto('deployment_invocations')
      .values({
        id,
        org_id: dep.org_id,
        deployment_id: dep.id,
        created_by_user_id: admin.userId,
        scopes: JSON.stringify(['deployments:invoke']),
        source: 'api',
        trigger_id: null,
        input: 'left behind',
        status: 'queued',
        run_id: null,
        thread_id: null,
        error: null,
        created_at: new Date().toISOString(),
        started_at: null,
        finished_at: null,
      })
      .execute();
    fake.script({ text: 'picked up' });
    // What the domain's start-up does when the app starts.
    await startDeploymentJobs(h.deps);
    await until(
      'the invocation ran',
      async () =>
        (await h.deps.db.kysely.selectFrom('deployment_invocations').select('status').where('id', '=', id).executeTakeFirst())?.status ===
        'completed',
      20_000,
    );
  });
});
