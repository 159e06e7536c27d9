export {
  createWorkspace,
  initStorage,
  storageOrgs,
  takeStorageByteSeconds,
  personalWorkspaceId,
  personalWorkspaceIds,
  projectWorkspaceIds,
  getWorkspace,
} from './service.js';
export { registerStorageActivity, storageRoutes } from './routes.js';
export { normalizePath } from './paths.js';
