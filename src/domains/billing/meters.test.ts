import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { startToolApi } from '../../../test/fakes/tool-api.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { describeNeeding, isolationNeed } from '../../../test/needs.js';
import { createIsolation } from '../../platform/isolation/index.js';
import { chargeStorageUsage } from './jobs.js';

/**
 * The meters wired into billing: what a user does (a platform model call, a tool call, a stored file, a program
 * run) shows as a usage event and, when billing is on, as exactly one `usage_charge` in the credit ledger at the
 * organization's plan price.
 */

const dir = mkdtempSync(path.join(tmpdir(), 'hangar-meters-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, content: unknown): string {
  const p = path.join(dir, name);
  writeFileSync(p, JSON.stringify(content));
  return p;
}

const GIB = 1024 ** 3;
const MONTH_SECONDS = 30 * 86_400;
const STORAGE_GIB_MONTH_MICROS = 1e12;

/** A plan priced so every meter's charge is visible: a model class, a tool call, storage, CPU-seconds. */
const plansFile = () =>
  file('plans.json', {
    plans: [
      {
        id: 'metered',
        name: 'Metered',
        prices: {
          modelClasses: { small: { inputPerMTok: 10, outputPerMTok: 20 } },
          toolExecutionMicros: 2500,
          storageGibMonthMicros: STORAGE_GIB_MONTH_MICROS,
          codeCpuSecondMicros: 1_000_000,
        },
      },
    ],
  });

const modelsFile = (fakeUrl: string) =>
  file(`models-${Math.random().toString(36).slice(2)}.json`, {
    platform: [
      { id: 'house-priced', provider: 'openai', pricing: { inputPerMTok: 2, outputPerMTok: 8, cachedInputPerMTok: 0.5 } },
      { id: 'house-small', provider: 'openai', class: 'small', pricing: { inputPerMTok: 1, outputPerMTok: 1 } },
    ],
    byok: [{ id: 'byok/fake', provider: 'openai', model: 'x', baseUrl: fakeUrl, requiresSecret: 'FAKE_KEY' }],
  });

function client(h: () => Harness) {
  const call = (actor: Actor, method: 'GET' | 'POST' | 'PUT', url: string, payload?: unknown) =>
    h().app.inject({ method, url, headers: actor.headers, ...(payload !== undefined ? { payload: payload as object } : {}) });
  const balance = async (actor: Actor): Promise<number> => {
    const res = await call(actor, 'GET', '/v1/billing/credits');
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data.balanceMicros;
  };
  const history = async (actor: Actor) => {
    const res = await call(actor, 'GET', '/v1/billing/credits/history?limit=200');
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data as { id: string; kind: string; amountMicros: number; description: string }[];
  };
  const events = (orgId: string, kind?: string) => {
    let q = h().deps.db.kysely.selectFrom('usage_events').selectAll().where('org_id', '=', orgId);
    if (kind) q = q.where('kind', '=', kind as never);
    return q.orderBy('created_at').execute();
  };
  /** The balance's change and the usage events added while `fn` ran. */
  const around = async (actor: Actor, fn: () => Promise<unknown>) => {
    const before = await balance(actor);
    const known = new Set((await events(actor.orgId)).map((e) => e.id));
    await fn();
    return { spent: before - (await balance(actor)), added: (await events(actor.orgId)).filter((e) => !known.has(e.id)) };
  };
  return { call, balance, history, events, around };
}

describe('metering with billing on', () => {
  let fake: FakeOpenAI;
  let api: Awaited<ReturnType<typeof startToolApi>>;
  let h: Harness;
  let admin: Actor;
  const c = client(() => h);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    api = await startToolApi();
    h = await createHarness({
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_MODELS_FILE: modelsFile(fake.url),
      HANGAR_BILLING_PLANS_FILE: plansFile(),
      HANGAR_BILLING_DEFAULT_PLAN: 'metered',
      HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS: 'true',
    });
    admin = await createOrgAdmin(h);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
    await api?.close();
  });

  it('a platform model call through the proxy is charged exactly its catalogue price', async () => {
    fake.script({ text: 'priced', usage: { prompt: 1000, completion: 500, cached: 400 } });
    const { spent, added } = await c.around(admin, async () => {
      const res = await c.call(admin, 'POST', '/v1/model-proxy', { model: 'house-priced', options: { messages: [{ role: 'user', content: 'hi' }] } });
      expect(res.statusCode, res.body).toBe(200);
    });
    // 600 uncached x $2 + 400 cached x $0.5 + 500 output x $8 per million tokens = 5400 micro-dollars
    expect(spent).toBe(5400);
    const usage = await h.deps.db.kysely.selectFrom('model_usage').selectAll().where('org_id', '=', admin.orgId).execute();
    expect(usage).toHaveLength(1);
    expect(added).toEqual([
      expect.objectContaining({
        kind: 'model_tokens',
        source_id: usage[0]!.id,
        subject: 'house-priced',
        tier: 'platform',
        input_tokens: 1000,
        cached_input_tokens: 400,
        output_tokens: 500,
        state: 'settled',
        user_id: admin.userId,
      }),
    ]);
    expect(Number(added[0]!.cost_micros)).toBe(5400);
    const newest = (await c.history(admin))[0]!;
    expect(newest).toMatchObject({ kind: 'usage_charge', amountMicros: -5400, description: 'Model tokens: house-priced' });
    expect(added[0]!.ledger_entry_id).toBe(newest.id);
  });

  it('the plan’s price for a model’s class wins over the catalogue price, on the stream too', async () => {
    fake.script({ text: ['a', 'b'], usage: { prompt: 100, completion: 50 } });
    const { spent, added } = await c.around(admin, async () => {
      const res = await c.call(admin, 'POST', '/v1/model-proxy/stream', {
        model: 'house-small',
        options: { messages: [{ role: 'user', content: 'hi' }] },
      });
      expect(res.statusCode, res.body).toBe(200);
      expect(res.body).toContain('"finish"');
    });
    // the plan's "small" class: 100 x $10 + 50 x $20 per million tokens = 2000 (the catalogue's price would be 150)
    expect(spent).toBe(2000);
    expect(added).toEqual([expect.objectContaining({ kind: 'model_tokens', subject: 'house-small', state: 'settled' })]);
    const row = await h.deps.db.kysely.selectFrom('model_usage').selectAll().where('id', '=', added[0]!.source_id).executeTakeFirstOrThrow();
    expect(Number(row.cost_micros)).toBe(150);
    expect((await c.history(admin))[0]).toMatchObject({ kind: 'usage_charge', amountMicros: -2000, description: 'Model tokens: house-small' });
  });

  it('a bring-your-own-key call is metered at zero and never reaches the ledger', async () => {
    expect((await c.call(admin, 'POST', '/v1/secrets', { name: 'FAKE_KEY', value: 'sk-own' })).statusCode).toBe(201);
    expect((await c.call(admin, 'POST', '/v1/agents', { slug: 'mine', model: 'byok/fake', instructions: 'Mine.' })).statusCode).toBe(201);
    const ledgerBefore = await c.history(admin);
    fake.script({ text: 'on your dime', usage: { prompt: 2000, completion: 400 } });
    const { spent, added } = await c.around(admin, async () => {
      const res = await c.call(admin, 'POST', '/v1/run', { agent: 'mine', prompt: 'Hi' });
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res).data).toMatchObject({ status: 'completed', result: 'on your dime' });
    });
    expect(fake.requests.at(-1)!.headers.authorization).toBe('Bearer sk-own');
    expect(spent).toBe(0);
    expect(added).toEqual([
      expect.objectContaining({
        kind: 'model_tokens',
        subject: 'byok/fake',
        tier: 'byok',
        input_tokens: 2000,
        state: 'settled',
        ledger_entry_id: null,
      }),
    ]);
    expect(Number(added[0]!.cost_micros)).toBe(0);
    expect(await c.history(admin)).toEqual(ledgerBefore);
  });

  it('a completed tool call is charged the plan’s tool price once; a failed one costs nothing', async () => {
    expect((await c.call(admin, 'POST', '/v1/tools/http_request/install', {})).statusCode).toBe(201);
    let executionId = '';
    const ok = await c.around(admin, async () => {
      const res = await c.call(admin, 'POST', '/v1/tools/http_request/execute', { arguments: { method: 'GET', url: `${api.url}/probe/echo` } });
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res).data.status).toBe('completed');
      executionId = json(res).data.id;
    });
    expect(ok.spent).toBe(2500);
    expect(ok.added).toEqual([
      expect.objectContaining({ kind: 'tool_execution', source_id: executionId, subject: 'http_request', state: 'settled' }),
    ]);
    const charges = (await c.history(admin)).filter((e) => e.description === 'Tool call: http_request');
    expect(charges).toEqual([expect.objectContaining({ kind: 'usage_charge', amountMicros: -2500 })]);

    const failed = await c.around(admin, async () => {
      const res = await c.call(admin, 'POST', '/v1/tools/http_request/execute', { arguments: { method: 'GET', url: 'http://127.0.0.1:47/closed' } });
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res).data.status).toBe('failed');
    });
    expect(failed.spent).toBe(0);
    expect(failed.added).toEqual([
      expect.objectContaining({ kind: 'tool_execution', subject: 'http_request', state: 'settled', ledger_entry_id: null }),
    ]);
    expect(Number(failed.added[0]!.cost_micros)).toBe(0);
    expect((await c.history(admin)).filter((e) => e.description === 'Tool call: http_request')).toHaveLength(1);
  });

  it('workspace storage is charged by bytes held times seconds, from one charge to the next', async () => {
    const owner = await createOrgAdmin(h);
    const bytes = 1000;
    const t0 = Date.now();
    const put = await c.call(owner, 'PUT', `/v1/workspaces/${owner.personalWorkspaceId}/files/data.bin`, Buffer.alloc(bytes, 7));
    expect(put.statusCode, put.body).toBe(201);
    const t1 = Date.now();

    const first = new Date(t1 + 3600_000);
    const one = await c.around(owner, () => chargeStorageUsage(h.deps, first));
    expect(one.added).toHaveLength(1);
    const e1 = one.added[0]!;
    expect(e1).toMatchObject({ kind: 'storage', subject: 'workspace', source_id: `storage:${owner.orgId}:${first.toISOString()}`, state: 'settled' });
    expect(e1.ended_at).toBe(first.toISOString());
    // the file was stored from some moment between t0 and t1 until `first`
    expect(Number(e1.quantity)).toBeGreaterThanOrEqual(bytes * ((first.getTime() - t1) / 1000));
    expect(Number(e1.quantity)).toBeLessThanOrEqual(bytes * ((first.getTime() - t0) / 1000));
    expect(Number(e1.cost_micros)).toBe(Math.round((Number(e1.quantity) / GIB / MONTH_SECONDS) * STORAGE_GIB_MONTH_MICROS));
    expect(one.spent).toBe(Number(e1.cost_micros));
    expect(one.spent).toBeGreaterThan(1000);

    // the next charge takes exactly the hour since the last one
    const second = new Date(first.getTime() + 3600_000);
    const two = await c.around(owner, () => chargeStorageUsage(h.deps, second));
    expect(two.added).toEqual([expect.objectContaining({ kind: 'storage', started_at: first.toISOString(), ended_at: second.toISOString() })]);
    expect(Number(two.added[0]!.quantity)).toBe(bytes * 3600);
    const price = Math.round(((bytes * 3600) / GIB / MONTH_SECONDS) * STORAGE_GIB_MONTH_MICROS);
    expect(Number(two.added[0]!.cost_micros)).toBe(price);
    expect(two.spent).toBe(price);
    expect((await c.history(owner))[0]).toMatchObject({ kind: 'usage_charge', amountMicros: -price, description: 'Workspace storage' });

    // nothing is taken twice, and an organization storing nothing is not metered
    const empty = await createOrgAdmin(h);
    const again = await c.around(owner, () => chargeStorageUsage(h.deps, second));
    expect(again).toEqual({ spent: 0, added: [] });
    await chargeStorageUsage(h.deps, new Date(second.getTime() + 60_000));
    expect(await c.events(empty.orgId, 'storage')).toEqual([]);
  });

  it('storage byte-seconds follow the bytes held: a deleted file stops counting', async () => {
    const owner = await createOrgAdmin(h);
    const ws = owner.personalWorkspaceId;
    const t0 = Date.now();
    const put = await c.call(owner, 'PUT', `/v1/workspaces/${ws}/files/gone.bin`, Buffer.alloc(4096, 1));
    expect(put.statusCode, put.body).toBe(201);
    const del = await h.app.inject({ method: 'DELETE', url: `/v1/workspaces/${ws}/files/gone.bin`, headers: owner.headers });
    expect(del.statusCode, del.body).toBe(200);
    const t1 = Date.now();
    await chargeStorageUsage(h.deps, new Date(t1 + 86_400_000));
    const held = (await c.events(owner.orgId, 'storage')).reduce((sum, e) => sum + Number(e.quantity), 0);
    // held for the milliseconds between the upload and the delete, not the day after it
    expect(held).toBeLessThanOrEqual(4096 * ((t1 - t0) / 1000));
  });
});

