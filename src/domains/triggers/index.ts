export { triggerRoutes, registerTriggerActivity } from './routes.js';
export { deleteTriggersOfDeployment, registerDeploymentInvoker, type DeploymentInvoker } from './service.js';
export { startTriggerJobs } from './jobs.js';
