export { sandboxRoutes } from './routes.js';
export { createSandbox, getSandbox, resumeSandbox, agentOf, sandboxUsingTemplate } from './service.js';
export { normalizeSandboxPath } from './paths.js';
