export {
  declareDead,
  getNode,
  liveNodes,
  nodeListening,
  nodeUrl,
  silentNodes,
  startNodeHeartbeat,
  type NodeInfo,
  type NodeLoad,
} from './registry.js';
export { HOP_HEADERS, HOP_WINDOW_MS, signHop, verifyHop } from './signing.js';
export { forwardRequest, HOP_BY_HOP } from './proxy.js';
export { forwardingHooks, type NodeTarget } from './hooks.js';
