import type { Kysely } from 'kysely';

// OAuth connections (issue 13, ADR 0026): organizations' own client configs, users' connected accounts and the
// flows in progress. Every token, client secret, PKCE verifier and device code is AES-256-GCM ciphertext.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('oauth_configs')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('provider', 'text', (c) => c.notNull())
    .addColumn('client_id', 'text', (c) => c.notNull())
    .addColumn('client_secret_ciphertext', 'text', (c) => c.notNull())
    .addColumn('secret_hint', 'text', (c) => c.notNull()) // the last four characters, for telling configs apart
    .addColumn('scopes', 'text') // JSON array; null: the provider's default scopes
    .addColumn('enabled', 'integer', (c) => c.notNull().defaultTo(1))
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('oauth_configs_org_provider', ['org_id', 'provider'])
    .execute();

  await db.schema
    .createTable('oauth_connections')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('provider', 'text', (c) => c.notNull())
    .addColumn('account_id', 'text', (c) => c.notNull())
    .addColumn('email', 'text')
    .addColumn('username', 'text')
    .addColumn('display_name', 'text')
    .addColumn('scopes', 'text', (c) => c.notNull()) // JSON array of the scopes granted
    .addColumn('status', 'text', (c) => c.notNull()) // active | expired | revoked | error
    .addColumn('is_default', 'integer', (c) => c.notNull().defaultTo(0))
    // Which client issued the tokens (refresh and revocation must use the same one).
    .addColumn('client_source', 'text', (c) => c.notNull()) // platform | organization
    .addColumn('client_id', 'text', (c) => c.notNull())
    .addColumn('access_token_ciphertext', 'text', (c) => c.notNull())
    .addColumn('refresh_token_ciphertext', 'text')
    .addColumn('token_type', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text') // null: the provider gave no expiry
    .addColumn('token_version', 'integer', (c) => c.notNull().defaultTo(1))
    // A refresh in progress somewhere (any replica) until this time; others wait for it instead of refreshing too.
    .addColumn('refresh_lease_until', 'text')
    .addColumn('last_error', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addColumn('last_refreshed_at', 'text')
    .addUniqueConstraint('oauth_connections_account', ['org_id', 'user_id', 'provider', 'account_id'])
    .execute();
  await db.schema.createIndex('oauth_connections_user').on('oauth_connections').columns(['org_id', 'user_id', 'provider']).execute();

  await db.schema
    .createTable('oauth_flows')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('provider', 'text', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull()) // browser | device
    .addColumn('state_hash', 'text', (c) => c.unique()) // browser: sha256 of the state sent to the provider
    .addColumn('secret_ciphertext', 'text') // browser: the PKCE verifier; device: the device code
    .addColumn('user_code', 'text')
    .addColumn('verification_uri', 'text')
    .addColumn('verification_uri_complete', 'text')
    .addColumn('interval_seconds', 'integer')
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('return_url', 'text')
    .addColumn('redirect_uri', 'text')
    .addColumn('client_source', 'text', (c) => c.notNull())
    .addColumn('client_id', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull()) // pending | completed | failed
    .addColumn('error', 'text')
    .addColumn('connection_id', 'text')
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('oauth_flows_expiry').on('oauth_flows').columns(['expires_at']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['oauth_flows', 'oauth_connections', 'oauth_configs']) await db.schema.dropTable(t).execute();
}
