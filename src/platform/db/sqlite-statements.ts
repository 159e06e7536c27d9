import type SQLite from 'better-sqlite3';
import type { SqliteDatabase, SqliteStatement } from 'kysely';

/** Most distinct SQL texts kept prepared; past it the oldest is dropped. */
const MAX_CACHED = 500;
const DDL = /^\s*(create|alter|drop)\b/i;

type Row = Record<string, unknown>;

/**
 * Builds rows from better-sqlite3's raw (array) mode with a function generated for the column list:
 * about twice as fast as better-sqlite3 building keyed objects itself, with the same result
 * (plain objects, keys in column order, a later duplicate column name winning).
 */
function rowBuilder(columns: string[]): (values: unknown[]) => Row {
  if (columns.includes('__proto__')) {
    // A literal `"__proto__": v` means something else; assign like better-sqlite3 does (the setter applies).
    return (values) => {
      const row: Row = {};
      for (let i = 0; i < columns.length; i++) row[columns[i]!] = values[i];
      return row;
    };
  }
  const body = `return {${columns.map((c, i) => `${JSON.stringify(c)}: v[${i}]`).join(', ')}};`;
  return new Function('v', body) as (values: unknown[]) => Row;
}

class CachedStatement implements SqliteStatement {
  readonly reader: boolean;
  #columns = -1;
  #build: (values: unknown[]) => Row = () => ({});

  constructor(
    private readonly db: SQLite.Database,
    private readonly sql: string,
    private readonly stmt: SQLite.Statement,
  ) {
    this.reader = stmt.reader;
    if (this.reader) {
      this.#learnColumns();
      stmt.raw(true);
    }
  }

  #learnColumns() {
    const names = this.stmt.columns().map((c) => c.name);
    this.#columns = names.length;
    this.#build = rowBuilder(names);
  }

  all(parameters: readonly unknown[]): unknown[] {
    const rows = this.stmt.all(parameters) as unknown[][];
    // SQLite re-prepares a statement after a schema change, which can change `select *`'s columns;
    // the statement has run (it may have written), so the rows in hand are rebuilt, never re-fetched.
    if (rows.length > 0 && rows[0]!.length !== this.#columns) this.#learnColumns();
    const build = this.#build;
    const out = new Array<Row>(rows.length);
    for (let i = 0; i < rows.length; i++) out[i] = build(rows[i]!);
    return out;
  }

  run(parameters: readonly unknown[]) {
    return this.stmt.run(parameters);
  }

  iterate(parameters: readonly unknown[]): IterableIterator<unknown> {
    // A stream may stay open across other queries, so it gets a statement of its own in object mode.
    return this.db.prepare(this.sql).iterate(parameters);
  }
}

/**
 * The better-sqlite3 database as Kysely's SqliteDialect sees it, with each SQL text prepared once and
 * reused (Kysely's driver otherwise prepares every query anew). The one SQLite connection runs one
 * statement at a time, so reuse is safe; DDL clears the cache.
 */
export function withStatementCache(db: SQLite.Database): SqliteDatabase {
  const cache = new Map<string, CachedStatement>();
  return {
    close: () => {
      cache.clear();
      db.close();
    },
    prepare(sql: string): SqliteStatement {
      const hit = cache.get(sql);
      if (hit) return hit;
      const stmt = db.prepare(sql);
      if (DDL.test(sql)) {
        cache.clear();
        return stmt;
      }
      const cached = new CachedStatement(db, sql, stmt);
      if (cache.size >= MAX_CACHED) cache.delete(cache.keys().next().value!);
      cache.set(sql, cached);
      return cached;
    },
  };
}
