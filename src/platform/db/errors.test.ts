import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import SQLite from 'better-sqlite3';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { AppError } from '../http/errors.js';
import { toAppError } from '../http/server.js';
import { driverErrorToAppError, isForeignKeyViolation, isUniqueViolation, uniqueAs } from './errors.js';

// CI runs PostgreSQL on 127.0.0.1 (as threads' tests expect); only temporary tables are made.
const pgUrl = process.env.HANGAR_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** The error a driver throws for a statement, as the domains see it. */
function sqliteError(statements: string[]): unknown {
  const db = new SQLite(':memory:');
  db.pragma('foreign_keys = ON');
  try {
    for (const s of statements) db.exec(s);
  } catch (err) {
    return err;
  } finally {
    db.close();
  }
  throw new Error('no error');
}

async function pgError(statements: (string | [string, unknown[]])[]): Promise<unknown> {
  const client = new pg.Client({ connectionString: pgUrl });
  await client.connect();
  try {
    await client.query('BEGIN');
    for (const s of statements) await (typeof s === 'string' ? client.query(s) : client.query(s[0], s[1]));
  } catch (err) {
    return err;
  } finally {
    await client.query('ROLLBACK').catch(() => undefined);
    await client.end();
  }
  throw new Error('no error');
}

const UNIQUE = ['create temp table t (id integer primary key, slug text unique)', "insert into t values (1, 'a')", "insert into t values (2, 'a')"];
const PRIMARY = ['create temp table t (id integer primary key)', 'insert into t values (1)', 'insert into t values (1)'];
const FOREIGN = [
  'create table p (id integer primary key)',
  'create table c (id integer primary key, p integer references p(id))',
  'insert into c values (1, 9)',
];

describe('driver errors become AppErrors in one place', () => {
  it('knows SQLite unique, primary-key and foreign-key violations', () => {
    expect(isUniqueViolation(sqliteError(UNIQUE))).toBe(true);
    expect(isUniqueViolation(sqliteError(PRIMARY))).toBe(true);
    const fk = sqliteError(FOREIGN);
    expect(isForeignKeyViolation(fk)).toBe(true);
    expect(isUniqueViolation(fk)).toBe(false);
  });

  it('knows PostgreSQL unique, foreign-key and NUL-in-text errors', async () => {
    expect(isUniqueViolation(await pgError(UNIQUE))).toBe(true);
    expect(isUniqueViolation(await pgError(PRIMARY))).toBe(true);
    const fkStatements = [
      'create temp table p (id integer primary key)',
      'create temp table c (id integer primary key, p integer references p(id))',
      'insert into c values (1, 9)',
    ];
    expect(isForeignKeyViolation(await pgError(fkStatements))).toBe(true);
    const nul = await pgError(['create temp table t (v text)', ['insert into t values ($1)', ['a\u0000b']]]);
    expect(driverErrorToAppError(nul)).toMatchObject({ code: 'invalid_request' });
  });

  it('uniqueAs turns a unique violation into the domain’s error and lets others through', async () => {
    const dup = sqliteError(UNIQUE);
    await expect(
      uniqueAs(
        () => Promise.reject(dup),
        () => new AppError('conflict', 'slug "a" is taken'),
      ),
    ).rejects.toMatchObject({ code: 'conflict', message: 'slug "a" is taken' });
    const other = new Error('disk I/O error');
    await expect(
      uniqueAs(
        () => Promise.reject(other),
        () => new AppError('conflict', 'x'),
      ),
    ).rejects.toBe(other);
    await expect(
      uniqueAs(
        () => Promise.resolve(7),
        () => new AppError('conflict', 'x'),
      ),
    ).resolves.toBe(7);
  });

  it('the HTTP layer answers an untranslated driver error with an envelope code, never the driver’s code', () => {
    const mapped = toAppError(sqliteError(UNIQUE) as Error);
    expect(mapped.code).toBe('conflict');
    expect(mapped.message).not.toMatch(/SQLITE|UNIQUE|constraint/i);
    expect(toAppError(sqliteError(FOREIGN) as Error).code).toBe('internal');
    expect(toAppError(Object.assign(new Error('invalid byte sequence'), { code: '22021' })).code).toBe('invalid_request');
  });

  it('no file outside src/platform/db/errors.ts names a driver error code', () => {
    const root = path.resolve(__dirname, '../..');
    const offenders: string[] = [];
    const walk = (dir: string) => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const p = path.join(dir, e.name);
        if (e.isDirectory()) walk(p);
        else if (p.endsWith('.ts') && !p.endsWith('.test.ts') && !p.endsWith(path.join('db', 'errors.ts'))) {
          if (/\b(23505|23503|22021)\b|SQLITE_CONSTRAINT/.test(readFileSync(p, 'utf8'))) offenders.push(path.relative(root, p));
        }
      }
    };
    walk(root);
    expect(offenders).toEqual([]);
  });
});
