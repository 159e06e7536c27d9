export { registerSessionActivity, sessionRoutes } from './routes.js';
export { openSessionForRun, type RunSession, type RunToolResult } from './runs.js';
