export { templateRoutes } from './routes.js';
export { resolveTemplate, type ResolvedTemplate } from './service.js';
