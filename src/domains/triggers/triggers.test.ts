import { createHmac } from 'node:crypto';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { addOrgMember, createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { expectError, until } from '../../../test/helpers.js';
import { securitySuite } from '../../../test/security.js';
import { type Ctx, withTx } from '../../platform/context.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { registerDeploymentInvoker, type DeploymentInvoker } from './index.js';
import { PRUNE_QUEUE } from './jobs.js';
import { REJECTIONS_RECORDED_PER_MINUTE } from './invoke.js';

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE';

/**
 * A stand-in for the deployments domain (an in-process collaborator): deployments it was told of, per
 * organization, and every invocation asked of it. The deployment rows exist too (triggers reference them).
 */
class FakeInvoker implements DeploymentInvoker {
  readonly deployments: { id: string; apiSlug: string; orgId: string }[] = [];
  readonly calls: { userId: string; orgId: string | null; role: string | null; deploymentId: string; input: string; triggerId: string }[] = [];
  failNext = false;

  async find(ctx: Ctx, idOrApiSlug: string) {
    const d = this.deployments.find((x) => x.orgId === ctx.principal.orgId && (x.id === idOrApiSlug || x.apiSlug === idOrApiSlug));
    return d ? { id: d.id, apiSlug: d.apiSlug } : null;
  }

  async invoke(ctx: Ctx, deploymentId: string, o: { input: string; triggerId: string; alsoInTx?: (tx: Ctx, invocationId: string) => Promise<void> }) {
    if (this.failNext) {
      this.failNext = false;
      throw new Error('the deployment could not start');
    }
    // As the deployments domain does: the trigger's writes in the invocation's transaction, counted once it commits.
    const id = `inv_${this.calls.length + 1}`;
    await withTx(ctx, async (tx) => o.alsoInTx?.(tx, id));
    this.calls.push({
      userId: ctx.principal.userId,
      orgId: ctx.principal.orgId,
      role: ctx.principal.role,
      deploymentId,
      input: o.input,
      triggerId: o.triggerId,
    });
    return { id, status: 'queued' };
  }
}

async function seedDeployment(h: Harness, fake: FakeInvoker, actor: Actor, apiSlug: string) {
  const id = prefixedId('dep');
  const now = nowIso();
  await h.deps.db.kysely
    .insertInto('deployments')
    .values({
      id,
      org_id: actor.orgId,
      created_by_user_id: actor.userId,
      api_slug: apiSlug,
      agent_slug: 'helper',
      template_slug: null,
      webhook_url: null,
      webhook_events: '[]',
      webhook_secret_ciphertext: 'x',
      webhook_previous_secret_ciphertext: null,
      webhook_previous_until: null,
      webhook_disabled_at: null,
      webhook_disabled_reason: null,
      max_concurrent: 1,
      timeout_seconds: 60,
      created_at: now,
      updated_at: now,
    })
    .execute();
  fake.deployments.push({ id, apiSlug, orgId: actor.orgId });
  return id;
}

const hex = (secret: string, ...parts: (string | Buffer)[]) => {
  const m = createHmac('sha256', secret);
  for (const p of parts) m.update(p);
  return m.digest('hex');
};
const nowS = () => Math.floor(Date.now() / 1000);

describe('agent triggers', () => {
  let h: Harness;
  let fake: FakeInvoker;
  let admin: Actor;
  let other: Actor;
  let depId: string;

  const call = (actor: Actor, method: Method, url: string, payload?: unknown) =>
    h.app.inject({ method, url, headers: actor.headers, payload: payload as object });
  const ok = async (actor: Actor, method: Method, url: string, payload?: unknown, status = 200) => {
    const res = await call(actor, method, url, payload);
    expect(res.statusCode, res.body).toBe(status);
    return json(res).data;
  };
  const create = (body: Record<string, unknown>, actor = admin) => ok(actor, 'POST', '/v1/triggers', { deployment: depId, ...body }, 201);
  const invoke = (id: string, body: string | Buffer, headers: Record<string, string> = {}, remoteAddress?: string) =>
    h.app.inject({
      method: 'POST',
      url: `/v1/triggers/${id}/invoke`,
      payload: body,
      headers: { 'content-type': 'application/json', ...headers },
      ...(remoteAddress ? { remoteAddress } : {}),
    });
  const signedWebhook = (t: { id: string; secret: string }, body: string, extra: Record<string, string> = {}) =>
    invoke(t.id, body, { 'x-webhook-signature': hex(t.secret, body), ...extra });
  const callsOf = (triggerId: string) => fake.calls.filter((c) => c.triggerId === triggerId);

  beforeAll(async () => {
    h = await createHarness({ HANGAR_TRIGGERS_TRUSTED_PROXIES: '10.0.0.0/8, fd00::1' });
    fake = new FakeInvoker();
    registerDeploymentInvoker(h.deps, fake);
    admin = await createOrgAdmin(h);
    other = await createOrgAdmin(h);
    depId = await seedDeployment(h, fake, admin, 'support-bot');
  });
  afterAll(() => h?.close());

  describe('REST', () => {
    it('creates a trigger by deployment apiSlug, answers its secret once, and lists, gets, changes and deletes it', async () => {
      const t = await create({ deployment: 'support-bot', events: ['order.paid'], allowedIps: ['203.0.113.0/24', '2001:db8::/32', '198.51.100.7'] });
      expect(t).toMatchObject({
        deployment: depId,
        source: 'webhook',
        events: ['order.paid'],
        message: '{{payload}}',
        allowedIps: ['203.0.113.0/24', '2001:db8::/32', '198.51.100.7'],
        repo: null,
        status: 'active',
      });
      expect(t.id).toMatch(/^trg_/);
      expect(t.secret).toMatch(/^[0-9a-f]{64}$/);
      expect(t.webhookUrl).toBe(`http://localhost:80/v1/triggers/${t.id}/invoke`);
      await expectActivity(h, admin, { eventType: 'trigger.created', resourceType: 'trigger', resourceId: t.id });

      const got = await ok(admin, 'GET', `/v1/triggers/${t.id}`);
      expect(got.secret).toBeUndefined();
      expect(got.events).toEqual(['order.paid']);
      const listed = await ok(admin, 'GET', '/v1/triggers?deployment=support-bot');
      expect(listed.triggers.map((x: { id: string }) => x.id)).toContain(t.id);
      expect(listed.triggers.every((x: { secret?: string }) => x.secret === undefined)).toBe(true);
      expect((await ok(admin, 'GET', '/v1/triggers?deployment=nope')).triggers).toEqual([]);

      const changed = await ok(admin, 'PATCH', `/v1/triggers/${t.id}`, { events: [], message: 'Hi {{payload.x}}', secret: 'new-secret-1' });
      expect(changed).toMatchObject({ events: [], message: 'Hi {{payload.x}}' });
      expect(changed.secret).toBeUndefined();
      await expectActivity(h, admin, { eventType: 'trigger.updated', resourceType: 'trigger', resourceId: t.id });
      // The new secret signs from now on; the old one no longer does.
      expectError(await invoke(t.id, '{"x":1}', { 'x-webhook-signature': hex(t.secret, '{"x":1}') }, '203.0.113.5'), 401, 'unauthenticated');
      // allowedIps still applies (the injected socket is 127.0.0.1); from an allowed address the new secret fires.
      expectError(await signedWebhook({ id: t.id, secret: 'new-secret-1' }, '{"x":1}'), 403, 'forbidden');
      const fired = await invoke(t.id, '{"x":1}', { 'x-webhook-signature': hex('new-secret-1', '{"x":1}') }, '203.0.113.5');
      expect(fired.statusCode, fired.body).toBe(202);
      expect(callsOf(t.id).map((c) => c.input)).toEqual(['Hi 1']);

      expect(await ok(admin, 'DELETE', `/v1/triggers/${t.id}`)).toEqual({ deleted: true });
      await expectActivity(h, admin, { eventType: 'trigger.deleted', resourceType: 'trigger', resourceId: t.id });
      expectError(await call(admin, 'GET', `/v1/triggers/${t.id}`), 404, 'not_found');
      expectError(await signedWebhook({ id: t.id, secret: 'new-secret-1' }, '{}'), 404, 'not_found');
    });

    it('refuses bad input: an unknown deployment 404, a bad CIDR, repo off code_host, a short secret, too many IPs 400', async () => {
      expectError(await call(admin, 'POST', '/v1/triggers', { deployment: 'missing' }), 404, 'not_found');
      for (const allowedIps of [['10.0.0.0/33'], ['not-an-ip'], ['300.1.1.1'], ['2001:db8::/129'], ['10.0.0.0/']]) {
        const err = expectError(await call(admin, 'POST', '/v1/triggers', { deployment: depId, allowedIps }), 400, 'invalid_request');
        expect(err.message).toContain('allowedIps');
      }
      const many = Array.from({ length: 101 }, (_, i) => `10.0.${i}.1`);
      expectError(await call(admin, 'POST', '/v1/triggers', { deployment: depId, allowedIps: many }), 400, 'invalid_request');
      const repoErr = expectError(await call(admin, 'POST', '/v1/triggers', { deployment: depId, repo: 'acme/web' }), 400, 'invalid_request');
      expect(repoErr.message).toContain('repo');
      expectError(await call(admin, 'POST', '/v1/triggers', { deployment: depId, source: 'code_host', repo: 'no-slash' }), 400, 'invalid_request');
      expectError(await call(admin, 'POST', '/v1/triggers', { deployment: depId, secret: 'short' }), 400, 'invalid_request');
      expectError(await call(admin, 'POST', '/v1/triggers', { deployment: depId, source: 'ftp' }), 400, 'invalid_request');
      expectError(await call(admin, 'POST', '/v1/triggers', { deployment: depId, message: 'x'.repeat(20_001) }), 400, 'invalid_request');
      const t = await create({});
      expectError(await call(admin, 'PATCH', `/v1/triggers/${t.id}`, { repo: 'acme/web' }), 400, 'invalid_request');
      expectError(await call(admin, 'PATCH', `/v1/triggers/${t.id}`, { deployment: 'missing' }), 404, 'not_found');
    });

    it("another organization's trigger is 404, while its owner reads it", async () => {
      const t = await create({});
      await ok(admin, 'GET', `/v1/triggers/${t.id}`);
      for (const [method, url] of [
        ['GET', `/v1/triggers/${t.id}`],
        ['PATCH', `/v1/triggers/${t.id}`],
        ['POST', `/v1/triggers/${t.id}/pause`],
        ['DELETE', `/v1/triggers/${t.id}`],
      ] as const)
        expectError(await call(other, method, url, method === 'PATCH' ? { events: [] } : undefined), 404, 'not_found');
      expect((await ok(other, 'GET', '/v1/triggers')).triggers).toEqual([]);
      // Nor can another organization bind its trigger to this organization's deployment.
      expectError(await call(other, 'POST', '/v1/triggers', { deployment: depId }), 404, 'not_found');
      expect((await ok(admin, 'GET', `/v1/triggers/${t.id}`)).status).toBe('active');
    });

    it('pause and resume move the state once; doing either again is 409 invalid_state', async () => {
      const t = await create({});
      expect((await ok(admin, 'POST', `/v1/triggers/${t.id}/pause`)).status).toBe('paused');
      expect(expectError(await call(admin, 'POST', `/v1/triggers/${t.id}/pause`), 409, 'invalid_state').state).toBe('paused');
      expect((await ok(admin, 'GET', `/v1/triggers/${t.id}`)).status).toBe('paused');
      expect((await ok(admin, 'POST', `/v1/triggers/${t.id}/resume`)).status).toBe('active');
      expectError(await call(admin, 'POST', `/v1/triggers/${t.id}/resume`), 409, 'invalid_state');
      await expectActivity(h, admin, { eventType: 'trigger.paused', resourceType: 'trigger', resourceId: t.id });
      await expectActivity(h, admin, { eventType: 'trigger.resumed', resourceType: 'trigger', resourceId: t.id });
    });
  });

  describe('generic webhook source', () => {
    it('a valid X-Webhook-Signature (with or without sha256=) fires the deployment once, as the creator, with the rendered message', async () => {
      const t = await create({ message: 'New order {{payload.order.id}} for {{payload.order.items.0.sku}}{{payload.missing}}' });
      const body = JSON.stringify({ order: { id: 'o-1', items: [{ sku: 'A7' }] } });
      const res = await signedWebhook(t, body);
      expect(res.statusCode, res.body).toBe(202);
      expect(json(res).data).toEqual({ fired: true, invocationId: expect.any(String), status: 'queued' });
      expect(callsOf(t.id)).toEqual([
        { userId: admin.userId, orgId: admin.orgId, role: 'admin', deploymentId: depId, input: 'New order o-1 for A7', triggerId: t.id },
      ]);
      const prefixed = await invoke(t.id, body, { 'x-webhook-signature': `sha256=${hex(t.secret, body)}` });
      expect(prefixed.statusCode, prefixed.body).toBe(202);
      expect(callsOf(t.id)).toHaveLength(2);
      await expectActivity(h, admin, {
        eventType: 'trigger.fired',
        resourceType: 'trigger',
        resourceId: t.id,
        metadata: { invocationId: json(res).data.invocationId },
      });
    });

    it('a wrong, wrong-length or missing signature is 401 and fires nothing; the rejection names the reason, not the secret', async () => {
      const t = await create({});
      const body = '{"a":1}';
      expectError(await invoke(t.id, body, { 'x-webhook-signature': hex('another-secret', body) }), 401, 'unauthenticated');
      expectError(await invoke(t.id, body, { 'x-webhook-signature': 'abc' }), 401, 'unauthenticated');
      expectError(await invoke(t.id, body, { 'x-webhook-signature': 'z'.repeat(5000) }), 401, 'unauthenticated');
      expectError(await invoke(t.id, body, { 'x-webhook-signature': `sha256=${hex(t.secret, body)}00` }), 401, 'unauthenticated');
      expectError(await invoke(t.id, body), 401, 'unauthenticated');
      // The signature covers the bytes sent: the same JSON with other spacing is not signed.
      expectError(await invoke(t.id, '{ "a": 1 }', { 'x-webhook-signature': hex(t.secret, body) }), 401, 'unauthenticated');
      expect(callsOf(t.id)).toEqual([]);
      const ev = await expectActivity(h, admin, {
        eventType: 'trigger.rejected',
        resourceType: 'trigger',
        resourceId: t.id,
        metadata: { reason: 'bad_signature' },
      });
      expect(JSON.stringify(ev)).not.toContain(t.secret);
      expect(JSON.stringify(ev)).not.toContain('"a":1');
    });

    it('a flood of refused requests is refused every time but records at most 10 a minute per trigger', async () => {
      const t = await create({});
      const body = '{"a":1}';
      for (let i = 0; i < 25; i++) expectError(await invoke(t.id, body, { 'x-webhook-signature': 'abc' }), 401, 'unauthenticated');
      const rejected = async (id: string) => {
        const q = new URLSearchParams({ event_type: 'trigger.rejected', resource_type: 'trigger', resource_id: id, limit: '200' });
        const res = await call(admin, 'GET', `/v1/activity?${q}`);
        expect(res.statusCode, res.body).toBe(200);
        return json(res).data.events as any[];
      };
      expect(await rejected(t.id)).toHaveLength(REJECTIONS_RECORDED_PER_MINUTE);
      // Another trigger's budget is its own; and a signed request still fires.
      const other = await create({});
      expectError(await invoke(other.id, body), 401, 'unauthenticated');
      expect(await rejected(other.id)).toHaveLength(1);
      expect((await signedWebhook(t, body)).statusCode).toBe(202);
    });

    it('the Standard Webhooks scheme fires; the same webhook-id again is 409 replayed; an old timestamp is 401', async () => {
      const t = await create({});
      const std = (id: string, ts: number, body: string, secret = t.secret) => ({
        'webhook-id': id,
        'webhook-timestamp': String(ts),
        'webhook-signature': `v1,${createHmac('sha256', 'nope').update('x').digest('base64')} v1,${createHmac('sha256', secret).update(`${id}.${ts}.${body}`).digest('base64')}`,
      });
      const body = '{"type":"user.created"}';
      const first = await invoke(t.id, body, std('msg_1', nowS(), body));
      expect(first.statusCode, first.body).toBe(202);
      expectError(await invoke(t.id, body, std('msg_1', nowS(), body)), 409, 'replayed');
      await expectActivity(h, admin, { eventType: 'trigger.rejected', resourceType: 'trigger', resourceId: t.id, metadata: { reason: 'replayed' } });
      expectError(await invoke(t.id, body, std('msg_2', nowS() - 3600, body)), 401, 'unauthenticated');
      expectError(await invoke(t.id, body, std('msg_3', nowS() + 3600, body)), 401, 'unauthenticated');
      await expectActivity(h, admin, {
        eventType: 'trigger.rejected',
        resourceType: 'trigger',
        resourceId: t.id,
        metadata: { reason: 'stale_timestamp' },
      });
      expectError(await invoke(t.id, body, std('msg_4', nowS(), body, 'wrong-secret')), 401, 'unauthenticated');
      // The id is signed: changing it breaks the signature.
      expectError(await invoke(t.id, body, { ...std('msg_5', nowS(), body), 'webhook-id': 'msg_6' }), 401, 'unauthenticated');
      expect(callsOf(t.id)).toHaveLength(1);
    });

    it('a whsec_ secret is the base64 of the Standard Webhooks key', async () => {
      const key = Buffer.from('0123456789abcdef0123456789abcdef');
      const t = await create({ secret: `whsec_${key.toString('base64')}` });
      const body = '{}';
      const ts = nowS();
      const res = await invoke(t.id, body, {
        'webhook-id': 'm1',
        'webhook-timestamp': String(ts),
        'webhook-signature': `v1,${createHmac('sha256', key).update(`m1.${ts}.${body}`).digest('base64')}`,
      });
      expect(res.statusCode, res.body).toBe(202);
    });

    it('a body that is not JSON (any content type) is the payload as text; the events filter reads X-Webhook-Event or payload.type', async () => {
      const t = await create({ message: 'Got: {{payload}}' });
      const body = 'hello <b>world</b>';
      const res = await invoke(t.id, body, { 'content-type': 'text/plain', 'x-webhook-signature': hex(t.secret, body) });
      expect(res.statusCode, res.body).toBe(202);
      expect(callsOf(t.id)[0]!.input).toBe('Got: hello <b>world</b>');

      const f = await create({ events: ['order.paid'] });
      const paid = '{"type":"order.paid"}';
      expect((await signedWebhook(f, paid)).statusCode).toBe(202);
      const refunded = '{"type":"order.refunded"}';
      const skipped = await signedWebhook(f, refunded);
      expect(skipped.statusCode, skipped.body).toBe(200);
      expect(json(skipped).data).toEqual({ fired: false, reason: expect.stringContaining('order.refunded') });
      expect((await signedWebhook(f, '{}', { 'x-webhook-event': 'order.paid' })).statusCode).toBe(202);
      expect(json(await signedWebhook(f, '{}')).data.fired).toBe(false);
      expect(callsOf(f.id)).toHaveLength(2);
    });

    it('template paths that reach for code render empty and run nothing', async () => {
      const t = await create({
        message: '[{{constructor}}][{{payload.__proto__}}][{{payload.constructor.name}}][{{process.exit(1)}}][{{payload.a}}]',
      });
      const body = '{"a":"x","__proto__":{"polluted":1}}';
      expect((await signedWebhook(t, body)).statusCode).toBe(202);
      expect(callsOf(t.id)[0]!.input).toBe('[][][][][x]');
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    });

    it('a deployment that cannot start leaves the delivery unseen, so the sender may retry it', async () => {
      const t = await create({});
      const ts = nowS();
      const body = '{}';
      const headers = {
        'webhook-id': 'retry-me',
        'webhook-timestamp': String(ts),
        'webhook-signature': `v1,${createHmac('sha256', t.secret).update(`retry-me.${ts}.${body}`).digest('base64')}`,
      };
      fake.failNext = true;
      expect((await invoke(t.id, body, headers)).statusCode).toBe(500);
      expect((await invoke(t.id, body, headers)).statusCode).toBe(202);
      expect(callsOf(t.id)).toHaveLength(1);
    });
  });

  describe('code host source', () => {
    const gh = (t: { id: string; secret: string }, event: string, delivery: string, payload: unknown) => {
      const body = JSON.stringify(payload);
      return invoke(t.id, body, { 'x-hub-signature-256': `sha256=${hex(t.secret, body)}`, 'x-github-event': event, 'x-github-delivery': delivery });
    };

    it('fires on a signed event of the repository, answers ping without firing, filters events and refuses replays', async () => {
      const t = await create({ source: 'code_host', repo: 'acme/web', events: ['issues', 'push'], message: '{{payload.issue.title}}' });
      expect(t.repo).toBe('acme/web');
      const ping = await gh(t, 'ping', 'd-0', { zen: 'hi', hook_id: 1 });
      expect(ping.statusCode, ping.body).toBe(200);
      expect(json(ping).data).toEqual({ fired: false, reason: 'ping' });

      const issue = { action: 'opened', issue: { title: 'Crash on save' }, repository: { full_name: 'acme/web' } };
      const res = await gh(t, 'issues', 'd-1', issue);
      expect(res.statusCode, res.body).toBe(202);
      expect(callsOf(t.id).map((c) => c.input)).toEqual(['Crash on save']);
      expectError(await gh(t, 'issues', 'd-1', issue), 409, 'replayed');

      expect(json(await gh(t, 'star', 'd-2', { repository: { full_name: 'acme/web' } })).data.fired).toBe(false);
      expect(json(await gh(t, 'issues', 'd-3', { ...issue, repository: { full_name: 'evil/web' } })).data.fired).toBe(false);
      expect(callsOf(t.id)).toHaveLength(1);

      const body = JSON.stringify(issue);
      expectError(
        await invoke(t.id, body, { 'x-hub-signature-256': hex(t.secret, body), 'x-github-event': 'issues', 'x-github-delivery': 'd-4' }),
        401,
        'unauthenticated',
      );
      expectError(
        await invoke(t.id, body, { 'x-hub-signature-256': 'sha256=00', 'x-github-event': 'issues', 'x-github-delivery': 'd-5' }),
        401,
        'unauthenticated',
      );
      // The generic header does not sign a code-host trigger.
      expectError(await invoke(t.id, body, { 'x-webhook-signature': hex(t.secret, body), 'x-github-event': 'issues' }), 401, 'unauthenticated');
    });
  });

  describe('payment provider source', () => {
    const stripe = (t: { id: string; secret: string }, payload: unknown, ts = nowS(), secret = t.secret) => {
      const body = JSON.stringify(payload);
      return invoke(t.id, body, { 'stripe-signature': `t=${ts},v1=${hex('old-secret', `${ts}.`, body)},v1=${hex(secret, `${ts}.`, body)},v0=abc` });
    };

    it('fires on a signed event (any of several v1), filters by type, refuses a replayed event id and a stale timestamp', async () => {
      const t = await create({
        source: 'payment_provider',
        events: ['checkout.session.completed'],
        message: 'Paid: {{payload.data.object.amount_total}}',
      });
      const evt = { id: 'evt_1', type: 'checkout.session.completed', data: { object: { amount_total: 4200 } } };
      const res = await stripe(t, evt);
      expect(res.statusCode, res.body).toBe(202);
      expect(callsOf(t.id).map((c) => c.input)).toEqual(['Paid: 4200']);
      expectError(await stripe(t, evt), 409, 'replayed');
      expect(json(await stripe(t, { id: 'evt_2', type: 'invoice.paid' })).data.fired).toBe(false);
      expectError(await stripe(t, { ...evt, id: 'evt_3' }, nowS() - 3600), 401, 'unauthenticated');
      await expectActivity(h, admin, {
        eventType: 'trigger.rejected',
        resourceType: 'trigger',
        resourceId: t.id,
        metadata: { reason: 'stale_timestamp' },
      });
      expectError(await stripe(t, { ...evt, id: 'evt_4' }, nowS(), 'wrong-secret'), 401, 'unauthenticated');
      expectError(await invoke(t.id, '{}', { 'stripe-signature': 'v1=00' }), 401, 'unauthenticated');
      expect(callsOf(t.id)).toHaveLength(1);
    });
  });

  describe('chat workspace source', () => {
    const slack = (t: { id: string; secret: string }, payload: unknown, ts = nowS(), secret = t.secret) => {
      const body = JSON.stringify(payload);
      return invoke(t.id, body, { 'x-slack-signature': `v0=${hex(secret, `v0:${ts}:`, body)}`, 'x-slack-request-timestamp': String(ts) });
    };

    it('answers url_verification with the challenge, fires on a signed event, filters, refuses replays and stale timestamps', async () => {
      const t = await create({ source: 'chat_workspace', events: ['app_mention'], message: '{{payload.event.text}}' });
      const challenge = await slack(t, { type: 'url_verification', token: 'x', challenge: 'c-123' });
      expect(challenge.statusCode, challenge.body).toBe(200);
      expect(json(challenge)).toEqual({ challenge: 'c-123' });
      // Unsigned, the handshake is refused like anything else.
      expectError(await invoke(t.id, JSON.stringify({ type: 'url_verification', challenge: 'c' })), 401, 'unauthenticated');

      const mention = { type: 'event_callback', event_id: 'Ev1', event: { type: 'app_mention', text: 'hi bot' } };
      const res = await slack(t, mention);
      expect(res.statusCode, res.body).toBe(202);
      expect(callsOf(t.id).map((c) => c.input)).toEqual(['hi bot']);
      expectError(await slack(t, mention), 409, 'replayed');
      expect(json(await slack(t, { type: 'event_callback', event_id: 'Ev2', event: { type: 'message' } })).data.fired).toBe(false);
      expectError(await slack(t, { ...mention, event_id: 'Ev3' }, nowS() - 3600), 401, 'unauthenticated');
      expectError(await slack(t, { ...mention, event_id: 'Ev4' }, nowS(), 'wrong-secret'), 401, 'unauthenticated');
      expect(callsOf(t.id)).toHaveLength(1);
    });
  });

  describe('checks before the signature', () => {
    it('a paused trigger answers 409 even to a bad signature, and fires again once resumed', async () => {
      const t = await create({});
      await ok(admin, 'POST', `/v1/triggers/${t.id}/pause`);
      expectError(await invoke(t.id, '{}', { 'x-webhook-signature': 'bad' }), 409, 'invalid_state');
      expectError(await signedWebhook(t, '{}'), 409, 'invalid_state');
      await expectActivity(h, admin, { eventType: 'trigger.rejected', resourceType: 'trigger', resourceId: t.id, metadata: { reason: 'paused' } });
      await ok(admin, 'POST', `/v1/triggers/${t.id}/resume`);
      expect((await signedWebhook(t, '{}')).statusCode).toBe(202);
      expect(callsOf(t.id)).toHaveLength(1);
    });

    it('allowedIps with CIDR ranges admit those addresses only, before the signature is checked', async () => {
      const t = await create({ allowedIps: ['203.0.113.0/24', '2001:db8::/32'] });
      const body = '{}';
      const sig = { 'x-webhook-signature': hex(t.secret, body) };
      expect((await invoke(t.id, body, sig, '203.0.113.77')).statusCode).toBe(202);
      expect((await invoke(t.id, body, sig, '::ffff:203.0.113.78')).statusCode).toBe(202);
      expect((await invoke(t.id, body, sig, '2001:db8::5')).statusCode).toBe(202);
      expectError(await invoke(t.id, body, sig, '203.0.114.1'), 403, 'forbidden');
      expectError(await invoke(t.id, body, sig, '2001:db9::5'), 403, 'forbidden');
      // Refused for its address before its (bad) signature is looked at.
      expectError(await invoke(t.id, body, { 'x-webhook-signature': 'bad' }, '198.51.100.1'), 403, 'forbidden');
      await expectActivity(h, admin, {
        eventType: 'trigger.rejected',
        resourceType: 'trigger',
        resourceId: t.id,
        metadata: { reason: 'ip_not_allowed', ip: '198.51.100.1' },
      });
      expect(callsOf(t.id)).toHaveLength(3);
    });

    it('X-Forwarded-For counts only from a trusted proxy, and only its right-most untrusted entry', async () => {
      const t = await create({ allowedIps: ['203.0.113.0/24'] });
      const body = '{}';
      const sig = { 'x-webhook-signature': hex(t.secret, body) };
      // From an untrusted socket the header is the caller's own claim.
      expectError(await invoke(t.id, body, { ...sig, 'x-forwarded-for': '203.0.113.9' }, '198.51.100.1'), 403, 'forbidden');
      // Through the trusted proxy (and a second trusted hop), the client is the address before them.
      expect((await invoke(t.id, body, { ...sig, 'x-forwarded-for': '203.0.113.9' }, '10.1.2.3')).statusCode).toBe(202);
      expect((await invoke(t.id, body, { ...sig, 'x-forwarded-for': '198.51.100.1, 203.0.113.9, 10.9.9.9' }, '10.1.2.3')).statusCode).toBe(202);
      expect((await invoke(t.id, body, { ...sig, 'x-forwarded-for': '203.0.113.9' }, 'fd00::1')).statusCode).toBe(202);
      // A forged entry on the left does not help: the proxy appended the real address on the right.
      expectError(await invoke(t.id, body, { ...sig, 'x-forwarded-for': '203.0.113.9, 198.51.100.1' }, '10.1.2.3'), 403, 'forbidden');
      expectError(await invoke(t.id, body, { ...sig, 'x-forwarded-for': 'garbage' }, '10.1.2.3'), 403, 'forbidden');
    });

    it('a body larger than HANGAR_TRIGGERS_MAX_BODY_BYTES (1 MB by default) is 413, a 16 MB one too', async () => {
      const t = await create({});
      const big = Buffer.alloc(16 * 1024 * 1024, 'a');
      expectError(await invoke(t.id, big, { 'x-webhook-signature': hex(t.secret, big) }), 413, 'payload_too_large');
      await expectActivity(h, admin, { eventType: 'trigger.rejected', resourceType: 'trigger', resourceId: t.id, metadata: { reason: 'too_large' } });
      expect(callsOf(t.id)).toEqual([]);
    });

    it('a creator who left the organization makes the trigger refuse with 409 invalid_state', async () => {
      const member = await addOrgMember(h, admin);
      const t = await create({}, member);
      expect((await signedWebhook(t, '{}')).statusCode).toBe(202);
      expect(callsOf(t.id)[0]).toMatchObject({ userId: member.userId, role: 'member' });
      expect((await call(admin, 'DELETE', `/v1/organizations/${admin.orgId}/members/${member.userId}`)).statusCode).toBe(204);
      expectError(await signedWebhook(t, '{}'), 409, 'invalid_state');
      await expectActivity(h, admin, {
        eventType: 'trigger.rejected',
        resourceType: 'trigger',
        resourceId: t.id,
        metadata: { reason: 'creator_not_member' },
      });
      expect(callsOf(t.id)).toHaveLength(1);
    });

    it('an unknown trigger is 404 whatever is sent', async () => {
      expectError(await invoke('trg_nope', '{}', { 'x-webhook-signature': 'x' }), 404, 'not_found');
      expectError(await invoke(`trg_${'x'.repeat(96)}`, '{}'), 404, 'not_found');
    });
  });

  it('delivery ids older than a week are forgotten by the triggers job', async () => {
    const gt = await create({ source: 'code_host' });
    const body = '{}';
    const sign = { 'x-hub-signature-256': `sha256=${hex(gt.secret, body)}`, 'x-github-event': 'push', 'x-github-delivery': 'old-1' };
    expect((await invoke(gt.id, body, sign)).statusCode).toBe(202);
    expectError(await invoke(gt.id, body, sign), 409, 'replayed');
    await h.deps.db.kysely
      .updateTable('trigger_deliveries')
      .set({ received_at: new Date(Date.now() - 8 * 24 * 3600 * 1000).toISOString() })
      .where('trigger_id', '=', gt.id)
      .execute();
    // The hourly schedule's job, as the engine runs it.
    await h.deps.jobs.send(PRUNE_QUEUE, null);
    await until('the old delivery id forgotten', async () => {
      const res = await invoke(gt.id, body, sign);
      return res.statusCode === 202 ? res : null;
    });
    const schedule = await h.deps.db.kysely.selectFrom('job_schedules').selectAll().where('name', '=', PRUNE_QUEUE).executeTakeFirst();
    expect(schedule).toMatchObject({ cron: '23 * * * *', queue: PRUNE_QUEUE });
  });
});

describe('agent triggers with a small body limit', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_TRIGGERS_MAX_BODY_BYTES: '2048' });
    const fake = new FakeInvoker();
    registerDeploymentInvoker(h.deps, fake);
    admin = await createOrgAdmin(h);
    await seedDeployment(h, fake, admin, 'bot');
  });
  afterAll(() => h?.close());

  it('takes a body at the limit and refuses one past it with 413 (declared or chunked)', async () => {
    const t = json(await h.app.inject({ method: 'POST', url: '/v1/triggers', headers: admin.headers, payload: { deployment: 'bot' } })).data;
    const at = JSON.stringify({ pad: 'x'.repeat(2048 - 10) });
    expect(at.length).toBe(2048);
    const fit = await h.app.inject({
      method: 'POST',
      url: `/v1/triggers/${t.id}/invoke`,
      payload: at,
      headers: { 'content-type': 'application/json', 'x-webhook-signature': hex(t.secret, at) },
    });
    expect(fit.statusCode, fit.body).toBe(202);
    const over = `${at} `;
    const res = await h.app.inject({
      method: 'POST',
      url: `/v1/triggers/${t.id}/invoke`,
      payload: over,
      headers: { 'content-type': 'application/json', 'x-webhook-signature': hex(t.secret, over) },
    });
    expectError(res, 413, 'payload_too_large');
    await expectActivity(h, admin, { eventType: 'trigger.rejected', resourceType: 'trigger', resourceId: t.id, metadata: { reason: 'too_large' } });
    // Sent without a Content-Length, the body is cut off once it passes the limit.
    const chunked = await h.app.inject({
      method: 'POST',
      url: `/v1/triggers/${t.id}/invoke`,
      payload: Readable.from([Buffer.from(over.slice(0, 1500)), Buffer.from(over.slice(1500))]),
      headers: { 'content-type': 'application/json', 'x-webhook-signature': hex(t.secret, over) },
    });
    expectError(chunked, 413, 'payload_too_large');
  });
});

