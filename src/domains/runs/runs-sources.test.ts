import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeAnthropic } from '../../../test/fakes/anthropic.js';
import { FakeOpenAI } from '../../../test/fakes/openai.js';
import { startSearchServer, type SearchServer } from '../../../test/fakes/search-server.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { readSse } from '../../../test/helpers.js';

/** Sources and citations a model gives reach the run's stream live and stay with the message (issue 23). */
describe('sources in runs', () => {
  let h: Harness;
  let fake: FakeAnthropic;
  let admin: Actor;
  let base: string;

  beforeAll(async () => {
    fake = await new FakeAnthropic().start();
    h = await createHarness({
      HANGAR_ANTHROPIC_BASE_URL: fake.url,
      HANGAR_ANTHROPIC_API_KEY: 'sk-ant-platform',
      HANGAR_ANTHROPIC_MODELS: 'claude-sonnet-4-5',
    });
    admin = await createOrgAdmin(h);
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/agents',
      headers: admin.headers,
      payload: { slug: 'cited', model: 'claude-sonnet-4-5' },
    });
    expect(res.statusCode, res.body).toBe(201);
  });
  afterAll(async () => {
    await h?.close();
    await fake?.stop();
  });

  it('streams each citation as an assistant_message_source frame and keeps them with the assistant_message', async () => {
    fake.script({
      text: 'Paris is the capital of France.',
      citations: [
        { url: 'https://example.com/paris', title: 'Paris', citedText: 'Paris is the capital' },
        { url: 'https://example.org/france', title: 'France', citedText: 'capital of France' },
      ],
    });
    const res = await fetch(`${base}/v1/run`, {
      method: 'POST',
      headers: { ...admin.headers, 'content-type': 'application/json' },
      body: JSON.stringify({ agent: 'cited', prompt: 'What is the capital of France?', stream: true }),
    });
    expect(res.status).toBe(200);
    const events = await readSse(res, (e) => e.event === 'run_completed');
    const sources = events.filter((e) => e.event === 'assistant_message_source').map((e) => e.data as Record<string, any>);
    expect(sources.map((s) => s.source)).toEqual([
      { sourceType: 'url', id: expect.any(String), url: 'https://example.com/paris', title: 'Paris', citedText: 'Paris is the capital' },
      { sourceType: 'url', id: expect.any(String), url: 'https://example.org/france', title: 'France', citedText: 'capital of France' },
    ]);
    const threadId = (events.find((e) => e.event === 'run_started')!.data as { threadId: string }).threadId;
    expect(sources[0]).toMatchObject({ threadId, messageId: expect.any(String) });

    const durable = json(await h.app.inject({ method: 'GET', url: `/v1/threads/${threadId}/events`, headers: admin.headers })).data.events;
    // Live only: the frames are not in the durable history; the message keeps the sources.
    expect(durable.some((e: { type: string }) => e.type === 'assistant_message_source')).toBe(false);
    const message = durable.find((e: { type: string }) => e.type === 'assistant_message');
    expect(message.payload).toMatchObject({ text: 'Paris is the capital of France.', messageId: sources[0]!.messageId });
    expect(message.payload.sources.map((s: { url: string }) => s.url)).toEqual(['https://example.com/paris', 'https://example.org/france']);
  });

  it('a message without sources carries none', async () => {
    fake.script({ text: 'Just text.' });
    const res = await h.app.inject({ method: 'POST', url: '/v1/run', headers: admin.headers, payload: { agent: 'cited', prompt: 'Say something' } });
    expect(res.statusCode, res.body).toBe(200);
    const { threadId } = json(res).data;
    const durable = json(await h.app.inject({ method: 'GET', url: `/v1/threads/${threadId}/events`, headers: admin.headers })).data.events;
    const message = durable.find((e: { type: string }) => e.type === 'assistant_message');
    expect(message.payload.text).toBe('Just text.');
    expect(message.payload).not.toHaveProperty('sources');
  });
});

describe('sources web_search finds, in runs', () => {
  let h: Harness;
  let fake: FakeOpenAI;
  let search: SearchServer;
  let admin: Actor;
  let base: string;
  const pages = [
    { title: 'Hangar docs', url: 'https://docs.example.com/hangar', description: 'Agents platform' },
    { title: 'Hangar blog', url: 'https://blog.example.com/hangar', description: 'News' },
  ];

  beforeAll(async () => {
    fake = await new FakeOpenAI().start();
    search = await startSearchServer({ apiKey: 'search-key', results: { 'hangar agents': pages } });
    h = await createHarness({
      HANGAR_OPENAI_BASE_URL: fake.url,
      HANGAR_OPENAI_API_KEY: 'sk-platform',
      HANGAR_OPENAI_MODELS: 'm1',
      HANGAR_SEARCH_PROVIDER: 'brave',
      HANGAR_SEARCH_API_KEY: 'search-key',
      HANGAR_SEARCH_URL: `${search.url}/res/v1/web/search`,
      HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS: 'true',
    });
    admin = await createOrgAdmin(h);
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    expect((await h.app.inject({ method: 'POST', url: '/v1/tools/web_search/install', headers: admin.headers, payload: {} })).statusCode).toBe(201);
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/agents',
      headers: admin.headers,
      payload: { slug: 'searcher', model: 'm1', tools: ['web_search'] },
    });
    expect(res.statusCode, res.body).toBe(201);
  });
  afterAll(async () => {
    await h?.close();
    await search?.close();
    await fake?.stop();
  });

  it('streams each page found as an assistant_message_source frame of the tool call and keeps them with the answer', async () => {
    fake.script(
      {
        toolCalls: [{ id: 'call_search', name: 'web_search', arguments: JSON.stringify({ query: 'hangar agents', count: 2 }) }],
        finishReason: 'tool_calls',
      },
      { text: 'Hangar is an agents platform.' },
    );
    const res = await fetch(`${base}/v1/run`, {
      method: 'POST',
      headers: { ...admin.headers, 'content-type': 'application/json' },
      body: JSON.stringify({ agent: 'searcher', prompt: 'What is Hangar?', stream: true }),
    });
    expect(res.status).toBe(200);
    const events = await readSse(res, (e) => e.event === 'run_completed');
    expect(events.at(-1)!.data).toMatchObject({ payload: { status: 'completed' } });
    const frames = events.filter((e) => e.event === 'assistant_message_source').map((e) => e.data as Record<string, any>);
    expect(frames.map((f) => [f.toolCallId, f.source.url, f.source.title])).toEqual([
      ['call_search', 'https://docs.example.com/hangar', 'Hangar docs'],
      ['call_search', 'https://blog.example.com/hangar', 'Hangar blog'],
    ]);
    const threadId = (events.find((e) => e.event === 'run_started')!.data as { threadId: string }).threadId;
    const durable = json(await h.app.inject({ method: 'GET', url: `/v1/threads/${threadId}/events`, headers: admin.headers })).data.events;
    const answer = durable.filter((e: { type: string }) => e.type === 'assistant_message').at(-1);
    expect(answer.payload.text).toBe('Hangar is an agents platform.');
    expect(answer.payload.sources.map((s: { url: string }) => s.url)).toEqual(pages.map((p) => p.url));
  });
});
