export { runRoutes } from './routes.js';
export { startRunJobs } from './jobs.js';
