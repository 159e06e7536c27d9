export { templateRoutes } from './routes.js';
export { startTemplateJobs } from './jobs.js';
export { resolveTemplate, type ResolvedTemplate } from './service.js';
