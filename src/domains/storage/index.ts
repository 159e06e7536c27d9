export { createWorkspace, initStorage, personalWorkspaceId, getWorkspace } from './service.js';
export { registerStorageActivity, storageRoutes } from './routes.js';
export { normalizePath } from './paths.js';
