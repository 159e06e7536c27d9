import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { Logger } from 'pino';
import { buildApp, closeDeps, createDeps } from '../src/app.js';
import { parseConfig } from '../src/config.js';
import { addMember, bootstrapOrganization } from '../src/domains/organizations/index.js';
import { createApiKey, createUser, issueSessionToken } from '../src/domains/identity/index.js';
import { systemCtx, type Deps } from '../src/platform/context.js';
import { openDb, type Db } from '../src/platform/db/index.js';
import type { App } from '../src/platform/http/server.js';
import { ROLE_SCOPES, type Role } from '../src/platform/scopes.js';

/**
 * The database the suite runs on: SQLite in a temp file by default, PostgreSQL when
 * HANGAR_TEST_DATABASE_URL is set (each harness gets its own schema, dropped on close).
 */
export const testDatabaseUrl = process.env.HANGAR_TEST_DATABASE_URL;
export const testRedisUrl = process.env.HANGAR_TEST_REDIS_URL;

export interface Harness {
  app: App;
  deps: Deps;
  dataDir: string;
  close(): Promise<void>;
}

export interface HarnessOptions {
  /** Runs on the fresh database before the app opens (and migrates) it: e.g. to build an older schema. */
  prepareDatabase?: (db: Db) => Promise<void>;
  /** The app's logger, for a test that reads what is logged (default: pino at LOG_LEVEL, silent). */
  log?: Logger;
}

/** Builds the app on a fresh database and data directory. */
export async function createHarness(env: Record<string, string | undefined> = {}, opts: HarnessOptions = {}): Promise<Harness> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'hangar-test-'));
  const schema = testDatabaseUrl ? `t_${randomBytes(6).toString('hex')}` : undefined;
  const config = parseConfig({
    HANGAR_DATA_DIR: dataDir,
    LOG_LEVEL: process.env.HANGAR_TEST_LOG_LEVEL ?? 'silent',
    HANGAR_VALIDATE_RESPONSES: 'true',
    HANGAR_SECRET_KEY: randomBytes(32).toString('hex'),
    DATABASE_URL: testDatabaseUrl ? `${testDatabaseUrl}${testDatabaseUrl.includes('?') ? '&' : '?'}schema=${schema}` : undefined,
    REDIS_URL: testRedisUrl,
    PORT: '0',
    HANGAR_TEMPLATE_PREBUILD: 'false',
    // Templates that leave `os` out build on the host's userland: where Ubuntu's mirror answered, the default os
    // (ubuntu-24.04) would make each of them build an Ubuntu image. Tests of OS images set their own mirrors.
    HANGAR_MIRROR_UBUNTU: 'http://127.0.0.1:47/ubuntu',
    ...env,
  });
  const dropSchema = async () => {
    if (!schema || !testDatabaseUrl) return;
    const client = new pg.Client({ connectionString: testDatabaseUrl });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    // The job engine's pg-boss schema beside it (created when the app first queued a job).
    await client.query(`DROP SCHEMA IF EXISTS "${schema}_pgboss" CASCADE`);
    await client.end();
  };
  let deps: Deps;
  let app: App;
  try {
    if (opts.prepareDatabase) {
      const db = await openDb(config.database);
      try {
        await opts.prepareDatabase(db);
      } finally {
        await db.close();
      }
    }
    deps = await createDeps(config, opts.log ? { log: opts.log } : {});
  } catch (err) {
    await dropSchema().catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  try {
    app = await buildApp(deps);
  } catch (err) {
    await deps.sandboxes.removeInstallation().catch(() => undefined);
    await closeDeps(deps).catch(() => undefined);
    await dropSchema().catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  return {
    app,
    deps,
    dataDir,
    async close() {
      await app.close();
      await deps.sandboxes.removeInstallation();
      await closeDeps(deps);
      await dropSchema();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface Actor {
  userId: string;
  orgId: string;
  role: Role;
  /** An API key with every scope the role grants. */
  key: string;
  /** A session token from the built-in issuer. */
  token: string;
  projectId: string;
  personalWorkspaceId: string;
  headers: { 'x-api-key': string };
}

let counter = 0;

/** A new user who creates a new organization (as admin), with an all-scopes key and a session token. */
export async function createOrgAdmin(h: Harness, orgName = `Org ${++counter}`): Promise<Actor> {
  const { user, org, key } = await bootstrapOrganization(h.deps, {
    email: `admin${++counter}@example.test`,
    name: 'Admin',
    orgName,
    keyName: `test key ${++counter}`,
  });
  const token = await issueSessionToken(h.deps.config, user.id);
  const projectId = org.defaultProjectId;
  return {
    userId: user.id,
    orgId: org.id,
    role: 'admin',
    key: key.key,
    token,
    projectId,
    personalWorkspaceId: org.personalWorkspaceId!,
    headers: { 'x-api-key': key.key },
  };
}

/** A new user added to `org` with the given role. */
export async function addOrgMember(h: Harness, org: Actor, role: Role = 'member'): Promise<Actor> {
  const user = await createUser(h.deps, { email: `member${++counter}@example.test`, name: 'Member' });
  const ctx = systemCtx(h.deps, { userId: org.userId, orgId: org.orgId, role: 'admin', scopes: ROLE_SCOPES.admin, apiKeyId: null });
  const { personalWorkspaceId } = await addMember(ctx, org.orgId, user.id, role);
  return actorFor(h, user.id, org.orgId, role, org.projectId, personalWorkspaceId);
}

async function actorFor(h: Harness, userId: string, orgId: string, role: Role, projectId: string, personalWorkspaceId: string): Promise<Actor> {
  const key = await keyFor(h, { userId, orgId, role }, ['*']);
  const token = await issueSessionToken(h.deps.config, userId);
  return { userId, orgId, role, key, token, projectId, personalWorkspaceId, headers: { 'x-api-key': key } };
}

/** Another API key for an actor, limited to `scopes` (intersected with the role, as always). */
export async function keyFor(h: Harness, actor: Pick<Actor, 'userId' | 'orgId' | 'role'>, scopes: string[], environment: 'live' | 'test' = 'live') {
  const ctx = systemCtx(h.deps, { userId: actor.userId, orgId: actor.orgId, role: actor.role, scopes: ROLE_SCOPES[actor.role], apiKeyId: null });
  const created = await createApiKey(ctx, { name: `test key ${++counter}`, scopes, environment });
  return created.key;
}

/** Parses a JSON response body, failing loudly with the body when it is not JSON. */
export function json<T = any>(res: { body: string }): T {
  try {
    return JSON.parse(res.body) as T;
  } catch {
    throw new Error(`response is not JSON: ${res.body.slice(0, 500)}`);
  }
}
