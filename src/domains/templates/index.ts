export { templateRoutes } from './routes.js';
export { startTemplateJobs } from './jobs.js';
export { lockTemplateForUse, resolveTemplate, setTemplateUseCheck, type ResolvedTemplate, type TemplateUseCheck } from './service.js';
