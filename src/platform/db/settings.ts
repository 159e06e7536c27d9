import type { Kysely } from 'kysely';
import type { Database } from '../../database.js';
import { base62 } from '../ids.js';

/**
 * The installation's id, made once: it keeps this installation's containers apart from another's on a shared
 * host. system_settings belongs to the platform (installation-wide values), not to any domain.
 */
export async function ensureInstallId(db: Kysely<Database>): Promise<string> {
  const row = await db.selectFrom('system_settings').select('value').where('key', '=', 'install_id').executeTakeFirst();
  if (row) return row.value;
  await db
    .insertInto('system_settings')
    .values({ key: 'install_id', value: `i${base62(11).toLowerCase()}` })
    .onConflict((oc) => oc.column('key').doNothing())
    .execute();
  return (await db.selectFrom('system_settings').select('value').where('key', '=', 'install_id').executeTakeFirstOrThrow()).value;
}
