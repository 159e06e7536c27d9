export { sandboxRoutes } from './routes.js';
export { createSandbox, getSandbox, resumeSandbox, agentOf } from './service.js';
export { normalizeSandboxPath } from './paths.js';
