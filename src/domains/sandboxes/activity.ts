import type { Ctx } from '../../platform/context.js';
import { listActivity, type ActivityQuery } from '../activity/index.js';
import { getSandbox } from './service.js';

/** A sandbox's activity: seeing the sandbox is what authorizes its events. */
export async function sandboxActivity(ctx: Ctx, id: string, query: Omit<ActivityQuery, 'sandbox_id'>) {
  await getSandbox(ctx, id);
  return listActivity(ctx, { ...query, sandbox_id: id }, { resourceAuthorized: true });
}
