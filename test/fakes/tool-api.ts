import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * Loopback fakes of the third-party APIs Hangar's catalogue tools call, on one node:http server, speaking each API's
 * real wire format (paths, auth placement, status codes and error bodies), so tool tests run the product's real HTTP
 * client end to end:
 *
 * - OpenWeatherMap current weather: `GET /data/2.5/weather?q=&appid=&units=`
 * - GitHub issues: `GET|POST /repos/:owner/:repo/issues`
 * - Slack: `POST /api/chat.postMessage`
 * - Resend: `POST /emails`
 * - test helpers: `/probe/...` (echo), `/redirect`, `/big`, `/slow`
 *
 * Credentials: a key or token is valid anywhere if it is in `apiKeys` or `bearerTokens`. For the Bearer-authenticated
 * APIs (GitHub, Slack, Resend) a token is also valid when `userinfoUrl` answers 200 to it, which is how tests check
 * access tokens issued by the loopback OAuth server (test/fakes/oauth-server.ts); it is asked on every request, so a
 * revoked token stops working at once.
 *
 * Every request is recorded (also the refused ones), before authentication. Request bodies over 1 MiB answer 413.
 */

export interface ToolApiOptions {
  /** Keys valid as the OpenWeatherMap `appid` (and, like `bearerTokens`, as any Bearer token). */
  apiKeys?: string[];
  /** Tokens valid as `Authorization: Bearer <t>` (GitHub also takes `token <t>`), and as an `appid`. */
  bearerTokens?: string[];
  /** An OpenID userinfo endpoint: a Bearer token is also valid when GET on it with that token answers 200. */
  userinfoUrl?: string;
}

export interface ToolApiRequest {
  method: string;
  path: string;
  query: Record<string, string>;
  headers: http.IncomingHttpHeaders;
  /** JSON bodies parsed, form bodies as an object, other bodies as text; null when empty or over the 1 MiB cap. */
  body: any;
}

export interface ToolApi {
  /** Base URL, no trailing slash (e.g. `http://127.0.0.1:1234`); the APIs' paths go after it. */
  url: string;
  requests: ToolApiRequest[];
  close(): Promise<void>;
}

export const TOOL_API_MAX_BODY_BYTES = 1024 * 1024;
const USERINFO_TIMEOUT_MS = 5000;
const JSON_TYPE = 'application/json; charset=utf-8';

interface Issue {
  id: number;
  node_id: string;
  number: number;
  title: string;
  body: string | null;
  state: 'open' | 'closed';
  html_url: string;
  url: string;
  user: { login: string };
  labels: { name: string }[];
  comments: number;
  created_at: string;
  updated_at: string;
}

type Caller = { ok: true; login: string } | { ok: false; missing: boolean };

