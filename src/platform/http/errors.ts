/** The closed set of error codes, each with its one HTTP status. */
export const ERROR_STATUS = {
  invalid_request: 400,
  provider_not_supported: 400,
  unauthenticated: 401,
  insufficient_credits: 402,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  invalid_state: 409,
  THREAD_BUSY: 409,
  connect_required: 409,
  provider_disabled: 409,
  provider_not_configured: 409,
  tool_not_installed: 409,
  payments_not_configured: 409,
  phone_number_in_use: 409,
  session_busy: 409,
  replayed: 409,
  link_expired: 410,
  payload_too_large: 413,
  quota_exceeded: 413,
  unsupported_media_type: 415,
  range_not_satisfiable: 416,
  rate_limited: 429,
  limit_exceeded: 429,
  internal: 500,
  not_implemented: 501,
  provider_error: 502,
  sandbox_agent_error: 502,
  provider_timeout: 504,
  service_unavailable: 503,
  insufficient_storage: 507,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export interface FieldIssue {
  path: string;
  message: string;
}

export class AppError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: { issues?: FieldIssue[]; [k: string]: unknown },
    readonly headers?: Record<string, string>,
  ) {
    super(message);
    this.name = 'AppError';
    this.status = ERROR_STATUS[code];
  }
}

/** Factories so messages read the same everywhere. */
export const errors = {
  notFound: (resource: string, id?: string) => new AppError('not_found', id ? `${resource} ${id} was not found` : `${resource} was not found`),
  invalid: (message: string, issues?: FieldIssue[]) => new AppError('invalid_request', message, issues ? { issues } : undefined),
  invalidField: (field: string, message: string) => new AppError('invalid_request', `${field}: ${message}`, { issues: [{ path: field, message }] }),
  unauthenticated: (message = 'a valid API key or session token is required') => new AppError('unauthenticated', message),
  forbidden: (message: string) => new AppError('forbidden', message),
  missingScope: (scope: string) => new AppError('forbidden', `this credential lacks the "${scope}" scope`),
  conflict: (message: string) => new AppError('conflict', message),
  tooLarge: (message: string) => new AppError('payload_too_large', message),
  quotaExceeded: (message: string) => new AppError('quota_exceeded', message),
  rateLimited: (message: string, retryAfterSeconds?: number) =>
    new AppError('rate_limited', message, undefined, retryAfterSeconds ? { 'retry-after': String(retryAfterSeconds) } : undefined),
  /** 409 for a transition that does not apply; `state` (the current one) is part of the error body. */
  invalidState: (message: string, state: string) => new AppError('invalid_state', message, { state }),
  /** 409 THREAD_BUSY naming the active run (`activeRunId` in the error body). */
  threadBusy: (message: string, activeRunId: string) => new AppError('THREAD_BUSY', message, { activeRunId }),
  limitExceeded: (message: string) => new AppError('limit_exceeded', message),
  unavailable: (message: string) => new AppError('service_unavailable', message),
  /** 507: the host is too short of disk to take on more (the operator's free-space floor). */
  insufficientStorage: (message: string) => new AppError('insufficient_storage', message),
  notImplemented: (what: string) => new AppError('not_implemented', `${what} is not available in this version of Hangar`),
};
