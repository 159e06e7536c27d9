export { agentRoutes } from './routes.js';
export { findAgentRow, getAgent } from './service.js';
