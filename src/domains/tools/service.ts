/** The catalogue as an organization sees it, installs, and stored credentials (ADR 0027). */
import { requireScope, withTx, type Ctx } from '../../platform/context.js';
import { decrypt, encrypt } from '../../platform/crypto/index.js';
import { isUniqueViolation } from '../../platform/db/errors.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { decodeCursor, toPage } from '../../platform/http/pagination.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { existingSecretNames, normalizeSecretName } from '../secrets/index.js';
import { catalog, credentialsKey } from './catalog.js';
import { type CatalogEntry, entryHosts } from './definition.js';
import * as repo from './repo.js';
import { ORG_OWNER, type CustomRow, type InstallRow } from './repo.js';
import type { CredentialStatus, Install, InstallScope, ListToolsQuery, ToolView } from './schemas.js';

export interface FoundTool {
  entry: CatalogEntry;
  source: 'catalog' | 'custom';
  /** The custom set it belongs to. */
  custom?: CustomRow;
}

const entriesOf = (row: CustomRow): CatalogEntry[] => JSON.parse(row.tools) as CatalogEntry[];

/** The custom tools of the caller's organization, each with its set. */
async function customTools(ctx: Ctx): Promise<FoundTool[]> {
  const rows = await repo.listCustomRows(ctx);
  return rows.flatMap((row) => entriesOf(row).map((entry) => ({ entry, source: 'custom' as const, custom: row })));
}

/** A tool by slug: the catalogue's, else one of the organization's custom tools (`<set>` or `<set>__<name>`). */
export async function findTool(ctx: Ctx, slug: string): Promise<FoundTool | null> {
  const shipped = catalog(ctx.deps).get(slug);
  if (shipped) return { entry: shipped, source: 'catalog' };
  const set = slug.split('__')[0]!;
  const row = await repo.findCustomBySlug(ctx, set);
  const entry = row && entriesOf(row).find((e) => e.slug === slug);
  return row && entry ? { entry, source: 'custom', custom: row } : null;
}

async function mustFind(ctx: Ctx, slug: string): Promise<FoundTool> {
  const found = await findTool(ctx, slug);
  if (!found) throw errors.notFound('tool', slug);
  return found;
}

/** Why a tool cannot run on this installation, or null. */
export function unavailableReason(ctx: Ctx, entry: CatalogEntry): string | null {
  if (entry.execution.type === 'builtin' && entry.execution.name === 'web_search' && !ctx.deps.config.tools.search)
    return 'no search provider is configured on this server (HANGAR_SEARCH_PROVIDER and HANGAR_SEARCH_API_KEY)';
  return null;
}

function toView(ctx: Ctx, t: FoundTool, installs: readonly InstallRow[]): ToolView {
  const { entry } = t;
  const reason = unavailableReason(ctx, entry);
  const mine = installs.filter((i) => i.slug === entry.slug);
  return {
    slug: entry.slug,
    name: entry.name,
    description: entry.description,
    category: entry.category,
    source: t.source,
    inputSchema: entry.inputSchema,
    output: entry.output,
    credentials: entry.credentials.map((f) => ({ ...f, oauth: entry.oauth?.field === f.name })),
    oauth: entry.oauth ? { provider: entry.oauth.provider, scopes: entry.oauth.scopes } : null,
    execution: {
      type: entry.execution.type,
      ...(entry.execution.type === 'http' ? { method: entry.execution.method } : {}),
      hosts: t.custom?.kind === 'mcp' ? mcpHosts(t.custom) : entryHosts(entry),
    },
    available: reason === null,
    unavailableReason: reason,
    installed: { user: mine.some((i) => i.user_id !== ORG_OWNER), organization: mine.some((i) => i.user_id === ORG_OWNER) },
  };
}

function mcpHosts(row: CustomRow): string[] {
  try {
    return [new URL((JSON.parse(row.source) as { url: string }).url).host.toLowerCase()];
  } catch {
    return [];
  }
}

