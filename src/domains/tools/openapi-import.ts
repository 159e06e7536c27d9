/**
 * OpenAPI 3.0/3.1 import: one catalogue entry (definition.ts) per operation. The document is tenant input, so every
 * step is bounded: the text's size, YAML aliases and nesting at parse time; `$ref` expansion per operation (local refs
 * only, cycles cut, a node budget); at most MAX_OPERATIONS operations. An operation that cannot be expressed as an
 * HTTP tool is skipped with a reason rather than imported half-working.
 */
import { parseDocument } from 'yaml';
import { errors } from '../../platform/http/errors.js';
import { CatalogEntry, type CredentialField, checkEntry, type HttpExecution, ToolSlug } from './definition.js';

export interface ImportResult {
  tools: CatalogEntry[];
  skipped: { name: string; reason: string }[];
}

export const OPENAPI_MAX_BYTES = 1024 * 1024;
/** Nesting of the parsed document; real documents stay far below it. */
export const OPENAPI_MAX_DEPTH = 64;
/** YAML aliases a document may expand (the `yaml` package's guard against "billion laughs"). */
const MAX_ALIASES = 100;
export const MAX_OPERATIONS = 200;
/** Nodes one operation may expand through `$ref`s before it is skipped. */
export const REF_BUDGET = 10_000;
const MAX_SLUG = 128;

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;
const SUPPORTED = new Set(['get', 'put', 'post', 'delete', 'patch']);
/** Headers the executor sets itself (or that security supplies); never tool arguments. */
const RESERVED_HEADERS = new Set(['authorization', 'content-type', 'accept']);
/** Schema keywords kept in an input schema: JSON Schema that both draft-07 and 2020-12 validators understand. */
const SCHEMA_KEYS = new Set([
  'type',
  'title',
  'description',
  'enum',
  'const',
  'format',
  'default',
  'items',
  'properties',
  'required',
  'additionalProperties',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'multipleOf',
  'minLength',
  'maxLength',
  'pattern',
  'minItems',
  'maxItems',
  'uniqueItems',
  'minProperties',
  'maxProperties',
  'oneOf',
  'anyOf',
  'allOf',
  'not',
]);

type Obj = Record<string, unknown>;

/** Why one operation is skipped; caught per operation. */
class Skip extends Error {}

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown): string | undefined => (typeof v === 'string' && v.trim() ? v.trim() : undefined);

/** Sets an own property even for keys like `__proto__` (document keys are untrusted). */
function put(o: Obj, k: string, v: unknown): void {
  Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
}

function tooDeep(v: unknown, max: number): boolean {
  const walk = (x: unknown, d: number): boolean => {
    if (d > max) return true;
    if (x === null || typeof x !== 'object') return false;
    for (const c of Array.isArray(x) ? x : Object.values(x)) if (walk(c, d + 1)) return true;
    return false;
  };
  return walk(v, 0);
}

/**
 * The deepest nesting of `[` and `{` (a linear scan that ignores quoting: brackets inside strings only make it
 * larger, so real documents stay far below the limit while a bracket bomb is caught before the parser sees it).
 */
function flowDepth(text: string): number {
  let depth = 0;
  let max = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 91 || c === 123) max = Math.max(max, ++depth);
    else if ((c === 93 || c === 125) && depth > 0) depth--;
  }
  return max;
}

