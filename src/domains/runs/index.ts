export { runRoutes } from './routes.js';
export { startRunJobs } from './jobs.js';
export {
  acceptDeviceRun,
  appendDeviceFrame,
  devicePayload,
  deviceRun,
  openLocalRun,
  registerLocalDispatcher,
  renewDeviceRun,
  type LocalDispatcher,
  type LocalRunRef,
} from './device.js';
export { cancelRun, cancelRunOfDeletedThread, endLocalRun, getRun, registerRunMetrics, startRun } from './service.js';
export { CancelledError } from './io.js';
export { RunBody } from './schemas.js';
