export { workflowRoutes, registerWorkflowActivity } from './routes.js';
export { startWorkflowJobs } from './jobs.js';
