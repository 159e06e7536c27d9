export { modelRoutes } from './routes.js';
export {
  modelGateway,
  resolveModel,
  recordModelUsage,
  toUsage,
  providerError,
  availableModels,
  runModelStream,
  runUsageTotals,
  type StreamLine,
} from './service.js';
