import { createHmac } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { WebhookReceiver } from '../../../test/fakes/webhook-receiver.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { expectError, until } from '../../../test/helpers.js';

// The issue's "done when", as a user does it: an agent deployed behind an API slug, signed run.completed
// webhooks received and verified with the Standard Webhooks library, and the deployment fired from a signed
// trigger with an IP allowlist (a request from elsewhere, or unsigned, changes nothing).

describe('deploy an agent, receive signed webhooks, fire it from a trigger', () => {
  let fake: FakeOpenAI;
  let receiver: WebhookReceiver;
  let h: Harness;
  let me: Actor;
  const call = (method: 'GET' | 'POST', url: string, payload?: unknown) =>
    h.app.inject({ method, url, headers: me.headers, payload: payload as object });
  const ok = async (method: 'GET' | 'POST', url: string, payload?: unknown) => {
    const res = await call(method, url, payload);
    expect(res.statusCode, res.body).toBeLessThan(300);
    return json(res).data;
  };

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    receiver = await new WebhookReceiver().start();
    h = await createHarness({
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'm1',
      HANGAR_WEBHOOKS_ALLOW_PRIVATE_NETWORKS: 'true',
    });
    me = await createOrgAdmin(h);
    await ok('POST', '/v1/agents', { slug: 'triager', model: 'm1', instructions: 'You triage issues.' });
  });
  afterAll(async () => {
    await h?.close();
    await receiver?.stop();
    await fake?.stop();
  });

  it('works end to end', async () => {
    // 1. The agent behind an API slug, with a webhook for its runs' outcomes.
    const dep = await ok('POST', '/v1/deployments', {
      runtimeSlug: 'triager',
      apiSlug: 'triage',
      webhookUrl: `${receiver.url}/hooks/hangar`,
      webhookEvents: ['run.completed', 'run.failed'],
      maxConcurrent: 2,
      timeout: 60,
    });
    receiver.trust(dep.webhookSecret);

    // 2. Invoked through the API, waiting for the answer; a signed run.completed arrives.
    fake.script({ text: 'Label: bug' });
    const res = await call('POST', '/v1/deployments/triage/invoke', { input: 'The app crashes on start', wait: true });
    expect(res.statusCode, res.body).toBe(200);
    const invocation = json(res).data;
    expect(invocation).toMatchObject({ status: 'completed', result: 'Label: bug' });
    // Generous under a loaded CI machine; on failure, what the deliveries and receiver looked like.
    let deliveries: unknown = null;
    const webhookWait = {
      timeoutMs: 30_000,
      detail: () => ({ deliveries, received: receiver.received.map((d) => [d.status, d.body?.type, d.body?.data?.invocationId]) }),
    };
    const delivered$ = async (invocationId: string) => {
      const d = receiver.received.find((r) => r.body?.data?.invocationId === invocationId);
      if (!d) deliveries = (await ok('GET', `/v1/deployments/${dep.id}/deliveries`)) as unknown;
      return d;
    };
    await until('the run.completed webhook', () => delivered$(invocation.id), webhookWait);
    const delivered = receiver.received.find((d) => d.body.data.invocationId === invocation.id)!;
    expect(delivered.verifiedWith).toEqual([dep.webhookSecret]);
    expect(delivered.body).toMatchObject({ type: 'run.completed', data: { deploymentId: dep.id, runId: invocation.runId, status: 'completed' } });
    expect(delivered.headers['webhook-id']).toMatch(/^msg_/);

    // 3. A trigger with an IP allowlist and a generated secret.
    const trigger = await ok('POST', '/v1/triggers', {
      deployment: 'triage',
      source: 'webhook',
      message: 'New issue: {{payload.issue.title}} ({{payload.issue.labels}}) missing: [{{payload.nope.deeper}}]',
      allowedIps: ['10.20.0.0/16'],
    });
    expect(trigger.webhookUrl).toMatch(new RegExp(`/v1/triggers/${trigger.id}/invoke$`));
    expect(trigger.secret).toBeTruthy();
    const body = JSON.stringify({ issue: { title: 'Login fails', labels: ['auth'] } });
    const sig = createHmac('sha256', trigger.secret).update(body).digest('hex');
    const invoke = (headers: Record<string, string>, remoteAddress: string, payload = body) =>
      h.app.inject({
        method: 'POST',
        url: `/v1/triggers/${trigger.id}/invoke`,
        headers: { 'content-type': 'application/json', ...headers },
        payload,
        remoteAddress,
      });
    const before = (await ok('GET', `/v1/deployments/${dep.id}/invocations`)).length;
    // From outside the allowlist, even signed: refused, nothing runs.
    expectError(await invoke({ 'x-webhook-signature': sig }, '192.0.2.7'), 403, 'forbidden');
    // From inside it, unsigned or wrongly signed: refused, nothing runs.
    expectError(await invoke({}, '10.20.3.4'), 401, 'unauthenticated');
    expectError(await invoke({ 'x-webhook-signature': sig.replace(/.$/, (c) => (c === '0' ? '1' : '0')) }, '10.20.3.4'), 401, 'unauthenticated');
    expect((await ok('GET', `/v1/deployments/${dep.id}/invocations`)).length).toBe(before);
    await expectActivity(h, me, { eventType: 'trigger.rejected', resourceType: 'trigger', resourceId: trigger.id });

    // Signed and from the allowed network: the deployment runs with the rendered message.
    fake.script({ text: 'Label: auth' });
    const fired = await invoke({ 'x-webhook-signature': sig, 'webhook-id': 'delivery-1' }, '10.20.3.4');
    expect(fired.statusCode, fired.body).toBe(202);
    const firedInv = json(fired).data;
    expect(firedInv.fired).toBe(true);
    await until(
      'the triggered run completed',
      async () => (await ok('GET', `/v1/deployments/${dep.id}/invocations/${firedInv.invocationId}`)).status === 'completed',
      30_000,
    );
    const prompt = fake.requests.at(-1)!.body.messages.at(-1).content;
    expect(prompt).toBe('New issue: Login fails (["auth"]) missing: []');
    await until('its webhook', () => delivered$(firedInv.invocationId), webhookWait);
    expect(receiver.received.find((d) => d.body.data.invocationId === firedInv.invocationId)!.verifiedWith).toEqual([dep.webhookSecret]);
    // The same delivery again is a replay: refused, nothing runs.
    expectError(await invoke({ 'x-webhook-signature': sig, 'webhook-id': 'delivery-1' }, '10.20.3.4'), 409, 'replayed');
    await expectActivity(h, me, { eventType: 'trigger.fired', resourceType: 'trigger', resourceId: trigger.id });
  });
});
