export { modelRoutes } from './routes.js';
export {
  modelGateway,
  resolveModel,
  recordModelUsage,
  registerModelMetrics,
  toUsage,
  providerError,
  availableModels,
  runModelStream,
  runUsageTotals,
  generateForCaller,
  type StreamLine,
} from './service.js';
export type { ModelEntry } from './catalogue.js';
