import { parseArgs } from 'node:util';
import { buildApp, closeDeps, createDeps } from './app.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import { CLIENT_USAGE, ClientCliError, isClientCommand } from './client/cli.js';
import { runClient } from './client/main.js';
import { DEVICE_USAGE, DeviceCliError, deviceCli } from './device/cli.js';
import { createApiKey, hasUsers, issueSessionToken, userExists } from './domains/identity/index.js';
import { bootstrapOrganization, firstMembership } from './domains/organizations/index.js';
import { assignPlan, createPromoCode, listPlans, listPromoCodes, type PromoCode } from './domains/billing/index.js';
import { allThreadIds, rebuildThread } from './domains/threads/index.js';
import { systemCtx, type Deps } from './platform/context.js';
import { AppError } from './platform/http/errors.js';
import { ROLE_SCOPES } from './platform/scopes.js';

const USAGE = `Usage: hangar <command> [options]

Commands:
  serve [--service orchestrator,auth,tools,billing,storage]   run the API (all services by default)
  init [--json] [--email E] [--name N] [--org NAME]            first user, organization and admin API key
  migrate                                                      apply database migrations
  keys create --scopes S1,S2 [--name N] [--org ID] [--user ID] [--env live|test] [--json]
  token --user ID [--ttl SECONDS]                              a session token from the built-in issuer
  threads rebuild [--thread ID] [--json]                       rebuild thread event projections from their JSONL
  promo create --credits CENTS --max-redemptions N [--expires ISO|YYYY-MM-DD] [--code CODE] [--json]
                                                               a promo code organizations redeem for credits
  promo list [--json]                                          every promo code and its redemptions
  plans list [--json]                                          the plans this server offers (built-in free + HANGAR_BILLING_PLANS_FILE)
  plans assign --org ID --plan PLAN [--json]                   put an organization on a plan
  device link [--url URL] [--label NAME] [--force]             link this machine to a Hangar server as a device
  device run [--workspace DIR] [--endpoint HOST:PORT] [--once] do the runs dispatched to this device in DIR
  device status [--json] | device unlink [--force]             this device's node; revoke and forget the link

${CLIENT_USAGE}

Configuration comes from the environment: see README.md.`;

class CliError extends Error {}

async function withDeps<T>(config: Config, fn: (deps: Deps) => Promise<T>): Promise<T> {
  const deps = await openDeps(config, false);
  try {
    return await fn(deps);
  } finally {
    await closeDeps(deps);
  }
}

async function openDeps(config: Config, isolation = true): Promise<Deps> {
  try {
    return await createDeps(config, { isolation });
  } catch (err) {
    const setting = config.database.kind === 'postgres' ? 'DATABASE_URL' : 'HANGAR_DATA_DIR';
    throw new CliError(`cannot open the database (${setting}): ${(err as Error).message}`);
  }
}

