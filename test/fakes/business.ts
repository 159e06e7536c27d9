import { createHmac, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The business messaging provider's Graph API on loopback, in the WhatsApp Cloud API wire format, versioned like the
 * real one (`url` ends in `/v21.0`): `Authorization: Bearer <token>`, errors as
 * `{"error":{"message","type","code","error_subcode"?,"fbtrace_id"}}`. A token is valid for the numbers it was added
 * with; an unknown token answers 401 OAuthException 190, an id it cannot see answers 400 GraphMethodException 100/33.
 *
 * Endpoints: GET /<phone number id>?fields=..., GET /<business account id>/phone_numbers,
 * POST /<phone number id>/messages (text messages). Controls: `addNumber`, `failNext(op, failure, times)`.
 * Webhooks: `deliver(webhookUrl, body, { appSecret })` posts a notification signed with `X-Hub-Signature-256` over
 * the exact bytes sent; `challenge(webhookUrl, verifyToken, challenge)` makes the GET verification handshake;
 * `textEvent`/`statusEvent` build notifications.
 */

export interface BusinessNumber {
  phoneNumberId: string;
  displayPhoneNumber: string;
  verifiedName: string;
  businessAccountId: string;
  accessToken: string;
}

export interface SentBusinessMessage {
  phoneNumberId: string;
  to: string;
  text: string;
  id: string;
}

export type BusinessOp = 'phone_number' | 'phone_numbers' | 'messages';

export interface BusinessFailure {
  status: number;
  code: number;
  message: string;
  type?: string;
  subcode?: number;
  /** Seconds, sent as the Retry-After header. */
  retryAfter?: number;
}

type Obj = Record<string, any>;

const trace = () => randomBytes(9).toString('base64url');
export const WA_VERSION = 'v21.0';

export class FakeBusiness {
  /** Base URL for HANGAR_CHANNELS_BUSINESS_API_URL (version included). */
  readonly url: string;
  readonly sent: SentBusinessMessage[] = [];
  /** Every API request: method, path (without the version), query, body. */
  readonly requests: { method: string; path: string; query: Obj; body: Obj | null; token: string | null }[] = [];
  private readonly numbers = new Map<string, BusinessNumber>();
  private readonly failures = new Map<BusinessOp, { failure: BusinessFailure; times: number }[]>();
  private readonly waiters = new Set<() => void>();
  private nextId = 1;

  private constructor(
    private readonly server: http.Server,
    port: number,
  ) {
    this.url = `http://127.0.0.1:${port}/${WA_VERSION}`;
  }

  static async start(opts: { numbers?: BusinessNumber[] } = {}): Promise<FakeBusiness> {
    let fake: FakeBusiness | undefined;
    const server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => fake!.handle(req, Buffer.concat(chunks), res));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    fake = new FakeBusiness(server, (server.address() as AddressInfo).port);
    for (const n of opts.numbers ?? []) fake.addNumber(n);
    return fake;
  }

  addNumber(n: BusinessNumber): void {
    this.numbers.set(n.phoneNumberId, { ...n });
  }

  /** The next `times` calls of `op` answer `failure`. */
  failNext(op: BusinessOp, failure: BusinessFailure, times = 1): void {
    const list = this.failures.get(op) ?? [];
    list.push({ failure, times });
    this.failures.set(op, list);
  }

  /** Resolves with the sent messages (matching `filter`) once there are at least `n`; rejects after `timeoutMs`. */
  waitForSent(n: number, filter: (m: SentBusinessMessage) => boolean = () => true, timeoutMs = 20_000): Promise<SentBusinessMessage[]> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.sent.filter(filter);
        if (found.length < n) return false;
        clearTimeout(timer);
        this.waiters.delete(check as () => void);
        resolve(found);
        return true;
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check as () => void);
        reject(new Error(`the business fake saw ${this.sent.filter(filter).length} of ${n} expected messages: ${JSON.stringify(this.sent)}`));
      }, timeoutMs);
      if (!check()) this.waiters.add(check as () => void);
    });
  }

  /**
   * POSTs a notification to `webhookUrl` as the provider does: `X-Hub-Signature-256: sha256=<HMAC of the exact bytes
   * sent with appSecret>`. A string or Buffer body is sent as is; `signature` overrides the header (null: none).
   */
  async deliver(webhookUrl: string, body: object | string | Buffer, opts: { appSecret: string; signature?: string | null }): Promise<Response> {
    const bytes = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body), 'utf8');
    const signature = opts.signature === undefined ? `sha256=${createHmac('sha256', opts.appSecret).update(bytes).digest('hex')}` : opts.signature;
    return fetch(webhookUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(signature !== null ? { 'x-hub-signature-256': signature } : {}) },
      body: new Uint8Array(bytes),
    });
  }

  /** The verification handshake: GET `webhookUrl?hub.mode=subscribe&hub.verify_token=...&hub.challenge=...`. */
  async challenge(webhookUrl: string, verifyToken: string, challenge: string, mode = 'subscribe'): Promise<Response> {
    const u = new URL(webhookUrl);
    u.searchParams.set('hub.mode', mode);
    u.searchParams.set('hub.verify_token', verifyToken);
    u.searchParams.set('hub.challenge', challenge);
    return fetch(u);
  }

  /** A notification with one text message from `from` (digits) to the number. */
  textEvent(o: {
    phoneNumberId: string;
    displayPhoneNumber?: string;
    businessAccountId?: string;
    from: string;
    name?: string;
    text: string;
    id?: string;
    timestamp?: number;
  }): Obj {
    const id = o.id ?? `wamid.HBgL${randomBytes(12).toString('hex').toUpperCase()}`;
    return this.notification(o, {
      contacts: [{ profile: { name: o.name ?? 'Customer' }, wa_id: o.from }],
      messages: [{ from: o.from, id, timestamp: String(o.timestamp ?? Math.floor(Date.now() / 1000)), type: 'text', text: { body: o.text } }],
    });
  }

  /** A notification with a delivery status only (no message). */
  statusEvent(o: {
    phoneNumberId: string;
    displayPhoneNumber?: string;
    businessAccountId?: string;
    messageId: string;
    recipient: string;
    status?: string;
  }): Obj {
    return this.notification(o, {
      statuses: [
        {
          id: o.messageId,
          status: o.status ?? 'delivered',
          timestamp: String(Math.floor(Date.now() / 1000)),
          recipient_id: o.recipient,
          conversation: { id: randomBytes(16).toString('hex'), origin: { type: 'service' } },
          pricing: { billable: true, pricing_model: 'CBP', category: 'service' },
        },
      ],
    });
  }

  /** A `whatsapp_business_account` notification with one `messages` change carrying `value` (metadata filled in). */
  notification(o: { phoneNumberId: string; displayPhoneNumber?: string; businessAccountId?: string }, value: Obj): Obj {
    const known = this.numbers.get(o.phoneNumberId);
    return {
      object: 'whatsapp_business_account',
      entry: [
        {
          id: o.businessAccountId ?? known?.businessAccountId ?? '100000000000001',
          changes: [
            {
              field: 'messages',
              value: {
                messaging_product: 'whatsapp',
                metadata: {
                  display_phone_number: o.displayPhoneNumber ?? known?.displayPhoneNumber?.replace(/\D/g, '') ?? '15550000000',
                  phone_number_id: o.phoneNumberId,
                },
                ...value,
              },
            },
          ],
        },
      ],
    };
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private handle(req: http.IncomingMessage, raw: Buffer, res: http.ServerResponse) {
    const answer = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': 'application/json', 'x-fb-trace-id': trace(), ...headers });
      res.end(JSON.stringify(body));
    };
    const error = (status: number, e: { message: string; type: string; code: number; subcode?: number }, headers: Record<string, string> = {}) =>
      answer(
        status,
        {
          error: {
            message: e.message,
            type: e.type,
            code: e.code,
            ...(e.subcode !== undefined ? { error_subcode: e.subcode } : {}),
            fbtrace_id: trace(),
          },
        },
        headers,
      );
    const unsupported = (id: string) =>
      error(400, {
        message: `Unsupported get request. Object with ID '${id}' does not exist, cannot be loaded due to missing permissions, or does not support this operation. Please read the Graph API documentation at https://developers.facebook.com/docs/graph-api`,
        type: 'GraphMethodException',
        code: 100,
        subcode: 33,
      });
    const url = new URL(req.url ?? '/', 'http://fake');
    const prefix = `/${WA_VERSION}/`;
    if (!url.pathname.startsWith(prefix)) return error(400, { message: 'Unknown path components', type: 'OAuthException', code: 2500 });
    const path = url.pathname.slice(prefix.length);
    const auth = req.headers.authorization;
    const token = auth?.startsWith('Bearer ') ? auth.slice(7) : null;
    let body: Obj | null = null;
    if (raw.length > 0) {
      try {
        body = JSON.parse(raw.toString('utf8'));
      } catch {
        return error(400, { message: '(#100) Invalid JSON', type: 'OAuthException', code: 100 });
      }
    }
    this.requests.push({ method: req.method ?? 'GET', path, query: Object.fromEntries(url.searchParams), body, token });
    if (!token)
      return error(400, {
        message: 'An active access token must be used to query information about the current user.',
        type: 'OAuthException',
        code: 2500,
      });
    const mine = [...this.numbers.values()].filter((n) => n.accessToken === token);
    if (mine.length === 0)
      return error(401, { message: 'Invalid OAuth access token - Cannot parse access token', type: 'OAuthException', code: 190 });

    const segments = path.split('/');
    const op: BusinessOp | null =
      req.method === 'GET' && segments.length === 1
        ? 'phone_number'
        : req.method === 'GET' && segments[1] === 'phone_numbers' && segments.length === 2
          ? 'phone_numbers'
          : req.method === 'POST' && segments[1] === 'messages' && segments.length === 2
            ? 'messages'
            : null;
    if (!op) return unsupported(segments[0] ?? '');
    const queued = this.failures.get(op);
    if (queued?.length) {
      const f = queued[0]!;
      if (--f.times <= 0) queued.shift();
      const { failure } = f;
      return error(
        failure.status,
        { message: failure.message, type: failure.type ?? 'OAuthException', code: failure.code, subcode: failure.subcode },
        failure.retryAfter !== undefined ? { 'retry-after': String(failure.retryAfter) } : {},
      );
    }
    const id = segments[0]!;
    if (op === 'phone_number') {
      const n = mine.find((x) => x.phoneNumberId === id);
      if (!n) return unsupported(id);
      return answer(200, { display_phone_number: n.displayPhoneNumber, verified_name: n.verifiedName, id: n.phoneNumberId, quality_rating: 'GREEN' });
    }
    if (op === 'phone_numbers') {
      const list = mine.filter((x) => x.businessAccountId === id);
      if (list.length === 0) return unsupported(id);
      return answer(200, {
        data: list.map((n) => ({
          verified_name: n.verifiedName,
          display_phone_number: n.displayPhoneNumber,
          id: n.phoneNumberId,
          quality_rating: 'GREEN',
        })),
        paging: { cursors: { before: 'QVFIU', after: 'QVFIU' } },
      });
    }
    const n = mine.find((x) => x.phoneNumberId === id);
    if (!n) return unsupported(id);
    const b = body ?? {};
    const param = (name: string) => error(400, { message: `(#100) The parameter ${name} is required.`, type: 'OAuthException', code: 100 });
    if (b.messaging_product !== 'whatsapp') return param('messaging_product');
    if (typeof b.to !== 'string' || !b.to) return param('to');
    if (b.type !== 'text') return error(400, { message: '(#100) Param type must be one of {TEXT} in this fake', type: 'OAuthException', code: 100 });
    const text = b.text?.body;
    if (typeof text !== 'string' || text === '') return param("text['body']");
    if (text.length > 4096)
      return error(400, { message: "(#100) Param text['body'] must be at most 4096 characters long.", type: 'OAuthException', code: 100 });
    const wamid = `wamid.HBgL${String(this.nextId++).padStart(6, '0')}${randomBytes(8).toString('hex').toUpperCase()}`;
    this.sent.push({ phoneNumberId: id, to: b.to, text, id: wamid });
    for (const w of [...this.waiters]) w();
    return answer(200, { messaging_product: 'whatsapp', contacts: [{ input: b.to, wa_id: b.to.replace(/\D/g, '') }], messages: [{ id: wamid }] });
  }
}
