/**
 * What a tool is (ADR 0027): the catalogue entry format shared by the shipped catalogue (`catalog.json`), an
 * operator's `HANGAR_TOOLS_CATALOG_FILE`, custom HTTP tools, tools imported from an OpenAPI document and the tools
 * of a registered MCP server. The zod schema is the file format; `checkEntry` adds the rules a schema cannot say.
 */
import { z } from 'zod';

/** A tool slug: lower case, digits, `_` and `-` (an MCP server's or OpenAPI set's tools are `<set>__<name>`). */
export const ToolSlug = z
  .string()
  .min(2)
  .max(128)
  .regex(/^[a-z][a-z0-9_-]*$/, 'lower-case letters, digits, "_" and "-", starting with a letter')
  .refine((s) => s !== 'custom' && s !== 'installed', 'is reserved (a route under /v1/tools)');

/** A credential field's name as a tool declares it (`apiKey`); step 4 of the chain maps it to the secret `APIKEY`. */
export const FieldName = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z][A-Za-z0-9_]*$/, 'letters, digits and "_", starting with a letter');

export const CredentialField = z.object({
  name: FieldName,
  description: z.string().max(500).default(''),
  required: z.boolean().default(true),
});
export type CredentialField = z.infer<typeof CredentialField>;

/**
 * A tool backed by an OAuth provider: step 5 of the chain fills `field` (default `accessToken`) with the access
 * token of the user's connected account of `provider`. The field must also be listed in `credentials`.
 */
export const OAuthRequirement = z.object({
  provider: z.string().min(1).max(64),
  scopes: z.array(z.string().min(1).max(200)).max(50).default([]),
  field: FieldName.default('accessToken'),
});
export type OAuthRequirement = z.infer<typeof OAuthRequirement>;

const templated = z.string().max(4096);

/**
 * An HTTP call. `url` is a template whose scheme and host are literal (so a tool's credentials only ever go to the
 * host its definition names); `headers`, `query` and `body` values are templates. A `body` object is sent as JSON
 * (`bodyType: "json"`, the default) or as a form; a body value that is exactly one `{{args.x}}` keeps x's JSON type.
 * Arguments not used by any template go into the query (GET, DELETE) or the JSON body (others) when `passArgs` is
 * true (the default).
 */
export const HttpExecution = z.object({
  type: z.literal('http'),
  method: z.enum(['GET', 'POST', 'PUT', 'PATCH', 'DELETE']),
  url: z.string().min(8).max(2048),
  headers: z.record(z.string().min(1).max(100), templated).default({}),
  query: z.record(z.string().min(1).max(100), templated).default({}),
  body: z.record(z.string().min(1).max(100), z.unknown()).optional(),
  bodyType: z.enum(['json', 'form']).default('json'),
  passArgs: z.boolean().default(true),
  /** What of the answer the tool returns: a dot path into the JSON (`data.items`), else the whole body. */
  response: z.object({ path: z.string().max(200).optional() }).default({}),
});
export type HttpExecution = z.infer<typeof HttpExecution>;

/** A tool implemented in Hangar itself. */
export const BuiltinExecution = z.object({
  type: z.literal('builtin'),
  name: z.enum(['web_search', 'http_request']),
});
export type BuiltinExecution = z.infer<typeof BuiltinExecution>;

/** One tool of a registered MCP server (custom tools only: never in a catalogue file). */
export const McpExecution = z.object({
  type: z.literal('mcp'),
  /** The custom tool set's slug (the server). */
  server: ToolSlug,
  /** The tool's name on the server. */
  tool: z.string().min(1).max(200),
});
export type McpExecution = z.infer<typeof McpExecution>;

export const Execution = z.discriminatedUnion('type', [HttpExecution, BuiltinExecution, McpExecution]);
export type Execution = z.infer<typeof Execution>;

export const CatalogEntry = z.object({
  slug: ToolSlug,
  name: z.string().min(1).max(200),
  description: z.string().max(4000).default(''),
  category: z.string().min(1).max(64).default('other'),
  /** JSON Schema (draft 2020-12 or 07) of the arguments: an object schema. */
  inputSchema: z.record(z.string(), z.unknown()),
  /** What the tool answers, in words (for people and models). */
  output: z.string().max(2000).default(''),
  credentials: z.array(CredentialField).max(20).default([]),
  oauth: OAuthRequirement.optional(),
  execution: Execution,
});
export type CatalogEntry = z.infer<typeof CatalogEntry>;

/** A catalogue file: `{ "tools": [ ... ] }`. */
export const CatalogFile = z.object({ tools: z.array(CatalogEntry).max(1000) });

/** The largest input schema accepted from a tenant or an operator (bytes of JSON, nesting depth). */
export const SCHEMA_MAX_BYTES = 64 * 1024;
export const SCHEMA_MAX_DEPTH = 32;

