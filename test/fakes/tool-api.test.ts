import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SearchServer, startSearchServer } from './search-server.js';
import { startToolApi, TOOL_API_MAX_BODY_BYTES, type ToolApi } from './tool-api.js';

const KEY = 'owm-key-1';
const TOKEN = 'static-token-1';
const OAUTH_TOKEN = 'issued-by-oauth';

let api: ToolApi;
let userinfo: http.Server;
let userinfoUrl: string;
let userinfoCalls = 0;

beforeAll(async () => {
  // Stands in for the OAuth server's userinfo endpoint: one token is good, any other is not.
  userinfo = http.createServer((req, res) => {
    userinfoCalls++;
    if (req.headers.authorization === `Bearer ${OAUTH_TOKEN}`) {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ sub: 'acct-1', preferred_username: 'alice' }));
    } else res.writeHead(401, { 'www-authenticate': 'Bearer error="invalid_token"' }).end();
  });
  await new Promise<void>((resolve) => userinfo.listen(0, '127.0.0.1', resolve));
  userinfoUrl = `http://127.0.0.1:${(userinfo.address() as AddressInfo).port}/me`;
  api = await startToolApi({ apiKeys: [KEY], bearerTokens: [TOKEN], userinfoUrl });
});

afterAll(async () => {
  await api?.close();
  userinfo?.closeAllConnections();
  await new Promise<void>((resolve) => userinfo?.close(() => resolve()));
});

async function call(path: string, init: RequestInit = {}) {
  const res = await fetch(`${api.url}${path}`, init);
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

const bearer = (t: string, extra: Record<string, string> = {}) => ({ authorization: `Bearer ${t}`, ...extra });
const jsonPost = (body: unknown, headers: Record<string, string>): RequestInit => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(body),
});

describe('OpenWeatherMap', () => {
  it('answers the current weather, the same for the same city, in the asked units', async () => {
    const metric = await call(`/data/2.5/weather?q=London&appid=${KEY}&units=metric`);
    expect(metric.status).toBe(200);
    expect(metric.json).toMatchObject({ name: 'London', cod: 200, coord: { lat: expect.any(Number), lon: expect.any(Number) } });
    expect(metric.json.weather[0]).toEqual({
      id: expect.any(Number),
      main: expect.any(String),
      description: expect.any(String),
      icon: expect.any(String),
    });
    expect(metric.json.main).toMatchObject({
      temp: expect.any(Number),
      feels_like: expect.any(Number),
      humidity: expect.any(Number),
      pressure: expect.any(Number),
    });
    expect(metric.json.wind).toMatchObject({ speed: expect.any(Number), deg: expect.any(Number) });

    const again = await call(`/data/2.5/weather?q=london&appid=${KEY}&units=metric`);
    expect(again.json.main).toEqual(metric.json.main);
    const imperial = await call(`/data/2.5/weather?q=London&appid=${KEY}&units=imperial`);
    expect(imperial.json.main.temp).toBeCloseTo((metric.json.main.temp * 9) / 5 + 32, 1);
    const standard = await call(`/data/2.5/weather?q=London&appid=${KEY}`);
    expect(standard.json.main.temp).toBeCloseTo(metric.json.main.temp + 273.15, 1);

    const paris = await call(`/data/2.5/weather?q=Paris,fr&appid=${KEY}&units=metric`);
    expect(paris.json.name).toBe('Paris');
    expect(paris.json.sys.country).toBe('FR');
    expect(paris.json.coord).not.toEqual(metric.json.coord);
  });

  it('refuses a missing or unknown appid with 401, and a bearer token in place of the key works too', async () => {
    const body = { cod: 401, message: 'Invalid API key. Please see https://openweathermap.org/faq#error401 for more info.' };
    for (const q of ['q=London', 'q=London&appid=nope']) {
      const r = await call(`/data/2.5/weather?${q}`);
      expect(r.status).toBe(401);
      expect(r.json).toEqual(body);
    }
    expect((await call(`/data/2.5/weather?q=London&appid=${TOKEN}`)).status).toBe(200);
  });

  it('answers 404 city not found for Atlantis and 400 without a city', async () => {
    const r = await call(`/data/2.5/weather?q=Atlantis&appid=${KEY}`);
    expect(r.status).toBe(404);
    expect(r.json).toEqual({ cod: '404', message: 'city not found' });
    const none = await call(`/data/2.5/weather?appid=${KEY}`);
    expect(none.status).toBe(400);
    expect(none.json).toEqual({ cod: '400', message: 'Nothing to geocode' });
  });
});