describe('metering with HANGAR_BILLING=off', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let admin: Actor;
  const c = client(() => h);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness({
      HANGAR_BILLING: 'off',
      HANGAR_BILLING_PLANS_FILE: plansFile(),
      HANGAR_BILLING_DEFAULT_PLAN: 'metered',
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_MODELS_FILE: modelsFile(fake.url),
    });
    admin = await createOrgAdmin(h);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('usage is metered and priced, and the balance does not move', async () => {
    const ledgerBefore = await c.history(admin);
    fake.script({ text: 'free', usage: { prompt: 1000, completion: 500, cached: 400 } });
    const { spent, added } = await c.around(admin, async () => {
      const res = await c.call(admin, 'POST', '/v1/model-proxy', { model: 'house-priced', options: { messages: [{ role: 'user', content: 'hi' }] } });
      expect(res.statusCode, res.body).toBe(200);
    });
    expect(spent).toBe(0);
    expect(added).toEqual([expect.objectContaining({ kind: 'model_tokens', subject: 'house-priced', state: 'settled', ledger_entry_id: null })]);
    expect(Number(added[0]!.cost_micros)).toBe(5400);

    const put = await c.call(admin, 'PUT', `/v1/workspaces/${admin.personalWorkspaceId}/files/a.txt`, 'x'.repeat(500));
    expect(put.statusCode, put.body).toBe(201);
    const storage = await c.around(admin, () => chargeStorageUsage(h.deps, new Date(Date.now() + 86_400_000)));
    expect(storage.spent).toBe(0);
    expect(storage.added).toEqual([expect.objectContaining({ kind: 'storage', state: 'settled', ledger_entry_id: null })]);
    expect(Number(storage.added[0]!.cost_micros)).toBeGreaterThan(0);
    expect(await c.history(admin)).toEqual(ledgerBefore);
  });
});

