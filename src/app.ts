import path from 'node:path';
import pino, { type Logger } from 'pino';
import type { Config, ServiceName } from './config.js';
import { activityRegistry, activityRoutes } from './domains/activity/index.js';
import { agentRoutes, registerAgentActivity } from './domains/agents/index.js';
import { billingRoutes, onCreditsExhausted, registerAutoTopup, startBillingJobs, startCreditGraceJobs } from './domains/billing/index.js';
import { executeRoutes, pistonRoutes, registerExecuteMetrics } from './domains/execute/index.js';
import { createAuthenticator, identityRoutes } from './domains/identity/index.js';
import { mcpRoutes } from './domains/mcp/index.js';
import { modelRoutes, registerModelMetrics } from './domains/models/index.js';
import { oauthRoutes, registerFlowOwners, registerOAuthActivity, startOAuthJobs } from './domains/oauth/index.js';
import { membershipOf, organizationRoutes } from './domains/organizations/index.js';
import { cancelRunOfDeletedThread, registerLocalDispatcher, registerRunMetrics, runRoutes, startRunJobs } from './domains/runs/index.js';
import {
  authenticateDevice,
  deviceFrame,
  meshDispatcher,
  registerRunmeshActivity,
  runmeshRoutes,
  startRunmeshJobs,
} from './domains/runmesh/index.js';
import {
  channelRoutes,
  endUserFlowOwner,
  productRoutes,
  registerChannelActivity,
  registerProductActivity,
  startChannelJobs,
} from './domains/channels/index.js';
import { secretRoutes } from './domains/secrets/index.js';
import { registerSessionActivity, sessionRoutes } from './domains/sessions/index.js';
import {
  deploymentRoutes,
  onDeploymentDeleted,
  registerDeploymentActivity,
  startDeploymentJobs,
  triggerInvoker,
} from './domains/deployments/index.js';
import {
  nodeLoad,
  pauseRunningForBilling,
  reconcileAfterRevival,
  registerSandboxActivity,
  sandboxRoutes,
  sandboxShellRoutes,
  sandboxUsingTemplate,
  startSandboxJobs,
  startSandboxPool,
  registerSandboxMetrics,
} from './domains/sandboxes/index.js';
import { registerStorageActivity, storageRoutes } from './domains/storage/index.js';
import { setTemplateUseCheck, startTemplateJobs, templateRoutes } from './domains/templates/index.js';
import { registerDeviceFrames, registerThreadActivity, setRunCanceller, startThreadJobs, threadRoutes } from './domains/threads/index.js';
import { startToolJobs, toolRoutes } from './domains/tools/index.js';
import {
  deleteTriggersOfDeployment,
  registerDeploymentInvoker,
  registerTriggerActivity,
  startTriggerJobs,
  triggerRoutes,
} from './domains/triggers/index.js';
import { LocalBlobStore } from './platform/blobs/index.js';
import { registerWorkflowActivity, startWorkflowJobs, workflowRoutes } from './domains/workflows/index.js';
import { createBus } from './platform/bus/index.js';
import type { Deps } from './platform/context.js';
import { openDb } from './platform/db/index.js';
import { migrateToLatest } from './platform/db/migrate.js';
import { ensureInstallId } from './platform/db/settings.js';
import { createIsolation, unavailableIsolation } from './platform/isolation/index.js';
import { createServer, type App } from './platform/http/server.js';
import type { StartJobs, Stoppable } from './platform/jobs.js';
import { nodeListening, startNodeHeartbeat } from './platform/nodes/index.js';
import { LiveCredentials } from './platform/revocations.js';
import { createSandboxRuntime, unavailableSandboxRuntime } from './platform/sandboxes/index.js';
import { RuntimeState } from './platform/state.js';
import { Metrics } from './platform/metrics.js';
import { startMetricsListener } from './platform/http/metrics.js';
import { createJobEngine } from './platform/job-engine/index.js';

type RouteModule = (app: App, deps: Deps) => Promise<void>;

