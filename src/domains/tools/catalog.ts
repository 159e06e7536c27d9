/**
 * The catalogue (ADR 0027): the shipped `catalog.json` plus the operator's `HANGAR_TOOLS_CATALOG_FILE`, checked
 * once per app (a bad file stops start-up naming the setting and the tool), argument validators compiled once per
 * schema, and the one egress policy every outbound tool request of this app uses.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Ajv, type ValidateFunction } from 'ajv';
import { ConfigError, type ToolsConfig } from '../../config.js';
import type { Deps } from '../../platform/context.js';
import { deriveKey } from '../../platform/crypto/index.js';
import { egressFetch, type EgressPolicy } from '../../platform/http/egress.js';
import { stateKey } from '../../platform/state.js';
import { type CatalogEntry, CatalogFile, checkEntry } from './definition.js';

const TOOLS_STATE = stateKey('tools', () => ({
  catalog: null as ReadonlyMap<string, CatalogEntry> | null,
  /** Compiled argument validators by a hash of the schema (custom tools' schemas change with their definition). */
  validators: new Map<string, ValidateFunction>(),
  policy: null as EgressPolicy | null,
  /** The egress-guarded fetch the MCP client uses (same policy, so the same pool). */
  fetch: null as typeof fetch | null,
  key: null as Buffer | null,
  ajv: null as Ajv | null,
}));

export const toolsState = (deps: Deps) => deps.state.get(TOOLS_STATE);

function parseCatalog(text: string, where: string, setting: string): CatalogEntry[] {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ConfigError(setting, `${where} is not valid JSON (${(err as Error).message})`);
  }
  const parsed = CatalogFile.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const index = typeof issue.path[1] === 'number' ? issue.path[1] : -1;
    const slug = index >= 0 ? ((json as { tools: { slug?: unknown }[] }).tools[index]?.slug ?? `#${index}`) : '';
    throw new ConfigError(
      setting,
      `${where}: ${slug ? `tool ${String(slug)}: ` : ''}${issue.path.slice(2).join('.') || issue.path.join('.')}: ${issue.message}`,
    );
  }
  const seen = new Set<string>();
  for (const entry of parsed.data.tools) {
    if (entry.execution.type === 'mcp')
      throw new ConfigError(
        setting,
        `${where}: tool ${entry.slug}: MCP tools come from registered servers (POST /v1/tools/custom), not a catalogue file`,
      );
    if (entry.slug.includes('__')) throw new ConfigError(setting, `${where}: tool ${entry.slug}: "__" is reserved for the tools of custom sets`);
    const problems = checkEntry(entry);
    if (problems.length) throw new ConfigError(setting, `${where}: tool ${entry.slug}: ${problems.join('; ')}`);
    if (seen.has(entry.slug)) throw new ConfigError(setting, `${where}: tool ${entry.slug} is defined twice`);
    seen.add(entry.slug);
  }
  return parsed.data.tools;
}

/** The shipped tools, then the operator's file (a slug it repeats replaces the shipped tool). */
export function loadCatalog(config: ToolsConfig): ReadonlyMap<string, CatalogEntry> {
  const shipped = parseCatalog(readFileSync(new URL('./catalog.json', import.meta.url), 'utf8'), 'the shipped catalog.json', 'catalog.json');
  const out = new Map(shipped.map((t) => [t.slug, t]));
  if (config.catalogFile) {
    let text: string;
    try {
      text = readFileSync(config.catalogFile, 'utf8');
    } catch (err) {
      throw new ConfigError('HANGAR_TOOLS_CATALOG_FILE', `${config.catalogFile} cannot be read (${(err as NodeJS.ErrnoException).code ?? err})`);
    }
    for (const t of parseCatalog(text, config.catalogFile, 'HANGAR_TOOLS_CATALOG_FILE')) out.set(t.slug, t);
  }
  return out;
}

export function catalog(deps: Deps): ReadonlyMap<string, CatalogEntry> {
  const s = toolsState(deps);
  s.catalog ??= loadCatalog(deps.config.tools);
  return s.catalog;
}

/**
 * The argument validator of a schema. Tenants write schemas (custom tools, MCP servers), so `pattern` is not
 * evaluated (a hostile regular expression would stall the process: ReDoS); schema size and depth are capped where
 * entries are checked. Formats are not asserted.
 */
export function validatorFor(deps: Deps, schema: Record<string, unknown>): ValidateFunction {
  const s = toolsState(deps);
  const { $schema: _ignored, $id: _id, ...rest } = schema;
  const key = createHash('sha256').update(JSON.stringify(rest)).digest('hex');
  let v = s.validators.get(key);
  if (!v) {
    s.ajv ??= new Ajv({
      strict: false,
      allErrors: false,
      validateFormats: false,
      code: { regExp: Object.assign(() => ({ test: () => true }), { code: 'hangarPatternNotEvaluated' }) },
    });
    try {
      v = s.ajv.compile(rest);
    } catch {
      // A schema Ajv cannot compile (a tenant's): accept any object rather than fail every call; the tool checks its own input.
      v = s.ajv.compile({ type: 'object' });
    }
    if (s.validators.size > 5000) s.validators.clear();
    s.validators.set(key, v);
  }
  return v;
}

/** The egress policy of this app's tool requests (one object, so one connection pool). */
export function toolPolicy(deps: Deps): EgressPolicy {
  const s = toolsState(deps);
  s.policy ??= {
    allowPrivateNetworks: deps.config.tools.allowPrivateNetworks,
    timeoutMs: deps.config.tools.timeoutMs,
    maxResponseBytes: deps.config.tools.maxResponseBytes,
    maxRedirects: 5,
  };
  return s.policy;
}

/** The egress-guarded fetch of this app's MCP client (the same policy, so the same connection pool). */
export function toolFetch(deps: Deps): typeof fetch {
  const s = toolsState(deps);
  const f = s.fetch ?? egressFetch(toolPolicy(deps));
  s.fetch = f;
  return f;
}

/** The key that seals stored tool credentials. */
export function credentialsKey(deps: Deps): Buffer {
  const s = toolsState(deps);
  s.key ??= deriveKey(deps.config.secretKey, 'tool-credentials');
  return s.key;
}
