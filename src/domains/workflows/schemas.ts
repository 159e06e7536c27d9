import { z } from 'zod';
import { limitParam } from '../../platform/http/pagination.js';

/** A workflow's slug: lowercase letters, digits and dashes. `webhooks` is the webhook route's own path segment. */
const Slug = z
  .string()
  .trim()
  .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'must be 1–63 lowercase letters, digits and dashes, starting with a letter or digit')
  .refine((s) => s !== 'webhooks', '"webhooks" is reserved');
export const WorkflowParams = z.object({ workflowSlug: z.string().min(1).max(100) });
export const RunParams = WorkflowParams.extend({ runId: z.string().min(1).max(100) });
export const VersionParams = WorkflowParams.extend({ version: z.coerce.number().int().min(1).max(1_000_000) });
export const TriggerParams = WorkflowParams.extend({ triggerId: z.string().min(1).max(100) });
export const WebhookParams = z.object({ webhookSlug: z.string().min(1).max(200) });

const StepName = z
  .string()
  .regex(
    /^[A-Za-z][A-Za-z0-9_]{0,62}$/,
    'must be 1–63 letters, digits and underscores, starting with a letter (later steps refer to it as steps.<name>)',
  );
const Template = z.string().max(100_000);
const StepBase = {
  name: StepName,
  retries: z.number().int().min(0).max(10).default(2).describe('Tries after the first that fails (default 2), with exponential backoff'),
  timeoutSeconds: z.number().int().min(1).max(3600).default(300).describe('One try gives up after this long (default 300)'),
};

export const AgentStep = z
  .object({
    ...StepBase,
    type: z.literal('agent'),
    agent: z.string().trim().min(1).max(100).describe('The agent’s slug'),
    prompt: Template.min(1).describe('The message, templated'),
  })
  .strict();
export const ToolStep = z
  .object({
    ...StepBase,
    type: z.literal('tool'),
    tool: z.string().trim().min(1).max(200).describe('An installed tool’s slug'),
    arguments: z.record(z.string(), z.unknown()).default({}).describe('The tool’s arguments; every string in it is templated'),
  })
  .strict();
export const CodeStep = z
  .object({
    ...StepBase,
    type: z.literal('code'),
    language: z.string().min(1).max(64),
    version: z.string().min(1).max(64).default('*'),
    code: z
      .string()
      .min(1)
      .max(512 * 1024)
      .describe('The program (not templated: read the input from stdin)'),
    stdin: Template.default('{{input}}').describe('Templated; default the run’s input as JSON'),
  })
  .strict();
export const HTTP_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD'] as const;
export const HttpStep = z
  .object({
    ...StepBase,
    type: z.literal('http'),
    method: z.enum(HTTP_METHODS).default('GET'),
    url: z.string().min(1).max(4096).describe('Templated; http(s) only, never a private address unless the operator allows it'),
    headers: z
      .record(z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$/, 'must be a header name'), z.string().max(8192))
      .refine((h) => Object.keys(h).length <= 50, 'at most 50 headers')
      .default({})
      .describe('Values templated'),
    body: z.unknown().optional().describe('A string (templated text) or any JSON value (strings in it templated), sent as JSON'),
  })
  .strict();

export const Step = z.discriminatedUnion('type', [AgentStep, ToolStep, CodeStep, HttpStep]).meta({ id: 'WorkflowStep' });
export type Step = z.infer<typeof Step>;
export type StepType = Step['type'];

export const MAX_STEPS = 50;
const Steps = z
  .array(Step)
  .min(1)
  .max(MAX_STEPS)
  .superRefine((steps, ctx) => {
    const seen = new Set<string>();
    steps.forEach((s, i) => {
      if (seen.has(s.name)) ctx.addIssue({ code: 'custom', path: [i, 'name'], message: `"${s.name}" names an earlier step too: names are unique` });
      seen.add(s.name);
    });
  });

export const CreateWorkflowBody = z
  .object({
    slug: Slug,
    name: z.string().trim().min(1).max(200),
    description: z.string().max(2000).optional(),
    steps: Steps.describe('Run in order; each step’s input is templated from `input` (the run’s input) and `steps.<name>.output`'),
  })
  .strict();
export type CreateWorkflowBody = z.infer<typeof CreateWorkflowBody>;

export const UpdateWorkflowBody = z
  .object({
    name: z.string().trim().min(1).max(200).optional(),
    description: z.string().max(2000).nullable().optional(),
    steps: Steps.optional().describe('New steps make a new version; runs already started keep theirs'),
  })
  .strict();
export type UpdateWorkflowBody = z.infer<typeof UpdateWorkflowBody>;

export const Workflow = z
  .object({
    id: z.string(),
    slug: z.string(),
    name: z.string(),
    description: z.string().nullable(),
    version: z.number().int().describe('The current version: new runs run it'),
    steps: z.array(Step).describe('The steps of `version`'),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'Workflow' });
export type Workflow = z.infer<typeof Workflow>;
export const WorkflowList = z.object({ workflows: z.array(Workflow.omit({ steps: true }).extend({ stepCount: z.number().int() })) });

