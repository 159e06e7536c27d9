import type { Deps } from '../../platform/context.js';

/** Every thread's id, oldest first, across organizations (the operator's `hangar threads rebuild`). */
export async function allThreadIds(deps: Deps): Promise<string[]> {
  return (await deps.db.kysely.selectFrom('threads').select('id').orderBy('created_at').execute()).map((r) => r.id);
}
