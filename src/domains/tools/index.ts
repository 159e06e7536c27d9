export { toolRoutes } from './routes.js';
export { startToolJobs } from './jobs.js';
export { executeTool, failedToolCalls, recordToolExecution, type ExecuteOptions } from './execute.js';
export { findTool, installTool, toolsNotInstalled, credentialStatus, unavailableReason } from './service.js';
export type { CatalogEntry } from './definition.js';
export type { ToolExecution } from './schemas.js';
