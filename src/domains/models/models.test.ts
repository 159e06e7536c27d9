import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { generateText } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { addOrgMember, createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { securitySuite } from '../../../test/security.js';
import { ConfigError } from '../../config.js';
import { systemCtx } from '../../platform/context.js';
import { ROLE_SCOPES } from '../../platform/scopes.js';
import { resolveModel } from './index.js';
import { expectError, until } from '../../../test/helpers.js';

interface Line {
  type: string;
  [k: string]: any;
}

const hello = { messages: [{ role: 'user', content: 'Say hello' }] };

const modelsDir = mkdtempSync(path.join(tmpdir(), 'hangar-models-'));
afterAll(() => rmSync(modelsDir, { recursive: true, force: true }));

function modelsFile(name: string, content: unknown): string {
  const file = path.join(modelsDir, name);
  writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content));
  return file;
}

function client(h: () => Harness) {
  const available = async (actor: Actor) => {
    const res = await h().app.inject({ method: 'GET', url: '/v1/models/available', headers: actor.headers });
    expect(res.statusCode).toBe(200);
    return json(res).data as {
      platform: { model: string; displayName: string; available: boolean }[];
      byok: { model: string; displayName: string; requiresSecret: string; available: boolean }[];
    };
  };
  const proxy = (actor: Actor, body: unknown) =>
    h().app.inject({ method: 'POST', url: '/v1/model-proxy', headers: actor.headers, payload: body as object });
  const stream = async (actor: Actor, body: unknown) => {
    const res = await h().app.inject({ method: 'POST', url: '/v1/model-proxy/stream', headers: actor.headers, payload: body as object });
    const lines: Line[] =
      res.statusCode === 200
        ? res.body
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l))
        : [];
    return { res, lines };
  };
  const putSecret = async (actor: Actor, name: string, value: string, scope: 'user' | 'organization' = 'user') => {
    const res = await h().app.inject({ method: 'POST', url: '/v1/secrets', headers: actor.headers, payload: { name, value, scope } });
    expect(res.statusCode).toBe(201);
  };
  const deleteSecret = async (actor: Actor, name: string, scope: 'user' | 'organization' = 'user') => {
    const res = await h().app.inject({ method: 'DELETE', url: `/v1/secrets/${name}?scope=${scope}`, headers: actor.headers });
    expect(res.statusCode).toBe(204);
  };
  const usageRows = (orgId: string) => h().deps.db.kysely.selectFrom('model_usage').selectAll().where('org_id', '=', orgId).execute();
  /** Runs `fn` and answers the model_usage rows of `orgId` it added. */
  const newUsage = async (orgId: string, fn: () => Promise<unknown>) => {
    const before = new Set((await usageRows(orgId)).map((r) => r.id));
    await fn();
    return (await usageRows(orgId)).filter((r) => !before.has(r.id));
  };
  return { available, proxy, stream, putSecret, deleteSecret, newUsage };
}