function depth(v: unknown, d = 0): number {
  if (d > SCHEMA_MAX_DEPTH) return d;
  if (Array.isArray(v)) return Math.max(d, ...v.map((x) => depth(x, d + 1)));
  if (v && typeof v === 'object') return Math.max(d, ...Object.values(v).map((x) => depth(x, d + 1)));
  return d;
}

/** Every `{{...}}` in a string, each with whether it is a known kind (`args.x` / `credentials.y`). */
function placeholders(s: string): { kind: string; name: string }[] {
  const out: { kind: string; name: string }[] = [];
  for (const m of s.matchAll(/\{\{([^}]*)\}\}/g)) {
    const known = /^\s*(args|credentials)\.([A-Za-z_][A-Za-z0-9_]*)\s*$/.exec(m[1] ?? '');
    out.push(known ? { kind: known[1]!, name: known[2]! } : { kind: 'unknown', name: (m[1] ?? '').trim() });
  }
  return out;
}

/**
 * The rules of an entry beyond its schema; answers the problems found (empty: the entry is sound). The URL's scheme
 * and host must be literal and http(s); credentials may not go into the URL path (paths are logged everywhere);
 * every placeholder names a declared credential field; the OAuth field is a declared field; the input schema is an
 * object schema of bounded size.
 */
export function checkEntry(entry: CatalogEntry): string[] {
  const problems: string[] = [];
  const fields = new Set(entry.credentials.map((f) => f.name));
  if (new Set(entry.credentials.map((f) => f.name.toLowerCase())).size !== entry.credentials.length)
    problems.push('credentials: two fields share a name');
  if (entry.oauth && !fields.has(entry.oauth.field)) problems.push(`oauth.field "${entry.oauth.field}" is not one of the credentials`);
  const schemaJson = JSON.stringify(entry.inputSchema);
  if (Buffer.byteLength(schemaJson) > SCHEMA_MAX_BYTES) problems.push(`inputSchema is larger than ${SCHEMA_MAX_BYTES} bytes`);
  if (depth(entry.inputSchema) > SCHEMA_MAX_DEPTH) problems.push(`inputSchema nests deeper than ${SCHEMA_MAX_DEPTH}`);
  if (entry.inputSchema.type !== 'object') problems.push('inputSchema must have "type": "object"');
  const ex = entry.execution;
  if (ex.type === 'http') {
    const url = ex.url;
    const origin = /^(https?):\/\/([^/?#{}]+)(.*)$/.exec(url);
    if (!origin) problems.push('execution.url must start with http:// or https:// and a literal host (no placeholder before the path)');
    else {
      const rest = origin[3] ?? '';
      const pathPart = rest.split('?')[0] ?? '';
      if (placeholders(pathPart).some((p) => p.kind === 'credentials')) problems.push('execution.url: credentials may not go into the URL path');
      if (/@/.test(origin[2] ?? '')) problems.push('execution.url may not carry user:password@');
    }
    const strings: [string, string][] = [
      ['execution.url', url],
      ...Object.entries(ex.headers).map(([k, v]) => [`execution.headers.${k}`, v] as [string, string]),
      ...Object.entries(ex.query).map(([k, v]) => [`execution.query.${k}`, v] as [string, string]),
      ...collectStrings(ex.body ?? {}, 'execution.body'),
    ];
    for (const [where, s] of strings) {
      for (const p of placeholders(s)) {
        if (p.kind === 'unknown') problems.push(`${where}: unknown placeholder {{${p.name}}} (use {{args.x}} or {{credentials.y}})`);
        else if (p.kind === 'credentials' && !fields.has(p.name))
          problems.push(`${where}: {{credentials.${p.name}}} is not a declared credential field`);
      }
    }
    for (const k of Object.keys(ex.headers)) {
      if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(k)) problems.push(`execution.headers: "${k}" is not a valid header name`);
    }
  }
  if (ex.type === 'builtin' && entry.credentials.length && ex.name === 'http_request') problems.push('http_request takes no credentials');
  return problems;
}

function collectStrings(v: unknown, where: string): [string, string][] {
  if (typeof v === 'string') return [[where, v]];
  if (Array.isArray(v)) return v.flatMap((x, i) => collectStrings(x, `${where}[${i}]`));
  if (v && typeof v === 'object') return Object.entries(v).flatMap(([k, x]) => collectStrings(x, `${where}.${k}`));
  return [];
}

/** The hosts an entry's requests go to (what the catalogue shows, and where its credentials may be sent). */
export function entryHosts(entry: CatalogEntry): string[] {
  if (entry.execution.type !== 'http') return [];
  const m = /^https?:\/\/([^/?#]+)/.exec(entry.execution.url);
  return m ? [m[1]!.toLowerCase()] : [];
}
