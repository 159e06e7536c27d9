import { z } from 'zod';
import { limitParam } from '../../platform/http/pagination.js';

export const RESOURCE_TYPES = [
  'sandbox',
  'agent',
  'workspace',
  'thread',
  'tool',
  'installable_agent_install',
  'runmesh_device',
  'code_execution',
  'organization',
  'api_key',
  'project',
  'secret',
  'template',
  'oauth_connection',
  'oauth_config',
  'billing',
  'product_app',
  'agent_channel',
  'context_session',
  'deployment',
  'trigger',
  'workflow',
] as const;
export type ResourceType = (typeof RESOURCE_TYPES)[number];

export const SEVERITIES = ['info', 'warning', 'error'] as const;

const isoTimestamp = z.iso.datetime({ offset: true, message: 'must be an ISO 8601 timestamp' });

export const ActivityQuery = z.object({
  resource_type: z.enum(RESOURCE_TYPES).optional(),
  resource_id: z.string().min(1).max(200).optional(),
  event_type: z.string().min(1).max(200).optional(),
  severity: z.enum(SEVERITIES).optional(),
  status: z.string().min(1).max(100).optional(),
  actor_user_id: z.string().min(1).max(100).optional(),
  thread_id: z.string().min(1).max(200).optional(),
  agent_run_id: z.string().min(1).max(200).optional(),
  sandbox_id: z.string().min(1).max(200).optional(),
  workspace_id: z.string().min(1).max(200).optional(),
  tool_slug: z.string().min(1).max(200).optional(),
  installable_agent_install_id: z.string().min(1).max(200).optional(),
  code_execution_id: z.string().min(1).max(200).optional(),
  runmesh_node_id: z.string().min(1).max(200).optional(),
  since: isoTimestamp.optional(),
  until: isoTimestamp.optional(),
  limit: limitParam(50, 200),
  cursor: z.string().min(1).max(500).optional(),
});
export type ActivityQuery = z.infer<typeof ActivityQuery>;

export const ActivityEvent = z
  .object({
    id: z.string().describe('`act_` prefixed id'),
    resourceType: z.string(),
    resourceId: z.string(),
    eventType: z.string().describe('dotted, e.g. `api_key.created`'),
    severity: z.enum(SEVERITIES),
    status: z.string(),
    title: z.string(),
    summary: z.string(),
    actorUserId: z.string().nullable(),
    threadId: z.string().optional(),
    agentRunId: z.string().optional(),
    sandboxId: z.string().optional(),
    workspaceId: z.string().optional(),
    toolSlug: z.string().optional(),
    installableAgentInstallId: z.string().optional(),
    codeExecutionId: z.string().optional(),
    runmeshNodeId: z.string().optional(),
    metadata: z.record(z.string(), z.unknown()).optional(),
    occurredAt: z.string(),
  })
  .meta({ id: 'ActivityEvent' });
export type ActivityEvent = z.infer<typeof ActivityEvent>;

export const ActivityList = z.object({ events: z.array(ActivityEvent) });
