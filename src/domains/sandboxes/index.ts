export { registerSandboxActivity, sandboxRoutes } from './routes.js';
export { startSandboxJobs } from './jobs.js';
export { startSandboxPool } from './pool.js';
export { createSandbox, getSandbox, resumeSandbox, agentOf, sandboxUsingTemplate, threadSandboxCtx } from './service.js';
export { normalizeSandboxPath } from './paths.js';
