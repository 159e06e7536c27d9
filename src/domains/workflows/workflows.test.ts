import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../app.js';
import { expectActivity } from '../../../test/activity.js';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { WebhookReceiver } from '../../../test/fakes/webhook-receiver.js';
import { createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { expectError, sleep, until } from '../../../test/helpers.js';
import { securitySuite } from '../../../test/security.js';
import { isolationNeed, itNeeding } from '../../../test/needs.js';
import { createIsolation } from '../../platform/isolation/index.js';
import { resendStalled } from './jobs.js';
import { runStepJob } from './runner.js';
import { scheduleName } from './triggers.js';

const isolation = await createIsolation();

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE';
const ENDED = ['completed', 'failed', 'cancelled'];

function client(h: () => Harness) {
  const call = (actor: Actor, method: Method, url: string, payload?: unknown) =>
    h().app.inject({ method, url, headers: actor.headers, payload: payload as object });
  const ok = async (actor: Actor, method: Method, url: string, payload?: unknown, status = 200) => {
    const res = await call(actor, method, url, payload);
    expect(res.statusCode, res.body).toBe(status);
    return json(res).data;
  };
  const create = (actor: Actor, body: Record<string, unknown>) => ok(actor, 'POST', '/v1/workflows', body, 201);
  const start = (actor: Actor, slug: string, input?: unknown) =>
    ok(actor, 'POST', `/v1/workflows/${slug}/runs`, input === undefined ? {} : { input }, 202);
  const run = (actor: Actor, slug: string, id: string) => ok(actor, 'GET', `/v1/workflows/${slug}/runs/${id}`);
  const ended = (actor: Actor, slug: string, id: string, ms = 20_000) =>
    until(
      `workflow run ${id} ended`,
      async () => {
        const r = await run(actor, slug, id);
        return ENDED.includes(r.status) ? r : null;
      },
      ms,
    );
  const hook = (url: string, body: string, headers: Record<string, string> = {}) =>
    h().app.inject({ method: 'POST', url: new URL(url).pathname, headers: { 'content-type': 'application/json', ...headers }, payload: body });
  return { call, ok, create, start, run, ended, hook };
}

/** A loopback server whose answers the test holds back: every request waits until `release()`, and none after it. */
class HoldingServer {
  hits = 0;
  private released = false;
  private waiting: (() => void)[] = [];
  private server!: http.Server;
  url = '';
  async start(): Promise<this> {
    this.server = http.createServer((req, res) => {
      this.hits++;
      req.resume();
      const answer = () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"done":true}');
      if (this.released) answer();
      else this.waiting.push(answer);
    });
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }
  release(): void {
    this.released = true;
    for (const w of this.waiting.splice(0)) w();
  }
  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

describe('workflows', () => {
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
      HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS: 'true',
      HANGAR_TRIGGERS_MAX_BODY_BYTES: '4096',
    });
    admin = await createOrgAdmin(h);
    stranger = await createOrgAdmin(h);
    await c.ok(admin, 'POST', '/v1/agents', { slug: 'summarizer', model: 'm1', instructions: 'Summarize.' }, 201);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
    await rx?.stop();
  });

  const httpStep = (name: string, path: string, extra: Record<string, unknown> = {}) => ({
    name,
    type: 'http',
    method: 'POST',
    url: `${rx.url}${path}`,
    retries: 0,
    ...extra,
  });

  it('creates, lists, reads, versions and deletes a workflow; bad definitions are 400 and a taken slug 409', async () => {
    const wf = await c.create(admin, { slug: 'crud', name: 'CRUD', steps: [httpStep('one', '/crud')] });
    expect(wf).toMatchObject({ slug: 'crud', name: 'CRUD', version: 1, description: null });
    expect(wf.id).toMatch(/^wf_/);
    expect(wf.steps[0]).toMatchObject({ name: 'one', type: 'http', method: 'POST', retries: 0, timeoutSeconds: 300 });

    const v2 = await c.ok(admin, 'PATCH', '/v1/workflows/crud', { steps: [httpStep('one', '/crud'), httpStep('two', '/crud2')], description: 'd' });
    expect(v2).toMatchObject({ version: 2, description: 'd' });
    expect(v2.steps).toHaveLength(2);
    // A change without new steps keeps the version.
    expect((await c.ok(admin, 'PATCH', '/v1/workflows/crud', { name: 'Renamed' })).version).toBe(2);
    expect((await c.ok(admin, 'GET', '/v1/workflows/crud/versions/1')).steps.map((s: any) => s.name)).toEqual(['one']);
    expect((await c.ok(admin, 'GET', '/v1/workflows/crud')).steps.map((s: any) => s.name)).toEqual(['one', 'two']);
    expectError(await c.call(admin, 'GET', '/v1/workflows/crud/versions/3'), 404, 'not_found');
    const list = await c.ok(admin, 'GET', '/v1/workflows');
    expect(list.workflows.find((w: any) => w.slug === 'crud')).toMatchObject({ name: 'Renamed', version: 2, stepCount: 2 });

    expectError(await c.call(admin, 'POST', '/v1/workflows', { slug: 'crud', name: 'x', steps: [httpStep('a', '/x')] }), 409, 'conflict');
    const bad = [
      { slug: 'Bad Slug', name: 'x', steps: [httpStep('a', '/x')] },
      { slug: 'webhooks', name: 'x', steps: [httpStep('a', '/x')] },
      { slug: 'ok', name: 'x', steps: [] },
      { slug: 'ok', name: 'x', steps: [httpStep('a', '/x'), httpStep('a', '/y')] },
      { slug: 'ok', name: 'x', steps: [{ name: 'a', type: 'teleport' }] },
      { slug: 'ok', name: 'x', steps: [{ name: 'a', type: 'agent' }] },
      { slug: 'ok', name: 'x', steps: [httpStep('a', '/x', { retries: 11 })] },
      { slug: 'ok', name: 'x', steps: [httpStep('a', '/x', { method: 'BREW' })] },
      { slug: 'ok', name: 'x', steps: Array.from({ length: 51 }, (_, i) => httpStep(`s${i}`, '/x')) },
      { slug: 'ok', name: 'x', steps: [httpStep('a', '/x')], extra: true },
    ];
    for (const body of bad) expectError(await c.call(admin, 'POST', '/v1/workflows', body), 400, 'invalid_request');
    expectError(await c.call(admin, 'GET', '/v1/workflows/ok'), 404, 'not_found');

    await expectActivity(h, admin, { eventType: 'workflow.updated', resourceType: 'workflow', resourceId: wf.id, metadata: { version: 2 } });
    await c.ok(admin, 'DELETE', '/v1/workflows/crud');
    expectError(await c.call(admin, 'GET', '/v1/workflows/crud'), 404, 'not_found');
    await expectActivity(h, admin, { eventType: 'workflow.deleted', resourceType: 'workflow', resourceId: wf.id });
  });

  it('runs an agent step then an HTTP step, each templated from the input and the earlier output', async () => {
    fake.script({ text: 'Build broke on main' });
    await c.create(admin, {
      slug: 'triage',
      name: 'Triage',
      steps: [
        { name: 'summarize', type: 'agent', agent: 'summarizer', prompt: 'Summarize: {{input.issue.title}} ({{input.issue.labels}})' },
        httpStep('notify', '/notify', {
          headers: { 'x-issue': '{{input.issue.number}}' },
          body: { text: 'Summary: {{steps.summarize.output.result}}', labels: '{{input.issue.labels}}', missing: '[{{input.nope.deeper}}]' },
        }),
      ],
    });
    const started = await c.start(admin, 'triage', { issue: { title: 'CI red', number: 42, labels: ['bug'] } });
    expect(started).toMatchObject({ status: 'queued', version: 1, currentStep: 0, triggerId: null });
    expect(started.id).toMatch(/^wfr_/);
    expect(started.steps.map((s: any) => [s.name, s.status])).toEqual([
      ['summarize', 'pending'],
      ['notify', 'pending'],
    ]);
    const done = await c.ended(admin, 'triage', started.id);
    expect(done.status, JSON.stringify(done)).toBe('completed');
    const prompt = fake.requests.at(-1)!.body.messages.at(-1).content;
    expect(prompt).toBe('Summarize: CI red (["bug"])');
    const [got] = at('/notify');
    expect(got!.body).toEqual({ text: 'Summary: Build broke on main', labels: ['bug'], missing: '[]' });
    expect(got!.headers['x-issue']).toBe('42');
    expect(done.steps[0]).toMatchObject({ status: 'completed', attempts: 1, output: { status: 'completed', result: 'Build broke on main' } });
    expect(done.steps[0].output.runId).toBeTruthy();
    expect(done.steps[1]).toMatchObject({
      status: 'completed',
      attempts: 1,
      output: { status: 200 },
      input: { method: 'POST', headers: ['x-issue', 'content-type'] },
    });
    expect(done.output).toEqual(done.steps[1].output);
    expect(done.finishedAt).toBeTruthy();

    const wf = await c.ok(admin, 'GET', '/v1/workflows/triage');
    await expectActivity(h, admin, {
      eventType: 'workflow.run.started',
      resourceType: 'workflow',
      resourceId: wf.id,
      metadata: { runId: started.id },
    });
    await expectActivity(h, admin, {
      eventType: 'workflow.run.completed',
      resourceType: 'workflow',
      resourceId: wf.id,
      metadata: { runId: started.id },
    });
    const runs = await c.call(admin, 'GET', '/v1/workflows/triage/runs?limit=1');
    expect(json(runs).data.runs[0].id).toBe(started.id);
    expect(json(runs).meta.hasMore).toBe(false);
  });

  it('runs a tool step with templated arguments; a tool not installed fails, untried again', async () => {
    await c.create(admin, {
      slug: 'tooling',
      name: 'Tooling',
      steps: [{ name: 'fetch', type: 'tool', tool: 'http_request', arguments: { method: 'GET', url: '{{input.base}}/tool-target' }, retries: 2 }],
    });
    const notInstalled = await c.ended(admin, 'tooling', (await c.start(admin, 'tooling', { base: rx.url })).id);
    expect(notInstalled.steps[0]).toMatchObject({ status: 'failed', attempts: 1 });
    expect(notInstalled.steps[0].error).toContain('http_request');
    expect(at('/tool-target')).toHaveLength(0);

    await c.ok(admin, 'POST', '/v1/tools/http_request/install', {}, 201);
    const done = await c.ended(admin, 'tooling', (await c.start(admin, 'tooling', { base: rx.url })).id);
    expect(done.status, JSON.stringify(done)).toBe('completed');
    expect(done.steps[0].input).toEqual({ tool: 'http_request', arguments: { method: 'GET', url: `${rx.url}/tool-target` } });
    expect(done.steps[0].output.executionId).toBeTruthy();
    expect(at('/tool-target')).toHaveLength(1);
  });

  itNeeding(isolationNeed(isolation), 'runs a code step on the run’s input; its JSON output feeds the next step', async () => {
    await c.create(admin, {
      slug: 'compute',
      name: 'Compute',
      steps: [
        {
          name: 'calc',
          type: 'code',
          language: 'python',
          code: 'import json,sys\nd=json.load(sys.stdin)\nprint(json.dumps({"double": d["n"] * 2}))',
        },
        httpStep('send', '/computed', { body: { double: '{{steps.calc.output.json.double}}' } }),
      ],
    });
    const done = await c.ended(admin, 'compute', (await c.start(admin, 'compute', { n: 21 })).id, 60_000);
    expect(done.status, JSON.stringify(done)).toBe('completed');
    expect(done.steps[0].output).toMatchObject({ exitCode: 0, status: 'exited', json: { double: 42 } });
    expect(at('/computed')[0]!.body).toEqual({ double: 42 });

    await c.create(admin, {
      slug: 'crash',
      name: 'Crash',
      steps: [{ name: 'boom', type: 'code', language: 'python', code: 'raise SystemExit(3)', retries: 0 }],
    });
    const failed = await c.ended(admin, 'crash', (await c.start(admin, 'crash')).id, 60_000);
    expect(failed.steps[0]).toMatchObject({ status: 'failed', output: { exitCode: 3 } });
    expect(failed.error).toContain('exited with code 3');
  });

  it('tries a failing step again with backoff, and a run whose step fails for good fails and skips the rest', async () => {
    rx.script({ status: 503 }, { status: 500 });
    await c.create(admin, { slug: 'flaky', name: 'Flaky', steps: [httpStep('call', '/flaky', { retries: 2 })] });
    const r = await c.start(admin, 'flaky');
    const done = await c.ended(admin, 'flaky', r.id);
    expect(done.status).toBe('completed');
    expect(done.steps[0]).toMatchObject({ status: 'completed', attempts: 3, error: null });
    expect(at('/flaky')).toHaveLength(3);

    rx.script({ status: 500 }, { status: 500 });
    await c.create(admin, { slug: 'broken', name: 'Broken', steps: [httpStep('call', '/broken', { retries: 1 }), httpStep('after', '/after')] });
    const b = await c.ended(admin, 'broken', (await c.start(admin, 'broken')).id);
    expect(b.status).toBe('failed');
    expect(b.error).toContain('step "call" failed after 2 tries: the server answered 500');
    expect(b.steps.map((s: any) => s.status)).toEqual(['failed', 'skipped']);
    expect(at('/after')).toHaveLength(0);
    const wf = await c.ok(admin, 'GET', '/v1/workflows/broken');
    await expectActivity(h, admin, {
      eventType: 'workflow.run.failed',
      resourceType: 'workflow',
      resourceId: wf.id,
      metadata: { runId: b.id, step: 'call', attempts: 2 },
    });

    // A 4xx is the request's fault: not tried again, whatever the retries.
    rx.script({ status: 404 });
    await c.create(admin, { slug: 'missing', name: 'Missing', steps: [httpStep('call', '/missing', { retries: 3 })] });
    const m = await c.ended(admin, 'missing', (await c.start(admin, 'missing')).id);
    expect(m.steps[0]).toMatchObject({ status: 'failed', attempts: 1 });
  });

  it('runs steps as the starter: a step their credential may not do fails, untried again', async () => {
    const key = await keyFor(h, admin, ['workflows:read', 'workflows:write', 'workflows:run']);
    const narrow: Actor = { ...admin, key, headers: { 'x-api-key': key } };
    await c.create(admin, { slug: 'scoped', name: 'Scoped', steps: [{ name: 'ask', type: 'agent', agent: 'summarizer', prompt: 'hi', retries: 3 }] });
    const r = await c.ended(admin, 'scoped', (await c.start(narrow, 'scoped')).id);
    expect(r.status).toBe('failed');
    expect(r.steps[0]).toMatchObject({ status: 'failed', attempts: 1 });
    expect(r.steps[0].error).toContain('agent:run');
  });

  it('cancels a run: the running step finishes, nothing after it starts', async () => {
    const hold = await new HoldingServer().start();
    try {
      await c.create(admin, {
        slug: 'cancel-me',
        name: 'Cancel me',
        steps: [{ name: 'slow', type: 'http', url: `${hold.url}/slow` }, httpStep('next', '/next-after-cancel')],
      });
      const r = await c.start(admin, 'cancel-me');
      await until('the slow step runs', () => hold.hits > 0, 10_000);
      const cancelled = await c.ok(admin, 'POST', `/v1/workflows/cancel-me/runs/${r.id}/cancel`);
      expect(cancelled.status).toBe('cancelled');
      expect(cancelled.steps.map((s: any) => s.status)).toEqual(['running', 'skipped']);
      expectError(await c.call(admin, 'POST', `/v1/workflows/cancel-me/runs/${r.id}/cancel`), 409, 'invalid_state');
      hold.release();
      await until('the slow step recorded', async () => (await c.run(admin, 'cancel-me', r.id)).steps[0].status === 'completed', 10_000);
      await sleep(300);
      expect(at('/next-after-cancel')).toHaveLength(0);
      expect((await c.run(admin, 'cancel-me', r.id)).status).toBe('cancelled');
    } finally {
      await hold.stop();
    }
  });

  it('starts a run from its webhook with the right X-Webhook-Secret only, and records what it refuses', async () => {
    await c.create(admin, { slug: 'hooked', name: 'Hooked', steps: [httpStep('echo', '/hooked', { body: '{{input.event}}' })] });
    const t = await c.ok(admin, 'POST', '/v1/workflows/hooked/triggers', { type: 'webhook', name: 'inbound', enabled: true }, 201);
    expect(t).toMatchObject({ type: 'webhook', name: 'inbound', enabled: true, workflow: 'hooked', schedule: null });
    expect(t.id).toMatch(/^wtr_/);
    expect(t.secret).toMatch(/^[0-9a-f]{64}$/);
    expect(t.webhookUrl).toMatch(/\/v1\/workflows\/webhooks\/hooked-[0-9a-f]{16}$/);
    expect((await c.ok(admin, 'GET', `/v1/workflows/hooked/triggers/${t.id}`)).secret).toBeUndefined();
    expect((await c.ok(admin, 'GET', '/v1/workflows/hooked/triggers')).triggers.map((x: any) => x.id)).toEqual([t.id]);

    expectError(await c.hook(t.webhookUrl, '{"event":"x"}'), 401, 'unauthenticated');
    expectError(await c.hook(t.webhookUrl, '{"event":"x"}', { 'x-webhook-secret': `${t.secret}0` }), 401, 'unauthenticated');
    expectError(await c.hook(t.webhookUrl, '{"event":', { 'x-webhook-secret': t.secret }), 400, 'invalid_request');
    expectError(await c.hook(t.webhookUrl, JSON.stringify({ event: 'x'.repeat(5000) }), { 'x-webhook-secret': t.secret }), 413, 'payload_too_large');
    expectError(await c.hook(`${t.webhookUrl}x`, '{}', { 'x-webhook-secret': t.secret }), 404, 'not_found');
    const wf = await c.ok(admin, 'GET', '/v1/workflows/hooked');
    expect((await c.ok(admin, 'GET', '/v1/workflows/hooked/runs')).runs).toHaveLength(0);
    const refused = await expectActivity(h, admin, {
      eventType: 'workflow.trigger.rejected',
      resourceType: 'workflow',
      resourceId: wf.id,
      metadata: { reason: 'bad_secret' },
    });
    expect(JSON.stringify(refused)).not.toContain(t.secret);
    await expectActivity(h, admin, {
      eventType: 'workflow.trigger.rejected',
      resourceType: 'workflow',
      resourceId: wf.id,
      metadata: { reason: 'missing_secret' },
    });
    await expectActivity(h, admin, {
      eventType: 'workflow.trigger.rejected',
      resourceType: 'workflow',
      resourceId: wf.id,
      metadata: { reason: 'too_large' },
    });

    const fired = await c.hook(t.webhookUrl, '{"event":"push"}', { 'x-webhook-secret': t.secret, 'idempotency-key': 'delivery-1' });
    expect(fired.statusCode, fired.body).toBe(202);
    const runId = json(fired).data.runId;
    const again = await c.hook(t.webhookUrl, '{"event":"push"}', { 'x-webhook-secret': t.secret, 'idempotency-key': 'delivery-1' });
    expect(again.statusCode).toBe(200);
    expect(json(again).data.runId).toBe(runId);
    const done = await c.ended(admin, 'hooked', runId);
    expect(done).toMatchObject({ status: 'completed', input: { event: 'push' }, triggerId: t.id });
    expect(at('/hooked').map((r) => r.raw)).toEqual(['push']);
    expect((await c.ok(admin, 'GET', `/v1/workflows/hooked/triggers/${t.id}`)).lastFiredAt).toBeTruthy();

    // Disabled: 409 before the secret is looked at; a new secret replaces the old.
    await c.ok(admin, 'PATCH', `/v1/workflows/hooked/triggers/${t.id}`, { enabled: false });
    expectError(await c.hook(t.webhookUrl, '{}', { 'x-webhook-secret': t.secret }), 409, 'invalid_state');
    await c.ok(admin, 'PATCH', `/v1/workflows/hooked/triggers/${t.id}`, { enabled: true, secret: 'a-new-secret-of-length' });
    expectError(await c.hook(t.webhookUrl, '{}', { 'x-webhook-secret': t.secret }), 401, 'unauthenticated');
    expect((await c.hook(t.webhookUrl, '', { 'x-webhook-secret': 'a-new-secret-of-length' })).statusCode).toBe(202);

    // Another organization's trigger routes are 404; the webhook URL is the only way in without a credential.
    expectError(await c.call(stranger, 'GET', `/v1/workflows/hooked/triggers/${t.id}`), 404, 'not_found');
    await c.ok(admin, 'DELETE', `/v1/workflows/hooked/triggers/${t.id}`);
    expectError(await c.hook(t.webhookUrl, '{}', { 'x-webhook-secret': 'a-new-secret-of-length' }), 404, 'not_found');
  });

  it('refuses bad cron triggers, and schedules a two-step workflow by cron', async () => {
    await c.create(admin, {
      slug: 'nightly',
      name: 'Nightly',
      steps: [
        httpStep('fetch', '/cron-fetch'),
        httpStep('report', '/cron-report', { body: { tick: '{{input.trigger}}', fetched: '{{steps.fetch.output.status}}' } }),
      ],
    });
    const bad = [
      { type: 'cron', name: 'x', enabled: true },
      { type: 'cron', name: 'x', enabled: true, schedule: '61 * * * *' },
      { type: 'cron', name: 'x', enabled: true, schedule: 'every day' },
      { type: 'cron', name: 'x', enabled: true, schedule: '0 3 * * *', timezone: 'Mars/Olympus' },
      { type: 'cron', name: 'x', enabled: true, schedule: '0 3 * * *', secret: 'abcdefghijklmnopqrstuvwxyz' },
      { type: 'webhook', name: 'x', enabled: true, schedule: '0 3 * * *' },
      { type: 'hourly', name: 'x', enabled: true },
    ];
    for (const body of bad) expectError(await c.call(admin, 'POST', '/v1/workflows/nightly/triggers', body), 400, 'invalid_request');
    const tz = await c.ok(
      admin,
      'POST',
      '/v1/workflows/nightly/triggers',
      { type: 'cron', name: 'at three', enabled: true, schedule: '0 3 * * *', timezone: 'Europe/Paris' },
      201,
    );
    expect(tz).toMatchObject({ schedule: '0 3 * * *', timezone: 'Europe/Paris', webhookUrl: null, enabled: true });
    expect(tz.secret).toBeUndefined();

    const t = await c.ok(
      admin,
      'POST',
      '/v1/workflows/nightly/triggers',
      { type: 'cron', name: 'every second', enabled: true, schedule: '* * * * * *' },
      201,
    );
    const firstRun = await until(
      'a tick started a run',
      async () => (await c.ok(admin, 'GET', '/v1/workflows/nightly/runs?status=completed')).runs.at(-1),
      15_000,
    );
    expect(firstRun.triggerId).toBe(t.id);
    const full = await c.run(admin, 'nightly', firstRun.id);
    expect(full.steps.map((s: any) => s.status)).toEqual(['completed', 'completed']);
    const report = at('/cron-report')[0]!;
    expect(report.body).toEqual({ tick: t.id, fetched: 200 });

    // Disabled, it stops firing.
    await c.ok(admin, 'PATCH', `/v1/workflows/nightly/triggers/${t.id}`, { enabled: false });
    await sleep(1200);
    const count = (await c.ok(admin, 'GET', '/v1/workflows/nightly/runs?limit=100')).runs.length;
    await sleep(2200);
    expect((await c.ok(admin, 'GET', '/v1/workflows/nightly/runs?limit=100')).runs.length).toBe(count);
    const schedules = () => h.deps.db.kysely.selectFrom('job_schedules').select('name').where('name', 'like', 'workflow-trigger:%').execute();
    expect((await schedules()).map((s) => s.name)).toEqual([scheduleName(tz.id)]);
    // Deleting the workflow removes its remaining schedule.
    await c.ok(admin, 'DELETE', '/v1/workflows/nightly');
    expect(await schedules()).toEqual([]);
  });

  it('resumes a run from its last completed step after the server restarts', async () => {
    const hold = await new HoldingServer().start();
    try {
      await c.create(admin, {
        slug: 'resumable',
        name: 'Resumable',
        steps: [
          httpStep('first', '/resume-first'),
          { name: 'second', type: 'http', url: `${hold.url}/second`, retries: 2 },
          httpStep('third', '/resume-third'),
        ],
      });
      const r = await c.start(admin, 'resumable');
      await until('the second step runs', () => hold.hits > 0, 10_000);
      // The server stops mid-step: its try is cut short (the engine's grace is shortened from its default).
      await h.deps.jobs.stop(50);
      await h.app.close();
      hold.release();
      h.app = await buildApp(h.deps);
      const done = await c.ended(admin, 'resumable', r.id, 30_000);
      expect(done.status, JSON.stringify(done)).toBe('completed');
      expect(at('/resume-first')).toHaveLength(1);
      expect(done.steps.map((s: any) => [s.name, s.status])).toEqual([
        ['first', 'completed'],
        ['second', 'completed'],
        ['third', 'completed'],
      ]);
      expect(done.steps[1].attempts).toBe(2);
      expect(hold.hits).toBe(2);
    } finally {
      hold.stop();
    }
  });

  it('a try its process never finished (it crashed) counts as failed and is tried again when the engine runs its job again', async () => {
    await c.create(admin, {
      slug: 'crashed',
      name: 'Crashed',
      steps: [httpStep('first', '/crashed-first'), httpStep('second', '/crashed-second', { retries: 1 })],
    });
    const wf = await c.ok(admin, 'GET', '/v1/workflows/crashed');
    const now = new Date().toISOString();
    // As a crash leaves it: step one done, step two running its first try, no process running it.
    await h.deps.db.kysely
      .insertInto('workflow_runs')
      .values({
        id: 'wfr_crashed',
        org_id: admin.orgId,
        workflow_id: wf.id,
        version: 1,
        status: 'running',
        input: '{"n":1}',
        trigger_id: null,
        dedupe_key: null,
        started_by_user_id: admin.userId,
        scopes: JSON.stringify(['agent:run']),
        step_index: 1,
        output: null,
        error: null,
        created_at: now,
        started_at: now,
        finished_at: null,
        updated_at: now,
      })
      .execute();
    await h.deps.db.kysely
      .insertInto('workflow_step_runs')
      .values([
        {
          run_id: 'wfr_crashed',
          idx: 0,
          org_id: admin.orgId,
          name: 'first',
          type: 'http',
          status: 'completed',
          attempts: 1,
          output: '{"status":200,"body":"kept"}',
          started_at: now,
          finished_at: now,
        },
        { run_id: 'wfr_crashed', idx: 1, org_id: admin.orgId, name: 'second', type: 'http', status: 'running', attempts: 1, started_at: now },
      ])
      .execute();
    // The engine runs the job of that try again (its process stopped while it was active).
    await runStepJob(h.deps, { orgId: admin.orgId, runId: 'wfr_crashed', index: 1, attempt: 1 }, new AbortController().signal);
    const done = await c.ended(admin, 'crashed', 'wfr_crashed');
    expect(done.status).toBe('completed');
    expect(done.steps[1]).toMatchObject({ status: 'completed', attempts: 2 });
    expect(at('/crashed-first')).toHaveLength(0);
    expect(at('/crashed-second')).toHaveLength(1);
  });

  it('a run whose next job was never sent is picked up by the sweep', async () => {
    await c.create(admin, { slug: 'lost', name: 'Lost', steps: [httpStep('only', '/lost')] });
    const wf = await c.ok(admin, 'GET', '/v1/workflows/lost');
    // A run committed whose first job's send was lost (as when the process stops between the two).
    await h.deps.db.kysely
      .insertInto('workflow_runs')
      .values({
        id: 'wfr_lost',
        org_id: admin.orgId,
        workflow_id: wf.id,
        version: 1,
        status: 'queued',
        input: 'null',
        trigger_id: null,
        dedupe_key: null,
        started_by_user_id: admin.userId,
        scopes: JSON.stringify(['agent:run']),
        step_index: 0,
        output: null,
        error: null,
        created_at: new Date(Date.now() - 120_000).toISOString(),
        started_at: null,
        finished_at: null,
        updated_at: new Date(Date.now() - 120_000).toISOString(),
      })
      .execute();
    await h.deps.db.kysely
      .insertInto('workflow_step_runs')
      .values({ run_id: 'wfr_lost', idx: 0, org_id: admin.orgId, name: 'only', type: 'http', status: 'pending', attempts: 0 })
      .execute();
    await sleep(500);
    expect((await c.run(admin, 'lost', 'wfr_lost')).status).toBe('queued');
    await resendStalled(h.deps, new Date(Date.now() - 60_000).toISOString());
    expect((await c.ended(admin, 'lost', 'wfr_lost')).status).toBe('completed');
    expect(at('/lost')).toHaveLength(1);
  });

  it('keeps organizations apart', async () => {
    await c.create(admin, { slug: 'private', name: 'Private', steps: [httpStep('a', '/private')] });
    const r = await c.start(admin, 'private');
    expect((await c.ok(admin, 'GET', `/v1/workflows/private/runs/${r.id}`)).id).toBe(r.id);
    expectError(await c.call(stranger, 'GET', '/v1/workflows/private'), 404, 'not_found');
    expectError(await c.call(stranger, 'GET', `/v1/workflows/private/runs/${r.id}`), 404, 'not_found');
    expectError(await c.call(stranger, 'POST', '/v1/workflows/private/runs', {}), 404, 'not_found');
    expect((await c.ok(stranger, 'GET', '/v1/workflows')).workflows).toEqual([]);
    // The same slug in another organization is its own workflow.
    await c.create(stranger, { slug: 'private', name: 'Theirs', steps: [httpStep('a', '/theirs')] });
    expect((await c.ok(admin, 'GET', '/v1/workflows/private')).name).toBe('Private');
  });
});

