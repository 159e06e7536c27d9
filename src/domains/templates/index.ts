export { templateRoutes } from './routes.js';
export { resolveTemplate, setTemplateUseCheck, type ResolvedTemplate, type TemplateUseCheck } from './service.js';
