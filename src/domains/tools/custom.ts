/**
 * Custom tools (ADR 0027): an organization's own HTTP tool, a set imported from an OpenAPI document, or a remote MCP
 * server whose tools are listed through the official SDK. Admins (tools:admin) manage them; each set's tools are
 * installed organization-wide when they appear, and lose their installs and stored credentials when they go.
 */
import { z } from 'zod';
import { requireScope, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { isUniqueViolation } from '../../platform/db/errors.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { ROLE_SCOPES } from '../../platform/scopes.js';
import { recordActivity } from '../activity/index.js';
import { membershipOf } from '../organizations/index.js';
import { catalog, toolFetch } from './catalog.js';
import { resolveCredentials } from './credentials.js';
import { CatalogEntry, CredentialField, checkEntry, HttpExecution, OAuthRequirement, ToolSlug } from './definition.js';
import { type McpSource, mcpHeaders } from './execute.js';
import { listMcpTools, McpError } from './mcp.js';
import { importOpenApi, OPENAPI_MAX_BYTES, parseOpenApiText } from './openapi-import.js';
import * as repo from './repo.js';
import { ORG_OWNER, type CustomRow } from './repo.js';

/** A custom set's slug: a tool slug without "__" (which joins a set and its tools), 64 characters at most. */
export const SetSlug = ToolSlug.max(64).refine((s) => !s.includes('__'), '"__" is reserved (it joins a set and its tools)');

const Common = {
  slug: SetSlug,
  name: z.string().min(1).max(200).optional(),
  description: z.string().max(4000).optional(),
  category: z.string().min(1).max(64).optional(),
};

const HttpTool = z
  .object({
    inputSchema: z.record(z.string(), z.unknown()),
    output: z.string().max(2000).optional(),
    credentials: z.array(CredentialField).max(20).optional(),
    oauth: OAuthRequirement.optional(),
    execution: HttpExecution,
  })
  .strict();

const HeaderTemplates = z.record(z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$/, 'a header name'), z.string().max(4096));

export const CreateCustomBody = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('http'), ...Common, tool: HttpTool }).strict(),
  z
    .object({
      kind: z.literal('openapi'),
      ...Common,
      document: z
        .union([z.string().min(1).max(OPENAPI_MAX_BYTES), z.record(z.string(), z.unknown())])
        .describe('The OpenAPI 3.0/3.1 document: JSON or YAML text, or the JSON object'),
      baseUrl: z.string().url().max(2048).optional().describe('Where its operations are sent (default: the document’s first server)'),
    })
    .strict(),
  z
    .object({
      kind: z.literal('mcp'),
      ...Common,
      url: z.string().url().max(2048).describe('The server’s streamable HTTP endpoint'),
      headers: HeaderTemplates.default({}).describe(
        'Header templates filled by the credential chain: `{"Authorization": "Bearer {{credentials.token}}"}`',
      ),
      credentials: z.array(CredentialField).max(20).default([]).describe('The credential fields the header templates use'),
    })
    .strict(),
]);
export type CreateCustomBody = z.infer<typeof CreateCustomBody>;

export const PatchCustomBody = z
  .object({
    name: z.string().min(1).max(200).optional(),
    description: z.string().max(4000).optional(),
    category: z.string().min(1).max(64).optional(),
    tool: HttpTool.optional(),
    document: z.union([z.string().min(1).max(OPENAPI_MAX_BYTES), z.record(z.string(), z.unknown())]).optional(),
    baseUrl: z.string().url().max(2048).optional(),
    url: z.string().url().max(2048).optional(),
    headers: HeaderTemplates.optional(),
    credentials: z.array(CredentialField).max(20).optional(),
  })
  .strict();
export type PatchCustomBody = z.infer<typeof PatchCustomBody>;