export async function startToolApi(opts: ToolApiOptions = {}): Promise<ToolApi> {
  const requests: ToolApiRequest[] = [];
  const staticCredentials = new Set([...(opts.apiKeys ?? []), ...(opts.bearerTokens ?? [])]);
  const issuesByRepo = new Map<string, Issue[]>();
  let slackSeq = 0;
  let url = '';

  /** The caller behind an Authorization header: a static credential, or a token the userinfo endpoint accepts. */
  async function caller(authorization: string | undefined, schemes: string[]): Promise<Caller> {
    const m = /^(\S+)\s+(\S+)\s*$/.exec(authorization ?? '');
    if (!m || !schemes.includes(m[1].toLowerCase())) return { ok: false, missing: !authorization };
    return token(m[2]);
  }

  async function token(t: string): Promise<Caller> {
    if (staticCredentials.has(t)) return { ok: true, login: 'hangar-test-user' };
    if (!opts.userinfoUrl) return { ok: false, missing: false };
    try {
      const res = await fetch(opts.userinfoUrl, {
        headers: { authorization: `Bearer ${t}`, accept: 'application/json' },
        signal: AbortSignal.timeout(USERINFO_TIMEOUT_MS),
      });
      const text = await res.text();
      if (res.status !== 200) return { ok: false, missing: false };
      let claims: Record<string, unknown> = {};
      try {
        claims = JSON.parse(text);
      } catch {
        // a 200 without JSON still vouches for the token
      }
      const login = [claims.login, claims.preferred_username, claims.sub].find((v) => typeof v === 'string' && v);
      return { ok: true, login: (login as string | undefined) ?? 'hangar-test-user' };
    } catch {
      return { ok: false, missing: false };
    }
  }

  function repoIssues(owner: string, repo: string): Issue[] {
    const key = `${owner}/${repo}`.toLowerCase();
    let list = issuesByRepo.get(key);
    if (!list) {
      // Every repository starts with the same three issues, so list calls have something to show.
      list = [];
      const seeds: [string, string, 'open' | 'closed', string][] = [
        ['Crash on startup when the config file is missing', 'Steps: delete config.yml, run `app start`.', 'open', 'bug'],
        ['Add a dark mode', 'The settings page could offer a dark theme.', 'open', 'enhancement'],
        ['Typo in README', '"recieve" should be "receive".', 'closed', 'documentation'],
      ];
      for (const [title, body, state, label] of seeds)
        list.push(newIssue(owner, repo, list, { title, body, state, labels: [label], login: 'octocat' }));
      issuesByRepo.set(key, list);
    }
    return list;
  }

  function newIssue(
    owner: string,
    repo: string,
    list: Issue[],
    i: { title: string; body: string | null; state: 'open' | 'closed'; labels: string[]; login: string },
  ): Issue {
    const number = list.length + 1;
    const at = new Date(Date.UTC(2024, 0, 1) + number * 3600_000).toISOString().replace('.000Z', 'Z');
    const id = 1_000_000 + (hash(`${owner}/${repo}`.toLowerCase()) % 1_000_000) * 1000 + number;
    return {
      id,
      node_id: `I_kwDO${id.toString(36)}`,
      number,
      title: i.title,
      body: i.body,
      state: i.state,
      html_url: `https://github.com/${owner}/${repo}/issues/${number}`,
      url: `${url}/repos/${owner}/${repo}/issues/${number}`,
      user: { login: i.login },
      labels: i.labels.map((name) => ({ name })),
      comments: 0,
      created_at: at,
      updated_at: at,
    };
  }

  async function weather(q: Record<string, string>, res: http.ServerResponse) {
    if (!q.appid || !staticCredentials.has(q.appid))
      return send(res, 401, { cod: 401, message: 'Invalid API key. Please see https://openweathermap.org/faq#error401 for more info.' });
    const place = (q.q ?? '').trim();
    if (!place) return send(res, 400, { cod: '400', message: 'Nothing to geocode' });
    const [cityPart, countryPart] = place.split(',').map((s) => s.trim());
    if (!cityPart || cityPart.toLowerCase() === 'atlantis') return send(res, 404, { cod: '404', message: 'city not found' });
    return send(res, 200, currentWeather(cityPart, countryPart, q.units));
  }

  async function github(req: http.IncomingMessage, res: http.ServerResponse, owner: string, repo: string, q: Record<string, string>, body: any) {
    const who = await caller(req.headers.authorization, ['bearer', 'token']);
    if (!who.ok)
      return send(res, 401, {
        message: who.missing ? 'Requires authentication' : 'Bad credentials',
        documentation_url: 'https://docs.github.com/rest',
        status: '401',
      });
    const list = repoIssues(owner, repo);
    if (req.method === 'GET') {
      const state = q.state ?? 'open';
      const perPage = Math.min(100, Math.max(1, Number.parseInt(q.per_page ?? '30', 10) || 30));
      const page = Math.max(1, Number.parseInt(q.page ?? '1', 10) || 1);
      const matching = list.filter((i) => state === 'all' || i.state === state).reverse(); // newest first, as GitHub sorts
      return send(res, 200, matching.slice((page - 1) * perPage, page * perPage));
    }
    if (body === undefined)
      return send(res, 400, {
        message: 'Problems parsing JSON',
        documentation_url: 'https://docs.github.com/rest/issues/issues#create-an-issue',
        status: '400',
      });
    const title = body?.title;
    if (typeof title !== 'string' && typeof title !== 'number') {
      return send(res, 422, {
        message: 'Validation Failed',
        errors: [{ resource: 'Issue', code: 'missing_field', field: 'title' }],
        documentation_url: 'https://docs.github.com/rest/issues/issues#create-an-issue',
        status: '422',
      });
    }
    const labels = Array.isArray(body.labels)
      ? body.labels.map((l: unknown) => (typeof l === 'string' ? l : String((l as { name?: unknown })?.name ?? ''))).filter(Boolean)
      : [];
    const issue = newIssue(owner, repo, list, {
      title: String(title),
      body: typeof body.body === 'string' ? body.body : null,
      state: 'open',
      labels,
      login: who.login,
    });
    list.push(issue);
    res.setHeader('location', issue.url);
    return send(res, 201, issue);
  }

  async function slack(req: http.IncomingMessage, res: http.ServerResponse, body: any) {
    // Slack answers HTTP 200 with ok:false for API errors. Form posts may carry the token as a `token` field.
    const fields: Record<string, unknown> = body && typeof body === 'object' ? body : {};
    const who = req.headers.authorization
      ? await caller(req.headers.authorization, ['bearer'])
      : typeof fields.token === 'string'
        ? await token(fields.token)
        : ({ ok: false, missing: true } as const);
    if (!who.ok) return send(res, 200, { ok: false, error: who.missing ? 'not_authed' : 'invalid_auth' });
    const channel = typeof fields.channel === 'string' ? fields.channel.trim() : '';
    if (!channel) return send(res, 200, { ok: false, error: 'channel_not_found' });
    const text = typeof fields.text === 'string' ? fields.text : '';
    if (!text && !fields.blocks && !fields.attachments) return send(res, 200, { ok: false, error: 'no_text' });
    slackSeq++;
    const ts = `${Math.floor(Date.now() / 1000)}.${String(slackSeq).padStart(6, '0')}`;
    return send(res, 200, {
      ok: true,
      channel: slackChannelId(channel),
      ts,
      message: { type: 'message', subtype: 'bot_message', text, ts, bot_id: 'B0HANGAR01', user: 'U0HANGAR01' },
    });
  }

  async function resend(req: http.IncomingMessage, res: http.ServerResponse, body: any) {
    // Shapes as in https://resend.com/docs/api-reference/errors: 401 without a key, 403 for a wrong one.
    const who = await caller(req.headers.authorization, ['bearer']);
    if (!who.ok) {
      return who.missing
        ? send(res, 401, { statusCode: 401, name: 'missing_api_key', message: 'Missing API key in the authorization header.' })
        : send(res, 403, { statusCode: 403, name: 'validation_error', message: 'API key is invalid' });
    }
    if (!body || typeof body !== 'object' || Array.isArray(body))
      return send(res, 422, { statusCode: 422, name: 'validation_error', message: 'Invalid JSON body.' });
    for (const field of ['from', 'to', 'subject'] as const) {
      const v = body[field];
      if (v === undefined || v === null || v === '' || (Array.isArray(v) && v.length === 0))
        return send(res, 422, { statusCode: 422, name: 'missing_required_field', message: `Missing \`${field}\` field.` });
    }
    if (!body.text && !body.html)
      return send(res, 422, { statusCode: 422, name: 'missing_required_field', message: 'Missing `html` or `text` field.' });
    return send(res, 200, { id: randomUUID() });
  }

  async function handle(req: http.IncomingMessage, res: http.ServerResponse) {
    const parsed = new URL(req.url ?? '/', 'http://loopback');
    const path = parsed.pathname;
    const query = Object.fromEntries(parsed.searchParams);
    const method = req.method ?? 'GET';
    const raw = await readBody(req, TOOL_API_MAX_BODY_BYTES);
    const body = raw === null ? null : parseBody(raw, req.headers['content-type']);
    requests.push({ method, path, query, headers: req.headers, body: body === undefined ? raw?.toString('utf8') : body });
    if (raw === null) return send(res, 413, { message: `Request body over ${TOOL_API_MAX_BODY_BYTES} bytes` });

    if (path.startsWith('/probe/') || path === '/probe')
      return send(res, 200, { method, path, query, headers: req.headers, body: body === undefined ? raw.toString('utf8') : body });

    if (path === '/data/2.5/weather') return method === 'GET' ? weather(query, res) : notAllowed(res);

    const issues = /^\/repos\/([^/]+)\/([^/]+)\/issues\/?$/.exec(path);
    if (issues) {
      if (method !== 'GET' && method !== 'POST') return notAllowed(res);
      // GitHub reads the body as JSON whatever its content type says.
      const json = body === undefined ? tryJson(raw.toString('utf8')) : body;
      return github(req, res, decodeURIComponent(issues[1]), decodeURIComponent(issues[2]), query, json);
    }

    if (path === '/api/chat.postMessage') return method === 'POST' ? slack(req, res, body) : notAllowed(res);
    if (path === '/emails') return method === 'POST' ? resend(req, res, body) : notAllowed(res);

    if (path === '/redirect' && method === 'GET') {
      const status = Number(query.status ?? 302);
      if (!query.to || ![301, 302, 303, 307, 308].includes(status)) return send(res, 400, { message: 'need ?to= and a redirect status' });
      res.writeHead(status, { location: query.to, 'content-type': 'text/plain' }).end(`Redirecting to ${query.to}`);
      return;
    }
    if (path === '/big' && method === 'GET') return big(res, Number(query.bytes ?? 0), query.chunked === '1');
    if (path === '/slow' && method === 'GET') {
      await sleepUnlessClosed(res, Number(query.ms ?? 0));
      if (!res.destroyed) send(res, 200, { ok: true });
      return;
    }
    send(res, 404, { message: 'Not Found' });
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(String(err));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  return {
    url,
    requests,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

// --- OpenWeatherMap -------------------------------------------------------------------------------------------------

const CONDITIONS = [
  { id: 800, main: 'Clear', description: 'clear sky', icon: '01d' },
  { id: 801, main: 'Clouds', description: 'few clouds', icon: '02d' },
  { id: 804, main: 'Clouds', description: 'overcast clouds', icon: '04d' },
  { id: 500, main: 'Rain', description: 'light rain', icon: '10d' },
  { id: 600, main: 'Snow', description: 'light snow', icon: '13d' },
  { id: 701, main: 'Mist', description: 'mist', icon: '50d' },
];

/** A current-weather body for a city, the same for the same city (case-insensitive), in the asked units. */
function currentWeather(city: string, country: string | undefined, units: string | undefined) {
  const h = hash(city.toLowerCase());
  const celsius = (h % 400) / 10 - 5; // -5.0 .. 34.9 °C
  const feelsC = celsius - ((h >>> 9) % 40) / 10;
  const windMs = ((h >>> 4) % 150) / 10;
  const toUnit = (c: number) => round2(units === 'metric' ? c : units === 'imperial' ? (c * 9) / 5 + 32 : c + 273.15);
  const name = city
    .split(/\s+/)
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1).toLowerCase())
    .join(' ');
  return {
    coord: { lon: round2((h % 36000) / 100 - 180), lat: round2(((h >>> 3) % 15000) / 100 - 75) },
    weather: [CONDITIONS[h % CONDITIONS.length]],
    base: 'stations',
    main: {
      temp: toUnit(celsius),
      feels_like: toUnit(feelsC),
      temp_min: toUnit(celsius - 1.5),
      temp_max: toUnit(celsius + 1.5),
      pressure: 990 + ((h >>> 8) % 40),
      humidity: 30 + ((h >>> 2) % 60),
    },
    visibility: 10000,
    wind: { speed: round2(units === 'imperial' ? windMs * 2.23694 : windMs), deg: (h >>> 12) % 360 },
    clouds: { all: (h >>> 5) % 101 },
    dt: 1_700_000_000 + (h % 86_400),
    sys: { country: (country ?? 'XX').toUpperCase(), sunrise: 1_699_990_000, sunset: 1_700_030_000 },
    timezone: 0,
    id: h % 10_000_000,
    name,
    cod: 200,
  };
}

// --- helpers --------------------------------------------------------------------------------------------------------

/** The channel ID Slack answers with: an ID as given, a `#name` or `name` as a stable made-up ID. */
function slackChannelId(channel: string): string {
  if (/^[CGD][A-Z0-9]{6,}$/.test(channel)) return channel;
  return `C${hash(channel.replace(/^#/, '').toLowerCase()).toString(36).toUpperCase().padStart(8, '0')}`;
}

async function big(res: http.ServerResponse, bytes: number, chunked: boolean) {
  if (!Number.isSafeInteger(bytes) || bytes < 0) return send(res, 400, { message: 'bytes must be a non-negative integer' });
  res.writeHead(200, { 'content-type': 'text/plain', ...(chunked ? {} : { 'content-length': String(bytes) }) });
  const block = Buffer.alloc(64 * 1024, 'a');
  let left = bytes;
  // Honour backpressure and stop when the client hangs up (a size cap on the client side cuts the stream).
  while (left > 0 && !res.destroyed) {
    const part = left >= block.length ? block : block.subarray(0, left);
    left -= part.length;
    if (!res.write(part)) await drainOrClose(res);
  }
  if (!res.destroyed) res.end();
}

function drainOrClose(res: http.ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

function sleepUnlessClosed(res: http.ServerResponse, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      res.off('close', done);
      resolve();
    };
    const timer = setTimeout(done, Number.isFinite(ms) && ms > 0 ? ms : 0);
    res.on('close', done);
  });
}

