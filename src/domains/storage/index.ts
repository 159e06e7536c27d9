export { createWorkspace, initStorage, personalWorkspaceId, getWorkspace } from './service.js';
export { storageRoutes } from './routes.js';
export { normalizePath } from './paths.js';
