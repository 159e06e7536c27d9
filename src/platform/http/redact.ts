/** The query parameters that carry a credential (the WebSockets' `api_key` and `token`): never logged. */
const CREDENTIAL_PARAMS = ['api_key', 'token'] as const;

/** The URL with the values of credential parameters replaced, for logs. */
export function redactUrl(url: string): string {
  const at = url.indexOf('?');
  if (at < 0) return url;
  const params = new URLSearchParams(url.slice(at + 1));
  if (!CREDENTIAL_PARAMS.some((name) => params.has(name))) return url;
  for (const name of CREDENTIAL_PARAMS) if (params.has(name)) params.set(name, '(redacted)');
  return `${url.slice(0, at)}?${params.toString()}`;
}

/** Route option: the request log line of a route whose query may carry a credential, with it redacted. */
export const redactedRequestLog = {
  req: (req: { method: string; url: string }) => ({ method: req.method, url: redactUrl(req.url) }),
};
