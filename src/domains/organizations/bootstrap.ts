import { systemCtx, type Ctx, type Deps } from '../../platform/context.js';
import { ROLE_SCOPES } from '../../platform/scopes.js';
import { createApiKey, createUser } from '../identity/index.js';
import { createOrganization } from './service.js';
import type { Organization } from './schemas.js';

export interface BootstrappedOrganization {
  user: { id: string; email: string | null; name: string | null };
  org: Organization;
  /** An API key of the admin with every scope (`*`); `key.key` is the secret, shown this once. */
  key: Awaited<ReturnType<typeof createApiKey>>;
  /** The admin's context, for calling verbs as that admin. */
  adminCtx: Ctx;
}

/**
 * A new user who creates a new organization, as its admin, and an all-scopes API key: what `hangar init`
 * does on an empty database, and how the test harness and the benches get a caller. One transaction: a
 * failure leaves no user without an organization.
 */
export async function bootstrapOrganization(
  deps: Deps,
  input: { email?: string | null; name?: string | null; orgName: string; keyName: string },
): Promise<BootstrappedOrganization> {
  // No caller exists yet to carry the transaction in a context: the user is made inside it.
  return deps.db.kysely.transaction().execute(async (trx) => {
    const user = await createUser(deps, { email: input.email ?? null, name: input.name ?? null }, trx);
    const creator = systemCtx(deps, { userId: user.id, orgId: null, role: null, scopes: new Set(['org:create'] as const), apiKeyId: null });
    const org = await createOrganization({ ...creator, trx }, { name: input.orgName });
    const adminCtx = systemCtx(deps, { userId: user.id, orgId: org.id, role: 'admin', scopes: ROLE_SCOPES.admin, apiKeyId: null });
    const key = await createApiKey({ ...adminCtx, trx }, { name: input.keyName, scopes: ['*'], environment: 'live' });
    return { user: { id: user.id, email: user.email, name: user.name }, org, key, adminCtx };
  });
}
