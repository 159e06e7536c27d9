import { Migrator, sql, type Kysely, type Migration, type MigrationProvider } from 'kysely';
import { migrations } from '../../../migrations/index.js';

class StaticProvider implements MigrationProvider {
  constructor(private readonly list: Record<string, Migration>) {}
  async getMigrations(): Promise<Record<string, Migration>> {
    return this.list;
  }
}

/**
 * Applies every pending migration of `list` (the product's, unless a test brings a database to an older
 * state first); throws with the failing migration's name.
 */
export async function migrateToLatest(
  // biome-ignore lint/suspicious/noExplicitAny: migrations run against the schema as it was, not today's Database type
  db: Kysely<any>,
  dialect: 'sqlite' | 'postgres' = 'sqlite',
  list: Record<string, Migration> = migrations,
): Promise<string[]> {
  // Kysely looks for its bookkeeping tables in every schema unless told which: on a PostgreSQL database
  // where another schema (another Hangar, another test) already has them, a new schema would never get its own.
  const migrationTableSchema =
    dialect === 'postgres' ? (await sql<{ schema: string }>`select current_schema() as schema`.execute(db)).rows[0]?.schema : undefined;
  const migrator = new Migrator({ db, provider: new StaticProvider(list), migrationTableSchema });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(`migration ${failed?.migrationName ?? '(unknown)'} failed: ${reason}`);
  }
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}
