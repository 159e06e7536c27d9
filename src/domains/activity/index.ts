export { ActivityQuery, ActivityEvent, RESOURCE_TYPES, type ResourceType } from './schemas.js';
export { recordActivity, listActivity, activityRegistry, ActivityRegistry, type ActivityInput } from './service.js';
export { activityRoutes, ActivityPage } from './routes.js';