const registered = new WeakSet<object>();
async function ownerTrigger(owner: Actor, h: Harness): Promise<string> {
  if (!registered.has(h.deps)) {
    const fake = new FakeInvoker();
    registerDeploymentInvoker(h.deps, fake);
    registered.add(h.deps);
    (h.deps as unknown as { __fake: FakeInvoker }).__fake = fake;
  }
  const fake = (h.deps as unknown as { __fake: FakeInvoker }).__fake;
  let dep = fake.deployments.find((d) => d.orgId === owner.orgId);
  if (!dep) {
    await seedDeployment(h, fake, owner, 'sec-bot');
    dep = fake.deployments.find((d) => d.orgId === owner.orgId)!;
  }
  const res = await h.app.inject({ method: 'POST', url: '/v1/triggers', headers: owner.headers, payload: { deployment: dep.id } });
  expect(res.statusCode, res.body).toBe(201);
  return json(res).data.id;
}

securitySuite('triggers', [
  { method: 'POST', url: () => '/v1/triggers', scope: 'triggers:write', body: { deployment: 'sec-bot' } },
  { method: 'GET', url: () => '/v1/triggers', scope: 'triggers:read' },
  { method: 'GET', url: async (o, h) => `/v1/triggers/${await ownerTrigger(o, h)}`, scope: 'triggers:read', crossOrg: true },
  {
    method: 'PATCH',
    url: async (o, h) => `/v1/triggers/${await ownerTrigger(o, h)}`,
    scope: 'triggers:write',
    body: { events: ['x'] },
    crossOrg: true,
  },
  { method: 'DELETE', url: async (o, h) => `/v1/triggers/${await ownerTrigger(o, h)}`, scope: 'triggers:write', crossOrg: true },
  { method: 'POST', url: async (o, h) => `/v1/triggers/${await ownerTrigger(o, h)}/pause`, scope: 'triggers:write', crossOrg: true },
  { method: 'POST', url: async (o, h) => `/v1/triggers/${await ownerTrigger(o, h)}/resume`, scope: 'triggers:write', crossOrg: true },
]);
