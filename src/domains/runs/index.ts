export { runRoutes } from './routes.js';
