export { oauthRoutes } from './routes.js';
export { startOAuthJobs } from './jobs.js';
export { canSeeConnection, listConnections, registerFlowOwners, startBrowserFlow, type FlowOwnerResolver } from './service.js';
export { OAuthConnection, OAuthStart } from './schemas.js';
export { getAccessToken, type AccessToken } from './tokens.js';

import type { ActivityRegistry } from '../activity/index.js';
import { canSeeConnection } from './service.js';

/** Activity filters on `oauth_connection` resources: a connection is its user's alone. */
export function registerOAuthActivity(registry: ActivityRegistry): void {
  registry.resource('oauth_connection', canSeeConnection);
}
