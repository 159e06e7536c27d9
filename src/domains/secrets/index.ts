export { secretRoutes } from './routes.js';
export { resolveSecret, existingSecretNames, normalizeSecretName } from './service.js';
