import { AppError } from '../../platform/http/errors.js';
import type { ProviderDefinition } from './providers.js';

/** The client a flow or a connection uses: the organization's own config, or the platform's. */
export interface OAuthClient {
  source: 'platform' | 'organization';
  clientId: string;
  clientSecret: string | null;
}

/** A provider's OAuth error answer (`invalid_grant`, `authorization_pending`, …). Its text never holds a token. */
export class ProviderOAuthError extends Error {
  constructor(
    readonly error: string,
    readonly description: string | null,
    readonly httpStatus: number,
  ) {
    super(description ? `${error}: ${description}` : error);
    this.name = 'ProviderOAuthError';
  }
}

const MAX_BODY = 256 * 1024;

/** The tokens of a token response, read the same way whatever the provider sent (JSON or a form, numbers as text). */
export interface TokenSet {
  accessToken: string;
  refreshToken: string | null;
  tokenType: string;
  /** null: the provider sent no `expires_in`; the token is used until the provider refuses it (ADR 0026). */
  expiresAt: string | null;
  /** The scopes granted, when the provider says (RFC 6749 §5.1: absent means "as requested"). */
  scopes: string[] | null;
  /** The whole response, for reading the account from it (`account.source: token`); never stored or logged. */
  raw: Record<string, unknown>;
}

export interface ProviderHttp {
  timeoutMs: number;
}

function clean(text: string, max = 300): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: strips control characters a provider may send
  return text.replace(/[\u0000-\u001f\u007f]/g, ' ').slice(0, max);
}

