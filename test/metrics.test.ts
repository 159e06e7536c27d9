import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createIsolation } from '../src/platform/isolation/index.js';
import { FakeOpenAI } from './fakes/openai.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from './harness.js';
import { isolationNeed, itNeeding } from './needs.js';

const TOKEN = 'metrics-token-0123456789abcdef';
const isolation = await createIsolation();

/** The value of one series in Prometheus text (null when absent). */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | null {
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[3]);
  }
  return null;
}

describe('GET /metrics: off unless configured', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness();
  });
  afterAll(async () => h?.close());

  it('answers 404 with what to set, even to an API key of an administrator', async () => {
    const admin = await createOrgAdmin(h);
    const res = await h.app.inject({ method: 'GET', url: '/metrics', headers: admin.headers });
    expect(res.statusCode).toBe(404);
    expect(json(res).error).toMatchObject({ code: 'not_found', requestId: expect.any(String) });
    expect(json(res).error.message).toContain('HANGAR_METRICS_TOKEN');
    expect(h.deps.metrics.enabled).toBe(false);
  });
});

describe('GET /metrics behind HANGAR_METRICS_TOKEN', () => {
  let h: Harness;
  let fake: FakeOpenAI;
  let a: Actor;
  let b: Actor;
  const scrape = async () => {
    const res = await h.app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TOKEN}` } });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
    return res.body;
  };

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness({
      HANGAR_METRICS_TOKEN: TOKEN,
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'fast-model',
    });
    a = await createOrgAdmin(h);
    b = await createOrgAdmin(h);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('refuses no token, a wrong token and an API key (401), and answers the token', async () => {
    for (const authorization of [undefined, 'Bearer wrong-token-0123456789', `Bearer ${a.key}`, TOKEN]) {
      const res = await h.app.inject({ method: 'GET', url: '/metrics', headers: authorization ? { authorization } : {} });
      expect(res.statusCode, authorization).toBe(401);
      expect(json(res).error.code).toBe('unauthenticated');
    }
    expect(await scrape()).toContain('# TYPE hangar_http_requests_total counter');
  });

  it('counts requests by route pattern and status, with latencies, and names no organization, user or resource', async () => {
    const before = await scrape();
    const route = { method: 'GET', route: '/v1/agents/:slug', status: '404' };
    const was = sample(before, 'hangar_http_requests_total', route) ?? 0;
    for (let i = 0; i < 3; i++) {
      const res = await h.app.inject({ method: 'GET', url: '/v1/agents/agt_doesnotexist0000000000', headers: b.headers });
      expect(res.statusCode).toBe(404);
    }
    expect((await h.app.inject({ method: 'GET', url: '/v1/activity', headers: a.headers })).statusCode).toBe(200);
    const text = await scrape();
    expect(sample(text, 'hangar_http_requests_total', route)).toBe(was + 3);
    expect(sample(text, 'hangar_http_requests_total', { method: 'GET', route: '/v1/activity', status: '200' })).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'hangar_http_request_duration_seconds_count', route)).toBe(was + 3);
    expect(sample(text, 'hangar_http_request_duration_seconds_bucket', { ...route, le: '+Inf' })).toBe(was + 3);
    // An unknown path is one series, whatever the path.
    await h.app.inject({ method: 'GET', url: '/v1/no-such-route/abc', headers: a.headers });
    expect(sample(await scrape(), 'hangar_http_requests_total', { method: 'GET', route: 'unmatched', status: '404' })).toBeGreaterThanOrEqual(1);
    for (const secret of [a.orgId, b.orgId, a.userId, b.userId, a.key, 'agt_doesnotexist', 'no-such-route']) {
      expect(text).not.toContain(secret);
    }
  });

  it('counts model tokens by platform model, and a run-free gauge set (jobs, runs, sandboxes, subscribers, pool) scrapes', async () => {
    fake.script({ text: 'hi', usage: { prompt: 11, completion: 7 } });
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/model-proxy',
      headers: a.headers,
      payload: { model: 'fast-model', options: { messages: [{ role: 'user', content: 'Say hello' }] } },
    });
    expect(res.statusCode, res.body).toBe(200);
    const text = await scrape();
    expect(sample(text, 'hangar_model_tokens_total', { model: 'fast-model', tier: 'platform', kind: 'input', source: 'proxy' })).toBe(11);
    expect(sample(text, 'hangar_model_tokens_total', { model: 'fast-model', tier: 'platform', kind: 'output', source: 'proxy' })).toBe(7);
    expect(sample(text, 'hangar_websocket_subscribers', { kind: 'subscribers' })).toBe(0);
    // A job nobody works stays in the backlog.
    await h.deps.jobs.send('metrics-test', { n: 1 });
    await h.deps.jobs.send('metrics-test', { n: 2 });
    expect(sample(await scrape(), 'hangar_jobs', { queue: 'metrics-test', state: 'created' })).toBe(2);
    for (const name of ['hangar_jobs', 'hangar_runs_active', 'hangar_sandboxes', 'hangar_execute_pool', 'hangar_process_cpu_seconds_total']) {
      expect(text, name).toContain(`# TYPE ${name} `);
    }
  });

  it('the Grafana dashboard in docs/ queries only series this server exposes', async () => {
    const dashboard = readFileSync(new URL('../docs/grafana-dashboard.json', import.meta.url), 'utf8');
    const names = new Set([...dashboard.matchAll(/\bhangar_[a-z0-9_]+/g)].map((m) => m[0].replace(/_(bucket|sum|count)$/, '')));
    expect(names.size).toBeGreaterThan(8);
    const text = await scrape();
    for (const name of names) expect(text, name).toContain(`# TYPE ${name} `);
  });

  itNeeding(isolationNeed(isolation), 'counts executions by language and outcome', async () => {
    for (const code of ['print("ok")', 'import sys\nsys.exit(3)']) {
      const res = await h.app.inject({ method: 'POST', url: '/v1/execute', headers: a.headers, payload: { language: 'python', code } });
      expect(res.statusCode, res.body).toBe(200);
    }
    const text = await scrape();
    expect(sample(text, 'hangar_executions_total', { language: 'python', result: 'completed', outcome: 'exited' })).toBe(1);
    expect(sample(text, 'hangar_executions_total', { language: 'python', result: 'failed', outcome: 'exited' })).toBe(1);
    expect(sample(text, 'hangar_execute_pool', { state: 'running' })).toBe(0);
  });
});

describe('GET /metrics on a port of its own (HANGAR_METRICS_PORT)', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_METRICS_PORT: '0' });
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    // The listener opens from the app's onListen hook, which listen() does not wait for.
    await vi.waitFor(() => expect(h.deps.metrics.listening).not.toBeNull());
  });
  afterAll(async () => h?.close());

  it('serves the metrics there without a token, and nothing else; the API port still answers 404', async () => {
    const at = h.deps.metrics.listening;
    expect(at).not.toBeNull();
    const res = await fetch(`http://127.0.0.1:${at!.port}/metrics`);
    expect(res.status).toBe(200);
    expect(await res.text()).toContain('# TYPE hangar_http_requests_total counter');
    expect((await fetch(`http://127.0.0.1:${at!.port}/v1/activity`)).status).toBe(404);
    expect((await h.app.inject({ method: 'GET', url: '/metrics' })).statusCode).toBe(404);
  });

  it('closes with the app', async () => {
    const { port } = h.deps.metrics.listening!;
    await h.app.close();
    await expect(fetch(`http://127.0.0.1:${port}/metrics`)).rejects.toThrow();
  });
});
