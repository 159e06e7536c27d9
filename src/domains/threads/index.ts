export { threadRoutes } from './routes.js';
export { appendDurable, acquireRunLock, renewRunLock, releaseRunLock, activeRun, threadBusy, createThread, rebuildThread, type DurableInput } from './service.js';
export { DURABLE_TYPES, TRANSIENT_TYPES, type ThreadEvent } from './frames.js';
