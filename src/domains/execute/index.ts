export { executeRoutes } from './routes.js';
export { executeCode, listRuntimes, createExecutor, sharedExecutor, type Executor } from './service.js';
