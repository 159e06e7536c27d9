export { productRoutes } from './product-routes.js';
export {
  activeLink,
  bindingForChannel,
  endUserCtx,
  endUserFlowOwner,
  isLinkToken,
  presentLinkToken,
  registerProductActivity,
  unlinkedSenderReply,
  type ChannelBindingInfo,
  type EndUser,
} from './product.js';
