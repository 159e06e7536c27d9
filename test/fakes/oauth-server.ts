import { randomBytes } from 'node:crypto';
import { createServer, IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair } from 'jose';
import Provider, { type KoaContext } from 'oidc-provider';

/**
 * A real OAuth 2.0 / OpenID Connect authorization server on loopback (oidc-provider 8), so the product's OAuth client
 * code runs against the real wire format: authorization code (+PKCE), refresh, revocation (RFC 7009), userinfo and the
 * device authorization grant (RFC 8628) with the provider's own verification pages.
 *
 * One confidential client per behaviour; the behaviour is chosen by client_id. A thin node:http front in front of the
 * provider counts requests, delays the token endpoint, answers the first device polls of `slow-down` with slow_down and
 * serves minimal login/consent pages; a Koa post-middleware reshapes token responses (`no-expiry`, `form-response`).
 *
 * Refresh tokens: issued on every code/device exchange (whether or not `offline_access` was asked for). They never expire
 * with the browser session. Only `rotating` rotates them; reusing a rotated-away refresh token answers invalid_grant and,
 * as oidc-provider does (reuse detection), revokes the whole grant.
 *
 * Set FAKE_OAUTH_DEBUG=1 to see the provider's errors on stderr.
 */

export type Behaviour = 'standard' | 'rotating' | 'no-expiry' | 'slow-down' | 'form-response';
export interface FakeAccount {
  id: string;
  email: string;
  username: string;
  name: string;
}

const BEHAVIOURS: Behaviour[] = ['standard', 'rotating', 'no-expiry', 'slow-down', 'form-response'];
const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';
const debug = process.env.FAKE_OAUTH_DEBUG === '1';

type Stored = { payload: Record<string, any> };

export class FakeOAuthServer {
  issuer = '';
  counts: { token: Record<string, number>; revocation: number; userinfo: number } = { token: {}, revocation: 0, userinfo: 0 };
  tokenDelayMs = 0;

  private server!: Server;
  private provider!: Provider;
  private handle!: (req: IncomingMessage, res: ServerResponse) => void;
  private readonly accounts = new Map<string, FakeAccount>();
  private readonly clients = new Map<Behaviour, { clientId: string; clientSecret: string }>();
  private readonly store = new Map<string, Stored>(); // `${model}:${id}` -> payload; one store per server instance
  private readonly slowDownPolls = new Map<string, number>(); // device_code -> polls seen
  private readonly behaviourOfReq = new WeakMap<IncomingMessage, Behaviour>();

