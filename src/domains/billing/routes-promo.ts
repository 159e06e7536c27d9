import { envelope, errorResponses, ok } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import { PROMO_FAILURE_LIMIT, redeemPromoCode } from './promo.js';
import { PromoRedemption, RedeemPromoBody } from './schemas.js';

export async function promoRoutes(app: App) {
  app.post(
    '/v1/billing/promo-codes/redeem',
    {
      config: { scope: 'billing:write' },
      schema: {
        tags: ['billing'],
        summary: 'Redeem a promo code',
        description:
          'Organization admins only. The body names the code in `code` (case-insensitive). The code’s credits are added to the ' +
          'organization’s balance at once (a `promo` entry in the credit history). Each organization may redeem a code once ' +
          '(409 `conflict` after that); a code fully redeemed or expired is a 409 `invalid_state` whose `state` is `fully_redeemed` ' +
          `or \`expired\`; an unknown code is a 404. After ${PROMO_FAILURE_LIMIT} refused attempts in a minute the organization ` +
          'is answered 429 `rate_limited` (with `Retry-After`) until the minute has passed.',
        body: RedeemPromoBody,
        response: { 200: envelope(PromoRedemption), ...errorResponses },
      },
    },
    async (req) => ok(req, await redeemPromoCode(req.ctx, req.body)),
  );
}
