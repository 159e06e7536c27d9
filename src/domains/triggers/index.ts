export { triggerRoutes, registerTriggerActivity } from './routes.js';
export { registerDeploymentInvoker, type DeploymentInvoker } from './service.js';
export { startTriggerJobs } from './jobs.js';
