import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { WebhookReceiver } from '../../../test/fakes/webhook-receiver.js';
import { addOrgMember, createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { expectError, sleep, until } from '../../../test/helpers.js';
import { resendPending } from './jobs.js';
import { INVOCATION_QUEUE, SLOT_RETRY_MS } from './runner.js';
import { WEBHOOK_QUEUE } from './webhooks.js';
import { securitySuite } from '../../../test/security.js';

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE';
const END = ['completed', 'failed', 'cancelled', 'timed_out'];

function client(h: () => Harness) {
  const call = (actor: Actor, method: Method, url: string, payload?: unknown) =>
    h().app.inject({ method, url, headers: actor.headers, payload: payload as object });
  const ok = async (actor: Actor, method: Method, url: string, payload?: unknown, status = 200) => {
    const res = await call(actor, method, url, payload);
    expect(res.statusCode, res.body).toBe(status);
    return json(res).data;
  };
  const deploy = (actor: Actor, body: Record<string, unknown>) => ok(actor, 'POST', '/v1/deployments', body, 201);
  const invoke = (actor: Actor, dep: string, body: Record<string, unknown>) => ok(actor, 'POST', `/v1/deployments/${dep}/invoke`, body, 202);
  const invocation = (actor: Actor, dep: string, id: string) => ok(actor, 'GET', `/v1/deployments/${dep}/invocations/${id}`);
  const ended = (actor: Actor, dep: string, id: string) =>
    until(
      `invocation ${id} ended`,
      async () => {
        const inv = await invocation(actor, dep, id);
        return END.includes(inv.status) ? inv : null;
      },
      20_000,
    );
  const deliveries = async (actor: Actor, dep: string) => (await ok(actor, 'GET', `/v1/deployments/${dep}/deliveries?limit=200`)) as any[];
  const delivery = (actor: Actor, dep: string, id: string) => ok(actor, 'GET', `/v1/deployments/${dep}/deliveries/${id}`);
  const settled = (actor: Actor, dep: string, id: string) =>
    until(
      `delivery ${id} settled`,
      async () => {
        const d = await delivery(actor, dep, id);
        return d.status !== 'pending' ? d : null;
      },
      20_000,
    );
  return { call, ok, deploy, invoke, invocation, ended, deliveries, delivery, settled };
}

describe('deployments', () => {
  let fake: FakeOpenAI;
  let rx: WebhookReceiver;
  let h: Harness;
  let admin: Actor;
  let stranger: Actor;
  const c = client(() => h);
  const at = (path: string) => rx.received.filter((r) => r.path === path);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    rx = await new WebhookReceiver().start();
    h = await createHarness({
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'm1',
      HANGAR_WEBHOOKS_ALLOW_PRIVATE_NETWORKS: 'true',
      HANGAR_WEBHOOKS_RETRY_SCHEDULE: '50ms,100ms',
      HANGAR_DEPLOYMENTS_MAX_QUEUED: '2',
    });
    admin = await createOrgAdmin(h);
    stranger = await createOrgAdmin(h);
    await c.ok(admin, 'POST', '/v1/agents', { slug: 'helper', model: 'm1', instructions: 'You are terse.' }, 201);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
    await rx?.stop();
  });

  it('creates, lists, reads, changes and deletes a deployment; the secret is shown once; apiSlug is unique', async () => {
    const dep = await c.deploy(admin, { runtimeSlug: 'helper', apiSlug: 'crud-one', webhookUrl: `${rx.url}/crud` });
    expect(dep.id).toMatch(/^dep_/);
    expect(dep).toMatchObject({
      apiSlug: 'crud-one',
      runtimeSlug: 'helper',
      templateSlug: null,
      webhookEvents: ['run.completed', 'run.failed', 'run.timed_out'],
      webhookStatus: 'active',
      maxConcurrent: 1,
      timeout: 300,
    });
    expect(dep.webhookSecret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(dep.invokeUrl).toMatch(/\/v1\/deployments\/crud-one\/invoke$/);

    const byId = await c.ok(admin, 'GET', `/v1/deployments/${dep.id}`);
    expect(byId.webhookSecret).toBeUndefined();
    expect((await c.ok(admin, 'GET', '/v1/deployments/crud-one')).id).toBe(dep.id);
    expect((await c.ok(admin, 'GET', '/v1/deployments')).map((d: any) => d.id)).toContain(dep.id);

    expectError(await c.call(admin, 'POST', '/v1/deployments', { runtimeSlug: 'helper', apiSlug: 'crud-one' }), 409, 'conflict');
    const bad = [
      { runtimeSlug: 'helper', apiSlug: 'A' },
      { runtimeSlug: 'helper', apiSlug: 'ok-slug', maxConcurrent: 0 },
      { runtimeSlug: 'helper', apiSlug: 'ok-slug', maxConcurrent: 101 },
      { runtimeSlug: 'helper', apiSlug: 'ok-slug', timeout: 3601 },
      { runtimeSlug: 'helper', apiSlug: 'ok-slug', webhookUrl: 'ftp://example.com/x' },
      { runtimeSlug: 'helper', apiSlug: 'ok-slug', webhookEvents: ['run.exploded'] },
      { apiSlug: 'ok-slug' },
    ];
    for (const body of bad) expectError(await c.call(admin, 'POST', '/v1/deployments', body), 400, 'invalid_request');
    const noAgent = expectError(
      await c.call(admin, 'POST', '/v1/deployments', { runtimeSlug: 'nobody', apiSlug: 'ok-slug' }),
      400,
      'invalid_request',
    );
    expect(noAgent.message).toContain('runtimeSlug');
    const noTemplate = expectError(
      await c.call(admin, 'POST', '/v1/deployments', { runtimeSlug: 'helper', apiSlug: 'ok-slug', templateSlug: 'no-such-template' }),
      400,
      'invalid_request',
    );
    expect(noTemplate.message).toContain('templateSlug');

    const changed = await c.ok(admin, 'PATCH', `/v1/deployments/${dep.id}`, { maxConcurrent: 3, timeout: 60, webhookEvents: ['run.started'] });
    expect(changed).toMatchObject({ maxConcurrent: 3, timeout: 60, webhookEvents: ['run.started'] });
    expect(changed.webhookSecret).toBeUndefined();
    await c.deploy(admin, { runtimeSlug: 'helper', apiSlug: 'crud-two' });
    expectError(await c.call(admin, 'PATCH', `/v1/deployments/${dep.id}`, { apiSlug: 'crud-two' }), 409, 'conflict');
    expectError(await c.call(admin, 'PATCH', `/v1/deployments/${dep.id}`, { timeout: 0 }), 400, 'invalid_request');

    const created = await expectActivity(h, admin, { eventType: 'deployment.created', resourceType: 'deployment', resourceId: dep.id });
    expect(JSON.stringify(created)).not.toContain(dep.webhookSecret);
    await expectActivity(h, admin, { eventType: 'deployment.updated', resourceType: 'deployment', resourceId: dep.id });

    await c.ok(admin, 'DELETE', `/v1/deployments/${dep.id}`);
    expectError(await c.call(admin, 'GET', `/v1/deployments/${dep.id}`), 404, 'not_found');
    // The resource is gone, so the event is found by its type and what it names.
    await expectActivity(h, admin, { eventType: 'deployment.deleted', metadata: { apiSlug: 'crud-one' } });
  });

  it('deleting a deployment deletes its triggers, each recorded as trigger.deleted; other deployments keep theirs', async () => {
    const dep = await c.deploy(admin, { runtimeSlug: 'helper', apiSlug: 'doomed' });
    const kept = await c.deploy(admin, { runtimeSlug: 'helper', apiSlug: 'kept' });
    const t1 = await c.ok(admin, 'POST', '/v1/triggers', { deployment: 'doomed' }, 201);
    const t2 = await c.ok(admin, 'POST', '/v1/triggers', { deployment: 'doomed', source: 'code_host', repo: 'acme/app' }, 201);
    const t3 = await c.ok(admin, 'POST', '/v1/triggers', { deployment: 'kept' }, 201);
    await c.ok(admin, 'GET', `/v1/triggers/${t1.id}`);
    await c.ok(admin, 'DELETE', `/v1/deployments/${dep.id}`);
    for (const t of [t1, t2]) {
      expectError(await c.call(admin, 'GET', `/v1/triggers/${t.id}`), 404, 'not_found');
      await expectActivity(h, admin, {
        eventType: 'trigger.deleted',
        resourceType: 'trigger',
        resourceId: t.id,
        metadata: { reason: 'deployment_deleted', deployment: dep.id },
      });
    }
    expect((await c.ok(admin, 'GET', `/v1/triggers/${t3.id}`)).deployment).toBe(kept.id);
  });

  it('runs an invocation as the invoker and delivers signed run.started and run.completed events', async () => {
    const dep = await c.deploy(admin, {
      runtimeSlug: 'helper',
      apiSlug: 'happy',
      webhookUrl: `${rx.url}/happy`,
      webhookEvents: ['run.started', 'run.completed'],
    });
    rx.trust(dep.webhookSecret);
    fake.script({ text: ['Hello', ' there'], usage: { prompt: 5, completion: 3 } });
    const inv = await c.invoke(admin, dep.id, { input: { question: 'hi?' } });
    expect(inv).toMatchObject({ status: 'queued', deploymentId: dep.id, input: '{"question":"hi?"}', runId: null });
    expect(inv.id).toMatch(/^dpi_/);
    const done = await c.ended(admin, dep.id, inv.id);
    expect(done).toMatchObject({ status: 'completed', error: null, result: 'Hello there' });
    expect(done.runId).toBeTruthy();
    expect(fake.requests.at(-1)?.body.messages.at(-1).content).toContain('{"question":"hi?"}');

    const got = await until('two deliveries', () => (at('/happy').length >= 2 ? at('/happy') : null));
    const types = got.map((r) => r.body.type).sort();
    expect(types).toEqual(['run.completed', 'run.started']);
    for (const r of got) {
      expect(r.verifiedWith).toEqual([dep.webhookSecret]);
      expect(r.headers['webhook-id']).toMatch(/^msg_/);
      expect(r.headers['content-type']).toBe('application/json');
      expect(String(r.headers['user-agent'])).toContain('Hangar');
    }
    const completed = got.find((r) => r.body.type === 'run.completed')!;
    expect(completed.body.data).toMatchObject({
      deploymentId: dep.id,
      apiSlug: 'happy',
      invocationId: inv.id,
      runId: done.runId,
      threadId: done.threadId,
      status: 'completed',
      result: 'Hello there',
      error: null,
      usage: { promptTokens: 5, completionTokens: 3 },
    });
    expect(Date.parse(completed.body.timestamp)).not.toBeNaN();

    const list = await until('deliveries delivered', async () => {
      const ds = await c.deliveries(admin, dep.id);
      return ds.length === 2 && ds.every((d) => d.status === 'delivered') ? ds : null;
    });
    expect(list.map((d) => d.id).sort()).toEqual(got.map((r) => r.headers['webhook-id']).sort());
    await expectActivity(h, admin, { eventType: 'deployment.invoked', resourceType: 'deployment', resourceId: dep.id });
    await expectActivity(h, admin, { eventType: 'deployment.invocation.completed', resourceType: 'deployment', resourceId: dep.id });
    await expectActivity(h, admin, { eventType: 'deployment.webhook.delivered', resourceType: 'deployment', resourceId: dep.id });
    const page = await c.call(admin, 'GET', `/v1/deployments/${dep.id}/invocations?limit=10`);
    expect(json(page).data.map((i: any) => i.id)).toEqual([inv.id]);
    expect(json(page).meta).toMatchObject({ hasMore: false, nextCursor: null });
  });

  it('answers at the end with wait: true, the run’s answer included', async () => {
    const dep = await c.deploy(admin, { runtimeSlug: 'helper', apiSlug: 'waiter' });
    fake.script({ text: ['Waited'] });
    const res = await c.call(admin, 'POST', `/v1/deployments/${dep.apiSlug}/invoke`, { input: 'go', wait: true });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data).toMatchObject({ status: 'completed', result: 'Waited' });
    expect(json(res).data.usage).toBeTruthy();
  });

  it('runs at most maxConcurrent invocations at once: the second starts after the first ends', async () => {
    const dep = await c.deploy(admin, { runtimeSlug: 'helper', apiSlug: 'one-at-a-time', maxConcurrent: 1 });
    fake.script({ text: ['first'], delayMs: 800 }, { text: ['second'] });
    const a = await c.invoke(admin, dep.id, { input: 'one' });
    const b = await c.invoke(admin, dep.id, { input: 'two' });
    const first = await c.ended(admin, dep.id, a.id);
    const second = await c.ended(admin, dep.id, b.id);
    expect(first.status).toBe('completed');
    expect(second.status).toBe('completed');
    expect(Date.parse(second.startedAt)).toBeGreaterThanOrEqual(Date.parse(first.finishedAt));
    // The freed slot wakes the waiting one (it does not wait for its own look, every SLOT_RETRY_MS = 5 s).
    expect(Date.parse(second.startedAt) - Date.parse(first.finishedAt)).toBeLessThan(SLOT_RETRY_MS / 2);
  });

  it('refuses with 429 when more than maxQueued invocations wait for a slot', async () => {
    const dep = await c.deploy(admin, { runtimeSlug: 'helper', apiSlug: 'crowded', maxConcurrent: 1 });
    fake.script({ text: ['slow'], delayMs: 1500 });
    const a = await c.invoke(admin, dep.id, { input: 'a' });
    await until('the first running', async () => (await c.invocation(admin, dep.id, a.id)).status === 'running');
    const b = await c.invoke(admin, dep.id, { input: 'b' });
    const d = await c.invoke(admin, dep.id, { input: 'c' });
    const refused = await c.call(admin, 'POST', `/v1/deployments/${dep.id}/invoke`, { input: 'd' });
    expectError(refused, 429, 'rate_limited');
    expect(refused.headers['retry-after']).toBeTruthy();
    for (const id of [a.id, b.id, d.id]) expect((await c.ended(admin, dep.id, id)).status).toBe('completed');
  });

  it('ends an invocation past its timeout as timed_out, its run cancelled with the reason, and reports run.timed_out', async () => {
    const dep = await c.deploy(admin, { runtimeSlug: 'helper', apiSlug: 'too-slow', timeout: 1, webhookUrl: `${rx.url}/slow` });
    rx.trust(dep.webhookSecret);
    fake.script({ text: ['never'], delayMs: 4000 });
    const inv = await c.invoke(admin, dep.id, { input: 'take your time' });
    const done = await c.ended(admin, dep.id, inv.id);
    const reason = "the run passed its deployment's timeout of 1 s";
    expect(done).toMatchObject({ status: 'timed_out', error: reason });
    const run = await c.ok(admin, 'GET', `/v1/runs/${done.runId}`);
    expect(run).toMatchObject({ status: 'cancelled', error: reason });
    const got = await until('run.timed_out', () => at('/slow').find((r) => r.body.type === 'run.timed_out'));
    expect(got.verifiedWith).toEqual([dep.webhookSecret]);
    expect(got.body.data).toMatchObject({ status: 'timed_out', error: reason, invocationId: inv.id });
  });

  /** A deployment whose webhook gets run.completed, and one invocation of it; the delivery's id. */
  const oneDelivery = async (apiSlug: string, path: string) => {
    const dep = await c.deploy(admin, { runtimeSlug: 'helper', apiSlug, webhookUrl: `${rx.url}${path}` });
    rx.trust(dep.webhookSecret);
    const inv = await c.invoke(admin, dep.id, { input: 'x' });
    await c.ended(admin, dep.id, inv.id);
    const [d] = await until('a delivery', async () => {
      const ds = await c.deliveries(admin, dep.id);
      return ds.length ? ds : null;
    });
    return { dep, deliveryId: d.id as string };
  };

  it('retries a failed delivery with the same webhook-id until the receiver answers 2xx', async () => {
    rx.script({ status: 500 });
    const { dep, deliveryId } = await oneDelivery('retried', '/retry');
    const d = await c.settled(admin, dep.id, deliveryId);
    expect(d).toMatchObject({ status: 'delivered', attempts: 2, lastStatusCode: 200 });
    expect(d.attemptLog.map((a: any) => a.statusCode)).toEqual([500, 200]);
    const got = at('/retry');
    expect(got.map((r) => r.status)).toEqual([500, 200]);
    expect(new Set(got.map((r) => r.headers['webhook-id']))).toEqual(new Set([deliveryId]));
    expect(got.every((r) => r.verifiedWith.length === 1)).toBe(true);
    expect(got[0].raw).toBe(got[1].raw);
  });

  it('gives up after the retry schedule and records the failure', async () => {
    rx.script({ status: 500 }, { status: 502 }, { status: 503 });
    const { dep, deliveryId } = await oneDelivery('given-up', '/giveup');
    const d = await c.settled(admin, dep.id, deliveryId);
    expect(d).toMatchObject({ status: 'failed', attempts: 3, lastStatusCode: 503 });
    await expectActivity(h, admin, { eventType: 'deployment.webhook.failed', resourceType: 'deployment', resourceId: dep.id });
  });

  it('honours a Retry-After longer than the schedule', async () => {
    rx.script({ status: 503, headers: { 'retry-after': '1' } });
    const { dep, deliveryId } = await oneDelivery('patient', '/patient');
    const d = await c.settled(admin, dep.id, deliveryId);
    expect(d.status).toBe('delivered');
    const [first, second] = at('/patient');
    // The schedule says 50 ms; the receiver asked for a second.
    expect(second.at - first.at).toBeGreaterThanOrEqual(950);
  });

  it('disables the webhook on 410 Gone; a PATCH with a webhookUrl enables it again', async () => {
    rx.script({ status: 410 });
    const { dep, deliveryId } = await oneDelivery('gone-away', '/gone');
    const d = await c.settled(admin, dep.id, deliveryId);
    expect(d).toMatchObject({ status: 'disabled', attempts: 1, lastStatusCode: 410 });
    const after = await c.ok(admin, 'GET', `/v1/deployments/${dep.id}`);
    expect(after.webhookStatus).toBe('disabled');
    expect(after.webhookDisabledReason).toContain('410');
    await expectActivity(h, admin, { eventType: 'deployment.webhook.disabled', resourceType: 'deployment', resourceId: dep.id });
    // Nothing more is sent while disabled.
    const inv = await c.invoke(admin, dep.id, { input: 'y' });
    await c.ended(admin, dep.id, inv.id);
    expect((await c.deliveries(admin, dep.id)).length).toBe(1);
    const again = await c.ok(admin, 'PATCH', `/v1/deployments/${dep.id}`, { webhookUrl: `${rx.url}/gone` });
    expect(again.webhookStatus).toBe('active');
    const inv2 = await c.invoke(admin, dep.id, { input: 'z' });
    await c.ended(admin, dep.id, inv2.id);
    await until('a new delivery', async () => (await c.deliveries(admin, dep.id)).some((x) => x.status === 'delivered'));
  });

  it('signs with both secrets after a rotation, and redelivers with the same id and payload', async () => {
    const { dep, deliveryId } = await oneDelivery('rotating', '/rotate');
    await c.settled(admin, dep.id, deliveryId);
    const rotated = await c.ok(admin, 'POST', `/v1/deployments/${dep.id}/webhook-secret/rotate`);
    expect(rotated.webhookSecret).toMatch(/^whsec_/);
    expect(rotated.webhookSecret).not.toBe(dep.webhookSecret);
    expect((await c.ok(admin, 'GET', `/v1/deployments/${dep.id}`)).webhookSecret).toBeUndefined();
    rx.trust(dep.webhookSecret, rotated.webhookSecret);

    const re = await c.ok(admin, 'POST', `/v1/deployments/${dep.id}/deliveries/${deliveryId}/redeliver`);
    expect(re).toMatchObject({ id: deliveryId, status: 'pending' });
    const got = await until('the redelivery', () => (at('/rotate').length >= 2 ? at('/rotate') : null));
    const [original, redelivered] = got;
    expect(redelivered.headers['webhook-id']).toBe(deliveryId);
    expect(redelivered.raw).toBe(original.raw);
    expect(String(redelivered.headers['webhook-signature']).split(' ')).toHaveLength(2);
    expect(redelivered.verifiedWith.sort()).toEqual([dep.webhookSecret, rotated.webhookSecret].sort());
    const d = await c.settled(admin, dep.id, deliveryId);
    expect(d).toMatchObject({ status: 'delivered', attempts: 2 });
    expect(d.attemptLog).toHaveLength(2);
  });

  it('fails, saying why, an invocation whose invoker left the organization before it ran', async () => {
    const dep = await c.deploy(admin, { runtimeSlug: 'helper', apiSlug: 'leaver', maxConcurrent: 1 });
    const member = await addOrgMember(h, admin);
    fake.script({ text: ['busy'], delayMs: 1000 });
    const first = await c.invoke(admin, dep.id, { input: 'hold the slot' });
    await until('the first running', async () => (await c.invocation(admin, dep.id, first.id)).status === 'running');
    const theirs = await c.invoke(member, dep.id, { input: 'mine' });
    expect(theirs.status).toBe('queued');
    expect((await c.call(admin, 'DELETE', `/v1/organizations/${admin.orgId}/members/${member.userId}`)).statusCode).toBe(204);
    const done = await c.ended(admin, dep.id, theirs.id);
    expect(done.status).toBe('failed');
    expect(done.error).toContain('no longer a member');
    expect(done.runId).toBeNull();
    expect((await c.ended(admin, dep.id, first.id)).status).toBe('completed');
  });

  it('loses no work when a job cannot be sent after commit: the invoke answers, and the sweep sends what was left', async () => {
    const dep = await c.deploy(admin, {
      runtimeSlug: 'helper',
      apiSlug: 'unsent',
      webhookUrl: `${rx.url}/unsent`,
      webhookEvents: ['run.completed'],
    });
    rx.trust(dep.webhookSecret);
    // The engine refuses the first invocation job and the first delivery job, as an unreachable job database would.
    const failing = new Set([INVOCATION_QUEUE, WEBHOOK_QUEUE]);
    const real = h.deps.jobs.send.bind(h.deps.jobs);
    const spy = vi.spyOn(h.deps.jobs, 'send').mockImplementation(async (queue, data, opts) => {
      if (failing.delete(queue)) throw new Error('the job database is unreachable');
      return real(queue, data, opts);
    });
    try {
      fake.script({ text: ['swept'] });
      const inv = await c.invoke(admin, dep.id, { input: 'do not lose me' });
      expect(inv.status).toBe('queued');
      await sleep(300);
      expect((await c.invocation(admin, dep.id, inv.id)).status).toBe('queued');
      // The sweep (every minute, for work due 30 s ago) runs the invocation; its delivery's send fails in turn.
      const soon = new Date(Date.now() + 1000).toISOString();
      await resendPending(h.deps, { before: soon });
      expect((await c.ended(admin, dep.id, inv.id)).status).toBe('completed');
      expect(failing.size).toBe(0);
      const [pending] = await c.deliveries(admin, dep.id);
      expect(pending).toMatchObject({ status: 'pending', attempts: 0 });
      expect(at('/unsent')).toHaveLength(0);
      // The next sweep sends it; a second sweep sends nothing more (each job's key).
      await resendPending(h.deps, { before: new Date(Date.now() + 1000).toISOString() });
      await resendPending(h.deps, { before: new Date(Date.now() + 1000).toISOString() });
      expect((await c.settled(admin, dep.id, pending.id)).status).toBe('delivered');
      await sleep(300);
      expect(at('/unsent').map((r) => [r.body.type, r.body.data.invocationId, r.verifiedWith])).toEqual([
        ['run.completed', inv.id, [dep.webhookSecret]],
      ]);
    } finally {
      spy.mockRestore();
    }
  });

  it('answers 404 for another organization’s deployment, invocation and delivery, and not for the owner', async () => {
    const { dep, deliveryId } = await oneDelivery('private-one', '/private');
    const [inv] = await c.ok(admin, 'GET', `/v1/deployments/${dep.id}/invocations`);
    const urls = [
      `/v1/deployments/${dep.id}`,
      `/v1/deployments/${dep.apiSlug}`,
      `/v1/deployments/${dep.id}/invocations/${inv.id}`,
      `/v1/deployments/${dep.id}/deliveries/${deliveryId}`,
    ];
    for (const url of urls) {
      expect((await c.call(admin, 'GET', url)).statusCode).toBe(200);
      expectError(await c.call(stranger, 'GET', url), 404, 'not_found');
    }
    expect((await c.ok(stranger, 'GET', '/v1/deployments')).map((d: any) => d.id)).not.toContain(dep.id);
    expectError(await c.call(stranger, 'POST', `/v1/deployments/${dep.id}/invoke`, { input: 'x' }), 404, 'not_found');
  });
});