describe('workflows: HTTP steps and private networks', () => {
  let h: Harness;
  let admin: Actor;
  let rx: WebhookReceiver;
  const c = client(() => h);
  beforeAll(async () => {
    rx = await new WebhookReceiver().start();
    h = await createHarness();
    admin = await createOrgAdmin(h);
  });
  afterAll(async () => {
    await h?.close();
    await rx?.stop();
  });

  it('never reach a loopback or private address unless the operator allows it', async () => {
    await c.create(admin, { slug: 'ssrf', name: 'SSRF', steps: [{ name: 'peek', type: 'http', url: `${rx.url}/internal`, retries: 3 }] });
    const r = await c.ended(admin, 'ssrf', (await c.start(admin, 'ssrf')).id);
    expect(r.status).toBe('failed');
    expect(r.steps[0]).toMatchObject({ status: 'failed', attempts: 1 });
    expect(r.steps[0].error).toContain('blocked_address');
    expect(rx.received).toHaveLength(0);
  });
});

let seeded = 0;
async function seedWorkflow(h: Harness, owner: Actor) {
  const slug = `sec-${++seeded}`;
  const res = await h.app.inject({
    method: 'POST',
    url: '/v1/workflows',
    headers: owner.headers,
    payload: { slug, name: slug, steps: [{ name: 'a', type: 'http', url: 'https://example.com/' }] },
  });
  expect(res.statusCode, res.body).toBe(201);
  return slug;
}

