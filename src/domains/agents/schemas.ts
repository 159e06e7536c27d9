import { z } from 'zod';
import { EXECUTION_MODES } from '../threads/index.js';

/** The tools that act in the thread's sandbox (they need `in_sandbox`); every other tool name is a catalogue slug. */
export const SANDBOX_TOOLS: readonly string[] = ['exec_command', 'write_stdin', 'apply_patch', 'view_image'];

/** A tool an agent may call: a sandbox tool or a catalogue slug (64 characters at most: models' function-name limit). */
const AgentTool = z
  .string()
  .min(2)
  .max(64)
  .regex(/^[a-z][a-z0-9_-]*$/, 'a sandbox tool (exec_command, write_stdin, apply_patch, view_image) or a tool slug from GET /v1/tools');

export const AgentSlug = z
  .string()
  .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'must be 1 to 63 lowercase letters, digits and "-", starting with a letter or digit');

export const AgentConfig = z
  .object({
    maxTurns: z.number().int().min(1).max(200).optional().describe('Model turns per run (default 20)'),
    maxTokens: z.number().int().min(1).max(1_000_000).optional().describe('Output tokens per model turn'),
    temperature: z.number().min(0).max(2).optional(),
  })
  .strict();

const Fields = {
  name: z.string().min(1).max(200),
  description: z.string().max(4000).nullable(),
  executionMode: z.enum(EXECUTION_MODES),
  targetDeviceId: z.string().min(1).max(200).nullable().describe('The device of a local-device agent (required for that mode)'),
  model: z.string().min(1).max(200).nullable().describe('A model id from GET /v1/models/available'),
  instructions: z.string().max(200_000).nullable().describe('System instructions'),
  tools: z.array(AgentTool).max(64),
  config: AgentConfig,
  sandboxTemplate: z.string().min(1).max(64).nullable().describe('Template of the sandbox an in_sandbox agent’s tools run in (default base-ubuntu)'),
  metadata: z.record(z.string().max(64), z.string().max(1024)),
};

export const CreateAgentBody = z
  .object({
    slug: AgentSlug,
    name: Fields.name.optional(),
    description: Fields.description.optional(),
    executionMode: Fields.executionMode.default('managed'),
    targetDeviceId: Fields.targetDeviceId.optional(),
    model: Fields.model.optional(),
    instructions: Fields.instructions.optional(),
    tools: Fields.tools.default([]),
    config: Fields.config.default({}),
    sandboxTemplate: Fields.sandboxTemplate.optional(),
    metadata: Fields.metadata.default({}),
  })
  .strict();
export type CreateAgentBody = z.infer<typeof CreateAgentBody>;

export const PatchAgentBody = z
  .object({
    name: Fields.name.optional(),
    description: Fields.description.optional(),
    executionMode: Fields.executionMode.optional(),
    targetDeviceId: Fields.targetDeviceId.optional(),
    model: Fields.model.optional(),
    instructions: Fields.instructions.optional(),
    tools: Fields.tools.optional(),
    config: Fields.config.optional(),
    sandboxTemplate: Fields.sandboxTemplate.optional(),
    metadata: Fields.metadata.optional(),
  })
  .strict();
export type PatchAgentBody = z.infer<typeof PatchAgentBody>;

export const Agent = z
  .object({
    id: z.string(),
    slug: z.string(),
    name: z.string(),
    description: z.string().nullable(),
    executionMode: z.enum(EXECUTION_MODES),
    targetDeviceId: z.string().nullable(),
    model: z.string().nullable(),
    instructions: z.string().nullable(),
    tools: z.array(z.string()),
    config: AgentConfig,
    sandboxTemplate: z.string().nullable(),
    metadata: z.record(z.string(), z.string()),
    createdByUserId: z.string(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'Agent' });
export type Agent = z.infer<typeof Agent>;

export const AgentParams = z.object({ slug: z.string().min(1).max(100) });

// ---- installable agents ----

/** An entry of the shipped catalogue (`installable.json`): an agent definition without a model. */
export const InstallableDefinition = z
  .object({
    slug: AgentSlug,
    name: Fields.name,
    description: z.string().max(4000),
    category: z.string().min(1).max(64),
    executionMode: z.literal('managed'),
    instructions: z.string().min(1).max(200_000),
    tools: z.array(AgentTool).min(1).max(64),
    config: AgentConfig,
  })
  .strict();
export type InstallableDefinition = z.infer<typeof InstallableDefinition>;

export const InstallableCatalogue = z.object({ agents: z.array(InstallableDefinition).max(200) }).strict();

const ToolAvailability = {
  slug: z.string(),
  available: z.boolean().describe('Whether the tool can run on this server (false: unavailableReason says what to configure)'),
  unavailableReason: z.string().nullable(),
};

export const InstallableAgent = InstallableDefinition.extend({
  tools: z.array(z.object(ToolAvailability)),
}).meta({ id: 'InstallableAgent' });
export type InstallableAgent = z.infer<typeof InstallableAgent>;

export const InstallableParams = z.object({ slug: z.string().min(1).max(100) });

export const InstallBody = z
  .object({
    agentSlug: AgentSlug.optional().describe('The new agent’s slug (default: the installable agent’s)'),
    model: z.string().min(1).max(200).optional().describe('A model id from GET /v1/models/available (default: the first one listed)'),
    scope: z
      .enum(['user', 'organization'])
      .optional()
      .describe('Whom the tools are installed for: user (default) or organization (needs tools:admin)'),
  })
  .strict();
export type InstallBody = z.infer<typeof InstallBody>;

export const InstallableAgentInstall = z
  .object({
    id: z.string(),
    slug: z.string().describe('The installable agent'),
    agentId: z.string(),
    agentSlug: z.string().nullable().describe('The agent it created (null once that agent was deleted on its own)'),
    installedByUserId: z.string(),
    createdAt: z.string(),
  })
  .meta({ id: 'InstallableAgentInstall' });
export type InstallableAgentInstall = z.infer<typeof InstallableAgentInstall>;

export const InstalledToolStatus = z.object({
  ...ToolAvailability,
  installed: z.literal(true),
  missingCredentials: z.array(z.string()).describe('Required credential fields stored nowhere yet (PUT /v1/tools/{slug}/credentials)'),
  oauthProvider: z.string().nullable().describe('The OAuth provider whose connected account fills the tool’s token'),
  oauthConnected: z
    .boolean()
    .nullable()
    .describe('Whether you have connected oauthProvider (null: no OAuth needed, or the credential lacks connections:read)'),
});
export type InstalledToolStatus = z.infer<typeof InstalledToolStatus>;

export const InstallResult = z.object({ install: InstallableAgentInstall, agent: Agent, tools: z.array(InstalledToolStatus) });
export type InstallResult = z.infer<typeof InstallResult>;

export const InstallParams = z.object({ installId: z.string().min(1).max(100) });
