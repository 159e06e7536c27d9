export {
  createAuthenticator,
  type AuthenticatorLookups,
  type MembershipLookup,
  createUser,
  createApiKey,
  listApiKeys,
  revokeApiKey,
  userForEmail,
  INVITED_ISSUER,
} from './service.js';
export { issueSessionToken, BUILTIN_ISSUER } from './tokens.js';
export { identityRoutes } from './routes.js';
export { getUserProfile, userProfiles, lockUser, revokeMemberKeys, hasUsers, userExists, type UserProfile } from './users.js';
