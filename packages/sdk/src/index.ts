/**
 * The TypeScript SDK of Hangar, the self-hostable cloud platform for AI agents. Works in Node 20+ and in browsers
 * (the WebSocket of `threads.subscribe` uses the `ws` package on Node 20, imported only there).
 *
 * @packageDocumentation
 */
export { Agents } from './agents.js';
export { Hangar, type HangarOptions } from './client.js';
export type { WebSocketConstructor, WebSocketLike } from './core.js';
export {
  AuthenticationError,
  BadRequestError,
  ConflictError,
  ConnectionError,
  type ErrorBody,
  HangarError,
  InsufficientCreditsError,
  InternalServerError,
  NotFoundError,
  PayloadTooLargeError,
  PermissionDeniedError,
  RateLimitError,
  RequestAbortedError,
  ServiceUnavailableError,
  TimeoutError,
} from './errors.js';
export type { components, operations, paths } from './generated/openapi.js';
export { type RunResultFrame, Runs, RunStream, type RunStreamFrame } from './runs.js';
export { Commands, Files, type ReadFileOptions, type RunCommandOptions, Sandbox, Sandboxes } from './sandboxes.js';
export { type SubscribeOptions, Threads, type ThreadSubscription } from './threads.js';
export type { RequestOptions } from './transport.js';
export type * from './types.js';