/** Parses an OpenAPI document given as JSON or YAML text, refusing oversized text, alias bombs and deep nesting. */
export function parseOpenApiText(text: string): unknown {
  if (Buffer.byteLength(text, 'utf8') > OPENAPI_MAX_BYTES) throw errors.invalid(`the OpenAPI document is larger than ${OPENAPI_MAX_BYTES} bytes`);
  if (!text.trim()) throw errors.invalid('the OpenAPI document is empty');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    // The YAML parser takes seconds on a few hundred thousand nested brackets: refuse deep flow nesting before it starts.
    if (flowDepth(text) > OPENAPI_MAX_DEPTH) throw errors.invalid(`the OpenAPI document nests deeper than ${OPENAPI_MAX_DEPTH}`);
    const doc = parseDocument(text, { uniqueKeys: true, prettyErrors: false });
    const first = doc.errors[0];
    if (first) {
      const stack = /call stack/i.test(first.message);
      throw errors.invalid(
        stack ? `the OpenAPI document nests deeper than ${OPENAPI_MAX_DEPTH}` : `the OpenAPI document is not valid JSON or YAML: ${first.message}`,
      );
    }
    try {
      value = doc.toJS({ maxAliasCount: MAX_ALIASES });
    } catch (e) {
      throw errors.invalid(`the OpenAPI document uses too many YAML aliases (${(e as Error).message})`);
    }
  }
  // A YAML alias may point at its own ancestor, which makes a cyclic value: it fails this check too.
  if (tooDeep(value, OPENAPI_MAX_DEPTH)) throw errors.invalid(`the OpenAPI document nests deeper than ${OPENAPI_MAX_DEPTH}`);
  return value;
}

/** Expands local `$ref`s of one operation within a shared node budget; a cycle becomes `{}` where it recurs. */
class Resolver {
  private used = 0;
  constructor(private readonly root: Obj) {}

  private lookup(ref: string): unknown {
    if (!ref.startsWith('#')) throw new Skip(`external $ref "${ref.slice(0, 200)}" is not supported`);
    let node: unknown = this.root;
    const pointer = decodeURIComponent(ref.slice(1));
    if (pointer && !pointer.startsWith('/')) throw new Skip(`$ref "${ref.slice(0, 200)}" is not a JSON pointer`);
    for (const raw of pointer.split('/').slice(1)) {
      const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
      if (Array.isArray(node) && /^\d+$/.test(key)) node = node[Number(key)];
      else if (isObj(node) && Object.hasOwn(node, key)) node = node[key];
      else throw new Skip(`$ref "${ref.slice(0, 200)}" does not resolve`);
    }
    return node;
  }

  /** The node a `$ref` chain ends at, not expanded further; undefined when it does not resolve locally. */
  follow(node: unknown): unknown {
    for (let hops = 0; isObj(node) && typeof node.$ref === 'string'; hops++) {
      if (hops > 16) return undefined;
      try {
        node = this.lookup(node.$ref);
      } catch {
        return undefined;
      }
    }
    return node;
  }

  resolve(node: unknown, stack: string[] = []): unknown {
    if (++this.used > REF_BUDGET) throw new Skip(`expanding its $refs takes more than ${REF_BUDGET} nodes`);
    if (stack.length > OPENAPI_MAX_DEPTH) throw new Skip(`its schemas nest deeper than ${OPENAPI_MAX_DEPTH}`);
    if (Array.isArray(node)) return node.map((x) => this.resolve(x, stack));
    if (!isObj(node)) return node;
    const ref = node.$ref;
    if (typeof ref === 'string') {
      if (stack.includes(ref)) return {};
      const target = this.resolve(this.lookup(ref), [...stack, ref]);
      // Siblings of $ref (3.1 allows summary/description next to it) override the target's.
      const siblings = Object.entries(node).filter(([k]) => k !== '$ref');
      if (!siblings.length || !isObj(target)) return target;
      const out: Obj = { ...target };
      for (const [k, v] of siblings) put(out, k, this.resolve(v, [...stack, ref]));
      return out;
    }
    const out: Obj = {};
    for (const [k, v] of Object.entries(node)) put(out, k, this.resolve(v, [...stack, '']));
    return out;
  }
}

/**
 * An OpenAPI schema (refs already expanded) as plain JSON Schema: OpenAPI-only keywords (`nullable`, `example`,
 * `discriminator`, `xml`, ...) dropped or translated, so a strict validator compiles it.
 */
