import { mkdirSync } from 'node:fs';
import path from 'node:path';
import SQLite from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, type Transaction } from 'kysely';
import pg from 'pg';
import type { Config } from '../../config.js';
import type { Database } from '../../database.js';
import { withStatementCache } from './sqlite-statements.js';

// int8 (count, bigint columns) and numeric (sum) come back as strings from pg; our values fit in a double.
pg.types.setTypeParser(20, (v) => Number(v));
pg.types.setTypeParser(1700, (v) => Number(v));

export type Dialect = 'sqlite' | 'postgres';
export type Executor = Kysely<Database> | Transaction<Database>;

export interface Db {
  readonly kysely: Kysely<Database>;
  readonly dialect: Dialect;
  /** The embedded database's better-sqlite3 handle; use it only through `onSqliteConnection`. */
  readonly sqlite?: SQLite.Database;
  close(): Promise<void>;
}

/**
 * Runs `fn` synchronously on the embedded SQLite database with Kysely's one connection held, so no Kysely
 * transaction is open around it (one that is waits for it, and it waits for one in progress). For a hot path
 * whose statements are few and fixed: no query building, and a transaction inside `fn` commits without a
 * turn of the event loop. Only on SQLite.
 */
export function onSqliteConnection<T>(db: Db, fn: (sqlite: SQLite.Database) => T): Promise<T> {
  const sqlite = db.sqlite;
  if (!sqlite) throw new Error('onSqliteConnection is for the embedded SQLite database');
  // The executor's connection provider (the driver's one-connection mutex) without `connection()`'s new Kysely.
  return db.kysely.getExecutor().provideConnection(async () => fn(sqlite));
}

/** Opens the configured database: SQLite (WAL) by default, PostgreSQL when DATABASE_URL is set. */
export async function openDb(database: Config['database']): Promise<Db> {
  if (database.kind === 'sqlite') {
    if (database.file !== ':memory:') mkdirSync(path.dirname(path.resolve(database.file)), { recursive: true });
    const sqlite = new SQLite(database.file);
    sqlite.pragma('journal_mode = WAL');
    sqlite.pragma('synchronous = NORMAL');
    sqlite.pragma('foreign_keys = ON');
    sqlite.pragma('busy_timeout = 5000');
    const kysely = new Kysely<Database>({ dialect: new SqliteDialect({ database: withStatementCache(sqlite) }) });
    return { kysely, dialect: 'sqlite', sqlite, close: () => kysely.destroy() };
  }
  if (database.schema) {
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      await client.query(`CREATE SCHEMA IF NOT EXISTS "${database.schema}"`);
    } finally {
      await client.end();
    }
  }
  const pool = new pg.Pool({
    connectionString: database.url,
    max: 10,
    ...(database.schema ? { options: `-c search_path="${database.schema}"` } : {}),
  });
  const kysely = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  return { kysely, dialect: 'postgres', close: () => kysely.destroy() };
}

// Driver error codes are known in errors.ts only; domains import the predicates from here or there.
export { isUniqueViolation, isForeignKeyViolation, uniqueAs, driverErrorToAppError } from './errors.js';
