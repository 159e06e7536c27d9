import { exec, orgId, type Ctx } from '../../platform/context.js';
import { getNode, type NodeTarget } from '../../platform/nodes/index.js';
import { sandboxRemoteNode } from '../sandboxes/index.js';

/** The other live node whose loop runs the caller's running run; null to answer here (404, 409, or this node's run). */
export async function runNode(ctx: Ctx, runId: string): Promise<NodeTarget | null> {
  const row = await exec(ctx)
    .selectFrom('agent_runs')
    .select(['node_id', 'status', 'created_by_user_id'])
    .where('id', '=', runId)
    .where('org_id', '=', orgId(ctx))
    .executeTakeFirst();
  if (!row || row.created_by_user_id !== ctx.principal.userId || row.status !== 'running' || row.node_id === ctx.deps.config.sandboxes.nodeId) {
    return null;
  }
  const node = await getNode(ctx.deps, row.node_id);
  return node?.live && node.url ? { id: node.id, url: node.url } : null;
}

/** The other live node holding the thread's sandbox (of the caller's organization), where a run on the thread acts. */
export async function threadSandboxNode(ctx: Ctx, threadId: string | undefined): Promise<NodeTarget | null> {
  if (!threadId) return null;
  const link = await exec(ctx).selectFrom('thread_sandboxes').select('sandbox_id').where('thread_id', '=', threadId).executeTakeFirst();
  return link ? sandboxRemoteNode(ctx, link.sandbox_id) : null;
}
