/**
 * Every scope a credential can hold, and the one table mapping roles to scopes.
 * Wildcards (`*`, `sandbox:*`) are accepted on API keys and expanded against this catalogue.
 */
export const SCOPES = {
  'org:read': 'Read the organization, its projects and its members',
  'org:admin': 'Administer the organization: members, keys of others, settings; organization-admin surfaces',
  'org:create': 'Create new organizations',
  'projects:read': 'Read projects and their resource pins',
  'projects:write': 'Change projects and their resource pins',
  'api_keys:read': 'List API keys (own keys; all keys with org:admin)',
  'api_keys:write': 'Create and revoke API keys (own keys; all keys with org:admin)',
  'activity:read': 'Read the activity log',
  'storage:read': 'List and download workspace files',
  'storage:write': 'Upload, move and delete workspace files',
  'billing:read': 'Read credits, plan and usage (organization admins)',
  'billing:write': 'Top up credits and change billing settings (organization admins)',
  'usage:read': 'Read your own usage (GET /v1/billing/my-usage); everyone’s needs billing:read too',
  'connections:read': 'List your connected OAuth accounts and the provider catalogue',
  'connections:write': 'Connect, set the default of and disconnect your OAuth accounts',
  'connections:use': 'Let tools and channels act through your connected accounts (tokens are never returned)',
  'credentials:admin': 'Manage OAuth provider configs and organization credentials',
  'execute:run': 'Run code in one-shot sandboxes (POST /v1/execute)',
  'sandbox:read': 'List and read persistent sandboxes, their processes and files',
  'sandbox:write': 'Create, pause, resume and destroy sandboxes; run commands and change files in them',
  'templates:read': 'Read sandbox templates and their build logs',
  'templates:write': 'Create and delete custom sandbox templates',
  'secrets:read': 'List the names of your own and the organization’s secrets',
  'secrets:write': 'Create, replace and delete your own secrets (organization secrets need credentials:admin too)',
  'models:use': 'List available models and call platform models through the model proxy',
  'agent:read': 'Read agents, runs and threads',
  'agent:run': 'Run agents and change threads',
  'agent:write': 'Create, change and delete agent definitions',
  'tools:read': 'Browse the tool catalogue and see installed tools and which credential fields are stored',
  'tools:write': 'Install and uninstall tools for yourself; store and delete your own tool credentials',
  'tools:execute': 'Execute installed tools (credentials are resolved on the server and never returned)',
  'tools:admin': 'Install tools for the whole organization and manage custom tools and MCP servers',
  'runmesh:read': 'Read device mesh nodes',
  'runmesh:write': 'Change and revoke device mesh nodes',
  'channels:read': 'Read messaging channels, their privacy settings, requests and grants',
  'channels:write': 'Connect, change and delete messaging channels; approve senders and manage grants',
  'apps:read': 'Read product apps, their channel bindings and channel identity links',
  'apps:write': 'Manage product apps, channel bindings, link sessions and channel identity links',
  'sessions:read': 'Read your context sessions and their blocks',
  'sessions:write': 'Create, fork, compact and delete your context sessions and change their blocks',
  'deployments:read': 'Read deployments, their invocations and webhook deliveries',
  'deployments:write': 'Create, change and delete deployments; rotate their webhook secrets; redeliver webhooks',
  'deployments:invoke': 'Invoke deployments (POST /v1/deployments/{id}/invoke)',
  'triggers:read': 'Read agent triggers',
  'triggers:write': 'Create, change, pause, resume and delete agent triggers',
  'workflows:read': 'Read workflows, their versions, triggers and runs',
  'workflows:write': 'Create, change and delete workflows and their triggers',
  'workflows:run': 'Start and cancel workflow runs',
} as const;

/**
 * Scopes no person's credential can hold (not in ALL_SCOPES, so no role grants them and no API key can ask for
 * them): a linked device's own credential (`hgd_…`, ADR 0029) holds only `runmesh:device`.
 */
export const DEVICE_SCOPES = {
  'runmesh:device': 'A linked device’s own credential: its dispatch connection, its runs’ model calls and frames',
} as const;

export type Scope = keyof typeof SCOPES | keyof typeof DEVICE_SCOPES;
export const ALL_SCOPES = Object.keys(SCOPES) as Scope[];

export type Role = 'admin' | 'member';
export const ROLES: readonly Role[] = ['admin', 'member'];

const ADMIN_ONLY: ReadonlySet<Scope> = new Set(['org:admin', 'billing:read', 'billing:write', 'credentials:admin', 'tools:admin']);

export const ROLE_SCOPES: Readonly<Record<Role, ReadonlySet<Scope>>> = {
  admin: new Set(ALL_SCOPES),
  member: new Set(ALL_SCOPES.filter((s) => !ADMIN_ONLY.has(s))),
};

/** True when `pattern` is a known scope or a wildcard that matches at least one. */
export function isValidScopePattern(pattern: string): boolean {
  return expandScopes([pattern]).size > 0;
}

/** Expands scope patterns (`*`, `prefix:*`, exact names) into the concrete scopes they grant. */
export function expandScopes(patterns: readonly string[]): Set<Scope> {
  const out = new Set<Scope>();
  for (const p of patterns) {
    if (p === '*') {
      for (const s of ALL_SCOPES) out.add(s);
    } else if (p.endsWith(':*')) {
      const prefix = p.slice(0, -1);
      for (const s of ALL_SCOPES) if (s.startsWith(prefix)) out.add(s);
    } else if ((ALL_SCOPES as string[]).includes(p)) out.add(p as Scope);
  }
  return out;
}

/**
 * What work done later for a member (a queued invocation, a trigger firing) may do: the scopes the credential
 * that asked for it held, within what the member's role grants now (a demotion or a narrower key both narrow it).
 */
export function scopesNow(role: Role, granted: readonly string[]): Set<Scope> {
  const roleScopes = ROLE_SCOPES[role];
  return new Set(granted.filter((s): s is Scope => roleScopes.has(s as Scope)));
}
