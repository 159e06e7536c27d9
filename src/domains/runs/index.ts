export { runRoutes } from './routes.js';
export { startRunJobs } from './jobs.js';
export {
  acceptDeviceRun,
  appendDeviceFrame,
  devicePayload,
  deviceRun,
  registerLocalDispatcher,
  renewDeviceRun,
  type LocalDispatcher,
  type LocalRunRef,
} from './device.js';
export { endLocalRun } from './service.js';
