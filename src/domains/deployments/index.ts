export { deploymentRoutes, registerDeploymentActivity } from './routes.js';
export { startDeploymentJobs } from './jobs.js';
export { triggerInvoker } from './service.js';