function toJsonSchema(s: unknown, v30: boolean): Obj {
  if (s === true || !isObj(s)) return {};
  const out: Obj = {};
  for (const [k, v] of Object.entries(s)) {
    if (!SCHEMA_KEYS.has(k)) continue;
    if (k === 'properties' && isObj(v)) {
      const props: Obj = {};
      for (const [pk, pv] of Object.entries(v)) put(props, pk, toJsonSchema(pv, v30));
      out.properties = props;
    } else if ((k === 'items' || k === 'not') && (isObj(v) || typeof v === 'boolean')) out[k] = typeof v === 'boolean' ? v : toJsonSchema(v, v30);
    else if (k === 'additionalProperties') out[k] = typeof v === 'boolean' ? v : toJsonSchema(v, v30);
    else if ((k === 'oneOf' || k === 'anyOf' || k === 'allOf') && Array.isArray(v)) out[k] = v.map((x) => toJsonSchema(x, v30));
    else if ((k === 'exclusiveMinimum' || k === 'exclusiveMaximum') && typeof v === 'boolean') {
      // OpenAPI 3.0 (draft 4 style): a boolean that turns minimum/maximum exclusive.
      const bound = k === 'exclusiveMinimum' ? 'minimum' : 'maximum';
      if (v && typeof s[bound] === 'number') out[k] = s[bound];
    } else if (k === 'required' && !Array.isArray(v)) continue;
    else out[k] = v;
  }
  if (typeof out.exclusiveMinimum === 'number' && s.exclusiveMinimum === true) delete out.minimum;
  if (typeof out.exclusiveMaximum === 'number' && s.exclusiveMaximum === true) delete out.maximum;
  if (v30 && s.nullable === true && typeof out.type === 'string') out.type = [out.type, 'null'];
  return out;
}

/** A name usable in `{{args.x}}` / `{{credentials.y}}`. */
function argName(name: string): string {
  const n = name.replace(/[^A-Za-z0-9_]/g, '_');
  return /^[A-Za-z_]/.test(n) ? n : `_${n}`;
}

function snake(s: string): string {
  return s
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1_$2')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '');
}

/** `api_key` → `apiKey`, `X-API-Key` → `xApiKey`: the credential field a security scheme's secret fills. */
function camel(s: string): string {
  const words = s.split(/[^A-Za-z0-9]+/).filter(Boolean);
  const field = words
    .map((w, i) => {
      const norm = w === w.toUpperCase() ? w.toLowerCase() : w;
      return i === 0 ? norm.charAt(0).toLowerCase() + norm.slice(1) : norm.charAt(0).toUpperCase() + norm.slice(1);
    })
    .join('');
  const named = /^[A-Za-z]/.test(field) ? field : `key${field}`;
  return named.slice(0, 64);
}

interface BaseUrl {
  url?: string;
  problem?: string;
}

function serverUrl(servers: unknown): BaseUrl {
  if (!Array.isArray(servers) || !servers.length) return { problem: 'the document declares no server URL' };
  const server = servers[0];
  if (!isObj(server) || typeof server.url !== 'string') return { problem: 'servers[0] has no url' };
  const vars = isObj(server.variables) ? server.variables : {};
  let missing: string | undefined;
  const url = server.url.replace(/\{([^}]*)\}/g, (_, name: string) => {
    const v = vars[name];
    if (isObj(v) && (typeof v.default === 'string' || typeof v.default === 'number')) return String(v.default);
    missing ??= name;
    return '';
  });
  if (missing !== undefined) return { problem: `server variable "${missing}" has no default` };
  return checkBase(url, 'the server URL');
}

function checkBase(raw: string, what: string): BaseUrl {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return { problem: `${what} "${raw.slice(0, 200)}" is not an absolute URL (pass a base URL)` };
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return { problem: `${what} must be http or https` };
  if (u.username || u.password) return { problem: `${what} may not carry user:password@` };
  if (u.search || u.hash) return { problem: `${what} may not carry a query or fragment` };
  // Normalised (lower-case scheme and host, default port dropped) so the entry's literal host is what checkEntry reads.
  return { url: (u.origin + u.pathname).replace(/\/+$/, '') };
}