describe('GitHub issues', () => {
  it('lists issues by state with per_page, newest first, and records Accept and User-Agent', async () => {
    const headers = bearer(TOKEN, { accept: 'application/vnd.github+json', 'user-agent': 'hangar-test' });
    const open = await call('/repos/acme/widgets/issues?state=open&per_page=10', { headers });
    expect(open.status).toBe(200);
    expect(open.json.map((i: any) => i.state)).toEqual(['open', 'open']);
    expect(open.json[0]).toMatchObject({
      number: 2,
      title: 'Add a dark mode',
      state: 'open',
      html_url: 'https://github.com/acme/widgets/issues/2',
      user: { login: 'octocat' },
      labels: [{ name: 'enhancement' }],
    });
    expect(open.json[0]).toHaveProperty('id');
    expect(open.json[0]).toHaveProperty('body');
    const closed = await call('/repos/acme/widgets/issues?state=closed', { headers });
    expect(closed.json.map((i: any) => i.number)).toEqual([3]);
    const all = await call('/repos/acme/widgets/issues?state=all&per_page=2', { headers });
    expect(all.json.map((i: any) => i.number)).toEqual([3, 2]);
    const recorded = api.requests.find((r) => r.path === '/repos/acme/widgets/issues' && r.query.per_page === '2');
    expect(recorded).toMatchObject({ method: 'GET', query: { state: 'all', per_page: '2' } });
    expect(recorded?.headers['user-agent']).toBe('hangar-test');
    expect(recorded?.headers.accept).toBe('application/vnd.github+json');
  });

  it('creates an issue (201) that a later list shows, and accepts the `token` scheme', async () => {
    const created = await call(
      '/repos/acme/gadgets/issues',
      jsonPost({ title: 'Button misaligned', body: 'On mobile', labels: ['bug', 'ui'] }, { authorization: `token ${TOKEN}` }),
    );
    expect(created.status).toBe(201);
    expect(created.json).toMatchObject({
      number: 4,
      title: 'Button misaligned',
      body: 'On mobile',
      state: 'open',
      html_url: 'https://github.com/acme/gadgets/issues/4',
      labels: [{ name: 'bug' }, { name: 'ui' }],
      user: { login: expect.any(String) },
    });
    const list = await call('/repos/acme/gadgets/issues', { headers: bearer(TOKEN) });
    expect(list.json[0]).toMatchObject({ number: 4, title: 'Button misaligned' });
    // Another repository does not see it.
    const other = await call('/repos/acme/widgets/issues?state=all', { headers: bearer(TOKEN) });
    expect(other.json.some((i: any) => i.title === 'Button misaligned')).toBe(false);
    expect(api.requests.find((r) => r.method === 'POST' && r.path === '/repos/acme/gadgets/issues')?.body).toEqual({
      title: 'Button misaligned',
      body: 'On mobile',
      labels: ['bug', 'ui'],
    });
  });

  it('answers 422 Validation Failed without a title and 400 for a body that is not JSON', async () => {
    const r = await call('/repos/acme/widgets/issues', jsonPost({ body: 'no title' }, bearer(TOKEN)));
    expect(r.status).toBe(422);
    expect(r.json).toMatchObject({ message: 'Validation Failed', errors: [{ resource: 'Issue', code: 'missing_field', field: 'title' }] });
    const bad = await call('/repos/acme/widgets/issues', { method: 'POST', headers: bearer(TOKEN), body: '{not json' });
    expect(bad.status).toBe(400);
    expect(bad.json.message).toBe('Problems parsing JSON');
  });

  it('answers 401 Bad credentials for an unknown token and Requires authentication without one', async () => {
    const r = await call('/repos/acme/widgets/issues', { headers: bearer('wrong') });
    expect(r.status).toBe(401);
    expect(r.json).toMatchObject({ message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' });
    const none = await call('/repos/acme/widgets/issues');
    expect(none.status).toBe(401);
    expect(none.json.message).toBe('Requires authentication');
  });

  it('accepts a token the userinfo endpoint vouches for, asking it each time, and names the issue author after it', async () => {
    const before = userinfoCalls;
    const ok = await call('/repos/acme/oauth/issues', jsonPost({ title: 'Via OAuth' }, bearer(OAUTH_TOKEN)));
    expect(ok.status).toBe(201);
    expect(ok.json.user).toEqual({ login: 'alice' });
    expect((await call('/repos/acme/oauth/issues', { headers: bearer(OAUTH_TOKEN) })).status).toBe(200);
    expect((await call('/repos/acme/oauth/issues', { headers: bearer('revoked-token') })).status).toBe(401);
    expect(userinfoCalls - before).toBe(3);
  });
});

describe('Slack chat.postMessage', () => {
  it('posts a JSON message and answers ok with channel, ts and the message', async () => {
    const r = await call('/api/chat.postMessage', jsonPost({ channel: 'C0123456789', text: 'Deploy finished' }, bearer(TOKEN)));
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({
      ok: true,
      channel: 'C0123456789',
      ts: expect.stringMatching(/^\d+\.\d{6}$/),
      message: { text: 'Deploy finished', type: 'message' },
    });
    const second = await call('/api/chat.postMessage', jsonPost({ channel: 'C0123456789', text: 'again' }, bearer(TOKEN)));
    expect(second.json.ts).not.toBe(r.json.ts);
  });

  it('takes a form body, with the token in the body or the header, and answers a channel ID for a #name', async () => {
    const form = new URLSearchParams({ channel: '#general', text: 'hello', token: TOKEN });
    const r = await call('/api/chat.postMessage', { method: 'POST', body: form });
    expect(r.json).toMatchObject({ ok: true, channel: expect.stringMatching(/^C[A-Z0-9]+$/), message: { text: 'hello' } });
    const viaHeader = await call('/api/chat.postMessage', {
      method: 'POST',
      headers: bearer(OAUTH_TOKEN),
      body: new URLSearchParams({ channel: '#general', text: 'hi' }),
    });
    expect(viaHeader.json).toMatchObject({ ok: true, channel: r.json.channel });
    expect(api.requests.at(-1)?.body).toEqual({ channel: '#general', text: 'hi' });
  });

  it('answers HTTP 200 ok:false for bad auth, no auth, a missing channel and a missing text', async () => {
    const cases: [RequestInit, string][] = [
      [jsonPost({ channel: 'C1', text: 'x' }, bearer('xoxb-wrong')), 'invalid_auth'],
      [jsonPost({ channel: 'C1', text: 'x' }, {}), 'not_authed'],
      [jsonPost({ text: 'x' }, bearer(TOKEN)), 'channel_not_found'],
      [jsonPost({ channel: 'C0123456789' }, bearer(TOKEN)), 'no_text'],
    ];
    for (const [init, error] of cases) {
      const r = await call('/api/chat.postMessage', init);
      expect(r.status).toBe(200);
      expect(r.json).toEqual({ ok: false, error });
    }
  });
});

describe('Resend emails', () => {
  const email = { from: 'Hangar <noreply@example.test>', to: ['bob@example.test'], subject: 'Hi', text: 'Hello Bob' };

  it('sends an email and answers its id', async () => {
    const r = await call('/emails', jsonPost(email, bearer(TOKEN)));
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ id: expect.stringMatching(/^[0-9a-f-]{36}$/) });
    const html = await call('/emails', jsonPost({ ...email, to: 'bob@example.test', text: undefined, html: '<p>Hi</p>' }, bearer(OAUTH_TOKEN)));
    expect(html.status).toBe(200);
    expect(html.json.id).not.toBe(r.json.id);
  });

  it('answers 422 missing_required_field for each missing field', async () => {
    for (const field of ['from', 'to', 'subject'] as const) {
      const r = await call('/emails', jsonPost({ ...email, [field]: undefined }, bearer(TOKEN)));
      expect(r.status).toBe(422);
      expect(r.json).toEqual({ statusCode: 422, name: 'missing_required_field', message: `Missing \`${field}\` field.` });
    }
    const noContent = await call('/emails', jsonPost({ ...email, text: undefined }, bearer(TOKEN)));
    expect(noContent.status).toBe(422);
    expect(noContent.json.message).toBe('Missing `html` or `text` field.');
  });

  it('answers 403 for a wrong key and 401 for a missing one, as Resend documents', async () => {
    const wrong = await call('/emails', jsonPost(email, bearer('re_wrong')));
    expect(wrong.status).toBe(403);
    expect(wrong.json).toEqual({ statusCode: 403, name: 'validation_error', message: 'API key is invalid' });
    const missing = await call('/emails', jsonPost(email, {}));
    expect(missing.status).toBe(401);
    expect(missing.json).toEqual({ statusCode: 401, name: 'missing_api_key', message: 'Missing API key in the authorization header.' });
  });
});