/** Reads the whole body; null when over `limit` (the rest is still drained, so the 413 reaches the client). */
async function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size <= limit) chunks.push(c as Buffer);
  }
  return size > limit ? null : Buffer.concat(chunks);
}

/** JSON and form bodies parsed; undefined for an unparseable JSON body or a non-JSON, non-form one; null when empty. */
function parseBody(raw: Buffer, contentType: string | undefined): any {
  if (raw.length === 0) return null;
  const type = (contentType ?? '').split(';')[0].trim().toLowerCase();
  const text = raw.toString('utf8');
  if (type === 'application/x-www-form-urlencoded') return Object.fromEntries(new URLSearchParams(text));
  if (type === 'application/json' || type.endsWith('+json')) return tryJson(text);
  return undefined;
}

function tryJson(text: string): any {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': JSON_TYPE }).end(JSON.stringify(body));
}

function notAllowed(res: http.ServerResponse): void {
  send(res, 405, { message: 'Method Not Allowed' });
}

function round2(n: number): number {
  return Math.round(n * 100) / 100;
}

/** FNV-1a, 32 bits: stable made-up data per name. */
function hash(s: string): number {
  let h = 0x811c9dc5;
  for (const ch of Buffer.from(s, 'utf8')) {
    h ^= ch;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}