/** Which service serves which domain. The five services' routes never collide under /v1. */
const SERVICE_ROUTES: Record<ServiceName, RouteModule[]> = {
  orchestrator: [
    organizationRoutes,
    identityRoutes,
    activityRoutes,
    executeRoutes,
    pistonRoutes,
    templateRoutes,
    sandboxRoutes,
    threadRoutes,
    sandboxShellRoutes, // after threadRoutes, which registers the WebSocket plugin
    modelRoutes,
    agentRoutes,
    runRoutes,
    runmeshRoutes,
    channelRoutes,
    productRoutes,
    sessionRoutes,
    triggerRoutes,
    deploymentRoutes,
    workflowRoutes,
    mcpRoutes,
  ],
  auth: [oauthRoutes],
  tools: [secretRoutes, toolRoutes],
  billing: [billingRoutes],
  storage: [storageRoutes],
};

/**
 * Each service's background work (start-up checks, reconcilers, sweepers, prebuilds), started in this order
 * once the routes are registered and stopped in reverse order when the app closes.
 */
const SERVICE_JOBS: Record<ServiceName, StartJobs[]> = {
  // The heartbeat first: this node is in the registry (placement, forwarding) before anything else of it runs.
  orchestrator: [
    startNodeHeartbeat({ load: nodeLoad, onRevived: reconcileAfterRevival }),
    startTemplateJobs,
    startSandboxJobs,
    startSandboxPool,
    // Billing's exhaustion grace runs beside the sandboxes it pauses: each node pauses its own.
    startCreditGraceJobs,
    startThreadJobs,
    startRunJobs,
    startRunmeshJobs,
    startChannelJobs,
    startTriggerJobs,
    startDeploymentJobs,
    startWorkflowJobs,
  ],
  auth: [startOAuthJobs],
  tools: [startToolJobs],
  billing: [startBillingJobs],
  storage: [],
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
  if (isolation.cgroup) {
    const { version, launcherRoot, parent, serviceLeaf, nsdelegate } = isolation.cgroup;
    logger.info(
      { cgroup: version, subtree: path.join(launcherRoot, parent), serviceLeaf, nsdelegate },
      `code execution: sandboxes limited through cgroup ${version}`,
    );
  } else if (opts.isolation !== false && config.services.includes('orchestrator')) {
    logger.warn({ reason: isolation.unavailableReason }, 'code execution is unavailable');
  }
  const db = await openDb(config.database);
  let installId: string;
  try {
    await migrateToLatest(db.kysely, db.dialect);
    installId = await ensureInstallId(db.kysely);
  } catch (err) {
    await db.close();
    throw err;
  }
  const sandboxes =
    opts.isolation !== false && config.services.includes('orchestrator')
      ? await createSandboxRuntime(config.sandboxes, installId, logger)
      : unavailableSandboxRuntime('this process does not serve sandboxes (orchestrator service)');
  const bus = createBus(config.redisUrl);
  return {
    config,
    db,
    blobs: new LocalBlobStore(path.join(config.dataDir, 'blobs')),
    bus,
    log: logger,
    isolation,
    sandboxes,
    installId,
    live: new LiveCredentials(bus, logger),
    state: new RuntimeState(),
    jobs: createJobEngine(config, db.kysely, logger),
    metrics: new Metrics(config.metrics, logger),
  };
}

export async function closeDeps(deps: Deps): Promise<void> {
  await deps.sandboxes.close();
  await deps.live.stop();
  await deps.bus.close();
  await deps.db.close();
}

