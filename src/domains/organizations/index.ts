export { bootstrapOrganization, type BootstrappedOrganization } from './bootstrap.js';
export { addMember, createOrganization, getMe, listMyOrganizations } from './service.js';
export { organizationRoutes } from './routes.js';
export { firstMembership, laterMemberCtx, membershipOf } from './members.js';