export const WorkflowVersion = z
  .object({ workflowId: z.string(), version: z.number().int(), steps: z.array(Step), createdAt: z.string() })
  .meta({ id: 'WorkflowVersion' });
export type WorkflowVersion = z.infer<typeof WorkflowVersion>;

export const RUN_STATUSES = ['queued', 'running', 'completed', 'failed', 'cancelled'] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
export const STEP_STATUSES = ['pending', 'running', 'completed', 'failed', 'skipped'] as const;
export type StepStatus = (typeof STEP_STATUSES)[number];

export const StepRun = z
  .object({
    index: z.number().int(),
    name: z.string(),
    type: z.enum(['agent', 'tool', 'code', 'http']),
    status: z.enum(STEP_STATUSES),
    attempts: z.number().int().describe('Tries started'),
    input: z.unknown().describe('The rendered input of the last try (null before the first)'),
    output: z.unknown().describe('What later steps read as steps.<name>.output (null until completed)'),
    error: z.string().nullable().describe('The last try’s error'),
    startedAt: z.string().nullable(),
    finishedAt: z.string().nullable(),
    nextAttemptAt: z.string().nullable().describe('When a failed try is tried again'),
  })
  .meta({ id: 'WorkflowStepRun' });
export type StepRun = z.infer<typeof StepRun>;

export const WorkflowRun = z
  .object({
    id: z.string(),
    workflowId: z.string(),
    workflowSlug: z.string(),
    version: z.number().int(),
    status: z.enum(RUN_STATUSES),
    input: z.unknown(),
    output: z.unknown().describe('The last step’s output, once completed'),
    error: z.string().nullable(),
    triggerId: z.string().nullable(),
    currentStep: z.number().int().describe('Index of the step the run is at'),
    steps: z.array(StepRun),
    createdAt: z.string(),
    startedAt: z.string().nullable(),
    finishedAt: z.string().nullable(),
  })
  .meta({ id: 'WorkflowRun' });
export type WorkflowRun = z.infer<typeof WorkflowRun>;
export const WorkflowRunList = z.object({ runs: z.array(WorkflowRun.omit({ steps: true })) });

export const StartRunBody = z.object({ input: z.unknown().optional().describe('Any JSON value: the run’s `input` (null when omitted)') }).strict();
export type StartRunBody = z.infer<typeof StartRunBody>;

export const RunsQuery = z
  .object({
    status: z.enum(RUN_STATUSES).optional(),
    limit: limitParam(20, 100),
    cursor: z.string().max(500).optional(),
  })
  .strict();
export type RunsQuery = z.infer<typeof RunsQuery>;

// ---- triggers ---------------------------------------------------------------------------------------------------

export const TRIGGER_TYPES = ['cron', 'webhook'] as const;
const Secret = z.string().min(16).max(256);
export const CreateWorkflowTriggerBody = z
  .object({
    type: z.enum(TRIGGER_TYPES),
    name: z.string().trim().min(1).max(200),
    enabled: z.boolean().default(true),
    secret: Secret.optional().describe('webhook: the X-Webhook-Secret value (16–256 characters); 32 random bytes (hex) are generated when omitted'),
    schedule: z.string().trim().min(1).max(200).optional().describe('cron (required): five fields, or six with seconds first'),
    timezone: z.string().trim().min(1).max(100).optional().describe('cron: the IANA time zone the schedule is read in (default UTC)'),
    input: z.unknown().optional().describe('cron: the input of each run it starts (default `{ trigger, scheduledAt }`)'),
  })
  .strict();
export type CreateWorkflowTriggerBody = z.infer<typeof CreateWorkflowTriggerBody>;

export const UpdateWorkflowTriggerBody = z
  .object({
    name: z.string().trim().min(1).max(200).optional(),
    enabled: z.boolean().optional(),
    secret: Secret.optional().describe('webhook: a new secret (never answered back)'),
    schedule: z.string().trim().min(1).max(200).optional(),
    timezone: z.string().trim().min(1).max(100).optional(),
  })
  .strict();
export type UpdateWorkflowTriggerBody = z.infer<typeof UpdateWorkflowTriggerBody>;

export const WorkflowTrigger = z
  .object({
    id: z.string(),
    workflow: z.string().describe('The workflow’s slug'),
    type: z.enum(TRIGGER_TYPES),
    name: z.string(),
    enabled: z.boolean(),
    webhookUrl: z.string().nullable().describe('webhook: `{base_url}/v1/workflows/webhooks/{webhookSlug}`; null for cron'),
    secret: z.string().optional().describe('webhook: only in the answer to the create request'),
    schedule: z.string().nullable(),
    timezone: z.string().nullable(),
    lastFiredAt: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'WorkflowTrigger' });
export type WorkflowTrigger = z.infer<typeof WorkflowTrigger>;
export const WorkflowTriggerList = z.object({ triggers: z.array(WorkflowTrigger) });

export const WebhookResult = z.object({ runId: z.string(), status: z.enum(RUN_STATUSES) });
