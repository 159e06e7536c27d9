export { createWorkspace, initStorage, personalWorkspaceId, personalWorkspaceIds, projectWorkspaceIds, getWorkspace } from './service.js';
export { registerStorageActivity, storageRoutes } from './routes.js';
export { normalizePath } from './paths.js';