describe('deployment webhooks without HANGAR_WEBHOOKS_ALLOW_PRIVATE_NETWORKS', () => {
  let fake: FakeOpenAI;
  let rx: WebhookReceiver;
  let h: Harness;
  let admin: Actor;
  const c = client(() => h);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    rx = await new WebhookReceiver().start();
    h = await createHarness({
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'm1',
      HANGAR_WEBHOOKS_RETRY_SCHEDULE: '50ms',
    });
    admin = await createOrgAdmin(h);
    await c.ok(admin, 'POST', '/v1/agents', { slug: 'helper', model: 'm1', instructions: 'x' }, 201);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
    await rx?.stop();
  });

  it('refuses a loopback receiver and records why on each attempt', async () => {
    const dep = await c.deploy(admin, { runtimeSlug: 'helper', apiSlug: 'internal', webhookUrl: `${rx.url}/hook` });
    const inv = await c.invoke(admin, dep.id, { input: 'x' });
    await c.ended(admin, dep.id, inv.id);
    const [d] = await until('a delivery', async () => {
      const ds = await c.deliveries(admin, dep.id);
      return ds.length ? ds : null;
    });
    const settled = await c.settled(admin, dep.id, d.id);
    expect(settled).toMatchObject({ status: 'failed', attempts: 2, lastStatusCode: null });
    expect(settled.attemptLog.every((a: any) => a.error.includes('not a public address'))).toBe(true);
    expect(rx.received).toHaveLength(0);
  });
});

