export { grantSignupCredits, getBalance, openBillingAccount, assignPlan, listPlans } from './service.js';
export {
  recordUsage,
  settleUsage,
  settleAfterCommit,
  usageEventOf,
  onAfterCharge,
  type UsageInput,
  type ModelPricing,
  type TokenCounts,
} from './meter.js';
export { requireCredits } from './limits.js';
export { billingRoutes } from './routes.js';
export { startBillingJobs } from './jobs.js';
export { createPromoCode, listPromoCodes, type PromoCode } from './promo.js';
