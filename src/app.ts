import path from 'node:path';
import pino, { type Logger } from 'pino';
import type { Config, ServiceName } from './config.js';
import { activityRoutes } from './domains/activity/index.js';
import { billingRoutes } from './domains/billing/index.js';
import { executeRoutes } from './domains/execute/index.js';
import { createAuthenticator, identityRoutes } from './domains/identity/index.js';
import { organizationRoutes } from './domains/organizations/index.js';
import { storageRoutes } from './domains/storage/index.js';
import { LocalBlobStore } from './platform/blobs/index.js';
import { createBus } from './platform/bus/index.js';
import type { Deps } from './platform/context.js';
import { openDb } from './platform/db/index.js';
import { migrateToLatest } from './platform/db/migrate.js';
import { createIsolation, unavailableIsolation } from './platform/isolation/index.js';
import { createServer, type App } from './platform/http/server.js';

type RouteModule = (app: App, deps: Deps) => Promise<void>;

/** Which service serves which domain. The five services' routes never collide under /v1. */
const SERVICE_ROUTES: Record<ServiceName, RouteModule[]> = {
  orchestrator: [organizationRoutes, identityRoutes, activityRoutes, executeRoutes],
  auth: [],
  tools: [],
  billing: [billingRoutes],
  storage: [storageRoutes],
};

/**
 * Opens storage, runs migrations and builds the collaborators every request shares. The sandbox layer is
 * started only where code can run: a process serving the orchestrator, unless the caller (a CLI command
 * that serves nothing) says it needs none.
 */
export async function createDeps(config: Config, opts: { log?: Logger; isolation?: boolean } = {}): Promise<Deps> {
  const logger = opts.log ?? pino({ level: config.logLevel, base: undefined });
  const isolation =
    opts.isolation !== false && config.services.includes('orchestrator')
      ? await createIsolation()
      : unavailableIsolation('this process does not serve code execution (orchestrator service)');
  const db = await openDb(config.database);
  try {
    await migrateToLatest(db.kysely, db.dialect);
  } catch (err) {
    await db.close();
    throw err;
  }
  return {
    config,
    db,
    blobs: new LocalBlobStore(path.join(config.dataDir, 'blobs')),
    bus: createBus(config.redisUrl),
    log: logger,
    isolation,
  };
}

export async function closeDeps(deps: Deps): Promise<void> {
  await deps.bus.close();
  await deps.db.close();
}

/** Builds the HTTP app for the configured services on the given collaborators. */
export async function buildApp(deps: Deps): Promise<App> {
  const app = await createServer(deps, createAuthenticator(deps));
  for (const service of deps.config.services) {
    for (const routes of SERVICE_ROUTES[service]) await routes(app, deps);
  }
  await app.ready();
  return app;
}