interface Auth {
  credentials: CredentialField[];
  headers: Record<string, string>;
  query: Record<string, string>;
}

/** The first security requirement set that a catalogue entry can express, or why none can. */
function chooseAuth(requirements: unknown, schemes: Obj, resolver: Resolver): Auth {
  if (!Array.isArray(requirements) || !requirements.length) return { credentials: [], headers: {}, query: {} };
  const why: string[] = [];
  for (const set of requirements) {
    if (!isObj(set)) continue;
    const auth: Auth = { credentials: [], headers: {}, query: {} };
    let problem: string | undefined;
    const addHeader = (name: string, value: string) => {
      if (Object.keys(auth.headers).some((h) => h.toLowerCase() === name.toLowerCase())) problem ??= `two schemes set the header ${name}`;
      put(auth.headers, name, value);
    };
    const addField = (name: string, description: string) => {
      if (auth.credentials.some((f) => f.name.toLowerCase() === name.toLowerCase())) problem ??= `two schemes use the credential field ${name}`;
      auth.credentials.push({ name, description: description.slice(0, 500), required: true });
    };
    for (const schemeName of Object.keys(set)) {
      const scheme = Object.hasOwn(schemes, schemeName) ? resolver.resolve(schemes[schemeName]) : undefined;
      if (!isObj(scheme)) {
        problem ??= `security scheme "${schemeName}" is not defined`;
        continue;
      }
      const own = str(scheme.description);
      const type = scheme.type;
      if (type === 'apiKey') {
        const name = str(scheme.name);
        const field = camel(schemeName);
        if (!name) problem ??= `apiKey scheme "${schemeName}" names no parameter`;
        else if (scheme.in === 'header') {
          addField(field, own ?? `API key sent in the ${name} header`);
          addHeader(name, `{{credentials.${field}}}`);
        } else if (scheme.in === 'query') {
          addField(field, own ?? `API key sent as the ${name} query parameter`);
          put(auth.query, name, `{{credentials.${field}}}`);
        } else problem ??= `apiKey scheme "${schemeName}" in ${String(scheme.in)} cannot be expressed`;
      } else if (type === 'http' && typeof scheme.scheme === 'string' && scheme.scheme.toLowerCase() === 'bearer') {
        addField('token', own ?? 'Bearer token');
        addHeader('Authorization', 'Bearer {{credentials.token}}');
      } else if (type === 'oauth2' || type === 'openIdConnect') {
        addField('accessToken', own ?? 'OAuth access token');
        addHeader('Authorization', 'Bearer {{credentials.accessToken}}');
      } else if (type === 'http') problem ??= `HTTP ${String(scheme.scheme)} authentication ("${schemeName}") cannot be expressed`;
      else problem ??= `security scheme "${schemeName}" of type ${String(type)} cannot be expressed`;
    }
    if (!problem) return auth;
    why.push(problem);
  }
  throw new Skip(why.length ? why.join('; ') : 'no usable security requirement');
}

/** Header names and query keys that security schemes of these requirements put on the request. */
function securityNames(requirements: unknown, schemes: Obj, resolver: Resolver): { headers: Set<string>; query: Set<string> } {
  const headers = new Set<string>();
  const query = new Set<string>();
  if (!Array.isArray(requirements)) return { headers, query };
  for (const set of requirements) {
    if (!isObj(set)) continue;
    for (const schemeName of Object.keys(set)) {
      if (!Object.hasOwn(schemes, schemeName)) continue;
      const s = resolver.resolve(schemes[schemeName]);
      if (!isObj(s) || s.type !== 'apiKey' || typeof s.name !== 'string') continue;
      if (s.in === 'header') headers.add(s.name.toLowerCase());
      if (s.in === 'query') query.add(s.name);
    }
  }
  return { headers, query };
}

function mediaType(key: string): string {
  return key.split(';')[0]!.trim().toLowerCase();
}

