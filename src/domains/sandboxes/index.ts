export { sandboxRoutes } from './routes.js';