/** Builds the HTTP app for the configured services on the given collaborators. */
export async function buildApp(deps: Deps): Promise<App> {
  // Identity resolves credentials; the roles behind them are memberships, which organizations owns and answers.
  // A linked device's credential (`hgd_…`) is the device mesh's to resolve (ADR 0029).
  const authenticate = createAuthenticator(deps, {
    membership: (userId, org) => membershipOf(deps, userId, org),
    device: (secret) => authenticateDevice(deps, secret),
  });
  const app = await createServer(deps, authenticate);
  // Templates ask the sandboxes domain (which owns the sandboxes table) whether a template is still in use.
  setTemplateUseCheck(deps, sandboxUsingTemplate);
  // Once an organization's credits ran out and its grace is over, its running sandboxes are paused (billing cannot
  // import the sandboxes domain, which asks it for credits).
  onCreditsExhausted(deps, pauseRunningForBilling);
  // Deleting a thread cancels the run active on it (threads cannot import runs, which imports threads).
  setRunCanceller(deps, cancelRunOfDeletedThread);
  // Every process that charges (the orchestrator settles its own meters) may start an auto top-up.
  registerAutoTopup(deps);
  // Local-device runs go out through the device mesh, and their devices' frames come back through it (runs and
  // threads cannot import it: it imports them).
  registerLocalDispatcher(deps, meshDispatcher);
  registerDeviceFrames(deps, deviceFrame);
  // A product end user (channels) finishes their own OAuth flows: oauth cannot import channels, which uses it.
  registerFlowOwners(deps, endUserFlowOwner);
  // Triggers fire deployments (triggers cannot import deployments, which owns the invocations), and go with them.
  registerDeploymentInvoker(deps, triggerInvoker);
  onDeploymentDeleted(deps, deleteTriggersOfDeployment);
  // Revocations from every replica close this process's sockets of that credential.
  await deps.live.start();
  app.addHook('onClose', async () => deps.live.stop());
  // What activity filters check against the domains that own the resources (whichever service serves them).
  const registry = activityRegistry(deps);
  registerAgentActivity(registry);
  registerOAuthActivity(registry);
  registerSandboxActivity(registry);
  registerStorageActivity(registry);
  registerThreadActivity(registry);
  registerRunmeshActivity(registry);
  registerChannelActivity(registry);
  registerProductActivity(registry);
  registerSessionActivity(registry);
  registerTriggerActivity(registry);
  registerDeploymentActivity(registry);
  registerWorkflowActivity(registry);
  // Gauges read at each scrape of GET /metrics (ADR 0040); the domains own what they count.
  if (deps.metrics.enabled) {
    registerExecuteMetrics(deps);
    registerSandboxMetrics(deps);
    registerRunMetrics(deps);
    registerModelMetrics(deps);
    deps.metrics.gauge('hangar_jobs', 'Durable jobs waiting (created, retry) and running (active), by queue', ['queue', 'state'], async () =>
      (await deps.jobs.backlog()).map((b): [{ queue: string; state: string }, number] => [{ queue: b.queue, state: b.state }, b.count]),
    );
  }
  for (const service of deps.config.services) {
    for (const routes of SERVICE_ROUTES[service]) await routes(app, deps);
  }
  // Metrics on a port of their own (ADR 0040), opened and closed with the app's own listener.
  let metricsListener: Awaited<ReturnType<typeof startMetricsListener>> = null;
  app.addHook('onListen', async () => {
    metricsListener = await startMetricsListener(deps);
    if (metricsListener) deps.metrics.listening = { host: metricsListener.address.address, port: metricsListener.address.port };
  });
  app.addHook('onClose', async () => {
    await metricsListener?.close();
    deps.metrics.listening = null;
  });
  // Once listening, the address becomes this node's internal URL unless HANGAR_NODE_URL names one (ADR 0024).
  app.addHook('onListen', async () => nodeListening(deps, app.server.address()));
  const started: Stoppable[] = [];
  app.addHook('onClose', async () => {
    for (const job of started.reverse()) await job.stop().catch((err) => deps.log.error({ err }, 'a background job did not stop cleanly'));
  });
  try {
    for (const service of deps.config.services) {
      for (const start of SERVICE_JOBS[service]) started.push(await start(deps));
    }
    // The job engine last, once every domain has declared its queues; stopped first (reverse order).
    await deps.jobs.start();
    started.push({ stop: () => deps.jobs.stop() });
  } catch (err) {
    await app.close(); // stops the jobs already started
    throw err;
  }
  await app.ready();
  return app;
}