describe('models with no provider configured', () => {
  let h: Harness;
  let admin: Actor;
  const c = client(() => h);
  beforeAll(async () => {
    h = await createHarness();
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h?.close());

  it('offers no platform model and lists the default BYOK models as unavailable', async () => {
    const data = await c.available(admin);
    expect(data.platform.filter((m) => m.available)).toEqual([]);
    expect(data.byok.length).toBeGreaterThan(0);
    for (const m of data.byok) {
      expect(m.available).toBe(false);
      expect(m.requiresSecret).toMatch(/^[A-Z][A-Z0-9_]*$/);
      expect(m.displayName).toBeTruthy();
    }
    expect(data.byok.map((m) => m.requiresSecret)).toEqual(expect.arrayContaining(['OPENAI_API_KEY', 'ANTHROPIC_API_KEY']));
  });

  it('the proxy has no model to call: 400 naming the model and where to look', async () => {
    const err = expectError(await c.proxy(admin, { model: 'gpt-4o-mini', options: hello }), 400, 'invalid_request');
    expect(err.message).toContain('gpt-4o-mini');
    expect(err.message).toContain('/v1/models/available');
  });

  it('BYOK models become available with the key even without a platform provider', async () => {
    await c.putSecret(admin, 'OPENAI_API_KEY', 'sk-mine');
    const data = await c.available(admin);
    for (const m of data.byok) expect(m.available, m.model).toBe(m.requiresSecret === 'OPENAI_API_KEY');
  });
});

describe('models on an OpenAI-compatible platform provider', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let admin: Actor;
  let member: Actor;
  let otherMember: Actor;
  const c = client(() => h);
  const lastRequest = () => fake.requests.at(-1)!;

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness({
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'fast-model,other-model',
    });
    admin = await createOrgAdmin(h);
    member = await addOrgMember(h, admin, 'member');
    otherMember = await addOrgMember(h, admin, 'member');
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  describe('GET /v1/models/available', () => {
    it('lists the platform models as available, in exactly the documented shape', async () => {
      const res = await h.app.inject({ method: 'GET', url: '/v1/models/available', headers: member.headers });
      expect(res.statusCode).toBe(200);
      const body = json(res);
      expect(Object.keys(body).sort()).toEqual(['data', 'meta']);
      expect(Object.keys(body.data).sort()).toEqual(['byok', 'platform']);
      expect(body.data.platform).toEqual([
        { model: 'fast-model', displayName: 'fast-model', available: true },
        { model: 'other-model', displayName: 'other-model', available: true },
      ]);
      expect(body.data.byok.length).toBeGreaterThan(0);
      for (const m of body.data.byok) {
        expect(Object.keys(m).sort()).toEqual(['available', 'displayName', 'model', 'requiresSecret']);
        expect(m.available).toBe(false);
      }
      expect(res.body).not.toContain('sk-platform');
    });

    it("BYOK models flip to available with the user's or the organization's secret, and back when it is deleted", async () => {
      const availability = async (actor: Actor) =>
        Object.fromEntries((await c.available(actor)).byok.map((m) => [m.model, { available: m.available, secret: m.requiresSecret }]));
      const bySecret = (a: Record<string, { available: boolean; secret: string }>, secret: string) =>
        Object.values(a)
          .filter((m) => m.secret === secret)
          .map((m) => m.available);

      await c.putSecret(member, 'OPENAI_API_KEY', 'sk-member-own');
      let mine = await availability(member);
      expect(bySecret(mine, 'OPENAI_API_KEY').length).toBeGreaterThan(0);
      expect(bySecret(mine, 'OPENAI_API_KEY').every(Boolean)).toBe(true);
      expect(bySecret(mine, 'ANTHROPIC_API_KEY').some(Boolean)).toBe(false);
      // my user secret is mine: another member's BYOK models stay unavailable
      expect(bySecret(await availability(otherMember), 'OPENAI_API_KEY').some(Boolean)).toBe(false);

      // an organization secret serves every member
      await c.putSecret(admin, 'ANTHROPIC_API_KEY', 'sk-ant-org', 'organization');
      for (const actor of [member, otherMember, admin]) {
        const a = await availability(actor);
        expect(bySecret(a, 'ANTHROPIC_API_KEY').length).toBeGreaterThan(0);
        expect(bySecret(a, 'ANTHROPIC_API_KEY').every(Boolean)).toBe(true);
      }

      await c.deleteSecret(member, 'OPENAI_API_KEY');
      mine = await availability(member);
      expect(bySecret(mine, 'OPENAI_API_KEY').some(Boolean)).toBe(false);
      expect(bySecret(mine, 'ANTHROPIC_API_KEY').every(Boolean)).toBe(true);

      await c.deleteSecret(admin, 'ANTHROPIC_API_KEY', 'organization');
      for (const actor of [member, otherMember]) expect(Object.values(await availability(actor)).some((m) => m.available)).toBe(false);
    });
  });

  describe('POST /v1/model-proxy', () => {
    it('answers the text, finish reason and usage, and meters the call', async () => {
      fake.script({ text: ['Hello', ' world'], usage: { prompt: 12, completion: 3 } });
      let res!: Awaited<ReturnType<typeof c.proxy>>;
      const rows = await c.newUsage(admin.orgId, async () => {
        res = await c.proxy(member, { model: 'fast-model', options: hello });
      });
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res).data).toEqual({
        model: 'fast-model',
        text: 'Hello world',
        reasoning: '',
        toolCalls: [],
        finishReason: 'stop',
        usage: { inputTokens: 12, outputTokens: 3, totalTokens: 15, cachedInputTokens: 0, reasoningTokens: 0 },
      });
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({
        org_id: admin.orgId,
        user_id: member.userId,
        model: 'fast-model',
        tier: 'platform',
        source: 'proxy',
        input_tokens: 12,
        output_tokens: 3,
        cached_input_tokens: 0,
        reasoning_tokens: 0,
        cost_micros: 0, // no pricing configured for environment-named models
      });
    });

    it('sends the platform key, the model, messages and generation options to the provider', async () => {
      const before = fake.requests.length;
      const res = await c.proxy(member, {
        model: 'other-model',
        options: {
          system: 'Be brief.',
          messages: [
            { role: 'user', content: 'First question' },
            { role: 'assistant', content: 'First answer' },
            {
              role: 'user',
              content: [
                { type: 'text', text: 'Part one. ' },
                { type: 'text', text: 'Part two.' },
              ],
            },
          ],
          temperature: 0.3,
          maxTokens: 50,
          topP: 0.9,
          stop: ['END'],
          seed: 7,
        },
      });
      expect(res.statusCode, res.body).toBe(200);
      expect(fake.requests.length).toBe(before + 1);
      const sent = lastRequest();
      expect(sent.path).toBe('/v1/chat/completions');
      expect(sent.headers.authorization).toBe('Bearer sk-platform');
      expect(sent.body).toMatchObject({
        model: 'other-model',
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'First question' },
          { role: 'assistant', content: 'First answer' },
          { role: 'user', content: 'Part one. Part two.' },
        ],
        temperature: 0.3,
        max_tokens: 50,
        top_p: 0.9,
        stop: ['END'],
        seed: 7,
      });
      expect(sent.body.stream).toBeFalsy();
      expect(sent.body.tools).toBeUndefined();
      // the caller's own credential never reaches the provider
      expect(JSON.stringify(sent.headers)).not.toContain(member.key);
    });

    it('returns reasoning, and cached and reasoning token counts', async () => {
      fake.script({ reasoning: ['Think', 'ing...'], text: 'Answer', usage: { prompt: 100, completion: 40, cached: 60, reasoning: 25 } });
      let res!: Awaited<ReturnType<typeof c.proxy>>;
      const rows = await c.newUsage(admin.orgId, async () => {
        res = await c.proxy(admin, { model: 'fast-model', options: hello });
      });
      expect(res.statusCode, res.body).toBe(200);
      const data = json(res).data;
      expect(data.text).toBe('Answer');
      expect(data.reasoning).toBe('Thinking...');
      expect(data.usage).toEqual({ inputTokens: 100, outputTokens: 40, totalTokens: 140, cachedInputTokens: 60, reasoningTokens: 25 });
      expect(rows).toEqual([
        expect.objectContaining({ user_id: admin.userId, input_tokens: 100, output_tokens: 40, cached_input_tokens: 60, reasoning_tokens: 25 }),
      ]);
    });

    it('offers tools with their JSON schema and returns tool calls (not executed) with parsed input', async () => {
      const parameters = { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] };
      fake.script({ toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris","days":3}' }] });
      const before = fake.requests.length;
      const res = await c.proxy(member, {
        model: 'fast-model',
        options: { ...hello, tools: [{ name: 'get_weather', description: 'Weather for a city', parameters }], toolChoice: 'required' },
      });
      expect(res.statusCode, res.body).toBe(200);
      const data = json(res).data;
      expect(data.toolCalls).toEqual([{ id: 'call_1', name: 'get_weather', input: { city: 'Paris', days: 3 } }]);
      expect(data.finishReason).toBe('tool-calls');
      expect(data.text).toBe('');
      const sent = lastRequest().body;
      expect(sent.tools).toEqual([
        { type: 'function', function: { name: 'get_weather', description: 'Weather for a city', parameters: expect.objectContaining(parameters) } },
      ]);
      expect(sent.tool_choice).toBe('required');
      // one model call only: the tool call was returned, not run and fed back
      expect(fake.requests.length).toBe(before + 1);
    });

    it('passes a forced tool choice through', async () => {
      fake.script({ toolCalls: [{ id: 'call_2', name: 'lookup', arguments: '{}' }] });
      const res = await c.proxy(member, {
        model: 'fast-model',
        options: { ...hello, tools: [{ name: 'lookup' }, { name: 'other' }], toolChoice: { tool: 'lookup' } },
      });
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res).data.toolCalls).toEqual([{ id: 'call_2', name: 'lookup', input: {} }]);
      expect(lastRequest().body.tool_choice).toEqual({ type: 'function', function: { name: 'lookup' } });
      expect(lastRequest().body.tools.map((t: any) => t.function.name)).toEqual(['lookup', 'other']);
    });

    it("reports the provider's finish reason", async () => {
      fake.script({ text: 'cut sho', finishReason: 'length' });
      const res = await c.proxy(member, { model: 'fast-model', options: { ...hello, maxTokens: 2 } });
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res).data).toMatchObject({ text: 'cut sho', finishReason: 'length' });
    });
  });

  describe('POST /v1/model-proxy errors', () => {
    it('accepts only the platform tier: 400 naming tier, and nothing reaches the provider', async () => {
      const before = fake.requests.length;
      for (const tier of ['byok', 'enterprise', '']) {
        for (const url of ['/v1/model-proxy', '/v1/model-proxy/stream']) {
          const res = await h.app.inject({ method: 'POST', url, headers: member.headers, payload: { model: 'fast-model', tier, options: hello } });
          const err = expectError(res, 400, 'invalid_request');
          expect(err.message).toContain('tier');
        }
      }
      // `platform`, said explicitly, is fine
      const ok = await c.proxy(member, { model: 'fast-model', tier: 'platform', options: hello });
      expect(ok.statusCode, ok.body).toBe(200);
      expect(fake.requests.length).toBe(before + 1);
    });

    it('refuses an unknown model and a BYOK model with 400, before any streaming', async () => {
      await c.putSecret(member, 'OPENAI_API_KEY', 'sk-member-byok');
      const byokId = (await c.available(member)).byok.find((m) => m.requiresSecret === 'OPENAI_API_KEY' && m.available)!.model;
      const before = fake.requests.length;
      for (const url of ['/v1/model-proxy', '/v1/model-proxy/stream']) {
        const unknown = expectError(
          await h.app.inject({ method: 'POST', url, headers: member.headers, payload: { model: 'no-such-model', options: hello } }),
          400,
          'invalid_request',
        );
        expect(unknown.message).toContain('no-such-model');
        const byok = expectError(
          await h.app.inject({ method: 'POST', url, headers: member.headers, payload: { model: byokId, options: hello } }),
          400,
          'invalid_request',
        );
        expect(byok.message).toContain(byokId);
        expect(byok.message).toContain('bring-your-own-key');
      }
      expect(fake.requests.length).toBe(before);
      await c.deleteSecret(member, 'OPENAI_API_KEY');
    });

    it('refuses malformed options with 400 naming the field', async () => {
      for (const options of [
        { messages: [] },
        { messages: [{ role: 'tool', content: 'x' }] },
        { ...hello, temperature: 3 },
        { ...hello, tools: [{ name: 'has space' }] },
        { ...hello, unknown: 1 },
      ]) {
        const res = await c.proxy(member, { model: 'fast-model', options });
        expectError(res, 400, 'invalid_request');
        expect(json(res).error.message).toContain('options');
      }
    });

    it("a provider's 401 is the platform's problem: 502 provider_error, never 401, and the key is not echoed", async () => {
      fake.script({ status: 401, errorMessage: 'Incorrect API key provided: sk-pla***orm' });
      const res = await c.proxy(member, { model: 'fast-model', options: hello });
      const err = expectError(res, 502, 'provider_error');
      expect(err.message).toContain('fast-model');
      expect(res.body).not.toContain('sk-platform');
      // the caller's own credential still works
      expect((await h.app.inject({ method: 'GET', url: '/v1/me', headers: member.headers })).statusCode).toBe(200);
    });

    it("a provider's 429 is 429 rate_limited", async () => {
      fake.script({ status: 429, errorMessage: 'Rate limit reached for requests' });
      const err = expectError(await c.proxy(member, { model: 'fast-model', options: hello }), 429, 'rate_limited');
      expect(err.message).toContain('fast-model');
    });

    it("a provider's 400 is 400 invalid_request carrying the provider's reason", async () => {
      fake.script({ status: 400, errorMessage: "This model's maximum context length is 8192 tokens" });
      const err = expectError(await c.proxy(member, { model: 'fast-model', options: hello }), 400, 'invalid_request');
      expect(err.message).toContain('maximum context length');
    });

    it("a provider's 500 is 502 provider_error", async () => {
      fake.script({ status: 500, errorMessage: 'The server had an error while processing your request' });
      const err = expectError(await c.proxy(member, { model: 'fast-model', options: hello }), 502, 'provider_error');
      expect(err.message).toContain('fast-model');
    });

    it('failed calls are not metered', async () => {
      fake.script({ status: 500 }, { status: 429 });
      const rows = await c.newUsage(admin.orgId, async () => {
        expect((await c.proxy(member, { model: 'fast-model', options: hello })).statusCode).toBe(502);
        expect((await c.proxy(member, { model: 'fast-model', options: hello })).statusCode).toBe(429);
      });
      expect(rows).toEqual([]);
    });
  });

  describe('POST /v1/model-proxy/stream', () => {
    it('streams NDJSON: start, reasoning, text, tool call, finish with usage; and meters it', async () => {
      fake.script({
        reasoning: ['Let me', ' think'],
        text: ['Hel', 'lo'],
        toolCalls: [{ id: 'call_s', name: 'lookup', arguments: '{"q":"weather"}' }],
        usage: { prompt: 20, completion: 9, cached: 5, reasoning: 4 },
      });
      let out!: Awaited<ReturnType<typeof c.stream>>;
      const rows = await c.newUsage(admin.orgId, async () => {
        out = await c.stream(member, {
          model: 'fast-model',
          options: { ...hello, temperature: 0.5, tools: [{ name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } }] },
        });
      });
      const { res, lines } = out;
      expect(res.statusCode, res.body).toBe(200);
      expect(res.headers['content-type']).toMatch(/^application\/x-ndjson/);
      expect(res.headers['cache-control']).toBe('no-cache');
      expect(res.headers['x-api-version']).toBe('v1');
      expect(res.body.endsWith('\n')).toBe(true);

      expect(lines[0]).toEqual({ type: 'start', model: 'fast-model' });
      const types = lines.map((l) => l.type).filter((t, i, all) => t !== all[i - 1]); // runs of deltas collapse
      expect(types).toEqual(['start', 'reasoning-delta', 'text-delta', 'tool-call', 'finish']);
      expect(
        lines
          .filter((l) => l.type === 'reasoning-delta')
          .map((l) => l.text)
          .join(''),
      ).toBe('Let me think');
      expect(
        lines
          .filter((l) => l.type === 'text-delta')
          .map((l) => l.text)
          .join(''),
      ).toBe('Hello');
      expect(lines.filter((l) => l.type === 'text-delta').length).toBeGreaterThanOrEqual(2); // streamed, not buffered into one
      expect(lines.find((l) => l.type === 'tool-call')).toEqual({ type: 'tool-call', id: 'call_s', name: 'lookup', input: { q: 'weather' } });
      expect(lines.at(-1)).toEqual({
        type: 'finish',
        finishReason: 'tool-calls',
        usage: { inputTokens: 20, outputTokens: 9, totalTokens: 29, cachedInputTokens: 5, reasoningTokens: 4 },
      });

      const sent = lastRequest();
      expect(sent.headers.authorization).toBe('Bearer sk-platform');
      expect(sent.body).toMatchObject({ model: 'fast-model', stream: true, temperature: 0.5, messages: [{ role: 'user', content: 'Say hello' }] });
      expect(rows).toEqual([
        expect.objectContaining({
          model: 'fast-model',
          source: 'proxy',
          user_id: member.userId,
          input_tokens: 20,
          output_tokens: 9,
          cached_input_tokens: 5,
          reasoning_tokens: 4,
        }),
      ]);
    });

    it('a provider dropping the connection mid-stream ends the stream with an error line (provider_error)', async () => {
      fake.script({ text: ['one ', 'two ', 'three ', 'four'], dropAfterChunks: 2 });
      const { res, lines } = await c.stream(member, { model: 'fast-model', options: hello });
      expect(res.statusCode).toBe(200);
      expect(lines[0]).toEqual({ type: 'start', model: 'fast-model' });
      expect(lines.map((l) => l.type)).not.toContain('finish');
      const last = lines.at(-1)!;
      expect(last.type).toBe('error');
      expect(last.error.code).toBe('provider_error');
      expect(last.error.message).toContain('fast-model');
      expect(lines.filter((l) => l.type === 'error')).toHaveLength(1);
    });

    it('a provider refusing the stream ends it with an error line mapped like the JSON route', async () => {
      fake.script({ status: 401 }, { status: 429 });
      for (const code of ['provider_error', 'rate_limited']) {
        const { res, lines } = await c.stream(member, { model: 'fast-model', options: hello });
        expect(res.statusCode).toBe(200);
        expect(lines.at(-1)).toMatchObject({ type: 'error', error: { code } });
        expect(lines.map((l) => l.type)).not.toContain('finish');
        expect(res.body).not.toContain('sk-platform');
      }
    });
  });

  describe('over a real socket', () => {
    let base: string;
    beforeAll(async () => {
      await h.app.listen({ port: 0, host: '127.0.0.1' });
      const addr = h.app.server.address();
      base = `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`;
    });

    const post = (url: string, signal: AbortSignal) =>
      fetch(`${base}${url}`, {
        method: 'POST',
        headers: { ...member.headers, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'fast-model', options: hello }),
        signal,
      });

    it('a call and a stream that the client waits for complete, and nothing upstream is cancelled', async () => {
      fake.script({ text: 'whole answer' }, { text: ['str', 'eamed'], chunkDelayMs: 20 });
      const abortedBefore = fake.aborted;
      const res = await post('/v1/model-proxy', new AbortController().signal);
      expect(res.status).toBe(200);
      expect((await res.json()).data.text).toBe('whole answer');
      const streamed = await post('/v1/model-proxy/stream', new AbortController().signal);
      expect(streamed.status).toBe(200);
      expect(streamed.headers.get('content-type')).toMatch(/^application\/x-ndjson/);
      const lines = (await streamed.text())
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Line);
      expect(
        lines
          .filter((l) => l.type === 'text-delta')
          .map((l) => l.text)
          .join(''),
      ).toBe('streamed');
      expect(lines.at(-1)!.type).toBe('finish');
      expect(fake.aborted).toBe(abortedBefore);
    });

    it('a client that disconnects during a slow stream cancels the upstream request', async () => {
      fake.script({ text: Array.from({ length: 50 }, (_, i) => `tick${i} `), chunkDelayMs: 150 });
      const abortedBefore = fake.aborted;
      const ac = new AbortController();
      const res = await post('/v1/model-proxy/stream', ac.signal);
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      const decoder = new TextDecoder();
      let seen = '';
      while (!seen.includes('"text-delta"')) {
        const { value, done } = await reader.read();
        if (done) break;
        seen += decoder.decode(value, { stream: true });
      }
      expect(seen).toContain('"text-delta"');
      ac.abort();
      await reader.cancel().catch(() => undefined);
      await until('the provider to see its request cancelled', () => fake.aborted > abortedBefore, 3000);
    });

    it('a client that disconnects during a slow non-streamed call cancels the upstream request', async () => {
      fake.script({ text: 'too late', delayMs: 6000 });
      const abortedBefore = fake.aborted;
      const requestsBefore = fake.requests.length;
      const ac = new AbortController();
      const pending = post('/v1/model-proxy', ac.signal).catch((err: Error) => err);
      await until('the request to reach the provider', () => fake.requests.length > requestsBefore, 3000);
      ac.abort();
      expect(await pending).toBeInstanceOf(Error);
      // well before the provider would have answered (6 s), it sees its request cancelled
      await until('the provider to see its request cancelled', () => fake.aborted > abortedBefore, 3000);
    });
  });
});

