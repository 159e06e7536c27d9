export { modelRoutes } from './routes.js';
export { modelGateway, resolveModel, recordModelUsage, toUsage, providerError, availableModels } from './service.js';
