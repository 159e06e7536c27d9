/**
 * The error both adapters' `parse` throws for an inbound body that is not the provider's format (not JSON, the
 * wrong shape, too large, too many items): the webhook route answers it with 400 and records nothing.
 */
export class InboundParseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InboundParseError';
  }
}

/** The largest inbound webhook body either adapter parses (the route's body limit should be at least this). */
export const MAX_INBOUND_BYTES = 1024 * 1024;
