import type { Selectable } from 'kysely';
import { z } from 'zod';
import type { SecretsTable } from '../../database.js';
import { exec, hasScope, orgId, requireScope, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { decrypt, deriveKey, encrypt } from '../../platform/crypto/index.js';
import { isUniqueViolation } from '../../platform/db/index.js';
import { errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';

export type SecretScope = 'user' | 'organization';
const ORG = 'org';

/**
 * A secret's name as stored: upper-case, anything but letters, digits and `_` turned into `_` (so a credential
 * field `apiKey` finds the secret `APIKEY`, as the spec's credential rules say).
 */
export function normalizeSecretName(name: string): string {
  return name
    .trim()
    .toUpperCase()
    .replace(/[^A-Z0-9_]/g, '_');
}

export const SecretName = z
  .string()
  .min(1)
  .max(128)
  .transform(normalizeSecretName)
  .refine((n) => /^[A-Z][A-Z0-9_]*$/.test(n), 'must start with a letter (names are upper-cased; other characters become "_")');

export const Secret = z
  .object({
    name: z.string(),
    scope: z.enum(['user', 'organization']),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'Secret' });
export type Secret = z.infer<typeof Secret>;

const keyOf = (deps: Deps) => deriveKey(deps.config.secretKey, 'secrets');
const aad = (org: string, owner: string, name: string) => `${org}:${owner}:${name}`;

function toSecret(row: Selectable<SecretsTable>): Secret {
  return { name: row.name, scope: row.owner === ORG ? 'organization' : 'user', createdAt: row.created_at, updatedAt: row.updated_at };
}

function ownerFor(ctx: Ctx, scope: SecretScope): string {
  if (scope === 'user') return ctx.principal.userId;
  if (!hasScope(ctx, 'credentials:admin')) throw errors.forbidden('organization secrets are managed by credential admins (credentials:admin)');
  return ORG;
}

/** Records a secret's change by name and scope (never its value), in the change's transaction. */
function secretActivity(ctx: Ctx, row: Pick<Selectable<SecretsTable>, 'id' | 'name' | 'owner'>, action: 'created' | 'updated' | 'deleted') {
  const scope: SecretScope = row.owner === ORG ? 'organization' : 'user';
  return recordActivity(ctx, {
    resourceType: 'secret',
    resourceId: row.id,
    eventType: `secret.${action}`,
    status: 'completed',
    title: `Secret ${row.name} ${action}`,
    metadata: { name: row.name, scope },
  });
}

/** Creates or replaces a secret; the value is encrypted (AES-256-GCM) and never returned. */
export async function putSecret(ctx: Ctx, input: { name: string; value: string; scope: SecretScope }): Promise<{ secret: Secret; created: boolean }> {
  requireScope(ctx, 'secrets:write');
  const org = orgId(ctx);
  const owner = ownerFor(ctx, input.scope);
  const sealed = encrypt(keyOf(ctx.deps), input.value, aad(org, owner, input.name));
  const replace = () =>
    withTx(ctx, async (tx) => {
      const now = nowIso();
      const existing = await exec(tx)
        .selectFrom('secrets')
        .selectAll()
        .where('org_id', '=', org)
        .where('owner', '=', owner)
        .where('name', '=', input.name)
        .executeTakeFirst();
      if (!existing) return null;
      await exec(tx).updateTable('secrets').set({ ciphertext: sealed, updated_at: now }).where('id', '=', existing.id).execute();
      await secretActivity(tx, existing, 'updated');
      return { secret: toSecret({ ...existing, updated_at: now }), created: false };
    });
  const replaced = await replace();
  if (replaced) return replaced;
  const now = nowIso();
  const row: Selectable<SecretsTable> = {
    id: prefixedId('sec'),
    org_id: org,
    owner,
    name: input.name,
    ciphertext: sealed,
    created_by_user_id: ctx.principal.userId,
    created_at: now,
    updated_at: now,
  };
  try {
    await withTx(ctx, async (tx) => {
      await exec(tx).insertInto('secrets').values(row).execute();
      await secretActivity(tx, row, 'created');
    });
  } catch (err) {
    // A concurrent put made it: replace it (outside a caller's transaction, which the failed insert has spoilt on PostgreSQL).
    if (isUniqueViolation(err) && !ctx.trx) {
      const again = await replace();
      if (again) return again;
    }
    throw err;
  }
  return { secret: toSecret(row), created: true };
}

/** The caller's own secrets and the organization's, by name (values never). */
export async function listSecrets(ctx: Ctx): Promise<Secret[]> {
  requireScope(ctx, 'secrets:read');
  const rows = await exec(ctx)
    .selectFrom('secrets')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('owner', 'in', [ctx.principal.userId, ORG])
    .orderBy('name')
    .orderBy('owner')
    .execute();
  return rows.map(toSecret);
}

export async function deleteSecret(ctx: Ctx, name: string, scope: SecretScope): Promise<void> {
  requireScope(ctx, 'secrets:write');
  const owner = ownerFor(ctx, scope);
  await withTx(ctx, async (tx) => {
    const row = await exec(tx)
      .deleteFrom('secrets')
      .where('org_id', '=', orgId(tx))
      .where('owner', '=', owner)
      .where('name', '=', name)
      .returning(['id', 'name', 'owner'])
      .executeTakeFirst();
    if (!row) throw errors.notFound(`${scope} secret`, name);
    await secretActivity(tx, row, 'deleted');
  });
}

/**
 * A secret's value for server-side use only (model keys, tool credentials): the user's own secret first, then
 * the organization's. Never hand the result to a client.
 */
export async function resolveSecret(
  deps: Deps,
  org: string,
  userId: string | null,
  name: string,
  opts: { userOnly?: boolean } = {},
): Promise<string | null> {
  const normalized = normalizeSecretName(name);
  // userOnly: a product end user's lookup, which must never reach the organization's secrets.
  if (opts.userOnly && !userId) return null;
  const owners = userId ? (opts.userOnly ? [userId] : [userId, ORG]) : [ORG];
  const rows = await deps.db.kysely
    .selectFrom('secrets')
    .selectAll()
    .where('org_id', '=', org)
    .where('owner', 'in', owners)
    .where('name', '=', normalized)
    .execute();
  const row = rows.find((r) => r.owner !== ORG) ?? rows[0];
  return row ? decrypt(keyOf(deps), row.ciphertext, aad(row.org_id, row.owner, row.name)) : null;
}

/** Which of `names` exist for the caller (own or organization). */
export async function existingSecretNames(deps: Deps, org: string, userId: string, names: string[]): Promise<Set<string>> {
  if (!names.length) return new Set();
  const rows = await deps.db.kysely
    .selectFrom('secrets')
    .select('name')
    .where('org_id', '=', org)
    .where('owner', 'in', [userId, ORG])
    .where('name', 'in', names.map(normalizeSecretName))
    .execute();
  return new Set(rows.map((r) => r.name));
}
