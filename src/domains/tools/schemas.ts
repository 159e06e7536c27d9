import { z } from 'zod';
import { limitParam } from '../../platform/http/pagination.js';
import { FieldName, ToolSlug } from './definition.js';

export const SlugParams = z.object({ slug: ToolSlug });

export const InstallScope = z.enum(['user', 'organization']);
export type InstallScope = z.infer<typeof InstallScope>;

export const ListToolsQuery = z.object({
  q: z.string().max(200).optional().describe('Words to find in the slug, name or description'),
  category: z.string().max(64).optional(),
  cursor: z.string().max(500).optional(),
  limit: limitParam(50, 200),
});
export type ListToolsQuery = z.infer<typeof ListToolsQuery>;

export const ToolView = z
  .object({
    slug: z.string(),
    name: z.string(),
    description: z.string(),
    category: z.string(),
    source: z.enum(['catalog', 'custom']).describe('Shipped (or the operator’s catalogue file), or an organization’s custom tool'),
    inputSchema: z.record(z.string(), z.unknown()),
    output: z.string(),
    credentials: z.array(
      z.object({
        name: z.string(),
        description: z.string(),
        required: z.boolean(),
        oauth: z.boolean().describe('Filled from the connected account of the tool’s OAuth provider when no earlier step supplies it'),
      }),
    ),
    oauth: z.object({ provider: z.string(), scopes: z.array(z.string()) }).nullable(),
    execution: z.object({
      type: z.enum(['http', 'builtin', 'mcp']),
      method: z.string().optional(),
      hosts: z.array(z.string()).describe('The hosts its requests go to (its credentials go nowhere else)'),
    }),
    available: z.boolean().describe('Whether it can run on this installation'),
    unavailableReason: z.string().nullable(),
    installed: z.object({ user: z.boolean(), organization: z.boolean() }),
  })
  .meta({ id: 'Tool' });
export type ToolView = z.infer<typeof ToolView>;

export const InstallBody = z
  .object({ scope: InstallScope.default('user').describe('`organization` installs it for every member (needs tools:admin)') })
  .strict()
  .default({ scope: 'user' });

export const ScopeQuery = z.object({ scope: InstallScope.default('user') });

export const Install = z
  .object({
    slug: z.string(),
    scope: InstallScope,
    installedByUserId: z.string(),
    createdAt: z.string(),
  })
  .meta({ id: 'ToolInstall' });
export type Install = z.infer<typeof Install>;

export const InstalledTool = Install.extend({ tool: ToolView }).meta({ id: 'InstalledTool' });

/** `POST /v1/tools/{slug}/credentials`: the tool's credential fields (the spec's body: a JSON object of fields). */
export const CredentialsBody = z.record(FieldName, z.string().min(1).max(16384)).refine((o) => Object.keys(o).length <= 20, 'at most 20 fields');

export const CredentialStatus = z
  .object({
    slug: z.string(),
    scope: InstallScope,
    stored: z.boolean().describe('Whether credentials are stored at this scope'),
    fields: z.array(z.string()).describe('The names of the stored fields (values are never returned)'),
    missingRequired: z.array(z.string()).describe('Required fields stored at neither scope (other steps of the chain may still fill them)'),
    updatedAt: z.string().nullable(),
  })
  .meta({ id: 'ToolCredentialStatus' });
export type CredentialStatus = z.infer<typeof CredentialStatus>;

export const ExecuteBody = z
  .object({
    arguments: z.record(z.string(), z.unknown()).default({}),
    credentials: z.record(z.string().max(64), z.string().max(16384)).optional().describe('Step 1: values for this call only'),
    credentialOverrides: z
      .record(z.string().max(64), z.string().min(1).max(128))
      .optional()
      .describe('Step 2: field -> the name of a stored secret (yours, else the organization’s)'),
    oauth: z
      .object({ account: z.string().min(1).max(320).optional() })
      .strict()
      .optional()
      .describe('Step 5: which connected account (email, username, display name, provider account id or connection id); the default one otherwise'),
  })
  .strict();
export type ExecuteBody = z.infer<typeof ExecuteBody>;

export const CredentialStep = z.enum(['request', 'override', 'stored', 'secret', 'oauth']);
export type CredentialStep = z.infer<typeof CredentialStep>;

export const ToolExecution = z
  .object({
    id: z.string(),
    tool: z.string(),
    status: z.enum(['completed', 'failed']),
    output: z.unknown().describe('The tool’s answer (null when it failed)'),
    error: z
      .object({
        code: z.string(),
        message: z.string(),
        missingFields: z.array(z.string()).optional(),
        connect: z.object({ provider: z.string(), startUrl: z.string() }).optional(),
      })
      .nullable(),
    credentialSources: z.record(z.string(), CredentialStep).describe('Which step of the chain supplied each field (names only)'),
    connection: z
      .object({ id: z.string(), provider: z.string(), accountId: z.string(), email: z.string().nullable(), username: z.string().nullable() })
      .nullable()
      .describe('The connected account step 5 used'),
    httpStatus: z.number().int().nullable(),
    durationMs: z.number().int(),
  })
  .meta({ id: 'ToolExecution' });
export type ToolExecution = z.infer<typeof ToolExecution>;
