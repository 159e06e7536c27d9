/**
 * `hangar template ...`: custom sandbox templates over `/v1/templates`. `create` submits the build and follows its
 * log (`GET /v1/templates/{slug}/logs` as Server-Sent Events) to stderr until it is ready or failed; `logs` shows a
 * log (or follows it), `ls` lists the templates, `rm` deletes one.
 */
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { ApiError, type DeviceApi } from '../device/api.js';
import { ClientCliError, type ClientIo, credentials, serverSentEvents, withApi } from './cli.js';

export const TEMPLATE_USAGE = [
  'usage: hangar template create --name SLUG (--dockerfile FILE | --config FILE.json|yaml | builder options) [--title NAME] [--no-follow] [--json]',
  '         builder options: --os OS, --apt PKG, --npm PKG, --pip PKG (each repeatable or comma-separated), --runtime NAME@VERSION, --env KEY=VALUE',
  '       hangar template ls [--json] | logs SLUG [--follow] | rm SLUG [--json]',
].join('\n');

interface TemplateView {
  id: string;
  slug: string;
  name: string;
  status: 'pending' | 'building' | 'ready' | 'failed';
  progress?: number;
  system?: boolean;
  os?: string;
  source?: string;
  parent?: string | null;
  error?: string | null;
  createdAt: string;
}

interface BuildEnd {
  status: string;
  progress: number;
  error: string | null;
}

/** The fields of `POST /v1/templates` a config file may set (src/domains/templates/schemas.ts). */
const BODY_FIELDS = new Set(['slug', 'name', 'os', 'runtimes', 'apt', 'npm', 'pip', 'env', 'dockerfile']);

const SLUG = /^[a-z0-9][a-z0-9-]{0,62}$/;

async function readText(file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    throw new ClientCliError(`cannot read ${file}: ${(err as Error).message}`);
  }
}