/** Object properties of a body schema, `allOf` members merged; undefined when it is not an object with properties. */
function objectShape(schema: unknown): { properties: Obj; required: string[] } | undefined {
  if (!isObj(schema)) return undefined;
  const properties: Obj = {};
  const required: string[] = [];
  let found = false;
  if (isObj(schema.properties)) {
    found = true;
    for (const [k, v] of Object.entries(schema.properties)) put(properties, k, v);
  }
  if (Array.isArray(schema.required)) required.push(...schema.required.filter((r): r is string => typeof r === 'string'));
  if (Array.isArray(schema.allOf)) {
    for (const part of schema.allOf) {
      const shape = objectShape(part);
      if (!shape) return undefined;
      found = true;
      for (const [k, v] of Object.entries(shape.properties)) put(properties, k, v);
      required.push(...shape.required);
    }
  }
  const type = schema.type;
  if (type !== undefined && type !== 'object' && !(Array.isArray(type) && type.includes('object'))) return undefined;
  return found ? { properties, required } : undefined;
}

interface Operation {
  method: string;
  path: string;
  op: Obj;
  pathItem: Obj;
}

/** Turns an OpenAPI 3.0/3.1 document into one catalogue entry per operation; what cannot be expressed is skipped with its reason. */
export function importOpenApi(doc: unknown, opts: { set: string; baseUrl?: string; category?: string }): ImportResult {
  if (!isObj(doc)) throw errors.invalid('the OpenAPI document is not an object');
  if (doc.swagger !== undefined) throw errors.invalid('Swagger 2.0 documents are not supported: convert the document to OpenAPI 3');
  const version = typeof doc.openapi === 'string' ? doc.openapi : '';
  if (!/^3\.[01]\.\d+/.test(version))
    throw errors.invalid(`the document is not OpenAPI 3.0 or 3.1 (openapi: ${JSON.stringify(doc.openapi ?? null)})`);
  const v30 = version.startsWith('3.0');
  if (!/^[a-z][a-z0-9_-]*$/.test(opts.set) || opts.set.length > MAX_SLUG - 8)
    throw errors.invalidField('set', 'a tool set slug: lower-case letters, digits, "_" and "-", starting with a letter');

  let docBase: BaseUrl;
  if (opts.baseUrl !== undefined) {
    docBase = checkBase(opts.baseUrl, 'the base URL');
    if (!docBase.url) throw errors.invalidField('baseUrl', docBase.problem!);
  } else docBase = serverUrl(doc.servers);

  const operations: Operation[] = [];
  const paths = isObj(doc.paths) ? doc.paths : {};
  for (const [path, rawItem] of Object.entries(paths)) {
    // A 3.1 path item may itself be a $ref (to components.pathItems); its parts are resolved per operation.
    const pathItem = new Resolver(doc).follow(rawItem);
    if (!isObj(pathItem)) continue;
    for (const method of METHODS) if (isObj(pathItem[method])) operations.push({ method, path, op: pathItem[method] as Obj, pathItem });
  }
  if (!operations.length) throw errors.invalid('the OpenAPI document has no operations (paths is missing or empty)');

  const schemes = isObj(doc.components) && isObj(doc.components.securitySchemes) ? doc.components.securitySchemes : {};
  const used = new Set<string>();
  const result: ImportResult = { tools: [], skipped: [] };
  for (const [i, o] of operations.entries()) {
    const label = str(o.op.operationId) ?? `${o.method.toUpperCase()} ${o.path}`;
    if (i >= MAX_OPERATIONS) {
      result.skipped.push({ name: label, reason: `more than ${MAX_OPERATIONS} operations` });
      continue;
    }
    try {
      if (!SUPPORTED.has(o.method)) throw new Skip(`method ${o.method.toUpperCase()} is not supported`);
      if (!o.path.startsWith('/')) throw new Skip('its path does not start with "/"');
      let base = docBase;
      if (opts.baseUrl === undefined && (Array.isArray(o.op.servers) || Array.isArray(o.pathItem.servers))) {
        base = serverUrl(Array.isArray(o.op.servers) ? o.op.servers : o.pathItem.servers);
        if (!base.url) throw new Skip(base.problem);
      }
      if (!base.url) throw errors.invalid(`${base.problem}; the document needs an absolute http(s) server URL or a base URL`);
      const draft = buildEntry(o, { doc, v30, schemes, base: base.url, set: opts.set, category: opts.category ?? 'custom' });
      const slug = uniqueSlug(slugBase(opts.set, o), used);
      const entry = CatalogEntry.safeParse({ ...draft, slug });
      if (!entry.success) throw new Skip(entry.error.issues.map((x) => `${x.path.join('.')}: ${x.message}`).join('; '));
      const problems = checkEntry(entry.data);
      if (problems.length) throw new Skip(problems.join('; '));
      used.add(slug);
      result.tools.push(entry.data);
    } catch (e) {
      if (!(e instanceof Skip)) throw e;
      result.skipped.push({ name: label, reason: e.message.slice(0, 1000) });
    }
  }
  return result;
}