/** The catalogue and the organization's custom tools, filtered and paged by slug. */
export async function listTools(ctx: Ctx, query: ListToolsQuery) {
  requireScope(ctx, 'tools:read');
  const after = query.cursor ? String(decodeCursor(query.cursor, 1)[0]) : null;
  const words = (query.q ?? '').toLowerCase().split(/\s+/).filter(Boolean);
  const all = [...[...catalog(ctx.deps).values()].map((entry) => ({ entry, source: 'catalog' as const })), ...(await customTools(ctx))]
    .filter(({ entry }) => !query.category || entry.category === query.category)
    .filter(({ entry }) => {
      const text = `${entry.slug} ${entry.name} ${entry.description}`.toLowerCase();
      return words.every((w) => text.includes(w));
    })
    .filter(({ entry }) => after === null || entry.slug > after)
    .sort((a, b) => (a.entry.slug < b.entry.slug ? -1 : 1))
    .slice(0, query.limit + 1);
  const installs = await repo.installsOf(
    ctx,
    all.map((t) => t.entry.slug),
  );
  const p = toPage(all, query.limit, (t) => [t.entry.slug]);
  return { items: p.items.map((t) => toView(ctx, t, installs)), hasMore: p.hasMore, nextCursor: p.nextCursor };
}

export async function getTool(ctx: Ctx, slug: string): Promise<ToolView> {
  requireScope(ctx, 'tools:read');
  const t = await mustFind(ctx, slug);
  return toView(ctx, t, await repo.installsOf(ctx, [slug]));
}

// ---- installs ----

const ownerOf = (ctx: Ctx, scope: InstallScope) => (scope === 'organization' ? ORG_OWNER : ctx.principal.userId);

/** Organization-wide installs need tools:admin, which only admins' credentials can hold. */
function requireScopeAdmin(ctx: Ctx, scope: InstallScope) {
  if (scope === 'organization') requireScope(ctx, 'tools:admin');
}

/** An activity event about one tool (its installs and stored credentials), in the caller's transaction. */
const toolActivity = (tx: Ctx, slug: string, eventType: string, title: string, metadata: Record<string, unknown>) =>
  recordActivity(tx, { resourceType: 'tool', resourceId: slug, toolSlug: slug, eventType, status: 'completed', title, metadata });

const toInstall = (row: InstallRow): Install => ({
  slug: row.slug,
  scope: row.user_id === ORG_OWNER ? 'organization' : 'user',
  installedByUserId: row.installed_by_user_id,
  createdAt: row.created_at,
});

/** Installs a tool for the caller or (admins, tools:admin) the organization; installing again answers the existing install. */
export async function installTool(ctx: Ctx, slug: string, scope: InstallScope): Promise<{ install: Install; created: boolean }> {
  requireScope(ctx, 'tools:write');
  requireScopeAdmin(ctx, scope);
  await mustFind(ctx, slug);
  const owner = ownerOf(ctx, scope);
  return withTx(ctx, async (tx) => {
    const existing = await repo.findInstall(tx, owner, slug);
    if (existing) return { install: toInstall(existing), created: false };
    const row: InstallRow = {
      id: prefixedId('tin'),
      org_id: ctx.principal.orgId!,
      user_id: owner,
      slug,
      installed_by_user_id: ctx.principal.userId,
      created_at: nowIso(),
    };
    try {
      await repo.insertInstall(tx, row);
    } catch (err) {
      if (isUniqueViolation(err)) throw errors.conflict(`${slug} is being installed by another request; try again`);
      throw err;
    }
    await toolActivity(tx, slug, 'tool.installed', `Tool ${slug} installed${scope === 'organization' ? ' for the organization' : ''}`, { scope });
    return { install: toInstall(row), created: true };
  });
}

export async function uninstallTool(ctx: Ctx, slug: string, scope: InstallScope): Promise<void> {
  requireScope(ctx, 'tools:write');
  requireScopeAdmin(ctx, scope);
  await withTx(ctx, async (tx) => {
    if (!(await repo.deleteInstall(tx, ownerOf(ctx, scope), slug)))
      throw errors.notFound(`${scope === 'organization' ? "the organization's" : 'your'} install of tool`, slug);
    await toolActivity(tx, slug, 'tool.uninstalled', `Tool ${slug} uninstalled${scope === 'organization' ? ' for the organization' : ''}`, { scope });
  });
}

