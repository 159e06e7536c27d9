export { deploymentRoutes, registerDeploymentActivity } from './routes.js';
export { startDeploymentJobs } from './jobs.js';
export { type DeploymentDeletedHook, onDeploymentDeleted, triggerInvoker } from './service.js';