describe('models from a models file', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let admin: Actor;
  let member: Actor;
  const c = client(() => h);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    const file = modelsFile('models.json', {
      platform: [
        {
          id: 'house-fast',
          provider: 'openai',
          model: 'gpt-house-1',
          displayName: 'House Fast',
          contextWindow: 128000,
          pricing: { inputPerMTok: 2, outputPerMTok: 8, cachedInputPerMTok: 0.5 },
        },
        { id: 'house-plain', provider: 'openai', displayName: 'House Plain', pricing: { inputPerMTok: 1, outputPerMTok: 3 } },
        {
          id: 'house-claude',
          provider: 'anthropic',
          model: 'claude-house',
          displayName: 'House Claude',
          pricing: { inputPerMTok: 3, outputPerMTok: 15 },
        },
      ],
      byok: [
        {
          id: 'byok/fake/llama',
          provider: 'openai',
          model: 'llama-3-70b',
          displayName: 'Llama on your endpoint',
          baseUrl: fake.url,
          requiresSecret: 'FAKE_ENDPOINT_KEY',
        },
      ],
    });
    h = await createHarness({
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'env-model',
      HANGAR_MODELS_FILE: file,
    });
    admin = await createOrgAdmin(h);
    member = await addOrgMember(h, admin, 'member');
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('lists exactly the models the file names, with their display names', async () => {
    expect(await c.available(member)).toEqual({
      platform: [
        { model: 'house-fast', displayName: 'House Fast', available: true },
        { model: 'house-plain', displayName: 'House Plain', available: true },
        { model: 'house-claude', displayName: 'House Claude', available: false },
      ],
      byok: [{ model: 'byok/fake/llama', displayName: 'Llama on your endpoint', requiresSecret: 'FAKE_ENDPOINT_KEY', available: false }],
    });
    const err = expectError(await c.proxy(member, { model: 'env-model', options: hello }), 400, 'invalid_request');
    expect(err.message).toContain('env-model');
  });

  it("calls the provider's model id and meters the cost from the file's pricing", async () => {
    fake.script({ text: 'priced', usage: { prompt: 1000, completion: 500, cached: 400 } });
    let res!: Awaited<ReturnType<typeof c.proxy>>;
    const rows = await c.newUsage(admin.orgId, async () => {
      res = await c.proxy(member, { model: 'house-fast', options: hello });
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data.model).toBe('house-fast');
    expect(fake.requests.at(-1)!.body.model).toBe('gpt-house-1');
    // 600 uncached x $2 + 400 cached x $0.5 + 500 output x $8 per million tokens = 5400 micro-dollars
    expect(rows).toEqual([
      expect.objectContaining({
        model: 'house-fast',
        tier: 'platform',
        input_tokens: 1000,
        cached_input_tokens: 400,
        output_tokens: 500,
        cost_micros: 5400,
      }),
    ]);
  });

  it('prices cached input at the input price when the file gives no cached price, on the stream too', async () => {
    fake.script({ text: ['a', 'b'], usage: { prompt: 100, completion: 10, cached: 50 } });
    let out!: Awaited<ReturnType<typeof c.stream>>;
    const rows = await c.newUsage(admin.orgId, async () => {
      out = await c.stream(member, { model: 'house-plain', options: hello });
    });
    expect(out.lines.at(-1)).toMatchObject({ type: 'finish', usage: { inputTokens: 100, cachedInputTokens: 50, outputTokens: 10 } });
    expect(fake.requests.at(-1)!.body.model).toBe('house-plain');
    // 50 x $1 + 50 x $1 + 10 x $3 per million tokens = 130 micro-dollars
    expect(rows).toEqual([expect.objectContaining({ model: 'house-plain', cost_micros: 130 })]);
  });

  it('a platform model whose provider is not configured is 503 naming what to configure', async () => {
    const before = fake.requests.length;
    for (const url of ['/v1/model-proxy', '/v1/model-proxy/stream']) {
      const res = await h.app.inject({ method: 'POST', url, headers: member.headers, payload: { model: 'house-claude', options: hello } });
      const err = expectError(res, 503, 'service_unavailable');
      expect(err.message).toContain('house-claude');
      expect(err.message).toContain('HANGAR_ANTHROPIC_API_KEY');
    }
    expect(fake.requests.length).toBe(before);
  });

  it("a BYOK model runs on the caller's own key at the file's endpoint, but not through the proxy", async () => {
    await c.putSecret(member, 'FAKE_ENDPOINT_KEY', 'sk-member-endpoint');
    expect((await c.available(member)).byok).toEqual([expect.objectContaining({ model: 'byok/fake/llama', available: true })]);
    expect((await c.available(admin)).byok).toEqual([expect.objectContaining({ model: 'byok/fake/llama', available: false })]);

    const err = expectError(await c.proxy(member, { model: 'byok/fake/llama', options: hello }), 400, 'invalid_request');
    expect(err.message).toContain('bring-your-own-key');

    // server-side use (agent runs): the member's key, the model's own id and endpoint
    const ctx = systemCtx(h.deps, { userId: member.userId, orgId: member.orgId, role: 'member', scopes: ROLE_SCOPES.member, apiKeyId: null });
    const { model, entry } = await resolveModel(ctx, 'byok/fake/llama');
    expect(entry.tier).toBe('byok');
    fake.script({ text: 'from your endpoint' });
    const result = await generateText({ model, prompt: 'hi', maxRetries: 0 });
    expect(result.text).toBe('from your endpoint');
    expect(fake.requests.at(-1)!.headers.authorization).toBe('Bearer sk-member-endpoint');
    expect(fake.requests.at(-1)!.body.model).toBe('llama-3-70b');

    // without the secret the model names the secret to create
    const adminCtx = systemCtx(h.deps, { userId: admin.userId, orgId: admin.orgId, role: 'admin', scopes: ROLE_SCOPES.admin, apiKeyId: null });
    await expect(resolveModel(adminCtx, 'byok/fake/llama')).rejects.toMatchObject({
      code: 'invalid_request',
      message: expect.stringContaining('FAKE_ENDPOINT_KEY'),
    });
  });

  it('a malformed models file stops start-up with a ConfigError naming HANGAR_MODELS_FILE', async () => {
    const cases = [
      modelsFile('not-json.json', '{ "platform": [ '),
      modelsFile('bad-provider.json', { platform: [{ id: 'x', provider: 'mistral' }] }),
      modelsFile('duplicate.json', {
        platform: [{ id: 'same', provider: 'openai' }],
        byok: [{ id: 'same', provider: 'openai', requiresSecret: 'K' }],
      }),
      path.join(modelsDir, 'missing.json'),
    ];
    // (each failed start-up leaves its deps open: createHarness does not close them when buildApp throws)
    for (const file of cases) {
      const err = await createHarness({ HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_MODELS_FILE: file }).then(
        async (started) => {
          await started.close();
          return null;
        },
        (e: unknown) => e,
      );
      expect(err, file).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).setting).toBe('HANGAR_MODELS_FILE');
      expect((err as ConfigError).message).toContain('HANGAR_MODELS_FILE');
    }
  });
});