export const CustomToolView = z
  .object({
    id: z.string(),
    slug: z.string(),
    kind: z.enum(['http', 'openapi', 'mcp']),
    name: z.string(),
    description: z.string(),
    tools: z.array(z.string()).describe('The slugs of the tools it yields'),
    skipped: z.array(z.object({ name: z.string(), reason: z.string() })).describe('What could not be made a tool, and why'),
    url: z.string().nullable().describe('MCP: the server; OpenAPI: where operations are sent'),
    headerNames: z.array(z.string()).describe('MCP: the headers sent (their templates are not shown)'),
    credentials: z.array(z.object({ name: z.string(), required: z.boolean() })).describe('MCP: the credential fields its headers use'),
    lastRefreshedAt: z.string().nullable(),
    lastError: z.string().nullable(),
    createdByUserId: z.string(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'CustomTool' });
export type CustomToolView = z.infer<typeof CustomToolView>;

interface Derived {
  tools: CatalogEntry[];
  skipped: { name: string; reason: string }[];
  source: Record<string, unknown>;
  lastError: string | null;
  refreshed: boolean;
}

const entriesOf = (row: CustomRow): CatalogEntry[] => JSON.parse(row.tools) as CatalogEntry[];

/** What a set keeps of what the admin sent: an HTTP tool's definition, an OpenAPI set's base URL, an MCP server. */
interface StoredSource {
  tool?: z.infer<typeof HttpTool>;
  baseUrl?: string | null;
  operations?: number;
  url?: string;
  headers?: Record<string, string>;
  credentials?: { name: string; description: string; required: boolean }[];
}

function toView(row: CustomRow): CustomToolView {
  const source = JSON.parse(row.source) as StoredSource;
  return {
    id: row.id,
    slug: row.slug,
    kind: row.kind,
    name: row.name,
    description: row.description,
    tools: entriesOf(row).map((t) => t.slug),
    skipped: JSON.parse(row.skipped),
    url: row.kind === 'mcp' ? (source.url ?? null) : row.kind === 'openapi' ? (source.baseUrl ?? null) : null,
    headerNames: row.kind === 'mcp' ? Object.keys(source.headers ?? {}) : [],
    credentials:
      row.kind === 'mcp' ? (source.credentials ?? []).map((f: { name: string; required: boolean }) => ({ name: f.name, required: f.required })) : [],
    lastRefreshedAt: row.last_refreshed_at,
    lastError: row.last_error,
    createdByUserId: row.created_by_user_id,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** A tool name as a slug part: lower case, `_` for anything else. */
const slugPart = (name: string) =>
  name
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .toLowerCase()
    .replace(/[^a-z0-9_-]+/g, '_')
    .replace(/^[^a-z]+/, '')
    .slice(0, 60) || 'tool';

function httpEntry(slug: string, meta: { name?: string; description?: string; category?: string }, tool: z.infer<typeof HttpTool>): CatalogEntry {
  const parsed = CatalogEntry.safeParse({
    slug,
    name: meta.name ?? slug,
    description: meta.description ?? '',
    category: meta.category ?? 'custom',
    inputSchema: tool.inputSchema,
    output: tool.output ?? '',
    credentials: tool.credentials ?? [],
    oauth: tool.oauth,
    execution: tool.execution,
  });
  if (!parsed.success) throw errors.invalid(`tool: ${parsed.error.issues[0]!.path.join('.')}: ${parsed.error.issues[0]!.message}`);
  const problems = checkEntry(parsed.data);
  if (problems.length) throw errors.invalidField('tool', problems.join('; '));
  return parsed.data;
}

/** The MCP server's header templates must be sound (the same rules as an HTTP tool's), checked on a stand-in entry. */
function checkMcpSource(source: McpSource): void {
  if (!/^https?:\/\//i.test(source.url)) throw errors.invalidField('url', 'must be an http:// or https:// URL');
  const problems = checkEntry({
    slug: 'mcp_server',
    name: 'x',
    description: '',
    category: 'custom',
    inputSchema: { type: 'object' },
    output: '',
    credentials: source.credentials.map((f) => ({ ...f, description: f.description ?? '' })),
    execution: { type: 'http', method: 'POST', url: source.url, headers: source.headers, query: {}, bodyType: 'json', passArgs: false, response: {} },
  });
  const relevant = problems.filter((p) => !p.startsWith('inputSchema'));
  if (relevant.length) throw errors.invalidField('headers', relevant.join('; '));
}

/** Lists an MCP server's tools with headers filled by the chain (as `ctx`); a failure keeps `previous` and says why. */
async function listServer(ctx: Ctx, slug: string, source: McpSource, previous: CatalogEntry[]): Promise<Derived> {
  const stand = {
    entry: {
      slug,
      name: slug,
      description: '',
      category: 'custom',
      inputSchema: { type: 'object' },
      output: '',
      credentials: source.credentials,
      execution: { type: 'mcp', server: slug, tool: '-' },
    } as CatalogEntry,
    source: 'custom' as const,
    custom: { kind: 'mcp', slug, source: JSON.stringify(source) } as CustomRow,
  };
  const keep = (why: string): Derived => ({ tools: previous, skipped: [], source: { ...source }, lastError: why, refreshed: false });
  const resolved = await resolveCredentials(ctx, stand, {});
  if (resolved.missing.length)
    return keep(`credential field(s) ${resolved.missing.join(', ')} are not available: store them with POST /v1/tools/${slug}/credentials`);
  try {
    const listed = await listMcpTools({
      url: source.url,
      headers: mcpHeaders(source, resolved.values),
      fetch: toolFetch(ctx.deps),
      timeoutMs: ctx.deps.config.tools.timeoutMs,
    });
    const tools: CatalogEntry[] = [];
    const skipped: { name: string; reason: string }[] = [];
    const used = new Set<string>();
    for (const t of listed) {
      let toolSlug = `${slug}__${slugPart(t.name)}`;
      for (let n = 2; used.has(toolSlug); n++) toolSlug = `${slug}__${slugPart(t.name)}_${n}`;
      const inputSchema = t.inputSchema.type === 'object' ? t.inputSchema : { type: 'object', ...t.inputSchema };
      const parsed = CatalogEntry.safeParse({
        slug: toolSlug,
        name: t.name.slice(0, 200),
        description: t.description,
        category: 'mcp',
        inputSchema,
        output: '',
        credentials: [],
        execution: { type: 'mcp', server: slug, tool: t.name },
      });
      const problems = parsed.success ? checkEntry(parsed.data) : [parsed.error.issues[0]!.message];
      if (!parsed.success || problems.length) {
        skipped.push({ name: t.name.slice(0, 200), reason: problems.join('; ').slice(0, 500) });
        continue;
      }
      used.add(toolSlug);
      tools.push(parsed.data);
    }
    return { tools, skipped, source: { ...source }, lastError: null, refreshed: true };
  } catch (err) {
    if (err instanceof McpError || err instanceof AppError) return keep(`${err instanceof McpError ? err.code : err.code}: ${err.message}`);
    throw err;
  }
}

async function derive(ctx: Ctx, slug: string, body: CreateCustomBody, previous: CatalogEntry[]): Promise<Derived> {
  const meta = { name: body.name, description: body.description, category: body.category };
  if (body.kind === 'http')
    return { tools: [httpEntry(slug, meta, body.tool)], skipped: [], source: { tool: body.tool }, lastError: null, refreshed: false };
  if (body.kind === 'openapi') {
    const doc = typeof body.document === 'string' ? parseOpenApiText(body.document) : body.document;
    if (typeof body.document !== 'string' && Buffer.byteLength(JSON.stringify(body.document)) > OPENAPI_MAX_BYTES)
      throw errors.tooLarge(`document is larger than ${OPENAPI_MAX_BYTES} bytes`);
    const r = importOpenApi(doc, { set: slug, baseUrl: body.baseUrl, category: body.category ?? 'custom' });
    if (!r.tools.length)
      throw errors.invalidField(
        'document',
        `no operation could be made a tool: ${r.skipped
          .map((s) => `${s.name}: ${s.reason}`)
          .join('; ')
          .slice(0, 1000)}`,
      );
    const baseUrl = /^https?:\/\/[^/?#]+/.exec(r.tools[0]!.execution.type === 'http' ? r.tools[0]!.execution.url : '')?.[0] ?? null;
    return {
      tools: r.tools,
      skipped: r.skipped,
      source: { baseUrl: body.baseUrl ?? baseUrl, operations: r.tools.length },
      lastError: null,
      refreshed: false,
    };
  }
  const source: McpSource = {
    url: body.url,
    headers: body.headers,
    credentials: body.credentials.map((f) => ({ ...f, description: f.description ?? '' })),
  };
  checkMcpSource(source);
  return listServer(ctx, slug, source, previous);
}

/** Installs the set's new tools for the organization and forgets installs and credentials of the tools it lost. */
async function syncInstalls(tx: Ctx, before: readonly string[], after: readonly string[]) {
  const gone = before.filter((s) => !after.includes(s));
  await repo.deleteInstallsOfSlugs(tx, gone);
  await repo.deleteCredentialsOfSlugs(tx, gone);
  for (const slug of after.filter((s) => !before.includes(s))) {
    if (!(await repo.findInstall(tx, ORG_OWNER, slug)))
      await repo.insertInstall(tx, {
        id: prefixedId('tin'),
        org_id: tx.principal.orgId!,
        user_id: ORG_OWNER,
        slug,
        installed_by_user_id: tx.principal.userId,
        created_at: nowIso(),
      });
  }
}

const activity = (tx: Ctx, row: { id: string; slug: string }, eventType: string, title: string, metadata: Record<string, unknown> = {}) =>
  recordActivity(tx, {
    resourceType: 'tool',
    resourceId: row.slug,
    toolSlug: row.slug,
    eventType,
    status: 'completed',
    title,
    metadata: { customToolId: row.id, ...metadata },
  });

export async function createCustomTool(ctx: Ctx, body: CreateCustomBody): Promise<CustomToolView> {
  requireScope(ctx, 'tools:admin');
  if (catalog(ctx.deps).has(body.slug)) throw errors.conflict(`${body.slug} is a catalogue tool; choose another slug`);
  if (await repo.findCustomBySlug(ctx, body.slug)) throw errors.conflict(`your organization already has a custom tool "${body.slug}"`);
  const d = await derive(ctx, body.slug, body, []);
  const collisions = d.tools.filter((t) => catalog(ctx.deps).has(t.slug)).map((t) => t.slug);
  if (collisions.length) throw errors.conflict(`${collisions.join(', ')} would shadow catalogue tools; choose another slug`);
  const now = nowIso();
  const row: CustomRow = {
    id: prefixedId('ctl'),
    org_id: ctx.principal.orgId!,
    slug: body.slug,
    kind: body.kind,
    name: body.name ?? body.slug,
    description: body.description ?? '',
    source: JSON.stringify(d.source),
    tools: JSON.stringify(d.tools),
    skipped: JSON.stringify(d.skipped),
    last_refreshed_at: d.refreshed ? now : null,
    last_error: d.lastError,
    created_by_user_id: ctx.principal.userId,
    created_at: now,
    updated_at: now,
  };
  try {
    await withTx(ctx, async (tx) => {
      await repo.insertCustom(tx, row);
      await syncInstalls(
        tx,
        [],
        d.tools.map((t) => t.slug),
      );
      await activity(tx, row, 'tool.custom.created', `Custom tool ${row.slug} (${row.kind}) created`, { kind: row.kind, tools: d.tools.length });
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw errors.conflict(`your organization already has a custom tool "${body.slug}"`);
    throw err;
  }
  return toView(row);
}

export async function listCustomTools(ctx: Ctx): Promise<CustomToolView[]> {
  requireScope(ctx, 'tools:read');
  return (await repo.listCustomRows(ctx)).map(toView);
}

async function mustFindCustom(ctx: Ctx, id: string): Promise<CustomRow> {
  const row = await repo.findCustom(ctx, id);
  if (!row) throw errors.notFound('custom tool', id);
  return row;
}

export async function getCustomTool(ctx: Ctx, id: string): Promise<CustomToolView> {
  requireScope(ctx, 'tools:read');
  return toView(await mustFindCustom(ctx, id));
}

/** The create body a row and a patch make together (what the set is now); null when its tools stay as they are. */
function merged(row: CustomRow, patch: PatchCustomBody): CreateCustomBody | null {
  const source = JSON.parse(row.source) as StoredSource;
  const meta = { slug: row.slug, name: patch.name ?? row.name, description: patch.description ?? row.description, category: patch.category };
  const wrong = (fields: string[]) => {
    const bad = fields.filter((f) => (patch as Record<string, unknown>)[f] !== undefined);
    if (bad.length) throw errors.invalid(`${bad.join(', ')} do(es) not apply to a ${row.kind} custom tool`);
  };
  if (row.kind === 'http') {
    wrong(['document', 'baseUrl', 'url', 'headers', 'credentials']);
    return { kind: 'http', ...meta, tool: (patch.tool ?? source.tool)! };
  }
  if (row.kind === 'openapi') {
    wrong(['tool', 'url', 'headers', 'credentials']);
    if (!patch.document && patch.baseUrl) throw errors.invalidField('baseUrl', 'send the document again with a new baseUrl');
    return patch.document ? { kind: 'openapi', ...meta, document: patch.document, baseUrl: patch.baseUrl } : null;
  }
  wrong(['tool', 'document', 'baseUrl']);
  return {
    kind: 'mcp',
    ...meta,
    url: (patch.url ?? source.url)!,
    headers: patch.headers ?? source.headers ?? {},
    credentials: patch.credentials ?? source.credentials ?? [],
  };
}

export async function updateCustomTool(ctx: Ctx, id: string, patch: PatchCustomBody): Promise<CustomToolView> {
  requireScope(ctx, 'tools:admin');
  const row = await mustFindCustom(ctx, id);
  const before = entriesOf(row);
  const body = merged(row, patch);
  // An OpenAPI set without a new document keeps its tools; only its name and description change.
  const d: Derived | null = body ? await derive(ctx, row.slug, body, before) : null;
  const now = nowIso();
  const next: CustomRow = {
    ...row,
    name: patch.name ?? row.name,
    description: patch.description ?? row.description,
    ...(d ? { source: JSON.stringify(d.source), tools: JSON.stringify(d.tools), skipped: JSON.stringify(d.skipped), last_error: d.lastError } : {}),
    ...(d?.refreshed ? { last_refreshed_at: now } : {}),
    updated_at: now,
  };
  await withTx(ctx, async (tx) => {
    await repo.updateCustom(tx, id, {
      name: next.name,
      description: next.description,
      source: next.source,
      tools: next.tools,
      skipped: next.skipped,
      last_error: next.last_error,
      last_refreshed_at: next.last_refreshed_at,
      updated_at: now,
    });
    await syncInstalls(
      tx,
      before.map((t) => t.slug),
      entriesOf(next).map((t) => t.slug),
    );
    await activity(tx, next, 'tool.custom.updated', `Custom tool ${row.slug} updated`, { tools: entriesOf(next).length });
  });
  return toView(next);
}

export async function deleteCustomTool(ctx: Ctx, id: string): Promise<void> {
  requireScope(ctx, 'tools:admin');
  const row = await mustFindCustom(ctx, id);
  await withTx(ctx, async (tx) => {
    await repo.deleteCustomRow(tx, id);
    const slugs = entriesOf(row).map((t) => t.slug);
    await repo.deleteInstallsOfSlugs(tx, slugs);
    await repo.deleteCredentialsOfSlugs(tx, [...slugs, row.slug]);
    await activity(tx, row, 'tool.custom.deleted', `Custom tool ${row.slug} deleted`);
  });
}

/** Lists an MCP server's tools again now; a server that fails keeps its last list, and the error is recorded. */
export async function refreshCustomTool(ctx: Ctx, id: string): Promise<CustomToolView> {
  requireScope(ctx, 'tools:admin');
  const row = await mustFindCustom(ctx, id);
  if (row.kind !== 'mcp') throw errors.invalidState(`only MCP servers are refreshed (this one is ${row.kind})`, row.kind);
  return refreshRow(ctx, row);
}

async function refreshRow(ctx: Ctx, row: CustomRow): Promise<CustomToolView> {
  const before = entriesOf(row);
  const d = await listServer(ctx, row.slug, JSON.parse(row.source) as McpSource, before);
  const now = nowIso();
  const next: CustomRow = {
    ...row,
    tools: JSON.stringify(d.tools),
    skipped: d.refreshed ? JSON.stringify(d.skipped) : row.skipped,
    last_error: d.lastError,
    // A failed refresh is still an attempt: the job does not retry it before the next interval.
    last_refreshed_at: now,
  };
  await withTx(ctx, async (tx) => {
    await repo.updateCustom(tx, row.id, { tools: next.tools, skipped: next.skipped, last_error: next.last_error, last_refreshed_at: now });
    await syncInstalls(
      tx,
      before.map((t) => t.slug),
      d.tools.map((t) => t.slug),
    );
    await activity(
      tx,
      next,
      d.lastError ? 'tool.custom.refresh_failed' : 'tool.custom.refreshed',
      `MCP server ${row.slug} ${d.lastError ? 'could not be refreshed' : 'refreshed'}`,
      {
        tools: d.tools.length,
        ...(d.lastError ? { error: d.lastError.slice(0, 300) } : {}),
      },
    );
  });
  return toView(next);
}

/**
 * The refresh job's pass: every MCP server not refreshed within `intervalMs` (across organizations: the job's one
 * unscoped read), each refreshed inside its organization as its creator with the creator's current role, so the
 * chain fills its headers as it did for them. A creator who has left the organization refreshes nothing: the
 * server keeps its list and says why.
 */
export async function refreshDueMcpServers(deps: Deps, intervalMs: number): Promise<number> {
  const lister = systemCtx(deps, { userId: 'system', orgId: null, role: null, scopes: new Set(), apiKeyId: null });
  const due = await repo.mcpServersDue(lister, new Date(Date.now() - intervalMs).toISOString());
  let n = 0;
  for (const d of due) {
    const member = await membershipOf(deps, d.created_by_user_id, d.org_id);
    const ctx = systemCtx(deps, {
      userId: d.created_by_user_id,
      orgId: d.org_id,
      role: member?.role ?? null,
      scopes: member ? ROLE_SCOPES[member.role] : new Set(),
      apiKeyId: null,
    });
    const row = await repo.findCustom(ctx, d.id);
    if (!row) continue;
    if (!member) {
      await repo.updateCustom(ctx, d.id, {
        last_error: 'its creator is no longer a member of the organization: an admin must refresh or re-create it',
        last_refreshed_at: nowIso(),
      });
      continue;
    }
    await refreshRow(ctx, row).catch((err) => deps.log.warn({ err, customToolId: d.id }, 'refreshing an MCP server failed'));
    n++;
  }
  return n;
}
