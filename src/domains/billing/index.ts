export { grantSignupCredits, getBalance } from './service.js';
export { billingRoutes } from './routes.js';