/** The body of a config file: JSON, or YAML for .yaml/.yml (its keys those of `POST /v1/templates`). */
async function readConfig(file: string): Promise<Record<string, unknown>> {
  const text = await readText(file);
  let parsed: unknown;
  try {
    if (/\.ya?ml$/i.test(file)) {
      const { parse } = await import('yaml');
      parsed = parse(text);
    } else parsed = JSON.parse(text);
  } catch (err) {
    throw new ClientCliError(`${file} is not valid ${/\.ya?ml$/i.test(file) ? 'YAML' : 'JSON'}: ${(err as Error).message}`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new ClientCliError(`${file} must hold an object (the template's fields)`);
  const unknown = Object.keys(parsed).filter((k) => !BODY_FIELDS.has(k));
  if (unknown.length)
    throw new ClientCliError(`${file}: unknown field${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')} (known: ${[...BODY_FIELDS].join(', ')})`);
  return parsed as Record<string, unknown>;
}

const list = (values: string[] | undefined) =>
  values
    ?.flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter(Boolean);

/**
 * Follows a build log to its end: each line once to `line` (a dropped stream is reopened and the replayed lines
 * skipped by their number), and the final status.
 */
async function followLog(api: DeviceApi, slug: string, line: (text: string) => void, io: ClientIo): Promise<BuildEnd> {
  let next = 0;
  for (let attempt = 0; ; attempt++) {
    let broke: string;
    try {
      const res = await api.fetch('GET', `/v1/templates/${encodeURIComponent(slug)}/logs`, undefined, undefined, { accept: 'text/event-stream' });
      for await (const ev of serverSentEvents(res.body)) {
        const data = JSON.parse(ev.data) as { n?: number; line?: string } & Partial<BuildEnd> & { message?: string };
        if (ev.event === 'log') {
          if (typeof data.n === 'number' && data.n < next) continue;
          next = (data.n ?? next) + 1;
          line(data.line ?? '');
        } else if (ev.event === 'status') return { status: data.status ?? 'failed', progress: data.progress ?? 0, error: data.error ?? null };
        else if (ev.event === 'error') throw new ClientCliError(`the build log broke off: ${data.message ?? ev.data}`);
      }
      broke = 'the stream ended';
    } catch (err) {
      // An answer (404, 401, ...) is final; a connection lost before or during the stream is retried.
      if (err instanceof ClientCliError || (err instanceof ApiError && err.status !== 0)) throw err;
      broke = (err as Error).message;
    }
    if (attempt >= 4) throw new ClientCliError(`the build log broke off (${broke}); the build goes on: hangar template logs ${slug} --follow`);
    const wait = 500 * 2 ** attempt;
    io.err(`── ${broke} before the build did; reconnecting in ${wait / 1000} s`);
    await sleep(wait);
  }
}

const describeTemplate = (t: TemplateView) =>
  `${t.slug} ${t.status}${t.status === 'building' && t.progress !== undefined ? ` ${t.progress}%` : ''} (${t.id}${t.parent ? `, on ${t.parent}` : ''})`;

export async function templateCommand(argv: string[], io: ClientIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      name: { type: 'string' },
      title: { type: 'string' },
      dockerfile: { type: 'string' },
      config: { type: 'string' },
      os: { type: 'string' },
      apt: { type: 'string', multiple: true },
      npm: { type: 'string', multiple: true },
      pip: { type: 'string', multiple: true },
      runtime: { type: 'string', multiple: true },
      env: { type: 'string', multiple: true },
      follow: { type: 'boolean', default: false },
      'no-follow': { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    io.out(TEMPLATE_USAGE);
    return 0;
  }
  const [sub, slug, ...extra] = positionals;
  const needSlug = () => {
    if (!slug || extra.length) throw new ClientCliError(`${TEMPLATE_USAGE}\n(${slug ? 'one template slug' : 'no template slug'})`);
    return encodeURIComponent(slug);
  };
  switch (sub) {
    case 'create': {
      if (slug) throw new ClientCliError(`${TEMPLATE_USAGE}\n(the slug goes in --name)`);
      if (values.dockerfile && values.config) throw new ClientCliError('pass --dockerfile or --config, not both');
      const body: Record<string, unknown> = values.config ? await readConfig(values.config) : {};
      if (values.dockerfile) body.dockerfile = await readText(values.dockerfile);
      if (values.name) body.slug = values.name;
      if (typeof body.slug !== 'string' || !body.slug) throw new ClientCliError(`${TEMPLATE_USAGE}\n(no --name)`);
      if (!SLUG.test(body.slug))
        throw new ClientCliError(`--name must be 1 to 63 lowercase letters, digits and "-", starting with a letter or digit (got ${body.slug})`);
      if (values.title) body.name = values.title;
      body.name ??= body.slug;
      if (values.os) body.os = values.os;
      for (const field of ['apt', 'npm', 'pip'] as const) if (values[field]) body[field] = list(values[field]);
      if (values.runtime) {
        body.runtimes = list(values.runtime)!.map((r) => {
          const at = r.lastIndexOf('@');
          if (at <= 0 || at === r.length - 1) throw new ClientCliError(`--runtime takes NAME@VERSION (got ${r})`);
          return { name: r.slice(0, at), version: r.slice(at + 1) };
        });
      }
      if (values.env) {
        const env = { ...((body.env as Record<string, string> | undefined) ?? {}) };
        for (const kv of values.env) {
          const eq = kv.indexOf('=');
          if (eq <= 0) throw new ClientCliError(`--env takes KEY=VALUE (got ${kv})`);
          env[kv.slice(0, eq)] = kv.slice(eq + 1);
        }
        body.env = env;
      }
      if (!['dockerfile', 'os', 'runtimes', 'apt', 'npm', 'pip', 'env'].some((k) => body[k] !== undefined))
        throw new ClientCliError(`${TEMPLATE_USAGE}\n(nothing to build: pass --dockerfile, --config or builder options)`);
      const target = body.slug;
      const c = await credentials(io.env);
      return withApi(c, async (api) => {
        const created = await api.call<TemplateView>('POST', '/v1/templates', body);
        if (values['no-follow']) {
          io.out(
            values.json ? JSON.stringify(created) : `${describeTemplate(created)}; follow it with: hangar template logs ${created.slug} --follow`,
          );
          return 0;
        }
        if (!values.json)
          io.err(`── template ${created.slug} (${created.id}) ${created.status}; its build log (Ctrl-C stops watching, not the build):`);
        const end = await followLog(api, target, io.err, io);
        const template = await api.call<TemplateView>('GET', `/v1/templates/${encodeURIComponent(target)}`);
        if (values.json) io.out(JSON.stringify(template));
        else io.out(describeTemplate(template));
        if (end.status === 'ready') return 0;
        io.err(`hangar: the build of ${target} ${end.status}${end.error ? `: ${end.error}` : ''}`);
        return 1;
      });
    }
    case 'ls': {
      if (slug) throw new ClientCliError(TEMPLATE_USAGE);
      const c = await credentials(io.env);
      const templates = await withApi(c, (api) => api.call<TemplateView[]>('GET', '/v1/templates'));
      if (values.json) io.out(JSON.stringify(templates));
      else
        for (const t of templates) {
          const status = t.status === 'building' ? `building ${t.progress ?? 0}%` : t.status;
          io.out(
            `${t.slug.padEnd(24)} ${status.padEnd(13)} ${(t.system ? 'system' : (t.source ?? '')).padEnd(10)} ${(t.os ?? '').padEnd(14)} ${t.name}`,
          );
        }
      return 0;
    }
    case 'logs': {
      const path = needSlug();
      const c = await credentials(io.env);
      if (!values.follow) {
        const text = await withApi(c, async (api) => (await api.fetch('GET', `/v1/templates/${path}/logs`, undefined)).text());
        if (text) process.stdout.write(text);
        return 0;
      }
      return withApi(c, async (api) => {
        const end = await followLog(api, slug!, io.out, io);
        if (end.status === 'ready') return 0;
        io.err(`hangar: the build of ${slug} ${end.status}${end.error ? `: ${end.error}` : ''}`);
        return 1;
      });
    }
    case 'rm': {
      const path = needSlug();
      const c = await credentials(io.env);
      await withApi(c, (api) => api.fetch('DELETE', `/v1/templates/${path}`, undefined));
      io.out(values.json ? JSON.stringify({ slug, deleted: true }) : `${slug} deleted`);
      return 0;
    }
    default:
      throw new ClientCliError(TEMPLATE_USAGE);
  }
}
