/**
 * The errors the SDK throws. Every failure is a {@link HangarError}; an answer of the API with an error status is
 * the subclass for that status, carrying the API's error `code`, the HTTP `status` and the `requestId` to quote
 * when asking for help.
 *
 * @packageDocumentation
 */

/** Fields of the API's error envelope `{ error: { code, message, requestId, ... } }`. */
export interface ErrorBody {
  code: string;
  message: string;
  requestId?: string;
  [extra: string]: unknown;
}

/** Every error the SDK throws. */
export class HangarError extends Error {
  /** Machine-readable code: the API's (`not_found`, `invalid_state`, `THREAD_BUSY`...), or the SDK's (`connection_error`, `timeout`, `aborted`). */
  readonly code: string;
  /** The HTTP status, when the API answered. */
  readonly status: number | undefined;
  /** The request's id (`X-Request-Id`), when the API answered: quote it when reporting a problem. */
  readonly requestId: string | undefined;
  /** The whole error object the API answered (extra fields such as `state`, `activeRunId`, `issues`). */
  readonly body: ErrorBody | undefined;
  /** The response's headers, when the API answered. */
  readonly headers: Headers | undefined;

  constructor(
    message: string,
    opts: { code: string; status?: number; requestId?: string; body?: ErrorBody; headers?: Headers; cause?: unknown } = { code: 'error' },
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.code = opts.code;
    this.status = opts.status;
    this.requestId = opts.requestId;
    this.body = opts.body;
    this.headers = opts.headers;
  }
}

/** 400: the request is invalid (`issues` in {@link HangarError.body} name the fields). */
export class BadRequestError extends HangarError {}
/** 401: no credential, or one the API does not accept. */
export class AuthenticationError extends HangarError {}
/** 402: not enough credits. */
export class InsufficientCreditsError extends HangarError {}
/** 403: the credential lacks the scope or role the operation needs. */
export class PermissionDeniedError extends HangarError {}
/** 404: no such resource (or one the caller cannot see). */
export class NotFoundError extends HangarError {}
/** 409: the resource's state does not allow it (`invalid_state`, `THREAD_BUSY`...). */
export class ConflictError extends HangarError {}
/** 413: the body is over the API's limit. */
export class PayloadTooLargeError extends HangarError {}
/** 429: too many requests; {@link RateLimitError.retryAfterMs} says when to try again, when the API said. */
export class RateLimitError extends HangarError {
  /** Milliseconds to wait, from the `Retry-After` header. */
  get retryAfterMs(): number | undefined {
    return this.headers ? parseRetryAfter(this.headers.get('retry-after')) : undefined;
  }
}
/** 5xx: the API failed or cannot serve the request now. */
export class InternalServerError extends HangarError {}
/** 503: the API cannot serve the request now (e.g. this server cannot run sandboxes). */
export class ServiceUnavailableError extends InternalServerError {}
/** The API could not be reached, or the connection broke (no status). */
export class ConnectionError extends HangarError {}
/** No answer within the client's `timeout`. */
export class TimeoutError extends ConnectionError {}
/**
 * The caller's `signal` aborted the operation. Its `name` is `AbortError`, as for an aborted `fetch`, and its
 * `cause` is the signal's reason.
 */
export class RequestAbortedError extends HangarError {
  constructor(cause?: unknown) {
    super('the operation was aborted', { code: 'aborted', cause });
    this.name = 'AbortError';
  }
}

const BY_STATUS: Record<number, typeof HangarError> = {
  400: BadRequestError,
  401: AuthenticationError,
  402: InsufficientCreditsError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  429: RateLimitError,
  503: ServiceUnavailableError,
};

/** The error for an API answer with an error status; `payload` is its parsed body (or its text). */
export function errorFromResponse(response: Response, payload: unknown): HangarError {
  const body =
    payload && typeof payload === 'object' && 'error' in payload && typeof (payload as { error: unknown }).error === 'object'
      ? ((payload as { error: ErrorBody }).error ?? undefined)
      : undefined;
  const status = response.status;
  const requestId = body?.requestId ?? response.headers.get('x-request-id') ?? undefined;
  const code = typeof body?.code === 'string' ? body.code : `http_${status}`;
  const text = typeof payload === 'string' && payload ? payload.slice(0, 500) : response.statusText || `HTTP ${status}`;
  const message = typeof body?.message === 'string' ? body.message : text;
  const Class = BY_STATUS[status] ?? (status >= 500 ? InternalServerError : HangarError);
  return new Class(message, { code, status, requestId, body, headers: response.headers });
}

/** `Retry-After` (delta seconds or an HTTP date) in milliseconds from now, or undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined;
  const v = value.trim();
  if (/^\d+(\.\d+)?$/.test(v)) return Math.round(Number(v) * 1000);
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}
