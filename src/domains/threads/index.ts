export { registerThreadActivity, threadRoutes } from './routes.js';
export { startThreadJobs } from './jobs.js';
export {
  appendDurable,
  acquireRunLock,
  renewRunLock,
  releaseRunLock,
  activeRun,
  threadBusy,
  createThread,
  findThread,
  rebuildThread,
  type DurableInput,
} from './service.js';
export { DURABLE_TYPES, TRANSIENT_TYPES, threadChannel, type BusFrame, type ThreadEvent } from './frames.js';