async function serve(config: Config) {
  const deps = await openDeps(config);
  const app = await buildApp(deps);
  try {
    await app.listen({ host: config.host, port: config.port });
  } catch (err) {
    await app.close(); // stops the background jobs before the database closes under them
    await closeDeps(deps);
    throw new CliError(`cannot listen on ${config.host}:${config.port} (HOST/PORT): ${(err as Error).message}`);
  }
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  console.log(`Hangar listening on http://${config.host}:${port} (services: ${config.services.join(', ')}; database: ${config.database.kind})`);
  console.log(`Web console:   http://${config.host}:${port}/`);
  console.log(`API reference: http://${config.host}:${port}/v1/docs`);
  const stop = async () => {
    await app.close();
    await closeDeps(deps);
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

async function init(config: Config, opts: { json: boolean; email?: string; name?: string; org?: string }) {
  await withDeps(config, async (deps) => {
    if (await hasUsers(deps)) {
      throw new CliError('already initialized: this database has users. Nothing was changed. Use `hangar keys create` for another key.');
    }
    const { user, org, key } = await bootstrapOrganization(deps, {
      email: opts.email ?? null,
      name: opts.name ?? 'Admin',
      orgName: opts.org ?? 'My Organization',
      keyName: 'admin (hangar init)',
    });
    const result = { userId: user.id, orgId: org.id, apiKey: key.key, projectId: org.defaultProjectId, workspaceId: org.personalWorkspaceId! };
    if (opts.json) console.log(JSON.stringify(result));
    else {
      console.log(`Created user          ${result.userId}`);
      console.log(`Created organization  ${result.orgId}`);
      console.log(`Default project       ${result.projectId}`);
      console.log(`Personal workspace    ${result.workspaceId}`);
      console.log(`Admin API key         ${result.apiKey}`);
      // The address the server will answer on: HANGAR_BASE_URL when set, else HOST and PORT (0.0.0.0 reached as 127.0.0.1).
      const base = config.publicBaseUrl ?? config.urls.orchestrator;
      console.log(`\nThe key is shown once. Sign in to the web console at ${base}/ with it, or try: curl -H "X-API-Key: <key>" ${base}/v1/me`);
    }
  });
}

async function keysCreate(config: Config, opts: { scopes?: string; name?: string; org?: string; user?: string; env?: string; json: boolean }) {
  if (!opts.scopes) throw new CliError('keys create needs --scopes (comma-separated, e.g. agent:read,agent:run or *)');
  if (opts.env && opts.env !== 'live' && opts.env !== 'test') throw new CliError('--env must be live or test');
  await withDeps(config, async (deps) => {
    const m = await firstMembership(deps, { orgId: opts.org, userId: opts.user });
    if (!m) throw new CliError(opts.org || opts.user ? 'no such membership (--org/--user)' : 'no organization yet: run `hangar init` first');
    const role = m.role;
    const ctx = systemCtx(deps, { userId: m.userId, orgId: m.orgId, role, scopes: ROLE_SCOPES[role], apiKeyId: null });
    const key = await createApiKey(ctx, {
      name: opts.name ?? 'created by hangar keys create',
      scopes: opts
        .scopes!.split(',')
        .map((s) => s.trim())
        .filter(Boolean),
      environment: (opts.env as 'live' | 'test') ?? 'live',
    });
    if (opts.json) console.log(JSON.stringify({ id: key.id, orgId: m.orgId, userId: m.userId, apiKey: key.key, scopes: key.scopes }));
    else console.log(key.key);
  });
}

async function token(config: Config, opts: { user?: string; ttl?: string }) {
  if (!opts.user) throw new CliError('token needs --user <user id>');
  const ttl = opts.ttl ? Number(opts.ttl) : undefined;
  if (ttl !== undefined && (!Number.isInteger(ttl) || ttl < 60)) throw new CliError('--ttl must be a whole number of seconds, at least 60');
  await withDeps(config, async (deps) => {
    if (!(await userExists(deps, opts.user!))) throw new CliError(`no user ${opts.user}`);
    console.log(await issueSessionToken(config, opts.user!, ttl));
  });
}

/** Where a promo code's field is set on the command line, to name it in an error. */
const PROMO_FLAGS: Record<string, string> = {
  code: '--code',
  creditsCents: '--credits',
  maxRedemptions: '--max-redemptions',
  expiresAt: '--expires',
};

const promoTerms = (p: PromoCode) =>
  `${p.code}  ${p.creditsCents} cents (${(p.creditsCents / 100).toFixed(2)} USD) per organization, ` +
  `${p.redemptions}/${p.maxRedemptions} redeemed, ${p.expiresAt ? `expires ${p.expiresAt}` : 'never expires'}`;

function wholeNumber(flag: string, value: string | undefined): number {
  if (value === undefined) throw new CliError(`promo create needs ${flag}`);
  if (!/^\d+$/.test(value.trim())) throw new CliError(`${flag} must be a whole number`);
  return Number(value.trim());
}

async function promoCreate(config: Config, opts: { credits?: string; maxRedemptions?: string; expires?: string; code?: string; json: boolean }) {
  const creditsCents = wholeNumber('--credits', opts.credits);
  const maxRedemptions = wholeNumber('--max-redemptions', opts.maxRedemptions);
  await withDeps(config, async (deps) => {
    const promo = await createPromoCode(deps, { code: opts.code, creditsCents, maxRedemptions, expiresAt: opts.expires }).catch((err: unknown) => {
      const issue = err instanceof AppError ? err.details?.issues?.[0] : undefined;
      if (issue && PROMO_FLAGS[issue.path]) throw new CliError(`${PROMO_FLAGS[issue.path]}: ${issue.message}`);
      throw err;
    });
    if (opts.json) console.log(JSON.stringify(promo));
    else console.log(promoTerms(promo));
  });
}

async function promoList(config: Config, opts: { json: boolean }) {
  await withDeps(config, async (deps) => {
    const promos = await listPromoCodes(deps);
    if (opts.json) console.log(JSON.stringify(promos));
    else if (!promos.length) console.log('no promo codes');
    else for (const p of promos) console.log(promoTerms(p));
  });
}

async function plansList(config: Config, opts: { json: boolean }) {
  await withDeps(config, async (deps) => {
    const plans = listPlans(deps);
    if (opts.json) console.log(JSON.stringify(plans));
    else for (const p of plans) console.log(`${p.id}  ${p.name}: ${p.includedMonthlyCents} cents included per month`);
  });
}

async function plansAssign(config: Config, opts: { org?: string; plan?: string; json: boolean }) {
  if (!opts.org || !opts.plan) throw new CliError('usage: hangar plans assign --org ID --plan PLAN [--json]');
  await withDeps(config, async (deps) => {
    const res = await assignPlan(deps, { orgId: opts.org!, plan: opts.plan! });
    if (opts.json) console.log(JSON.stringify(res));
    else console.log(`${res.orgId}: plan ${res.previous} -> ${res.plan}`);
  });
}

/** Rebuilds the SQL projection of one thread's (or every thread's) events from its JSONL, the source of truth. */
async function threadsRebuild(config: Config, opts: { thread?: string; json: boolean }) {
  await withDeps(config, async (deps) => {
    const ids = opts.thread ? [opts.thread] : await allThreadIds(deps);
    const results = [];
    for (const id of ids) results.push({ threadId: id, ...(await rebuildThread(deps, id)) });
    if (opts.json) console.log(JSON.stringify(results));
    else for (const r of results) console.log(`${r.threadId}: ${r.events} events, last sequence ${r.lastSequence}`);
    if (!ids.length) console.log('no threads');
  });
}

async function main(argv: string[]) {
  if (argv[0] === '--help' || argv[0] === '-h') argv = ['help'];
  const [command, ...rest] = argv;
  // The device side of the mesh and the client commands talk to a server over HTTP and need none of the server's configuration.
  if (command === 'device') return deviceCli(rest);
  // bin/hangar.js sends the client commands to src/client/main.ts, which loads none of the server; here for callers of main.ts.
  if (isClientCommand(argv)) return runClient(command!, rest);
  const sub = command === 'keys' || command === 'threads' || command === 'promo' || command === 'plans' ? rest.shift() : undefined;
  const { values } = parseArgs({
    args: rest,
    options: {
      service: { type: 'string' },
      json: { type: 'boolean', default: false },
      email: { type: 'string' },
      name: { type: 'string' },
      org: { type: 'string' },
      user: { type: 'string' },
      scopes: { type: 'string' },
      env: { type: 'string' },
      ttl: { type: 'string' },
      thread: { type: 'string' },
      credits: { type: 'string' },
      'max-redemptions': { type: 'string' },
      expires: { type: 'string' },
      code: { type: 'string' },
      plan: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (!command || values.help || command === 'help') {
    console.log(USAGE);
    return;
  }
  const config = loadConfig(process.env, { services: values.service });
  switch (command) {
    case 'serve':
      return serve(config);
    case 'init':
      return init(config, { json: values.json!, email: values.email, name: values.name, org: values.org });
    case 'migrate':
      await withDeps(config, async () => undefined);
      console.log('database is up to date');
      return;
    case 'keys':
      if (sub !== 'create')
        throw new CliError('usage: hangar keys create --scopes S1,S2 [--name N] [--org ID] [--user ID] [--env live|test] [--json]');
      return keysCreate(config, { ...values, json: values.json! });
    case 'token':
      return token(config, values);
    case 'threads':
      if (sub !== 'rebuild') throw new CliError('usage: hangar threads rebuild [--thread ID] [--json]');
      return threadsRebuild(config, { thread: values.thread, json: values.json! });
    case 'promo':
      if (sub === 'create')
        return promoCreate(config, {
          credits: values.credits,
          maxRedemptions: values['max-redemptions'],
          expires: values.expires,
          code: values.code,
          json: values.json!,
        });
      if (sub === 'list') return promoList(config, { json: values.json! });
      throw new CliError(
        'usage: hangar promo create --credits CENTS --max-redemptions N [--expires ISO|YYYY-MM-DD] [--code CODE] [--json] | hangar promo list [--json]',
      );
    case 'plans':
      if (sub === 'list') return plansList(config, { json: values.json! });
      if (sub === 'assign') return plansAssign(config, { org: values.org, plan: values.plan, json: values.json! });
      throw new CliError('usage: hangar plans list [--json] | hangar plans assign --org ID --plan PLAN [--json]');
    default:
      throw new CliError(`unknown command "${command}"\n\n${USAGE}`);
  }
}

main(process.argv.slice(2)).catch((err) => {
  if (
    err instanceof ConfigError ||
    err instanceof CliError ||
    err instanceof AppError ||
    err instanceof DeviceCliError ||
    err instanceof ClientCliError
  ) {
    console.error(`hangar: ${err.message}`);
    process.exit(2);
  }
  if ((err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
    console.error(`hangar: ${(err as Error).message}\n\n${process.argv[2] === 'device' ? DEVICE_USAGE : USAGE}`);
    process.exit(2);
  }
  console.error(err);
  process.exit(1);
});
