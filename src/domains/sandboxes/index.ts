export { registerSandboxActivity, sandboxRoutes } from './routes.js';
export { reconcileAfterRevival, startSandboxJobs } from './jobs.js';
export { nodeLoad, remoteNodeOf as sandboxRemoteNode } from './nodes.js';
export { startSandboxPool } from './pool.js';
export {
  createSandbox,
  getSandbox,
  resumeSandbox,
  agentOf,
  pauseRunningForBilling,
  registerSandboxMetrics,
  sandboxUsingTemplate,
  threadSandboxCtx,
} from './service.js';
export { normalizeSandboxPath } from './paths.js';