async function readBody(res: Response): Promise<string> {
  const declared = Number(res.headers.get('content-length') ?? '0');
  if (declared > MAX_BODY) {
    await res.body?.cancel();
    throw new AppError('provider_error', `the provider's answer is larger than ${MAX_BODY} bytes`);
  }
  const reader = res.body?.getReader();
  if (!reader) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > MAX_BODY) {
      await reader.cancel();
      throw new AppError('provider_error', `the provider's answer is larger than ${MAX_BODY} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Parses a provider's answer: JSON, or `application/x-www-form-urlencoded` (one well-known code host's default). */
function parseBody(text: string, contentType: string | null): Record<string, unknown> | null {
  if (contentType?.includes('application/x-www-form-urlencoded')) return Object.fromEntries(new URLSearchParams(text));
  try {
    const v = JSON.parse(text) as unknown;
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    if (/^[\w.~%+-]+=[^&]*(&[\w.~%+-]+=[^&]*)*$/.test(text.trim())) return Object.fromEntries(new URLSearchParams(text.trim()));
    return null;
  }
}

async function call(
  http: ProviderHttp,
  def: ProviderDefinition,
  url: string,
  init: { method: string; headers?: Record<string, string>; body?: string },
): Promise<{ status: number; body: Record<string, unknown> | null }> {
  let res: Response;
  try {
    res = await fetch(url, {
      method: init.method,
      headers: { accept: 'application/json', ...def.requestHeaders, ...init.headers },
      body: init.body,
      redirect: 'error',
      signal: AbortSignal.timeout(http.timeoutMs),
    });
  } catch (err) {
    const e = err as Error;
    if (e.name === 'TimeoutError') throw new AppError('provider_timeout', `${def.name} did not answer within ${http.timeoutMs} ms`);
    throw new AppError('provider_error', `${def.name} could not be reached (${clean((e.cause as Error | undefined)?.message ?? e.message, 120)})`);
  }
  const text = await readBody(res);
  return { status: res.status, body: parseBody(text, res.headers.get('content-type')) };
}

/** Throws the provider's OAuth error when the answer is one: a 4xx/5xx, or a 200 carrying `error` (some providers do). */
function expectOk(def: ProviderDefinition, r: { status: number; body: Record<string, unknown> | null }): Record<string, unknown> {
  const body = r.body;
  const error = typeof body?.error === 'string' ? body.error : body?.ok === false ? 'provider_error' : null;
  if (error || r.status >= 400 || !body) {
    const description = typeof body?.error_description === 'string' ? clean(body.error_description) : null;
    throw new ProviderOAuthError(
      clean(error ?? `http_${r.status}`, 80),
      description ?? (body ? null : `${def.name} answered ${r.status} without JSON`),
      r.status,
    );
  }
  return body;
}

/** Builds the request of a client-authenticated call to the token, device or revocation endpoint. */
function clientRequest(def: ProviderDefinition, client: OAuthClient, params: Record<string, string>, format: 'form' | 'json') {
  const headers: Record<string, string> = {};
  const fields = { ...params };
  if (def.clientAuth === 'client_secret_basic' && client.clientSecret !== null) {
    const enc = (s: string) => encodeURIComponent(s);
    headers.authorization = `Basic ${Buffer.from(`${enc(client.clientId)}:${enc(client.clientSecret)}`).toString('base64')}`;
  } else {
    fields.client_id = client.clientId;
    if (client.clientSecret !== null) fields.client_secret = client.clientSecret;
  }
  if (format === 'json') {
    headers['content-type'] = 'application/json';
    return { method: 'POST', headers, body: JSON.stringify(fields) };
  }
  headers['content-type'] = 'application/x-www-form-urlencoded';
  return { method: 'POST', headers, body: new URLSearchParams(fields).toString() };
}

function tokenSet(def: ProviderDefinition, body: Record<string, unknown>, now: number): TokenSet {
  const accessToken = body.access_token;
  if (typeof accessToken !== 'string' || !accessToken)
    throw new ProviderOAuthError('invalid_token_response', `${def.name} sent no access_token`, 200);
  const expiresIn = Number(body.expires_in);
  const hasExpiry =
    body.expires_in !== undefined && body.expires_in !== null && body.expires_in !== '' && Number.isFinite(expiresIn) && expiresIn > 0;
  const scope = typeof body.scope === 'string' ? body.scope : null;
  return {
    accessToken,
    refreshToken: typeof body.refresh_token === 'string' && body.refresh_token ? body.refresh_token : null,
    tokenType: typeof body.token_type === 'string' && body.token_type ? body.token_type.slice(0, 40) : 'Bearer',
    expiresAt: hasExpiry ? new Date(now + expiresIn * 1000).toISOString() : null,
    scopes: scope === null ? null : scope.split(/[\s,]+/).filter(Boolean),
    raw: body,
  };
}

/** POSTs to the token endpoint (any grant) and reads the tokens. */
export async function requestTokens(
  http: ProviderHttp,
  def: ProviderDefinition,
  client: OAuthClient,
  params: Record<string, string>,
): Promise<TokenSet> {
  const r = await call(http, def, def.tokenUrl, clientRequest(def, client, params, def.tokenRequestFormat));
  return tokenSet(def, expectOk(def, r), Date.now());
}

export interface DeviceAuthorization {
  deviceCode: string;
  userCode: string;
  verificationUri: string;
  verificationUriComplete: string | null;
  expiresIn: number;
  interval: number;
}

/** RFC 8628 §3.1-3.2: asks the provider for a device code and a user code. */
export async function startDeviceAuthorization(
  http: ProviderHttp,
  def: ProviderDefinition,
  client: OAuthClient,
  scopes: string[],
): Promise<DeviceAuthorization> {
  const params: Record<string, string> = scopes.length ? { scope: scopes.join(def.scopeSeparator) } : {};
  const body = expectOk(def, await call(http, def, def.deviceAuthorizationUrl!, clientRequest(def, client, params, 'form')));
  const str = (v: unknown) => (typeof v === 'string' && v ? v : null);
  const deviceCode = str(body.device_code);
  const userCode = str(body.user_code);
  // One large provider spells it verification_url.
  const verificationUri = str(body.verification_uri) ?? str(body.verification_url);
  if (!deviceCode || !userCode || !verificationUri || !/^https?:\/\//.test(verificationUri))
    throw new ProviderOAuthError('invalid_device_response', `${def.name} sent an incomplete device authorization`, 200);
  const complete = str(body.verification_uri_complete);
  const expiresIn = Number(body.expires_in);
  const interval = Number(body.interval);
  return {
    deviceCode,
    userCode: userCode.slice(0, 64),
    verificationUri: verificationUri.slice(0, 2000),
    verificationUriComplete: complete && /^https?:\/\//.test(complete) ? complete.slice(0, 2000) : null,
    expiresIn: Number.isFinite(expiresIn) && expiresIn > 0 ? Math.min(expiresIn, 3600) : 900,
    // RFC 8628 §3.2: 5 seconds when the provider names no interval.
    interval: Number.isFinite(interval) && interval > 0 ? Math.min(interval, 60) : 5,
  };
}

/** GETs the userinfo endpoint with the new access token. */
export async function fetchUserinfo(http: ProviderHttp, def: ProviderDefinition, token: TokenSet): Promise<Record<string, unknown>> {
  const r = await call(http, def, def.userinfoUrl!, { method: 'GET', headers: { authorization: `Bearer ${token.accessToken}` } });
  return expectOk(def, r);
}

/** RFC 7009: revokes a token at the provider. False when the provider has no revocation endpoint. */
export async function revokeToken(
  http: ProviderHttp,
  def: ProviderDefinition,
  client: OAuthClient,
  token: string,
  hint: 'access_token' | 'refresh_token',
): Promise<boolean> {
  if (!def.revocationUrl) return false;
  const r = await call(http, def, def.revocationUrl, clientRequest(def, client, { token, token_type_hint: hint }, 'form'));
  // RFC 7009 §2.2: 200 whether or not the token was valid; an error body is a refusal.
  if (r.status >= 400) expectOk(def, r);
  return true;
}
