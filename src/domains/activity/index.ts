export { ActivityQuery, ActivityEvent, RESOURCE_TYPES, type ResourceType } from './schemas.js';
export { recordActivity, listActivity, registerActivityResource, registerHiddenFilter, type ActivityInput } from './service.js';
export { activityRoutes, ActivityPage } from './routes.js';
