export { threadRoutes } from './routes.js';
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
export { EXECUTION_MODES } from './schemas.js';
export { threadHistory, type HistoryMessage } from './history.js';
export { allThreadIds } from './maintenance.js';