const isolation = await createIsolation();

describeNeeding(isolationNeed(isolation), 'metering code execution', () => {
  let h: Harness;
  let admin: Actor;
  const c = client(() => h);

  beforeAll(async () => {
    h = await createHarness({ HANGAR_SANDBOX_SPARE_NETWORKS: '0', HANGAR_BILLING_PLANS_FILE: plansFile(), HANGAR_BILLING_DEFAULT_PLAN: 'metered' });
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h?.close());

  it('a program run is charged its CPU-seconds at the plan’s price', async () => {
    let id = '';
    let cpuMs = 0;
    const { spent, added } = await c.around(admin, async () => {
      const res = await c.call(admin, 'POST', '/v1/execute', {
        language: 'python',
        code: 'import time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass\nprint("done")',
      });
      expect(res.statusCode, res.body).toBe(200);
      const body = json(res);
      expect(body.run.stdout).toBe('done\n');
      id = res.headers['x-execution-id'] as string;
      cpuMs = body.run.cpu_time_ms + (body.compile?.cpu_time_ms ?? 0);
    });
    expect(cpuMs).toBeGreaterThanOrEqual(150);
    expect(added).toEqual([expect.objectContaining({ kind: 'code_execution', source_id: id, subject: 'python', state: 'settled' })]);
    expect(Number(added[0]!.quantity)).toBeCloseTo(cpuMs / 1000, 6);
    const cost = Math.round((cpuMs / 1000) * 1_000_000);
    expect(Number(added[0]!.cost_micros)).toBe(cost);
    expect(spent).toBe(cost);
    expect((await c.history(admin))[0]).toMatchObject({ kind: 'usage_charge', amountMicros: -cost, description: 'Code execution: python' });
  }, 60_000);
});
