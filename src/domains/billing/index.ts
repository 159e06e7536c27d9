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
export { planLimits, requireCredits } from './limits.js';
export { onCreditsExhausted, type ExhaustionHandler } from './grace.js';
export { billingRoutes } from './routes.js';
export { startBillingJobs, startCreditGraceJobs } from './jobs.js';
export { createPromoCode, listPromoCodes, type PromoCode } from './promo.js';
export { finishRuntime } from './runtime.js';
export { registerAutoTopup } from './topups.js';