securitySuite('workflows', [
  { method: 'GET', url: () => '/v1/workflows', scope: 'workflows:read' },
  {
    method: 'POST',
    url: () => '/v1/workflows',
    scope: 'workflows:write',
    body: { slug: 'x', name: 'x', steps: [{ name: 'a', type: 'http', url: 'https://example.com/' }] },
  },
  { method: 'GET', url: async (o, h) => `/v1/workflows/${await seedWorkflow(h, o)}`, scope: 'workflows:read', crossOrg: true },
  {
    method: 'PATCH',
    url: async (o, h) => `/v1/workflows/${await seedWorkflow(h, o)}`,
    scope: 'workflows:write',
    body: { name: 'y' },
    crossOrg: true,
  },
  { method: 'DELETE', url: async (o, h) => `/v1/workflows/${await seedWorkflow(h, o)}`, scope: 'workflows:write', crossOrg: true },
  { method: 'GET', url: async (o, h) => `/v1/workflows/${await seedWorkflow(h, o)}/versions/1`, scope: 'workflows:read', crossOrg: true },
  { method: 'POST', url: async (o, h) => `/v1/workflows/${await seedWorkflow(h, o)}/runs`, scope: 'workflows:run', body: {}, crossOrg: true },
  { method: 'GET', url: async (o, h) => `/v1/workflows/${await seedWorkflow(h, o)}/runs`, scope: 'workflows:read', crossOrg: true },
  { method: 'GET', url: async (o, h) => `/v1/workflows/${await seedWorkflow(h, o)}/runs/wfr_none`, scope: 'workflows:read' },
  { method: 'POST', url: async (o, h) => `/v1/workflows/${await seedWorkflow(h, o)}/runs/wfr_none/cancel`, scope: 'workflows:run' },
  {
    method: 'POST',
    url: async (o, h) => `/v1/workflows/${await seedWorkflow(h, o)}/triggers`,
    scope: 'workflows:write',
    body: { type: 'webhook', name: 'w', enabled: true },
    crossOrg: true,
  },
  { method: 'GET', url: async (o, h) => `/v1/workflows/${await seedWorkflow(h, o)}/triggers`, scope: 'workflows:read', crossOrg: true },
  { method: 'GET', url: async (o, h) => `/v1/workflows/${await seedWorkflow(h, o)}/triggers/wtr_none`, scope: 'workflows:read' },
  {
    method: 'PATCH',
    url: async (o, h) => `/v1/workflows/${await seedWorkflow(h, o)}/triggers/wtr_none`,
    scope: 'workflows:write',
    body: { name: 'n' },
  },
  { method: 'DELETE', url: async (o, h) => `/v1/workflows/${await seedWorkflow(h, o)}/triggers/wtr_none`, scope: 'workflows:write' },
]);
