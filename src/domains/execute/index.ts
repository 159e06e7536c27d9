export { executeRoutes } from './routes.js';
export { executeCode, listRuntimes, createExecutor, type Executor } from './service.js';
