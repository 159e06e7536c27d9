import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { ConfigError, type OAuthConfig } from '../../config.js';

/** A dotted path into a JSON object (`owner.user.id`). */
const JsonPath = z
  .string()
  .min(1)
  .max(200)
  .regex(/^[A-Za-z0-9_$-]+(\.[A-Za-z0-9_$-]+)*$/, 'a dotted path such as "owner.user.id"');
const HttpUrl = z
  .string()
  .url()
  .refine((u) => /^https?:\/\//.test(u), 'must be an http(s) URL');

/**
 * One provider's definition (ADR 0026). The built-in ones live in `providers.json` beside this file; an operator
 * adds or replaces them by slug with `HANGAR_OAUTH_PROVIDERS_FILE`, a file of the same shape.
 */
export const ProviderDefinition = z
  .object({
    slug: z.string().regex(/^[a-z][a-z0-9-]{0,39}$/, 'lower-case letters, digits and "-", starting with a letter'),
    name: z.string().min(1).max(100),
    docs: HttpUrl.optional(),
    /** `oauth2`: authorization code in the browser; `device_code`: RFC 8628, for a provider that offers it. */
    modes: z
      .array(z.enum(['oauth2', 'device_code']))
      .min(1)
      .default(['oauth2']),
    authorizationUrl: HttpUrl.optional(),
    tokenUrl: HttpUrl,
    deviceAuthorizationUrl: HttpUrl.optional(),
    /** RFC 7009 revocation; without it a disconnect only forgets the tokens. */
    revocationUrl: HttpUrl.optional(),
    userinfoUrl: HttpUrl.optional(),
    defaultScopes: z.array(z.string().min(1).max(200)).max(100).default([]),
    scopeSeparator: z.string().min(1).max(3).default(' '),
    pkce: z.boolean().default(true),
    /** How the client authenticates at the token, device and revocation endpoints. */
    clientAuth: z.enum(['client_secret_post', 'client_secret_basic']).default('client_secret_post'),
    /** Token request body encoding: RFC 6749's form, or JSON for providers that want it. */
    tokenRequestFormat: z.enum(['form', 'json']).default('form'),
    /** Extra query parameters of the authorization URL (`access_type=offline`). */
    authorizationParams: z.record(z.string(), z.string()).default({}),
    /** Headers sent with every request to the provider (`Accept`, `User-Agent`, an API version). */
    requestHeaders: z.record(z.string(), z.string()).default({}),
    /** Where the account's identity is read: the userinfo response, or the token response itself. */
    account: z
      .object({
        source: z.enum(['userinfo', 'token']).default('userinfo'),
        id: JsonPath,
        email: JsonPath.optional(),
        username: JsonPath.optional(),
        displayName: JsonPath.optional(),
      })
      .strict(),
  })
  .strict()
  .superRefine((p, ctx) => {
    if (p.modes.includes('oauth2') && !p.authorizationUrl)
      ctx.addIssue({ code: 'custom', path: ['authorizationUrl'], message: 'required when modes include "oauth2"' });
    if (p.modes.includes('device_code') && !p.deviceAuthorizationUrl)
      ctx.addIssue({ code: 'custom', path: ['deviceAuthorizationUrl'], message: 'required when modes include "device_code"' });
    if (p.account.source === 'userinfo' && !p.userinfoUrl)
      ctx.addIssue({ code: 'custom', path: ['userinfoUrl'], message: 'required when account.source is "userinfo"' });
  });
export type ProviderDefinition = z.infer<typeof ProviderDefinition>;

export const ProvidersFile = z.object({ providers: z.array(ProviderDefinition).max(500) }).strict();

function parseFile(text: string, origin: string, setting: string): ProviderDefinition[] {
  let parsed: z.infer<typeof ProvidersFile>;
  try {
    parsed = ProvidersFile.parse(JSON.parse(text));
  } catch (err) {
    const detail = err instanceof z.ZodError ? err.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ') : (err as Error).message;
    throw new ConfigError(setting, `${origin} is not a valid OAuth providers file: ${detail}`);
  }
  const seen = new Set<string>();
  for (const p of parsed.providers) {
    if (seen.has(p.slug)) throw new ConfigError(setting, `${origin} lists provider "${p.slug}" twice`);
    seen.add(p.slug);
  }
  return parsed.providers;
}

/** The key of a provider's platform client in the configuration (`google-mail` → `google_mail`). */
export const clientKey = (slug: string): string => slug.replace(/-/g, '_');

/**
 * The catalogue: the built-in definitions, then the operator's file (a slug it repeats replaces the built-in one).
 * A platform client configured for a slug nobody defines stops start-up: it is surely a typo.
 */
export function loadProviders(config: OAuthConfig): ReadonlyMap<string, ProviderDefinition> {
  const builtIn = parseFile(readFileSync(new URL('./providers.json', import.meta.url), 'utf8'), 'the built-in providers.json', 'providers.json');
  const out = new Map(builtIn.map((p) => [p.slug, p]));
  if (config.providersFile) {
    let text: string;
    try {
      text = readFileSync(config.providersFile, 'utf8');
    } catch (err) {
      throw new ConfigError('HANGAR_OAUTH_PROVIDERS_FILE', `${config.providersFile} cannot be read (${(err as NodeJS.ErrnoException).code ?? err})`);
    }
    for (const p of parseFile(text, config.providersFile, 'HANGAR_OAUTH_PROVIDERS_FILE')) out.set(p.slug, p);
  }
  const keys = new Set([...out.keys()].map(clientKey));
  for (const key of Object.keys(config.clients)) {
    if (!keys.has(key))
      throw new ConfigError(`HANGAR_OAUTH_${key.toUpperCase()}_CLIENT_ID`, `no OAuth provider "${key.replace(/_/g, '-')}" is defined`);
  }
  return out;
}

/** Reads a dotted path out of a provider's JSON answer; numbers become strings (account ids often are numbers). */
export function readPath(body: unknown, path: string | undefined): string | null {
  if (!path) return null;
  let cur: unknown = body;
  for (const part of path.split('.')) {
    if (cur === null || typeof cur !== 'object' || Array.isArray(cur)) return null;
    cur = (cur as Record<string, unknown>)[part];
  }
  if (typeof cur === 'string') return cur.length ? cur.slice(0, 320) : null;
  if (typeof cur === 'number' && Number.isFinite(cur)) return String(cur);
  return null;
}