describe('a model provider that is too slow', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let admin: Actor;
  const c = client(() => h);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    h = await createHarness({
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'slow-model',
      HANGAR_MODEL_TIMEOUT_MS: '1000',
    });
    admin = await createOrgAdmin(h);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('is 504 provider_timeout, and the upstream request is cancelled', async () => {
    fake.script({ text: 'late', delayMs: 3000 });
    const abortedBefore = fake.aborted;
    const rows = await c.newUsage(admin.orgId, async () => {
      const err = expectError(await c.proxy(admin, { model: 'slow-model', options: hello }), 504, 'provider_timeout');
      expect(err.message).toContain('slow-model');
    });
    expect(rows).toEqual([]);
    await until('the provider to see its request cancelled', () => fake.aborted > abortedBefore, 3000);
  });

  it('ends a stream with a provider_timeout error line', async () => {
    fake.script({ text: 'late', delayMs: 3000 });
    const { res, lines } = await c.stream(admin, { model: 'slow-model', options: hello });
    expect(res.statusCode).toBe(200);
    expect(lines[0]).toEqual({ type: 'start', model: 'slow-model' });
    expect(lines.at(-1)).toMatchObject({ type: 'error', error: { code: 'provider_timeout' } });
  });
});

securitySuite('models', [
  { method: 'GET', url: () => '/v1/models/available', scope: 'models:use' },
  { method: 'POST', url: () => '/v1/model-proxy', scope: 'models:use', body: { model: 'fast-model', options: hello } },
  { method: 'POST', url: () => '/v1/model-proxy/stream', scope: 'models:use', body: { model: 'fast-model', options: hello } },
]);
