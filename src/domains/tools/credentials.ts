/**
 * The spec's credential chain: each step fills only the fields still missing, in this order (ADR 0027):
 * (1) the request's `credentials`; (2) `credentialOverrides` naming stored secrets; (3) the tool's stored
 * credentials, the caller's then the organization's; (4) the secret named after the field (`apiKey` -> `APIKEY`),
 * the caller's then the organization's; (5) the connected account of the tool's OAuth provider. What each step
 * supplied is reported by field name; values never leave the server except to the tool's own hosts.
 * A product channel's end user (`principal.endUser`, ADR 0030) gets only their own: steps 2-4 skip the organization's
 * credentials and secrets, and a missing connection in step 5 is `connect_required` naming the provider.
 */
import { hasScope, type Ctx } from '../../platform/context.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { getAccessToken } from '../oauth/index.js';
import { normalizeSecretName, resolveSecret } from '../secrets/index.js';
import type { CatalogEntry } from './definition.js';
import * as repo from './repo.js';
import type { CredentialStep } from './schemas.js';
import { credentialSlug, type FoundTool, credentialFields, openCredentials } from './service.js';

export interface ChainInput {
  credentials?: Record<string, string>;
  credentialOverrides?: Record<string, string>;
  oauth?: { account?: string };
}

export interface Resolved {
  values: Record<string, string>;
  sources: Record<string, CredentialStep>;
  /** Required fields no step supplied. */
  missing: string[];
  /** Why step 5 could not supply the OAuth field, and where to connect (`connect_required` for a product end user). */
  oauthProblem?: { provider: string; message: string; startUrl: string; code?: 'connect_required' };
  connection: { id: string; provider: string; accountId: string; email: string | null; username: string | null } | null;
}

/** A caller naming a field the tool does not take is a mistake worth a 400 (API) or an error result (model). */
function checkNames(fields: CatalogEntry['credentials'], given: Record<string, string> | undefined, what: string) {
  if (!given) return;
  const known = new Set(fields.map((f) => f.name));
  const unknown = Object.keys(given).filter((k) => !known.has(k));
  if (unknown.length)
    throw errors.invalid(
      `${what}: unknown credential field(s) ${unknown.join(', ')}; this tool takes ${[...known].join(', ') || 'none'}`,
      unknown.map((f) => ({ path: `${what}.${f}`, message: 'not a credential field of this tool' })),
    );
}

export async function resolveCredentials(ctx: Ctx, t: FoundTool, input: ChainInput): Promise<Resolved> {
  const fields = credentialFields(t);
  checkNames(fields, input.credentials, 'credentials');
  checkNames(fields, input.credentialOverrides, 'credentialOverrides');
  const values: Record<string, string> = {};
  const sources: Record<string, CredentialStep> = {};
  const org = ctx.principal.orgId!;
  const user = ctx.principal.userId;
  // A product end user never falls back to the organization's (or the builder's) credentials.
  const endUser = ctx.principal.endUser;
  const userOnly = { userOnly: Boolean(endUser) };
  const open = () => fields.filter((f) => !(f.name in values));
  const fill = (name: string, value: string | null | undefined, step: CredentialStep) => {
    if (value && !(name in values)) {
      values[name] = value;
      sources[name] = step;
    }
  };

  // (1) this request
  for (const f of open()) fill(f.name, input.credentials?.[f.name], 'request');
  // (2) overrides naming secrets (the caller's, else the organization's)
  for (const f of open()) {
    const secret = input.credentialOverrides?.[f.name];
    if (secret) fill(f.name, await resolveSecret(ctx.deps, org, user, normalizeSecretName(secret), userOnly), 'override');
  }
  // (3) stored credentials of the tool (the caller's first, then the organization's)
  if (open().length) {
    for (const row of await repo.credentialsFor(ctx, credentialSlug(t))) {
      if (endUser && row.user_id !== user) continue;
      const stored = openCredentials(ctx, row);
      for (const f of open()) fill(f.name, stored[f.name], 'stored');
    }
  }
  // (4) the secret named after the field
  for (const f of open()) fill(f.name, await resolveSecret(ctx.deps, org, user, normalizeSecretName(f.name), userOnly), 'secret');
  // (5) the connected OAuth account
  let oauthProblem: Resolved['oauthProblem'];
  let connection: Resolved['connection'] = null;
  const oauth = t.entry.oauth;
  if (oauth && !(oauth.field in values)) {
    const startUrl = `${ctx.deps.config.urls.auth.replace(/\/+$/, '')}/v1/oauth/start/${oauth.provider}`;
    if (!hasScope(ctx, 'connections:use')) {
      oauthProblem = {
        provider: oauth.provider,
        startUrl,
        message: 'this credential lacks the "connections:use" scope, so connected accounts cannot be used',
      };
    } else {
      try {
        const token = await getAccessToken(ctx, { provider: oauth.provider, account: input.oauth?.account });
        fill(oauth.field, token.accessToken, 'oauth');
        connection = { id: token.connectionId, provider: token.provider, accountId: token.accountId, email: token.email, username: token.username };
      } catch (err) {
        if (!(err instanceof AppError)) throw err;
        oauthProblem = endUser
          ? {
              provider: oauth.provider,
              startUrl,
              code: 'connect_required',
              message: `connect your ${oauth.provider} account in ${endUser.appSlug} first (product channels use only your own connected accounts): ${err.message}`,
            }
          : { provider: oauth.provider, startUrl, message: err.message };
      }
    }
  }
  const missing = fields.filter((f) => f.required && !(f.name in values)).map((f) => f.name);
  return { values, sources, missing, oauthProblem: missing.length ? oauthProblem : undefined, connection };
}
