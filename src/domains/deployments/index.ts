export { deploymentRoutes, registerDeploymentActivity } from './routes.js';
export { startDeploymentJobs } from './jobs.js';
