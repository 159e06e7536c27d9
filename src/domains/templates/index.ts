export { templateRoutes } from './routes.js';
export { startTemplateJobs } from './jobs.js';
export { resolveTemplate, setTemplateUseCheck, type ResolvedTemplate, type TemplateUseCheck } from './service.js';