/** The caller's and the organization's installs, with their tools (an install whose custom tool is gone is left out). */
export async function listInstalled(ctx: Ctx): Promise<(Install & { tool: ToolView })[]> {
  requireScope(ctx, 'tools:read');
  const installs = await repo.visibleInstalls(ctx);
  const out: (Install & { tool: ToolView })[] = [];
  for (const row of installs) {
    const t = await findTool(ctx, row.slug);
    if (t) out.push({ ...toInstall(row), tool: toView(ctx, t, installs) });
  }
  return out;
}

/** Which of these slugs the caller can run: neither the caller nor the organization has installed the rest. */
export async function toolsNotInstalled(ctx: Ctx, slugs: readonly string[]): Promise<string[]> {
  const installed = new Set((await repo.installsOf(ctx, slugs)).map((r) => r.slug));
  return slugs.filter((s) => !installed.has(s));
}

export async function requireInstalled(ctx: Ctx, slug: string): Promise<void> {
  if ((await toolsNotInstalled(ctx, [slug])).length)
    throw new AppError('tool_not_installed', `tool ${slug} is not installed: install it with POST /v1/tools/${slug}/install`);
}

// ---- stored credentials ----

/** Where a tool's credentials are stored: an MCP server's tools share the server's. */
export const credentialSlug = (t: FoundTool) => (t.custom?.kind === 'mcp' ? t.custom.slug : t.entry.slug);

/** The fields a tool (or, for an MCP tool, its server) takes. */
export function credentialFields(t: FoundTool): CatalogEntry['credentials'] {
  if (t.custom?.kind === 'mcp') return (JSON.parse(t.custom.source) as { credentials?: CatalogEntry['credentials'] }).credentials ?? [];
  return t.entry.credentials;
}

const credentialsAad = (org: string, owner: string, slug: string) => `${org}:${owner || '*'}:${slug}`;

export function openCredentials(ctx: Ctx, row: repo.CredentialsRow): Record<string, string> {
  return JSON.parse(decrypt(credentialsKey(ctx.deps), row.values_ciphertext, credentialsAad(row.org_id, row.user_id, row.slug))) as Record<
    string,
    string
  >;
}

/** The organization's stored credentials need credentials:admin (admins only), as organization secrets do. */
function requireCredentialScope(ctx: Ctx, scope: InstallScope) {
  if (scope === 'organization') requireScope(ctx, 'credentials:admin');
}

/** Whose credentials a slug names: a tool's own, or (an MCP server's slug) the server's, which all its tools share. */
async function credentialTarget(ctx: Ctx, slug: string): Promise<{ key: string; fields: CatalogEntry['credentials'] }> {
  const t = await findTool(ctx, slug);
  if (t) return { key: credentialSlug(t), fields: credentialFields(t) };
  const server = await repo.findCustomBySlug(ctx, slug);
  if (server?.kind === 'mcp')
    return { key: slug, fields: (JSON.parse(server.source) as { credentials?: CatalogEntry['credentials'] }).credentials ?? [] };
  throw errors.notFound('tool', slug);
}

