export { registerRunmeshActivity, runmeshRoutes } from './routes.js';
export { startRunmeshJobs } from './jobs.js';
export { authenticateDevice } from './nodes.js';
export { deviceFrame, meshDispatcher } from './dispatch.js';
