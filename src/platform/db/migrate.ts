import { readdirSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Migrator, sql, type Kysely, type Migration, type MigrationProvider } from 'kysely';
import { migrations } from '../../../migrations/index.js';

/** A migration's file name: `<yyyymmdd>T<hhmm>_<what>.ts` (index.ts and the checksum files are not migrations). */
export const MIGRATION_FILE = /^\d{8}T\d{4}_[a-z0-9_]+\.ts$/;
export const migrationsDir = fileURLToPath(new URL('../../../migrations/', import.meta.url));

/**
 * The product's migrations: those `migrations/index.ts` lists (the registry as it stood when it was frozen, which
 * like a landed migration is never edited again) and every later migration file in `migrations/`, found by name
 * (ADR 0034). The checkout always runs through tsx, so a `.ts` file imports as it is.
 */
export async function productMigrations(): Promise<Record<string, Migration>> {
  const list: Record<string, Migration> = { ...migrations };
  for (const file of readdirSync(migrationsDir).filter((f) => MIGRATION_FILE.test(f))) {
    const name = file.slice(0, -'.ts'.length);
    list[name] ??= (await import(pathToFileURL(`${migrationsDir}${file}`).href)) as Migration;
  }
  return list;
}

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
  list?: Record<string, Migration>,
): Promise<string[]> {
  // Kysely looks for its bookkeeping tables in every schema unless told which: on a PostgreSQL database
  // where another schema (another Hangar, another test) already has them, a new schema would never get its own.
  const migrationTableSchema =
    dialect === 'postgres' ? (await sql<{ schema: string }>`select current_schema() as schema`.execute(db)).rows[0]?.schema : undefined;
  const migrator = new Migrator({ db, provider: new StaticProvider(list ?? (await productMigrations())), migrationTableSchema });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(`migration ${failed?.migrationName ?? '(unknown)'} failed: ${reason}`);
  }
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}