  constructor(
    private readonly opts: {
      redirectUris: string[];
      accessTokenTtlSeconds?: number;
      /** Lifetime of device codes (default 600 s); a short one lets a test see `expired_token`. */
      deviceCodeTtlSeconds?: number;
    },
  ) {
    for (const b of BEHAVIOURS) this.clients.set(b, { clientId: `fake-${b}`, clientSecret: `secret-${b}-${randomBytes(12).toString('hex')}` });
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      this.route(req, res).catch((err) => {
        if (debug) console.error('[fake-oauth] front error', err);
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
        res.end(String(err));
      });
    });
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.issuer = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    this.provider = new Provider(this.issuer, await this.configuration());
    this.provider.use(async (ctx, next) => {
      await next();
      this.reshapeTokenResponse(ctx);
    });
    if (debug) {
      const events =
        'server_error authorization.error grant.error revocation.error userinfo.error code_verification.error device_authorization.error device_resume.error';
      for (const event of events.split(' ')) {
        this.provider.on(event, (ctx, err: Error & { error_description?: string }) =>
          console.error(`[fake-oauth] ${event} on ${ctx.path}:`, event === 'server_error' ? err : `${err.message} (${err.error_description ?? ''})`),
        );
      }
    }
    this.handle = this.provider.callback();
    return this;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  addAccount(a: FakeAccount): void {
    this.accounts.set(a.id, a);
  }

  client(b: Behaviour): { clientId: string; clientSecret: string } {
    return { ...this.clients.get(b)! };
  }

  /** The same endpoints for every behaviour (the behaviour is decided by client_id). */
  urls(_b: Behaviour): { authorization: string; token: string; revocation: string; userinfo: string; deviceAuthorization: string } {
    const i = this.issuer;
    return {
      authorization: `${i}/auth`,
      token: `${i}/token`,
      revocation: `${i}/token/revocation`,
      userinfo: `${i}/me`,
      deviceAuthorization: `${i}/device/auth`,
    };
  }

  async authorize(authUrl: string, accountId: string, opts: { deny?: boolean } = {}): Promise<string> {
    this.requireAccount(accountId);
    const end = await this.browse(authUrl, (form) => {
      if (form.fields.prompt === 'login') return { ...form.fields, login: accountId };
      if (form.fields.prompt === 'consent') return { ...form.fields, decision: opts.deny ? 'deny' : 'allow' };
      return null;
    });
    if (!end.exitUrl) throw new Error(`authorize: the flow ended inside the issuer (HTTP ${end.status}): ${end.html.slice(0, 500)}`);
    return end.exitUrl;
  }

  async approveDevice(userCode: string, accountId: string, opts: { deny?: boolean } = {}): Promise<void> {
    this.requireAccount(accountId);
    let codeSent = false;
    const end = await this.browse(`${this.issuer}/device`, (form) => {
      if (form.id === 'op.deviceInputForm') {
        if (codeSent) return null; // re-rendered input page: an error (or the abort confirmation)
        codeSent = true;
        return { ...form.fields, user_code: userCode };
      }
      if (form.id === 'op.deviceConfirmForm')
        return opts.deny ? { xsrf: form.fields.xsrf, user_code: form.fields.user_code, abort: 'yes' } : form.fields;
      if (form.fields.prompt === 'login') return { ...form.fields, login: accountId };
      if (form.fields.prompt === 'consent') return { ...form.fields, decision: 'allow' };
      return null;
    });
    const error = /data-error="([^"]*)"/.exec(end.html)?.[1];
    if (opts.deny ? error === 'AbortedError' : end.html.includes('data-result="success"')) return;
    throw new Error(`approveDevice: unexpected end of the device flow (HTTP ${end.status}, ${error ?? 'no error'}): ${end.html.slice(0, 500)}`);
  }

  async revokeGrants(accountId: string): Promise<void> {
    const grantIds = [...this.store].filter(([k, v]) => k.startsWith('Grant:') && v.payload.accountId === accountId).map(([k]) => k.slice(6));
    for (const grantId of grantIds) {
      this.store.delete(`Grant:${grantId}`);
      for (const [k, v] of this.store) if (v.payload.grantId === grantId) this.store.delete(k);
    }
  }

  // --- the front server ---------------------------------------------------------------------------------------------

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', this.issuer).pathname;
    const interaction = /^\/interaction\/([^/]+)$/.exec(path);
    if (interaction) return this.interaction(req, res);
    if (path === '/token/revocation') this.counts.revocation++;
    if (path === '/me') this.counts.userinfo++;
    if (path !== '/token' || req.method !== 'POST') return this.handle(req, res);

    const body = await readBody(req);
    const params = new URLSearchParams(body.toString());
    const grantType = params.get('grant_type') ?? '(none)';
    this.counts.token[grantType] = (this.counts.token[grantType] ?? 0) + 1;
    const behaviour = this.behaviourOf(params.get('client_id') ?? basicClientId(req.headers.authorization));
    if (this.tokenDelayMs > 0) await new Promise((r) => setTimeout(r, this.tokenDelayMs));

    const deviceCode = params.get('device_code');
    if (behaviour === 'slow-down' && grantType === DEVICE_GRANT && deviceCode) {
      const polls = (this.slowDownPolls.get(deviceCode) ?? 0) + 1;
      this.slowDownPolls.set(deviceCode, polls);
      if (polls <= 2) {
        res.writeHead(400, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' });
        res.end(JSON.stringify({ error: 'slow_down', error_description: 'you are polling too quickly and should back off at a reasonable rate' }));
        return;
      }
    }
    const replayed = replay(req, body);
    if (behaviour) this.behaviourOfReq.set(replayed, behaviour);
    this.handle(replayed, res);
  }

  /** Koa post-middleware: strips expires_in (`no-expiry`) or form-encodes the answer (`form-response`) of the token endpoint. */
  private reshapeTokenResponse(ctx: KoaContext): void {
    if (ctx.oidc?.route !== 'token' || !ctx.body || typeof ctx.body !== 'object') return;
    const behaviour = this.behaviourOf(ctx.oidc.client?.clientId) ?? this.behaviourOfReq.get(ctx.req);
    const body = ctx.body as Record<string, unknown>;
    if (behaviour === 'no-expiry') delete body.expires_in;
    if (behaviour === 'form-response') {
      const form = new URLSearchParams();
      for (const [k, v] of Object.entries(body)) if (v !== undefined) form.set(k, String(v));
      ctx.body = form.toString();
      ctx.type = 'application/x-www-form-urlencoded';
    }
  }

  /** Minimal login and consent pages (instead of devInteractions), driven by `authorize` and `approveDevice`. */
  private async interaction(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const details = await this.provider.interactionDetails(req, res);
    const { prompt, params, session, grantId } = details;
    if (req.method === 'GET') {
      const fields =
        prompt.name === 'login'
          ? '<input type="hidden" name="prompt" value="login"/><input type="text" name="login" placeholder="account id"/>'
          : '<input type="hidden" name="prompt" value="consent"/><button name="decision" value="allow">Allow</button><button name="decision" value="deny">Deny</button>';
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
      res.end(`<!DOCTYPE html><html><body><h1>${esc(prompt.name)} for ${esc(params.client_id)}</h1>
<form id="interaction" method="post" action="/interaction/${esc(details.uid)}">${fields}</form></body></html>`);
      return;
    }
    const form = new URLSearchParams((await readBody(req)).toString());
    if (form.get('prompt') === 'login' && prompt.name === 'login') {
      const accountId = form.get('login') ?? '';
      if (!this.accounts.has(accountId)) {
        res.writeHead(400, { 'content-type': 'text/plain' });
        res.end(`unknown account ${accountId}`);
        return;
      }
      return this.provider.interactionFinished(req, res, { login: { accountId } }, { mergeWithLastSubmission: false });
    }
    if (form.get('prompt') === 'consent' && prompt.name === 'consent') {
      if (form.get('decision') === 'deny') {
        const result = { error: 'access_denied', error_description: 'End-User denied the authorization request' };
        return this.provider.interactionFinished(req, res, result, { mergeWithLastSubmission: false });
      }
      const grant = grantId
        ? await this.provider.Grant.find(grantId)
        : new this.provider.Grant({ accountId: session?.accountId ?? '', clientId: params.client_id });
      if (!grant) throw new Error(`grant ${grantId} not found`);
      const { missingOIDCScope, missingOIDCClaims, missingResourceScopes } = prompt.details;
      if (missingOIDCScope) grant.addOIDCScope(missingOIDCScope.join(' '));
      if (missingOIDCClaims) grant.addOIDCClaims(missingOIDCClaims);
      for (const [indicator, scopes] of Object.entries<string[]>(missingResourceScopes ?? {})) grant.addResourceScope(indicator, scopes.join(' '));
      return this.provider.interactionFinished(req, res, { consent: { grantId: await grant.save() } }, { mergeWithLastSubmission: true });
    }
    res.writeHead(400, { 'content-type': 'text/plain' });
    res.end(`unexpected submission for prompt ${prompt.name}`);
  }

  // --- the browser --------------------------------------------------------------------------------------------------

  /**
   * Follows redirects inside the issuer and submits each page's form as `fill` decides (null = stop on this page), with
   * its own cookie jar. Ends at a redirect leaving the issuer (exitUrl) or at a page `fill` stops on / without a form.
   */
  private async browse(
    startUrl: string,
    fill: (form: { id: string; fields: Record<string, string> }) => Record<string, string> | null,
  ): Promise<{ exitUrl?: string; status: number; html: string }> {
    const jar = new Map<string, string>(); // "path\0name" -> value
    let url = new URL(startUrl);
    let post: URLSearchParams | undefined;
    for (let step = 0; step < 30; step++) {
      if (url.origin !== this.issuer) throw new Error(`browse: refusing to leave the issuer for ${url.href}`);
      const cookie = [...jar]
        .filter(([k]) => url.pathname.startsWith(k.split('\0')[0]))
        .map(([k, v]) => `${k.split('\0')[1]}=${v}`)
        .join('; ');
      const res = await fetch(url, {
        method: post ? 'POST' : 'GET',
        body: post,
        redirect: 'manual',
        headers: { accept: 'text/html', ...(cookie ? { cookie } : {}) },
      });
      for (const c of res.headers.getSetCookie()) {
        const [pair, ...attrs] = c.split(';');
        const name = pair.slice(0, pair.indexOf('='));
        const value = pair.slice(pair.indexOf('=') + 1);
        const path =
          attrs
            .map((a) => a.trim())
            .find((a) => a.toLowerCase().startsWith('path='))
            ?.slice(5) || '/';
        const expired = attrs.some((a) => a.trim().toLowerCase().startsWith('expires=') && Date.parse(a.trim().slice(8)) < Date.now());
        if (value === '' || expired) jar.delete(`${path}\0${name}`);
        else jar.set(`${path}\0${name}`, value);
      }
      const location = res.headers.get('location');
      if (res.status >= 300 && res.status < 400 && location) {
        await res.arrayBuffer();
        const next = new URL(location, url);
        if (next.origin !== this.issuer) return { exitUrl: next.href, status: res.status, html: '' };
        url = next;
        post = undefined;
        continue;
      }
      const html = await res.text();
      const form = parseForm(html);
      const fields = form && fill(form);
      if (!form || !fields) return { status: res.status, html };
      url = new URL(form.action, url);
      post = new URLSearchParams(fields);
    }
    throw new Error('browse: too many steps');
  }

  // --- provider configuration ---------------------------------------------------------------------------------------

  private async configuration(): Promise<Record<string, unknown>> {
    const { privateKey } = await generateKeyPair('RS256', { extractable: true });
    const jwk = { ...(await exportJWK(privateKey)), kid: 'fake-oauth', alg: 'RS256', use: 'sig' };
    const accessTokenTtl = this.opts.accessTokenTtlSeconds ?? 3600;
    const deviceCodeTtl = this.opts.deviceCodeTtlSeconds ?? 600;
    const store = this.store;
    const rotating = this.clients.get('rotating')!.clientId;
    const sourcePage = (body: string) => `<!DOCTYPE html><html><body>${body}</body></html>`;

    class Adapter {
      constructor(private readonly model: string) {}
      async upsert(id: string, payload: Record<string, any>) {
        store.set(`${this.model}:${id}`, { payload: { ...payload } });
      }
      // Expired entries are kept: the models check `exp` themselves (an expired device code answers expired_token).
      async find(id: string) {
        const e = store.get(`${this.model}:${id}`);
        return e ? { ...e.payload } : undefined;
      }
      async findByUserCode(userCode: string) {
        return this.findBy((p) => p.userCode === userCode);
      }
      async findByUid(uid: string) {
        return this.findBy((p) => p.uid === uid);
      }
      async consume(id: string) {
        const e = store.get(`${this.model}:${id}`);
        if (e) e.payload.consumed = Math.floor(Date.now() / 1000);
      }
      async destroy(id: string) {
        store.delete(`${this.model}:${id}`);
      }
      async revokeByGrantId(grantId: string) {
        for (const [k, v] of store) if (k.startsWith(`${this.model}:`) && v.payload.grantId === grantId) store.delete(k);
      }
      private findBy(match: (p: Record<string, any>) => boolean) {
        for (const [k, v] of store) if (k.startsWith(`${this.model}:`) && match(v.payload)) return { ...v.payload };
        return undefined;
      }
    }

    return {
      adapter: Adapter,
      jwks: { keys: [jwk] },
      cookies: { keys: [randomBytes(32).toString('hex')] },
      clients: BEHAVIOURS.map((b) => ({
        client_id: this.clients.get(b)!.clientId,
        client_secret: this.clients.get(b)!.clientSecret,
        client_name: `Fake ${b} client`,
        redirect_uris: this.opts.redirectUris,
        grant_types: ['authorization_code', 'refresh_token', DEVICE_GRANT],
        response_types: ['code'],
        token_endpoint_auth_method: 'client_secret_post', // oidc-provider accepts client_secret_basic for it too
      })),
      scopes: ['openid', 'offline_access', 'email', 'profile'],
      claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name', 'preferred_username'] },
      findAccount: async (_ctx: unknown, sub: string) => {
        const a = this.accounts.get(sub);
        if (!a) return undefined;
        return {
          accountId: a.id,
          claims: async () => ({ sub: a.id, email: a.email, email_verified: true, preferred_username: a.username, name: a.name }),
        };
      },
      interactions: { url: async (_ctx: unknown, interaction: { uid: string }) => `/interaction/${interaction.uid}` },
      features: {
        devInteractions: { enabled: false },
        revocation: { enabled: true },
        userinfo: { enabled: true },
        deviceFlow: {
          enabled: true,
          userCodeInputSource: async (ctx: KoaContext, form: string, _out: unknown, err?: Error) => {
            ctx.body = sourcePage(`${err ? `<p data-error="${esc(err.name)}">${esc(err.message)}</p>` : ''}${form}`);
          },
          userCodeConfirmSource: async (ctx: KoaContext, form: string, _client: unknown, _info: unknown, userCode: string) => {
            ctx.body = sourcePage(`<p>Confirm code ${esc(userCode)}</p>${form}`);
          },
          successSource: async (ctx: KoaContext) => {
            ctx.body = sourcePage('<p data-result="success">Device signed in</p>');
          },
        },
      },
      pkce: { methods: ['S256'], required: (_ctx: unknown, client: { clientAuthMethod: string }) => client.clientAuthMethod === 'none' },
      issueRefreshToken: async (_ctx: unknown, client: { grantTypeAllowed(g: string): boolean }) => client.grantTypeAllowed('refresh_token'),
      expiresWithSession: async () => false,
      rotateRefreshToken: (ctx: { oidc: { client: { clientId: string } } }) => ctx.oidc.client.clientId === rotating,
      renderError: async (ctx: KoaContext, out: Record<string, string>) => {
        ctx.type = 'html';
        ctx.body = sourcePage(`<p data-error="${esc(out.error)}">${esc(out.error_description ?? '')}</p>`);
      },
      ttl: {
        AccessToken: accessTokenTtl,
        AuthorizationCode: 60,
        DeviceCode: deviceCodeTtl,
        IdToken: 3600,
        RefreshToken: 14 * 24 * 3600,
        Interaction: 3600,
        Session: 14 * 24 * 3600,
        Grant: 14 * 24 * 3600,
      },
    };
  }

  private behaviourOf(clientId: string | null | undefined): Behaviour | undefined {
    return BEHAVIOURS.find((b) => this.clients.get(b)!.clientId === clientId);
  }

  private requireAccount(accountId: string): void {
    if (!this.accounts.has(accountId)) throw new Error(`unknown account ${accountId}: addAccount() it first`);
  }
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

