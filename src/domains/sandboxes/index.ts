export { registerSandboxActivity, sandboxRoutes } from './routes.js';
export { sandboxShellRoutes } from './shell-routes.js';
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
export { runCommand } from './commands.js';
export { readFile as readSandboxFile, statPath as statSandboxPath, uploadFile as uploadSandboxFile } from './files.js';
export { destroySandbox, listSandboxes } from './service.js';
export { CommandBody, CreateSandboxBody } from './schemas.js';
