export { mcpRoutes } from './routes.js';
