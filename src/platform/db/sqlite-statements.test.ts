import SQLite from 'better-sqlite3';
import { Kysely, SqliteDialect, sql, type Generated } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { withStatementCache } from './sqlite-statements.js';

describe('withStatementCache (SQLite statement reuse and row building)', () => {
  let raw: SQLite.Database;
  /** The same connection read without the cache: the behaviour to match. */
  let plain: SQLite.Database;

  beforeEach(() => {
    raw = new SQLite(':memory:');
    raw.exec(`
      create table t (id integer primary key, name text, score real, data blob, note text);
      insert into t values (1, 'a', 1.5, x'0102', null), (2, 'b', null, null, 'n'), (3, 'é…', -2, x'', '');
      create table u (id integer primary key, t_id integer, name text);
      insert into u values (10, 1, 'u1'), (11, 2, 'u2');
    `);
    plain = raw;
  });
  afterEach(() => raw.open && raw.close());

  const all = (db: ReturnType<typeof withStatementCache>, text: string, params: unknown[] = []) => db.prepare(text).all(params);

  it('returns exactly the rows better-sqlite3 returns: types, nulls, blobs, key order, duplicate names', () => {
    const db = withStatementCache(raw);
    for (const text of [
      'select * from t order by id',
      'select id, name from t where id > ? order by id desc',
      'select t.id, u.id, t.name, u.name from t left join u on u.t_id = t.id order by t.id',
      'select count(*) as n, sum(score) from t',
      'select * from t where id = -1',
    ]) {
      const params = text.includes('?') ? [1] : [];
      const expected = plain.prepare(text).all(...params);
      const got = all(db, text, params);
      expect(got).toEqual(expected);
      expect(got.map((r) => Object.keys(r as object))).toEqual(expected.map((r) => Object.keys(r as object)));
      for (const row of got) expect(Object.getPrototypeOf(row)).toBe(Object.prototype);
    }
  });

  it('prepares each SQL text once and reuses it', () => {
    const db = withStatementCache(raw);
    expect(db.prepare('select * from t')).toBe(db.prepare('select * from t'));
    expect(db.prepare('select * from t')).not.toBe(db.prepare('select id from t'));
  });

  it('runs writes and reports changes and ids', () => {
    const db = withStatementCache(raw);
    const stmt = db.prepare('insert into t (name) values (?)');
    expect(stmt.reader).toBe(false);
    expect(stmt.run(['x'])).toMatchObject({ changes: 1, lastInsertRowid: 4 });
    expect(stmt.run(['y'])).toMatchObject({ changes: 1, lastInsertRowid: 5 });
    expect(all(db, 'insert into t (name) values (?) returning id, name', ['z'])).toEqual([{ id: 6, name: 'z' }]);
  });

  it('sees columns added after a statement was cached', () => {
    const db = withStatementCache(raw);
    expect(Object.keys(all(db, 'select * from t where id = 1')[0] as object)).toEqual(['id', 'name', 'score', 'data', 'note']);
    db.prepare('alter table t add column extra text').run([]);
    expect(all(db, 'select * from t where id = 1')[0]).toEqual({ id: 1, name: 'a', score: 1.5, data: Buffer.from([1, 2]), note: null, extra: null });
    // a change made behind the cache's back (another connection, or raw SQL) is caught too
    raw.exec('alter table t add column more integer default 7');
    expect(all(db, 'select * from t where id = 1')[0]).toMatchObject({ extra: null, more: 7 });
  });

  it('runs a writing statement once even when its columns changed since it was cached', () => {
    const db = withStatementCache(raw);
    const text = 'insert into t (name) values (?) returning *';
    expect(Object.keys(all(db, text, ['first'])[0] as object)).toEqual(['id', 'name', 'score', 'data', 'note']);
    raw.exec('alter table t add column extra text');
    expect(all(db, text, ['second'])).toEqual([{ id: 5, name: 'second', score: null, data: null, note: null, extra: null }]);
    expect(plain.prepare("select count(*) as n from t where name = 'second'").get()).toEqual({ n: 1 });
  });

  it('treats a column named __proto__ as better-sqlite3 does', () => {
    const db = withStatementCache(raw);
    for (const text of ['select 1 as "__proto__", 2 as b', `select json_object('x', 1) as "__proto__", 2 as b`]) {
      const [row] = all(db, text) as object[];
      const [expected] = plain.prepare(text).all() as object[];
      expect(Object.getOwnPropertyNames(row)).toEqual(Object.getOwnPropertyNames(expected));
      expect(Object.getPrototypeOf(row)).toEqual(Object.getPrototypeOf(expected));
    }
  });

  it('streams with iterate while the same query runs again inside the loop', () => {
    const db = withStatementCache(raw);
    const text = 'select id from t order by id';
    const seen: unknown[] = [];
    for (const row of db.prepare(text).iterate([])) {
      seen.push(row);
      expect(all(db, text)).toHaveLength(3);
    }
    expect(seen).toEqual([{ id: 1 }, { id: 2 }, { id: 3 }]);
  });

  it('serves Kysely: queries, transactions, rollbacks and errors', async () => {
    const db = new Kysely<{ t: { id: Generated<number>; name: string | null } }>({
      dialect: new SqliteDialect({ database: withStatementCache(raw) }),
    });
    await db.transaction().execute(async (trx) => {
      await trx.insertInto('t').values({ name: 'in tx' }).execute();
    });
    await expect(
      db.transaction().execute(async (trx) => {
        await trx.insertInto('t').values({ name: 'rolled back' }).execute();
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    await expect(db.insertInto('t').values({ id: 1, name: 'dup' }).execute()).rejects.toThrow(/UNIQUE/);
    const names = await db.selectFrom('t').select('name').orderBy('id').execute();
    expect(names.map((r) => r.name)).toEqual(['a', 'b', 'é…', 'in tx']);
    const { rows } = await sql<{ n: number }>`select count(*) as n from t`.execute(db);
    expect(rows).toEqual([{ n: 4 }]);
    await db.destroy();
  });
});
