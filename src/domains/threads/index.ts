export { registerThreadActivity, threadRoutes } from './routes.js';
export { startThreadJobs } from './jobs.js';
export { appendDurable, rebuildThread } from './durable.js';
export { acquireRunLock, renewRunLock, releaseRunLock, activeRun, threadBusy } from './locks.js';
export {
  createThread,
  findThread,
  followRun,
  publishTransient,
  registerDeviceFrames,
  setRunCanceller,
  transientPublisher,
  type DeviceFrameHandler,
  type RunCanceller,
  type TransientPublisher,
} from './service.js';
export { DeviceDurableFrame, type ThreadEventFrame, type ThreadEventsResult } from './schemas.js';
export {
  BusFrame,
  DURABLE_TYPES,
  DurableFrame,
  DurableInput,
  DurablePayloads,
  ExecutionMode,
  LiveFrame,
  MessageSource,
  MetadataFrame,
  METADATA_TYPES,
  SnapshotFrame,
  ThreadEvent,
  TRANSIENT_TYPES,
  TransientFrame,
  transientFrames,
  threadChannel,
  type DurablePayload,
  type FrameType,
  type TransientOrigin,
} from './frames.js';
export { EXECUTION_MODES } from './schemas.js';
export { runFinalText, threadHistory, type HistoryMessage } from './history.js';
export { listEvents, listThreads } from './service.js';
export { allThreadIds } from './maintenance.js';