let seeded = 0;
/** A deployment of `owner` (and its agent), through the API. */
async function seedDeployment(h: Harness, owner: Actor) {
  const n = ++seeded;
  const headers = owner.headers;
  await h.app.inject({ method: 'POST', url: '/v1/agents', headers, payload: { slug: `sec-agent-${n}`, instructions: 'x' } });
  const res = await h.app.inject({
    method: 'POST',
    url: '/v1/deployments',
    headers,
    payload: { runtimeSlug: `sec-agent-${n}`, apiSlug: `sec-${n}` },
  });
  expect(res.statusCode, res.body).toBe(201);
  return json(res).data as { id: string };
}

securitySuite('deployments', [
  { method: 'GET', url: () => '/v1/deployments', scope: 'deployments:read' },
  { method: 'POST', url: () => '/v1/deployments', scope: 'deployments:write', body: { runtimeSlug: 'x', apiSlug: 'xx' } },
  { method: 'GET', url: async (o, h) => `/v1/deployments/${(await seedDeployment(h, o)).id}`, scope: 'deployments:read', crossOrg: true },
  {
    method: 'PATCH',
    url: async (o, h) => `/v1/deployments/${(await seedDeployment(h, o)).id}`,
    scope: 'deployments:write',
    body: { maxConcurrent: 2 },
    crossOrg: true,
  },
  { method: 'DELETE', url: async (o, h) => `/v1/deployments/${(await seedDeployment(h, o)).id}`, scope: 'deployments:write', crossOrg: true },
  {
    method: 'POST',
    url: async (o, h) => `/v1/deployments/${(await seedDeployment(h, o)).id}/invoke`,
    scope: 'deployments:invoke',
    body: { input: 'hi' },
    crossOrg: true,
  },
  { method: 'GET', url: async (o, h) => `/v1/deployments/${(await seedDeployment(h, o)).id}/invocations`, scope: 'deployments:read', crossOrg: true },
  { method: 'GET', url: async (o, h) => `/v1/deployments/${(await seedDeployment(h, o)).id}/invocations/dpi_none`, scope: 'deployments:read' },
  {
    method: 'POST',
    url: async (o, h) => `/v1/deployments/${(await seedDeployment(h, o)).id}/webhook-secret/rotate`,
    scope: 'deployments:write',
    crossOrg: true,
  },
  { method: 'GET', url: async (o, h) => `/v1/deployments/${(await seedDeployment(h, o)).id}/deliveries`, scope: 'deployments:read', crossOrg: true },
  { method: 'GET', url: async (o, h) => `/v1/deployments/${(await seedDeployment(h, o)).id}/deliveries/msg_none`, scope: 'deployments:read' },
  {
    method: 'POST',
    url: async (o, h) => `/v1/deployments/${(await seedDeployment(h, o)).id}/deliveries/msg_none/redeliver`,
    scope: 'deployments:write',
  },
]);