describe('test helpers', () => {
  it('probe echoes method, path, query, headers and body (JSON parsed, text otherwise)', async () => {
    const r = await call('/probe/a/b?x=1&y=two', {
      method: 'PUT',
      headers: { 'content-type': 'application/json', 'x-custom': 'v' },
      body: '{"k":[1,2]}',
    });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({
      method: 'PUT',
      path: '/probe/a/b',
      query: { x: '1', y: 'two' },
      headers: { 'x-custom': 'v' },
      body: { k: [1, 2] },
    });
    const text = await call('/probe/t', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'plain words' });
    expect(text.json.body).toBe('plain words');
    const get = await call('/probe');
    expect(get.json).toMatchObject({ method: 'GET', path: '/probe', body: null });
  });

  it('redirects with Location and the asked status', async () => {
    const target = `${api.url}/probe/landed`;
    const r = await fetch(`${api.url}/redirect?to=${encodeURIComponent(target)}&status=307`, { redirect: 'manual' });
    expect(r.status).toBe(307);
    expect(r.headers.get('location')).toBe(target);
    const followed = await fetch(`${api.url}/redirect?to=${encodeURIComponent(target)}`);
    expect(followed.status).toBe(200);
    expect(((await followed.json()) as { path: string }).path).toBe('/probe/landed');
  });

  it('big answers N bytes of "a", with Content-Length or chunked', async () => {
    const sized = await fetch(`${api.url}/big?bytes=200000`);
    expect(sized.headers.get('content-length')).toBe('200000');
    const body = await sized.text();
    expect(body.length).toBe(200000);
    expect(/^a+$/.test(body)).toBe(true);
    const chunked = await fetch(`${api.url}/big?bytes=70000&chunked=1`);
    expect(chunked.headers.get('content-length')).toBeNull();
    expect(chunked.headers.get('transfer-encoding')).toBe('chunked');
    expect((await chunked.text()).length).toBe(70000);
  });

  it('slow waits the asked time before answering', async () => {
    const started = Date.now();
    const r = await call('/slow?ms=300');
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    expect(r.json).toEqual({ ok: true });
    // A client that gives up does not wait for it.
    await expect(fetch(`${api.url}/slow?ms=5000`, { signal: AbortSignal.timeout(100) })).rejects.toThrow();
  });

  it('answers 413 for a body over 1 MiB and takes one of exactly 1 MiB', async () => {
    const over = await call('/probe/upload', { method: 'POST', body: 'x'.repeat(TOOL_API_MAX_BODY_BYTES + 1) });
    expect(over.status).toBe(413);
    const at = await call('/probe/upload', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x'.repeat(TOOL_API_MAX_BODY_BYTES) });
    expect(at.status).toBe(200);
    expect(at.json.body.length).toBe(TOOL_API_MAX_BODY_BYTES);
  });

  it('answers 404 for an unknown path', async () => {
    expect((await call('/nowhere')).status).toBe(404);
  });
});