/** Stores (merging into what is there) credential fields of a tool; unknown fields are a 400 naming them. */
export async function putToolCredentials(ctx: Ctx, slug: string, scope: InstallScope, values: Record<string, string>): Promise<CredentialStatus> {
  requireScope(ctx, 'tools:write');
  requireCredentialScope(ctx, scope);
  const { key, fields } = await credentialTarget(ctx, slug);
  const known = new Set(fields.map((f) => f.name));
  const unknown = Object.keys(values).filter((f) => !known.has(f));
  if (unknown.length)
    throw errors.invalid(
      `unknown credential field(s) for ${slug}: ${unknown.join(', ')}; it takes ${[...known].join(', ') || 'none'}`,
      unknown.map((f) => ({ path: f, message: 'not a credential field of this tool' })),
    );
  if (!Object.keys(values).length) throw errors.invalid('send at least one credential field');
  const owner = ownerOf(ctx, scope);
  const org = ctx.principal.orgId!;
  await withTx(ctx, async (tx) => {
    const existing = await repo.findCredentials(tx, owner, key);
    const merged = { ...(existing ? openCredentials(tx, existing) : {}), ...values };
    const sealed = encrypt(credentialsKey(ctx.deps), JSON.stringify(merged), credentialsAad(org, owner, key));
    const now = nowIso();
    const names = JSON.stringify(Object.keys(merged).sort());
    if (existing)
      await repo.updateCredentials(tx, existing.id, {
        fields: names,
        values_ciphertext: sealed,
        updated_by_user_id: ctx.principal.userId,
        updated_at: now,
      });
    else {
      try {
        await repo.insertCredentials(tx, {
          id: prefixedId('tcr'),
          org_id: org,
          user_id: owner,
          slug: key,
          fields: names,
          values_ciphertext: sealed,
          updated_by_user_id: ctx.principal.userId,
          created_at: now,
          updated_at: now,
        });
      } catch (err) {
        if (isUniqueViolation(err)) throw errors.conflict('these credentials are being stored by another request; try again');
        throw err;
      }
    }
    await toolActivity(
      tx,
      slug,
      'tool.credentials.updated',
      `Credentials of ${slug} stored${scope === 'organization' ? ' for the organization' : ''}`,
      { scope, fields: Object.keys(values).sort() },
    );
  });
  return getToolCredentials(ctx, slug, scope);
}

/** Which fields are stored (never values), and which required fields neither the caller nor the organization stored. */
export async function getToolCredentials(ctx: Ctx, slug: string, scope: InstallScope): Promise<CredentialStatus> {
  requireScope(ctx, 'tools:read');
  const { key, fields } = await credentialTarget(ctx, slug);
  const rows = await repo.credentialsFor(ctx, key);
  const here = rows.find((r) => r.user_id === ownerOf(ctx, scope));
  const storedAnywhere = new Set(rows.flatMap((r) => JSON.parse(r.fields) as string[]));
  return {
    slug,
    scope,
    stored: Boolean(here),
    fields: here ? (JSON.parse(here.fields) as string[]) : [],
    missingRequired: fields.filter((f) => f.required && !storedAnywhere.has(f.name)).map((f) => f.name),
    updatedAt: here?.updated_at ?? null,
  };
}

export async function deleteToolCredentials(ctx: Ctx, slug: string, scope: InstallScope): Promise<void> {
  requireScope(ctx, 'tools:write');
  requireCredentialScope(ctx, scope);
  const { key } = await credentialTarget(ctx, slug);
  await withTx(ctx, async (tx) => {
    const row = await repo.findCredentials(tx, ownerOf(ctx, scope), key);
    if (!row) throw errors.notFound(`stored credentials (${scope}) of tool`, slug);
    await repo.deleteCredentialsRow(tx, row.id);
    await toolActivity(
      tx,
      slug,
      'tool.credentials.deleted',
      `Credentials of ${slug} deleted${scope === 'organization' ? ' for the organization' : ''}`,
      { scope },
    );
  });
}

/**
 * For an installable agent's report: the required fields that neither stored credentials nor a secret named after
 * the field (steps 3 and 4 of the chain) would fill, and the OAuth provider step 5 would use.
 */
export async function credentialStatus(ctx: Ctx, slug: string): Promise<{ missingRequired: string[]; oauthProvider: string | null }> {
  const t = await mustFind(ctx, slug);
  const rows = await repo.credentialsFor(ctx, credentialSlug(t));
  const stored = new Set(rows.flatMap((r) => JSON.parse(r.fields) as string[]));
  const candidates = credentialFields(t).filter((f) => f.required && !stored.has(f.name) && t.entry.oauth?.field !== f.name);
  const secrets = await existingSecretNames(
    ctx.deps,
    ctx.principal.orgId!,
    ctx.principal.userId,
    candidates.map((f) => f.name),
  );
  return {
    missingRequired: candidates.filter((f) => !secrets.has(normalizeSecretName(f.name))).map((f) => f.name),
    oauthProvider: t.entry.oauth?.provider ?? null,
  };
}
