/**
 * The adapters' one way to call a provider: Node's fetch bounded by the configured timeout, redirects refused, the
 * answer read up to a cap and parsed as JSON when it is JSON. Network failures and timeouts become retryable
 * ProviderErrors whose message never carries the credentials (a chat-bot token is part of the URL path).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { z } from 'zod';
import { InboundParseError, MAX_INBOUND_BYTES } from './errors.js';
import { ProviderError } from './types.js';

/** The most bytes of a provider's answer that are read. */
export const MAX_RESPONSE_BYTES = 1024 * 1024;

export interface ProviderResponse {
  status: number;
  headers: Headers;
  /** The parsed JSON answer; null when the body was empty or not JSON. */
  json: unknown;
}

/** Removes every secret from a text that may be shown (an error's cause can name the request). */
export function scrub(text: string, secrets: readonly (string | undefined)[]): string {
  let out = text;
  for (const s of secrets) if (s && s.length >= 4) out = out.split(s).join('<redacted>');
  // Control characters and overlong provider texts never reach a message.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: strips control characters a provider may send
  out = out.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim();
  return out.length > 300 ? `${out.slice(0, 300)}…` : out;
}

async function readCapped(res: Response, provider: string): Promise<string> {
  if (!res.body) return '';
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > MAX_RESPONSE_BYTES) {
      await reader.cancel().catch(() => undefined);
      throw new ProviderError(`${provider} answered with more than ${MAX_RESPONSE_BYTES} bytes`, { status: res.status, code: 'response_too_large' });
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export async function callProvider(
  opts: { provider: string; timeoutMs: number; secrets: readonly (string | undefined)[] },
  url: string,
  init: { method: 'GET' | 'POST'; headers?: Record<string, string>; body?: unknown },
): Promise<ProviderResponse> {
  const headers: Record<string, string> = { accept: 'application/json', ...init.headers };
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(url, {
      method: init.method,
      headers,
      body: init.body === undefined ? undefined : JSON.stringify(init.body),
      redirect: 'error',
      signal: AbortSignal.timeout(opts.timeoutMs),
    });
  } catch (err) {
    const e = err as Error;
    if (e.name === 'TimeoutError' || e.name === 'AbortError')
      throw new ProviderError(`${opts.provider} did not answer within ${opts.timeoutMs} ms`, { code: 'timeout' });
    const cause = (e.cause as Error | undefined)?.message ?? e.message;
    throw new ProviderError(`${opts.provider} could not be reached (${scrub(cause, opts.secrets)})`, { code: 'network' });
  }
  let text: string;
  try {
    text = await readCapped(res, opts.provider);
  } catch (err) {
    if (err instanceof ProviderError) throw err;
    const e = err as Error;
    if (e.name === 'TimeoutError' || e.name === 'AbortError')
      throw new ProviderError(`${opts.provider} did not finish its answer within ${opts.timeoutMs} ms`, { code: 'timeout' });
    throw new ProviderError(`${opts.provider}'s answer was cut off (${scrub(e.message, opts.secrets)})`, { code: 'network' });
  }
  let json: unknown = null;
  if (text.trim()) {
    try {
      json = JSON.parse(text);
    } catch {
      json = null;
    }
  }
  return { status: res.status, headers: res.headers, json };
}

/** A `Retry-After` header (seconds or an HTTP date) in milliseconds, or undefined. */
export function retryAfterHeader(headers: Headers): number | undefined {
  const v = headers.get('retry-after')?.trim();
  if (!v) return undefined;
  if (/^\d{1,7}$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - Date.now());
}

/** Compares two secrets in constant time whatever their lengths (fixed-length SHA-256 digests). */
export function sameSecret(a: string, b: string): boolean {
  const da = createHash('sha256').update(a, 'utf8').digest();
  const db = createHash('sha256').update(b, 'utf8').digest();
  return timingSafeEqual(da, db);
}

/** A header's single value (a repeated header is refused as absent); names are matched case-insensitively. */
export function headerOf(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const wanted = name.toLowerCase();
  for (const [k, v] of Object.entries(headers)) {
    if (k.toLowerCase() !== wanted) continue;
    if (Array.isArray(v)) return v.length === 1 ? v[0] : undefined;
    return v;
  }
  return undefined;
}

/** Parses an inbound body against a schema; anything else is an InboundParseError naming the first problem. */
export function parseInbound<T>(rawBody: Buffer, schema: z.ZodType<T>, what: string): T {
  if (!Buffer.isBuffer(rawBody)) throw new InboundParseError(`the ${what} body is missing`);
  if (rawBody.byteLength > MAX_INBOUND_BYTES) throw new InboundParseError(`the ${what} body is larger than ${MAX_INBOUND_BYTES} bytes`);
  let value: unknown;
  try {
    value = JSON.parse(rawBody.toString('utf8'));
  } catch {
    throw new InboundParseError(`the ${what} body is not JSON`);
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const at = issue?.path.length ? issue.path.join('.') : 'body';
    throw new InboundParseError(`the ${what} body is not in the provider's format (${at}: ${issue?.message ?? 'invalid'})`);
  }
  return parsed.data;
}

/** Cuts a text to at most `max` UTF-16 units without splitting a surrogate pair. */
export function truncate(text: string, max: number): string {
  if (text.length <= max) return text;
  let end = max;
  const code = text.charCodeAt(end - 1);
  if (code >= 0xd800 && code <= 0xdbff) end -= 1;
  return text.slice(0, end);
}

/** The most characters of an inbound message's text that are kept. */
export const MAX_INBOUND_TEXT = 16_000;