describe('Brave search server', () => {
  const API_KEY = 'brave-key';
  let search: SearchServer;
  const endpoint = (q: string) => `${search.url}/res/v1/web/search?${q}`;
  const get = async (q: string, key: string | null = API_KEY) => {
    const res = await fetch(endpoint(q), { headers: key === null ? {} : { 'x-subscription-token': key, accept: 'application/json' } });
    return { status: res.status, json: (await res.json()) as any };
  };

  beforeAll(async () => {
    search = await startSearchServer({
      apiKey: API_KEY,
      results: {
        'hangar agents': [
          { title: 'Hangar', url: 'https://hangar.example/', description: 'A platform for agents', age: '2 days ago' },
          { title: 'Hangar docs', url: 'https://hangar.example/docs', description: 'Documentation' },
        ],
      },
    });
  });

  afterAll(async () => {
    await search?.close();
  });

  it('answers the scripted results in Brave shape', async () => {
    const r = await get('q=hangar+agents');
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ type: 'search', query: { original: 'hangar agents' }, web: { type: 'search' } });
    expect(r.json.web.results).toHaveLength(2);
    expect(r.json.web.results[0]).toMatchObject({
      type: 'search_result',
      title: 'Hangar',
      url: 'https://hangar.example/',
      description: 'A platform for agents',
      age: '2 days ago',
    });
    expect(r.json.web.results[1]).not.toHaveProperty('age');
    expect(search.requests.at(-1)).toMatchObject({ method: 'GET', path: '/res/v1/web/search', query: { q: 'hangar agents' } });
    expect(search.requests.at(-1)?.headers['x-subscription-token']).toBe(API_KEY);
  });

  it('makes up the same results for the same unknown query and honours count', async () => {
    const a = await get('q=quantum+gardening');
    const b = await get('q=quantum+gardening');
    expect(a.json.web.results.length).toBeGreaterThanOrEqual(2);
    expect(a.json.web.results).toEqual(b.json.web.results);
    expect(a.json.web.results[0].title).toContain('quantum gardening');
    expect((await get('q=quantum+gardening&count=1')).json.web.results).toHaveLength(1);
    expect((await get('q=hangar+agents&count=1')).json.web.results.map((r: any) => r.title)).toEqual(['Hangar']);
  });

  it('answers 401 SUBSCRIPTION_TOKEN_INVALID for a wrong or missing token', async () => {
    for (const key of ['wrong', null]) {
      const r = await get('q=x', key);
      expect(r.status).toBe(401);
      expect(r.json).toMatchObject({
        type: 'ErrorResponse',
        error: {
          id: expect.any(String),
          status: 401,
          code: 'SUBSCRIPTION_TOKEN_INVALID',
          detail: 'The provided subscription token is invalid.',
          meta: expect.any(Object),
        },
      });
    }
  });

  it('answers 422 VALIDATION without q and for a count outside 1..20', async () => {
    for (const q of ['count=3', 'q=x&count=0', 'q=x&count=21', 'q=x&count=abc']) {
      const r = await get(q);
      expect(r.status).toBe(422);
      expect(r.json).toMatchObject({ type: 'ErrorResponse', error: { status: 422, code: 'VALIDATION', meta: { errors: [expect.any(Object)] } } });
    }
    expect((await get('q=x&count=20')).status).toBe(200);
  });
});
