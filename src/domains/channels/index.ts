export { channelRoutes, registerChannelActivity } from './routes.js';
export { productRoutes } from './product-routes.js';
export { startChannelJobs } from './jobs.js';
export { endUserFlowOwner, registerProductActivity } from './product.js';
