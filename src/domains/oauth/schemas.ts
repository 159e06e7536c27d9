import { z } from 'zod';

export const ProviderSlug = z.string().regex(/^[a-z][a-z0-9-]{0,39}$/, 'a provider slug such as "github"');

export const OAuthProvider = z
  .object({
    slug: z.string(),
    name: z.string(),
    authModes: z.array(z.enum(['oauth2', 'device_code'])).describe('`oauth2`: authorization code in a browser; `device_code`: RFC 8628'),
    defaultScopes: z.array(z.string()),
    scopeSeparator: z.string(),
    pkce: z.boolean(),
    platformClient: z.boolean().describe('The platform has a client for this provider (configured by the operator)'),
    organizationConfig: z.boolean().describe('This organization has its own client config (it takes precedence)'),
    configRequired: z.boolean().describe('No client is available: an admin must add one with POST /v1/oauth/configs'),
    enabled: z.boolean().describe('A user of this organization can connect an account now'),
    docs: z.string().nullable(),
  })
  .meta({ id: 'OAuthProvider' });
export type OAuthProvider = z.infer<typeof OAuthProvider>;

export const OAuthConnection = z
  .object({
    id: z.string(),
    provider: z.string(),
    accountId: z.string(),
    email: z.string().nullable(),
    username: z.string().nullable(),
    displayName: z.string().nullable(),
    scopes: z.array(z.string()),
    status: z.enum(['active', 'expired', 'revoked', 'error']),
    isDefault: z.boolean(),
    clientSource: z.enum(['platform', 'organization']),
    expiresAt: z.string().nullable().describe('When the current access token expires (null: the provider gave no expiry)'),
    lastError: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
    lastRefreshedAt: z.string().nullable(),
  })
  .meta({ id: 'OAuthConnection' });
export type OAuthConnection = z.infer<typeof OAuthConnection>;

export const OAuthConfigView = z
  .object({
    provider: z.string(),
    clientId: z.string(),
    clientSecretHint: z.string().describe('The last four characters of the client secret; the secret itself is never returned'),
    scopes: z.array(z.string()).nullable().describe("Scopes asked for by default instead of the provider's; null: the provider's"),
    enabled: z.boolean(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'OAuthConfig' });
export type OAuthConfigView = z.infer<typeof OAuthConfigView>;

export const OAuthStart = z
  .object({
    authUrl: z.string().describe("Open it in the user's browser; the provider redirects back to /v1/oauth/callback"),
    flowId: z.string(),
    expiresAt: z.string().describe('The flow must be finished before this time'),
  })
  .meta({ id: 'OAuthStart' });

export const DeviceStart = z
  .object({
    attemptId: z.string().describe('Poll POST /v1/oauth/device/status/{provider} with it'),
    user_code: z.string(),
    verification_uri: z.string(),
    verification_uri_complete: z.string().nullable(),
    expires_in: z.number().int(),
    interval: z.number().int(),
  })
  .meta({ id: 'OAuthDeviceStart' });

export const DeviceStatus = z
  .object({
    status: z.enum(['pending', 'slow_down', 'completed', 'denied', 'expired', 'failed']),
    interval: z.number().int().describe('Seconds to wait before the next poll'),
    connection: OAuthConnection.nullable(),
    error: z.string().nullable(),
  })
  .meta({ id: 'OAuthDeviceStatus' });
export type DeviceStatus = z.infer<typeof DeviceStatus>;

export const ProviderStatus = z
  .object({
    provider: z.string(),
    connected: z.boolean().describe('The caller has at least one active connection'),
    connections: z.number().int(),
    defaultConnection: OAuthConnection.nullable(),
  })
  .meta({ id: 'OAuthProviderStatus' });

/** Scopes as a list or as one comma- or space-separated string. */
export const ScopeList = z
  .union([z.array(z.string().min(1).max(200)).max(100), z.string().max(4000)])
  .transform((v) => (Array.isArray(v) ? v : v.split(/[\s,]+/)).map((s) => s.trim()).filter(Boolean))
  .refine((v) => v.length <= 100, 'at most 100 scopes')
  .refine((v) => v.every((s) => s.length <= 200 && !/[\s"\\]/.test(s)), 'a scope holds no spaces, quotes or backslashes');
