export { grantSignupCredits, getBalance, openBillingAccount } from './service.js';
export { recordUsage, settleUsage, settleAfterCommit, usageEventOf, onAfterCharge, type UsageInput, type ModelPricing, type TokenCounts } from './meter.js';
export { requireCredits } from './limits.js';
export { billingRoutes } from './routes.js';
export { startBillingJobs } from './jobs.js';
export { finishRuntime } from './runtime.js';
