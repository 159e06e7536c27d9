import { sql, type SelectQueryBuilder } from 'kysely';
import { errors } from '../http/errors.js';
import { decodeCursor, toPage } from '../http/pagination.js';

/**
 * One newest-first keyset page over a (time, id) pair of text columns: the rows after `cursor`,
 * ordered by both descending, fetching limit + 1 to tell whether more follow.
 */
export async function newestFirstPage<O extends Record<string, unknown>>(
  // biome-ignore lint/suspicious/noExplicitAny: one pager for every table's query; the row type O is what it reads
  query: SelectQueryBuilder<any, any, O>,
  keys: { time: keyof O & string; id: keyof O & string },
  page: { cursor?: string; limit: number },
) {
  let q = query;
  if (page.cursor) {
    const [at, id] = decodeCursor(page.cursor, 2);
    if (typeof at !== 'string' || typeof id !== 'string') throw errors.invalidField('cursor', 'is not a cursor this endpoint issued');
    const time = sql.ref(keys.time);
    q = q.where(sql<boolean>`(${time} < ${at} or (${time} = ${at} and ${sql.ref(keys.id)} < ${id}))`);
  }
  const rows = await q
    .orderBy(sql.ref(keys.time), 'desc')
    .orderBy(sql.ref(keys.id), 'desc')
    .limit(page.limit + 1)
    .execute();
  return toPage(rows as O[], page.limit, (r) => [r[keys.time] as string, r[keys.id] as string]);
}