function slugBase(set: string, o: Operation): string {
  const words = (s: string) => snake(s.replace(/[{}]/g, ' '));
  const opId = str(o.op.operationId);
  const name = (opId && snake(opId)) || [o.method, words(o.path)].filter(Boolean).join('_');
  return `${set}__${name}`.slice(0, MAX_SLUG).replace(/_+$/, '');
}

function uniqueSlug(base: string, used: Set<string>): string {
  if (!used.has(base)) return base;
  for (let n = 2; ; n++) {
    const suffix = `_${n}`;
    const slug = base.slice(0, MAX_SLUG - suffix.length) + suffix;
    if (!used.has(slug) && ToolSlug.safeParse(slug).success) return slug;
  }
}

interface BuildCtx {
  doc: Obj;
  v30: boolean;
  schemes: Obj;
  base: string;
  set: string;
  category: string;
}

function buildEntry(o: Operation, c: BuildCtx): Omit<CatalogEntry, 'slug'> {
  const r = new Resolver(c.doc);
  const requirements = o.op.security !== undefined ? o.op.security : c.doc.security;
  const auth = chooseAuth(requirements, c.schemes, r);
  const secured = securityNames(requirements, c.schemes, r);

  // Operation parameters override path-item ones with the same name and location.
  const params = new Map<string, Obj>();
  for (const raw of [
    ...(Array.isArray(o.pathItem.parameters) ? o.pathItem.parameters : []),
    ...(Array.isArray(o.op.parameters) ? o.op.parameters : []),
  ]) {
    const p = r.resolve(raw);
    if (!isObj(p) || typeof p.name !== 'string' || typeof p.in !== 'string') throw new Skip('a parameter has no name or location');
    params.set(`${p.in}:${p.name}`, p);
  }

  const properties: Obj = {};
  const required: string[] = [];
  const owner = new Map<string, string>();
  const claim = (arg: string, what: string) => {
    const prev = owner.get(arg);
    if (prev) throw new Skip(`${what} and ${prev} both map to the argument "${arg}"`);
    owner.set(arg, what);
  };
  const headers: Record<string, string> = {};
  const query: Record<string, string> = {};
  const pathArgs = new Map<string, string>();

  for (const p of params.values()) {
    const name = p.name as string;
    const where = p.in as string;
    if (where === 'header' && (RESERVED_HEADERS.has(name.toLowerCase()) || secured.headers.has(name.toLowerCase()))) continue;
    if (where === 'query' && secured.query.has(name)) continue;
    if (where === 'cookie') {
      if (p.required === true) throw new Skip(`cookie parameter "${name}" cannot be expressed`);
      continue;
    }
    if (where !== 'path' && where !== 'query' && where !== 'header') throw new Skip(`parameter "${name}" is in an unknown location "${where}"`);
    const arg = argName(name);
    claim(arg, `${where} parameter "${name}"`);
    const schemaSource = isObj(p.schema) ? p.schema : isObj(p.content) ? (Object.values(p.content).find(isObj)?.schema ?? {}) : {};
    const schema = toJsonSchema(schemaSource, c.v30);
    if (str(p.description) && schema.description === undefined) schema.description = str(p.description);
    put(properties, arg, schema);
    if (where === 'path' || p.required === true) required.push(arg);
    const ref = `{{args.${arg}}}`;
    if (where === 'path') pathArgs.set(name, arg);
    else if (where === 'query') put(query, name, ref);
    else put(headers, name, ref);
  }

  // Path template variables the document forgot to declare still need a value.
  const url =
    c.base +
    o.path.replace(/\{([^}]*)\}/g, (_, name: string) => {
      let arg = pathArgs.get(name);
      if (!arg) {
        arg = argName(name);
        claim(arg, `path parameter "${name}"`);
        put(properties, arg, { type: 'string' });
        required.push(arg);
        pathArgs.set(name, arg);
      }
      return `{{args.${arg}}}`;
    });

  let body: Record<string, unknown> | undefined;
  let bodyType: 'json' | 'form' = 'json';
  const requestBody = r.resolve(o.op.requestBody);
  if (isObj(requestBody) && isObj(requestBody.content) && Object.keys(requestBody.content).length) {
    const entries = Object.entries(requestBody.content).map(([k, v]) => [mediaType(k), v] as const);
    const json = entries.find(([k]) => k === 'application/json' || /^application\/[a-z0-9.+-]+\+json$/.test(k));
    const form = entries.find(([k]) => k === 'application/x-www-form-urlencoded');
    const chosen = json ?? form;
    if (!chosen) throw new Skip(`request body type ${entries.map(([k]) => k).join(', ')} is not supported (only JSON and form bodies)`);
    if (!json) bodyType = 'form';
    const schema = isObj(chosen[1]) ? chosen[1].schema : undefined;
    const shape = objectShape(schema);
    if (!shape)
      throw new Skip(isObj(schema) && schema.type === 'object' ? 'request body object declares no properties' : 'request body is not a JSON object');
    body = {};
    for (const [prop, propSchema] of Object.entries(shape.properties)) {
      // A read-only property is answered by the server, never sent.
      if (isObj(propSchema) && propSchema.readOnly === true) continue;
      const arg = argName(prop);
      claim(arg, `body property "${prop}"`);
      put(properties, arg, toJsonSchema(propSchema, c.v30));
      put(body, prop, `{{args.${arg}}}`);
      if (requestBody.required === true && shape.required.includes(prop)) required.push(arg);
    }
  }

  for (const [k, v] of Object.entries(auth.headers)) put(headers, k, v);
  for (const [k, v] of Object.entries(auth.query)) put(query, k, v);

  const execution: HttpExecution = {
    type: 'http',
    method: o.method.toUpperCase() as HttpExecution['method'],
    url,
    headers,
    query,
    ...(body ? { body } : {}),
    bodyType,
    passArgs: false,
    response: {},
  };

  const summary = str(o.op.summary);
  const opId = str(o.op.operationId);
  const deprecated = o.op.deprecated === true ? 'Deprecated.' : undefined;
  const description = [summary, str(o.op.description), deprecated].filter(Boolean).join('\n\n').slice(0, 4000);
  const inputSchema: Obj = { type: 'object', properties, additionalProperties: false };
  if (required.length) inputSchema.required = [...new Set(required)];
  return {
    name: (summary ?? opId ?? `${o.method.toUpperCase()} ${o.path}`).slice(0, 200),
    description,
    category: c.category,
    inputSchema,
    output: successDescription(o.op.responses, r),
    credentials: auth.credentials,
    execution,
  };
}

/** The first 2xx response's description: what the tool answers, in the document's words. */
function successDescription(responses: unknown, r: Resolver): string {
  if (!isObj(responses)) return '';
  const key = Object.keys(responses)
    .filter((k) => /^2(\d\d|XX)$/i.test(k))
    .sort()[0];
  if (!key) return '';
  try {
    const res = r.resolve(responses[key]);
    return (isObj(res) && str(res.description)) || '';
  } catch {
    return '';
  }
}
