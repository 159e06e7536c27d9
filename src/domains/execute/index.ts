export { executeRoutes } from './routes.js';
export { executeCode, listRuntimes, createExecutor, registerExecuteMetrics, sharedExecutor, type Executor } from './service.js';
