import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeAnthropic } from '../../../test/fakes/anthropic.js';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { securitySuite } from '../../../test/security.js';
import { ROLE_SCOPES } from '../../platform/scopes.js';

/**
 * The OpenAI-compatible endpoints (ADR 0042), driven by OpenAI's own `openai` client pointed at Hangar listening on
 * loopback, with a Hangar API key; the platform's provider is the scripted OpenAI-compatible fake.
 */

const dir = mkdtempSync(path.join(tmpdir(), 'hangar-openai-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const weatherTool = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

describe('OpenAI client against Hangar', () => {
  let fake: FakeOpenAI;
  let h: Harness;
  let admin: Actor;
  let member: Actor;
  let stranger: Actor;
  let baseURL: string;
  const client = (apiKey: string, opts: { maxRetries?: number } = {}) => new OpenAI({ apiKey, baseURL, maxRetries: opts.maxRetries ?? 0 });
  const lastSent = () => fake.requests.at(-1)!;
  const myUsage = async (actor: Actor) => {
    const res = await h.app.inject({ method: 'GET', url: '/v1/billing/my-usage?period=all_time', headers: actor.headers });
    expect(res.statusCode, res.body).toBe(200);
    return json(res).data as {
      modelUsage: { model: string; tier: string; calls: number; inputTokens: number; outputTokens: number; costMicros: number }[];
    };
  };
  const usageOf = async (actor: Actor, model: string) => (await myUsage(actor)).modelUsage.find((m) => m.model === model);

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    const modelsFile = path.join(dir, 'models.json');
    writeFileSync(
      modelsFile,
      JSON.stringify({
        platform: [
          { id: 'fast-model', provider: 'openai', pricing: { inputPerMTok: 2, outputPerMTok: 8 } },
          { id: 'vendor/slashed-model', provider: 'openai', model: 'slashed', pricing: { inputPerMTok: 1, outputPerMTok: 1 } },
          { id: 'claude-unconfigured', provider: 'anthropic' },
        ],
        byok: [{ id: 'byok/fake/own-model', provider: 'openai', model: 'own', baseUrl: fake.url, requiresSecret: 'FAKE_PROVIDER_KEY' }],
      }),
    );
    h = await createHarness({ HANGAR_OPENAI_BASE_URL: fake.url, HANGAR_OPENAI_API_KEY: 'sk-platform', HANGAR_MODELS_FILE: modelsFile });
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    baseURL = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}/v1`;
    admin = await createOrgAdmin(h);
    member = await addOrgMember(h, admin, 'member');
    stranger = await createOrgAdmin(h);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('a non-streaming completion: OpenAI’s shape, the request translated for the provider, and the usage metered', async () => {
    fake.script({ text: 'Hello there', usage: { prompt: 1000, completion: 500, cached: 100 } });
    const before = await usageOf(member, 'fast-model');
    const res = await client(member.key).chat.completions.create({
      model: 'fast-model',
      messages: [
        { role: 'developer', content: 'Be brief.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Say ' },
            { type: 'text', text: 'hello' },
          ],
        },
      ],
      max_completion_tokens: 64,
      temperature: 0.2,
      top_p: 0.9,
      stop: 'END',
      seed: 7,
      user: 'ignored-field',
    });
    expect(res.id).toMatch(/^chatcmpl-/);
    expect(res.object).toBe('chat.completion');
    expect(res.model).toBe('fast-model');
    expect(typeof res.created).toBe('number');
    expect(res.choices).toEqual([
      { index: 0, message: { role: 'assistant', content: 'Hello there', refusal: null }, logprobs: null, finish_reason: 'stop' },
    ]);
    expect(res.usage).toMatchObject({
      prompt_tokens: 1000,
      completion_tokens: 500,
      total_tokens: 1500,
      prompt_tokens_details: { cached_tokens: 100 },
    });
    const sent = lastSent();
    expect(sent.headers.authorization).toBe('Bearer sk-platform');
    expect(sent.body).toMatchObject({
      model: 'fast-model',
      max_tokens: 64,
      temperature: 0.2,
      top_p: 0.9,
      stop: ['END'],
      seed: 7,
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Say hello' },
      ],
    });
    expect(sent.body.user).toBeUndefined();
    // metered like the proxy: one more call of fast-model in the member's usage, at the catalogue price
    const after = await usageOf(member, 'fast-model');
    expect((after?.calls ?? 0) - (before?.calls ?? 0)).toBe(1);
    expect((after?.inputTokens ?? 0) - (before?.inputTokens ?? 0)).toBe(1000);
    expect((after?.costMicros ?? 0) - (before?.costMicros ?? 0)).toBe(1000 * 2 + 500 * 8);
  });

  it('a streamed completion: chunks with the text, a finish, a last usage chunk, and the usage metered', async () => {
    fake.script({ text: ['Hel', 'lo', ' world'], usage: { prompt: 20, completion: 3 } });
    const before = (await usageOf(admin, 'fast-model'))?.calls ?? 0;
    const stream = await client(admin.key).chat.completions.create({
      model: 'fast-model',
      messages: [{ role: 'user', content: 'Say hello' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(new Set(chunks.map((c) => c.object))).toEqual(new Set(['chat.completion.chunk']));
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Hello world');
    const finish = chunks.filter((c) => c.choices[0]?.finish_reason);
    expect(finish.map((c) => c.choices[0]!.finish_reason)).toEqual(['stop']);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ prompt_tokens: 20, completion_tokens: 3, total_tokens: 23 });
    expect(lastSent().body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    expect((await usageOf(admin, 'fast-model'))!.calls).toBe(before + 1);

    // without include_usage: no usage chunk (and the client's helper assembles the same text)
    fake.script({ text: ['a', 'b'] });
    const plain = client(admin.key).chat.completions.stream({ model: 'fast-model', messages: [{ role: 'user', content: 'ab' }] });
    const done = await plain.finalChatCompletion();
    expect(done.choices[0]!.message.content).toBe('ab');
    expect(done.choices[0]!.finish_reason).toBe('stop');
  });

  it('a tool round trip: the model’s tool call, then the assistant’s tool_calls and the tool result sent back', async () => {
    const openai = client(member.key);
    fake.script({ toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }], usage: { prompt: 30, completion: 10 } });
    const first = await openai.chat.completions.create({
      model: 'fast-model',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [weatherTool],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
    const choice = first.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toEqual([{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }]);
    expect(lastSent().body.tools).toEqual([weatherTool]);
    expect(lastSent().body.tool_choice).toEqual({ type: 'function', function: { name: 'get_weather' } });

    fake.script({ text: 'It is sunny in Paris.' });
    const second = await openai.chat.completions.create({
      model: 'fast-model',
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        choice.message,
        { role: 'tool', tool_call_id: 'call_1', content: '{"sky":"clear"}' },
      ],
      tools: [weatherTool],
      tool_choice: 'auto',
    });
    expect(second.choices[0]!.message.content).toBe('It is sunny in Paris.');
    expect(lastSent().body.messages).toEqual([
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '{"sky":"clear"}' },
    ]);
    expect(lastSent().body.tool_choice).toBe('auto');

    // streamed tool calls come as tool_calls deltas the client's helper assembles
    fake.script({ toolCalls: [{ id: 'call_2', name: 'get_weather', arguments: '{"city":"Rome"}' }] });
    const streamed = await openai.chat.completions
      .stream({ model: 'fast-model', messages: [{ role: 'user', content: 'Rome?' }], tools: [weatherTool] })
      .finalChatCompletion();
    expect(streamed.choices[0]!.finish_reason).toBe('tool_calls');
    expect(streamed.choices[0]!.message.tool_calls).toEqual([
      { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
    ]);
  });

  it('a tool message that answers no call, or a call left unanswered, is a 400 naming the message', async () => {
    const openai = client(member.key);
    const before = fake.requests.length;
    const orphan = await openai.chat.completions
      .create({
        model: 'fast-model',
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'tool', tool_call_id: 'nope', content: 'x' },
        ],
      })
      .catch((e) => e);
    expect(orphan).toBeInstanceOf(OpenAI.BadRequestError);
    expect(orphan.param).toBe('messages.1.tool_call_id');
    const unanswered = await openai.chat.completions
      .create({
        model: 'fast-model',
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
          { role: 'user', content: 'and?' },
        ],
      })
      .catch((e) => e);
    expect(unanswered).toBeInstanceOf(OpenAI.BadRequestError);
    expect(unanswered.message).toContain('c1');
    expect(unanswered.param).toBe('messages.1.tool_calls');
    expect(fake.requests.length).toBe(before);
  });

  it('the model proxy takes the same tool turns in its own shape, and refuses unpaired ones naming options.messages', async () => {
    const proxy = (messages: unknown[]) =>
      h.app.inject({ method: 'POST', url: '/v1/model-proxy', headers: member.headers, payload: { model: 'fast-model', options: { messages } } });
    const call = { role: 'assistant', toolCalls: [{ id: 'c1', name: 'get_weather', input: { city: 'Oslo' } }] };
    fake.script({ text: 'Cold.' });
    const ok = await proxy([{ role: 'user', content: 'Oslo?' }, call, { role: 'tool', toolCallId: 'c1', content: 'snow' }]);
    expect(ok.statusCode, ok.body).toBe(200);
    expect(json(ok).data.text).toBe('Cold.');
    expect(lastSent().body.messages.slice(1)).toEqual([
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'snow' },
    ]);
    const before = fake.requests.length;
    for (const [messages, field] of [
      [[{ role: 'user', content: 'x' }, call], 'options.messages.1.toolCalls'],
      [[{ role: 'user', content: 'x' }, call, { role: 'user', content: 'y' }], 'options.messages.1.toolCalls'],
      [
        [
          { role: 'user', content: 'x' },
          { role: 'tool', toolCallId: 'c1', content: 'r' },
        ],
        'options.messages.1.toolCallId',
      ],
      [
        [{ role: 'user', content: 'x' }, call, { role: 'tool', toolCallId: 'c1', content: 'r' }, { role: 'tool', toolCallId: 'c1', content: 'r' }],
        'options.messages.3.toolCallId',
      ],
    ] as [unknown[], string][]) {
      const res = await proxy(messages);
      expect(res.statusCode, res.body).toBe(400);
      expect(json(res).error.issues[0].path).toBe(field);
    }
    expect(fake.requests.length).toBe(before);
  });

  it('models.list and models.retrieve: the models the caller can call, ids with "/" included', async () => {
    const openai = client(member.key);
    const ids = [];
    for await (const m of openai.models.list()) {
      expect(m).toEqual({ id: m.id, object: 'model', created: 0, owned_by: 'hangar' });
      ids.push(m.id);
    }
    // the Anthropic model is in the catalogue but its provider is not configured: not callable, not listed
    expect(ids.sort()).toEqual(['fast-model', 'vendor/slashed-model']);
    expect(await openai.models.retrieve('vendor/slashed-model')).toEqual({
      id: 'vendor/slashed-model',
      object: 'model',
      created: 0,
      owned_by: 'hangar',
    });
    const raw = await fetch(`${baseURL}/models/vendor/slashed-model`, { headers: { authorization: `Bearer ${member.key}` } });
    expect(raw.status).toBe(200);
    for (const id of ['claude-unconfigured', 'no-such-model', 'byok/fake/own-model']) {
      const err = await openai.models.retrieve(id).catch((e) => e);
      expect(err, id).toBeInstanceOf(OpenAI.NotFoundError);
      expect(err.error).toMatchObject({ code: 'not_found', type: 'invalid_request_error', param: 'model' });
    }
    // the catalogue listing keeps its own route
    const available = await h.app.inject({ method: 'GET', url: '/v1/models/available', headers: member.headers });
    expect(available.statusCode).toBe(200);
    expect(json(available).data.platform.map((m: { model: string }) => m.model)).toContain('claude-unconfigured');
  });

  it('a model with a "/" in its id is called by that id (the provider gets its own model name)', async () => {
    fake.script({ text: 'slashed' });
    const res = await client(member.key).chat.completions.create({ model: 'vendor/slashed-model', messages: [{ role: 'user', content: 'hi' }] });
    expect(res.model).toBe('vendor/slashed-model');
    expect(lastSent().body.model).toBe('slashed');
  });

  it('bad input is a 400 the client raises as BadRequestError, with OpenAI’s type and param and Hangar’s code and request id', async () => {
    const openai = client(member.key);
    const before = fake.requests.length;
    const cases: [Record<string, unknown>, string][] = [
      [{ model: 'fast-model', messages: [] }, 'messages'],
      [{ model: 'fast-model', messages: [{ role: 'user', content: 'hi' }], temperature: 5 }, 'temperature'],
      [{ model: 'fast-model', messages: [{ role: 'user', content: 'hi' }], n: 2 }, 'n'],
      [
        { model: 'fast-model', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }] },
        'messages.0.content',
      ],
      [{ model: 'fast-model', messages: [{ role: 'function', content: 'x', name: 'f' }] }, 'messages.0.role'],
      [{ model: 'fast-model', messages: [{ role: 'user', content: 'hi' }], response_format: { type: 'json_object' } }, 'response_format'],
      [{ model: 'fast-model', messages: [{ role: 'user', content: 'hi' }], tools: [{ type: 'custom', custom: { name: 'x' } }] }, 'tools.0.type'],
      [{ model: 'fast-model', messages: 'hello' }, 'messages'],
      [{ messages: [{ role: 'user', content: 'hi' }] }, 'model'],
    ];
    for (const [body, param] of cases) {
      const err = await openai.chat.completions.create(body as never).catch((e) => e);
      expect(err, JSON.stringify(body)).toBeInstanceOf(OpenAI.BadRequestError);
      expect(err.status).toBe(400);
      expect(err.type).toBe('invalid_request_error');
      expect(err.param, JSON.stringify(body)).toMatch(new RegExp(`^${param.replaceAll('.', '\\.')}`));
      expect(err.code).toBe('invalid_request');
      expect(err.error.requestId).toBe(err.requestID);
      expect(err.message).toMatch(/^400 /);
    }
    // a deeply nested body is a 400 too, never a 5xx
    for (const deep of [`${'['.repeat(20_000)}${']'.repeat(20_000)}`, `[${'{"role":"user","content":'.repeat(5000)}"x"${'}'.repeat(5000)}]`]) {
      const nested = await fetch(`${baseURL}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${member.key}`, 'content-type': 'application/json' },
        body: `{"model":"fast-model","messages":${deep},"metadata":${deep}}`,
      });
      expect(nested.status).toBe(400);
      expect((await nested.json()).error).toMatchObject({ code: 'invalid_request', type: 'invalid_request_error' });
    }
    // an unknown model is a 404, as OpenAI answers it
    const unknown = await openai.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
    expect(unknown.param).toBe('model');
    expect(fake.requests.length).toBe(before);
  });

  it('a missing or invalid key is 401 (AuthenticationError); a key without models:use is 403 (PermissionDeniedError)', async () => {
    const before = fake.requests.length;
    const call = (openai: OpenAI) =>
      openai.chat.completions.create({ model: 'fast-model', messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
    const noKey = await fetch(`${baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fast-model', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(noKey.status).toBe(401);
    expect((await noKey.json()).error).toMatchObject({ code: 'unauthenticated', type: 'authentication_error', param: null });
    for (const bad of ['hgr_live_not_a_real_key', 'sk-proj-something']) {
      const err = await call(client(bad));
      expect(err, bad).toBeInstanceOf(OpenAI.AuthenticationError);
      expect(err.error).toMatchObject({ code: 'unauthenticated', type: 'authentication_error' });
      expect(
        (
          await client(bad)
            .models.list()
            .catch((e) => e)
        ).status,
      ).toBe(401);
    }
    const readOnly = await keyFor(
      h,
      member,
      [...ROLE_SCOPES.member].filter((s) => s !== 'models:use'),
    );
    const denied = await call(client(readOnly));
    expect(denied).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(denied.error).toMatchObject({ code: 'forbidden', type: 'permission_error' });
    expect(denied.message).toContain('models:use');
    expect(
      await client(readOnly)
        .models.list()
        .catch((e) => e),
    ).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(
      await client(readOnly)
        .models.retrieve('fast-model')
        .catch((e) => e),
    ).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(fake.requests.length).toBe(before);
    // the right key still works with the same client setup
    fake.script({ text: 'fine' });
    expect((await call(client(member.key))).choices[0].message.content).toBe('fine');
  });

  it('provider failures keep the proxy’s statuses: 429 RateLimitError, 502 InternalServerError; mid-stream an error the client raises', async () => {
    const openai = client(member.key);
    fake.script({ status: 429, errorMessage: 'Rate limit reached' });
    const limited = await openai.chat.completions.create({ model: 'fast-model', messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
    expect(limited).toBeInstanceOf(OpenAI.RateLimitError);
    expect(limited.error).toMatchObject({ code: 'rate_limited', type: 'rate_limit_error' });
    fake.script({ status: 500, errorMessage: 'upstream broke' });
    const broken = await openai.chat.completions.create({ model: 'fast-model', messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
    expect(broken).toBeInstanceOf(OpenAI.InternalServerError);
    expect(broken.status).toBe(502);
    expect(broken.error).toMatchObject({ code: 'provider_error', type: 'server_error' });
    expect(JSON.stringify(broken.error)).not.toContain('sk-platform');

    fake.script({ text: ['one ', 'two ', 'three'], dropAfterChunks: 2, chunkDelayMs: 5 });
    const stream = await openai.chat.completions.create({ model: 'fast-model', messages: [{ role: 'user', content: 'count' }], stream: true });
    let text = '';
    const failure = await (async () => {
      for await (const c of stream) text += c.choices[0]?.delta.content ?? '';
    })().catch((e) => e);
    expect(failure).toBeInstanceOf(OpenAI.APIError);
    expect(failure.error).toMatchObject({ code: 'provider_error', type: 'server_error' });
    expect(text).toBe('one ');
  });

  it('a bring-your-own-key model: listed and callable in the organization that has the key, on that key, not metered at a price', async () => {
    // the owner's org first (control): no key, not listed; then the key makes it listed and callable
    const ids = async (actor: Actor) => (await client(actor.key).models.list()).data.map((m) => m.id);
    expect(await ids(admin)).not.toContain('byok/fake/own-model');
    const put = await h.app.inject({
      method: 'POST',
      url: '/v1/secrets',
      headers: admin.headers,
      payload: { name: 'FAKE_PROVIDER_KEY', value: 'sk-org-a-own', scope: 'organization' },
    });
    expect(put.statusCode, put.body).toBe(201);
    expect(await ids(admin)).toContain('byok/fake/own-model');
    expect(await ids(member)).toContain('byok/fake/own-model');
    expect(await client(member.key).models.retrieve('byok/fake/own-model')).toMatchObject({ owned_by: 'byok' });
    fake.script({ text: 'on your key' });
    const res = await client(member.key).chat.completions.create({ model: 'byok/fake/own-model', messages: [{ role: 'user', content: 'hi' }] });
    expect(res.choices[0]!.message.content).toBe('on your key');
    expect(res.model).toBe('byok/fake/own-model');
    expect(lastSent().headers.authorization).toBe('Bearer sk-org-a-own');
    expect(lastSent().body.model).toBe('own');
    expect(await usageOf(member, 'byok/fake/own-model')).toMatchObject({ tier: 'byok', calls: 1, costMicros: 0 });

    // another organization: not listed, not retrievable, not callable, and nothing reaches the provider
    expect(await ids(stranger)).not.toContain('byok/fake/own-model');
    expect(
      await client(stranger.key)
        .models.retrieve('byok/fake/own-model')
        .catch((e) => e),
    ).toBeInstanceOf(OpenAI.NotFoundError);
    const before = fake.requests.length;
    const refused = await client(stranger.key)
      .chat.completions.create({ model: 'byok/fake/own-model', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e) => e);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect(refused.message).toContain('FAKE_PROVIDER_KEY');
    expect(fake.requests.length).toBe(before);
    expect(await usageOf(stranger, 'byok/fake/own-model')).toBeUndefined();
  });
});

describe('OpenAI client against Hangar, on an Anthropic platform model (the AI SDK path)', () => {
  let fake: FakeAnthropic;
  let h: Harness;
  let admin: Actor;
  let openai: OpenAI;
  beforeAll(async () => {
    fake = await new FakeAnthropic().start();
    h = await createHarness({
      HANGAR_ANTHROPIC_BASE_URL: fake.url,
      HANGAR_ANTHROPIC_API_KEY: 'sk-ant-platform',
      HANGAR_ANTHROPIC_MODELS: 'claude-x',
    });
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    admin = await createOrgAdmin(h);
    openai = new OpenAI({ apiKey: admin.key, baseURL: `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}/v1`, maxRetries: 0 });
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('a tool conversation reaches Anthropic as tool_use and tool_result blocks, and the stream answers in OpenAI’s shape', async () => {
    fake.script({ text: 'Sunny.' });
    const stream = await openai.chat.completions.create({
      model: 'claude-x',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Weather in Paris?' },
        {
          role: 'assistant',
          content: 'Looking.',
          tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
        },
        { role: 'tool', tool_call_id: 'toolu_1', content: 'clear sky' },
      ],
      tools: [weatherTool],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      usage = chunk.usage ?? usage;
    }
    expect(text).toBe('Sunny.');
    expect(usage!.prompt_tokens).toBe(12);
    expect(usage!.total_tokens).toBe(usage!.prompt_tokens + usage!.completion_tokens);
    const sent = fake.requests.at(-1);
    expect(sent.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }] },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Looking.' },
          { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
        ],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'clear sky' }] },
    ]);
    expect(sent.tools).toEqual([expect.objectContaining({ name: 'get_weather' })]);
  });
});

securitySuite('OpenAI-compatible endpoints', [
  { method: 'GET', url: () => '/v1/models', scope: 'models:use' },
  { method: 'GET', url: () => '/v1/models/some-model', scope: 'models:use' },
  {
    method: 'POST',
    url: () => '/v1/chat/completions',
    scope: 'models:use',
    body: { model: 'some-model', messages: [{ role: 'user', content: 'hi' }] },
  },
]);
