export { agentRoutes, registerAgentActivity } from './routes.js';
export { findAgentRow, getAgent } from './service.js';
export { SANDBOX_TOOLS } from './schemas.js';