/** A fresh request carrying an already-read body, for the provider (which reads the body itself). */
function replay(req: IncomingMessage, body: Buffer): IncomingMessage {
  const copy = new IncomingMessage(req.socket);
  Object.assign(copy, { method: req.method, url: req.url, headers: req.headers, rawHeaders: req.rawHeaders, httpVersion: req.httpVersion });
  copy.complete = true; // else its destroy after the read would be taken for an abort, and close the shared socket
  copy.push(body);
  copy.push(null);
  return copy;
}

function basicClientId(authorization: string | undefined): string | undefined {
  const [scheme, value] = (authorization ?? '').split(' ');
  if (scheme?.toLowerCase() !== 'basic' || !value) return undefined;
  const decoded = Buffer.from(value, 'base64').toString('utf8');
  return decodeURIComponent(decoded.slice(0, decoded.indexOf(':')).replace(/\+/g, '%20'));
}

/** The first form of one of the fake's own pages (or oidc-provider's device forms): id, action and hidden fields. */
function parseForm(html: string): { id: string; action: string; fields: Record<string, string> } | null {
  const m = /<form([^>]*)>([\s\S]*?)<\/form>/.exec(html);
  if (!m) return null;
  const attr = (name: string) => new RegExp(`${name}="([^"]*)"`).exec(m[1])?.[1] ?? '';
  const fields: Record<string, string> = {};
  for (const input of m[2].matchAll(/<input[^>]*type="hidden"[^>]*>/g)) {
    const name = /name="([^"]*)"/.exec(input[0])?.[1];
    if (name) fields[name] = unesc(/value="([^"]*)"/.exec(input[0])?.[1] ?? '');
  }
  return { id: attr('id'), action: unesc(attr('action')), fields };
}

function esc(s: unknown): string {
  return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function unesc(s: string): string {
  return s
    .replace(/&quot;/g, '"')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&#39;/g, "'")
    .replace(/&amp;/g, '&');
}
