export { executeRoutes } from './routes.js';
export { pistonRoutes } from './piston-routes.js';
export { ExecuteBody } from './schemas.js';
export { executeCode, listRuntimes, createExecutor, registerExecuteMetrics, sharedExecutor, type Executor } from './service.js';
