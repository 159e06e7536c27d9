import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Stripe from 'stripe';

/**
 * Stripe's API on loopback, in its wire format, for the parts Hangar uses: form-encoded bodies as the SDK sends
 * them (`line_items[0][price_data][currency]=usd`), `Authorization: Bearer <secret key>`, JSON objects with their
 * `object` field, errors as `{"error":{type,code,message,...}}` (402 for a card error, 404 `resource_missing`),
 * and `Idempotency-Key` replays (the same key answers the first answer again, with `Idempotent-Replayed: true`).
 *
 * Endpoints: POST /v1/customers, POST /v1/checkout/sessions, GET /v1/checkout/sessions/:id,
 * POST /v1/payment_intents, GET /v1/payment_intents/:id.
 *
 * Webhooks are sent to `webhookUrl` signed as Stripe signs them (`Stripe-Signature: t=<unix>,v1=<HMAC-SHA256 of
 * "<t>.<payload>">`). Controls: `pay(sessionId)` pays a session (a succeeded PaymentIntent with a saved card) and
 * sends `checkout.session.completed`; `expire(sessionId)` sends `checkout.session.expired`; `failNextCharge()`
 * declines the next off-session PaymentIntent (402 card_error and `payment_intent.payment_failed`). Off-session
 * payments send `payment_intent.succeeded` / `payment_intent.payment_failed` in the background, as Stripe does.
 */

export interface PaymentsFakeOptions {
  secretKey: string;
  webhookSecret: string;
  /** Where events are posted; settable later (`fake.webhookUrl = ...`). */
  webhookUrl?: string;
}

export interface Delivery {
  status: number;
  body: string;
}

type Obj = Record<string, any>;

export interface PaymentsFake {
  /** Base URL (HANGAR_STRIPE_API_URL). */
  url: string;
  webhookUrl: string | null;
  customers: Map<string, Obj>;
  sessions: Map<string, Obj>;
  intents: Map<string, Obj>;
  /** Every API request: method, path, decoded form body, headers. */
  requests: { method: string; path: string; body: Obj; headers: http.IncomingHttpHeaders }[];
  /** Every event made, in order. */
  events: Obj[];
  /** Pays the session; sends checkout.session.completed unless `deliver` is false. Returns the event. */
  pay(sessionId: string, opts?: { deliver?: boolean }): Promise<{ event: Obj; delivery: Delivery | null }>;
  /** Expires an open session and sends checkout.session.expired. */
  expire(sessionId: string, opts?: { deliver?: boolean }): Promise<{ event: Obj; delivery: Delivery | null }>;
  /** The next off-session charge is declined (insufficient funds). */
  failNextCharge(): void;
  /** Posts an event to webhookUrl, signed (with another secret or timestamp when given). */
  deliver(event: Obj, opts?: { timestamp?: number; secret?: string; signature?: string | null }): Promise<Delivery>;
  /** Waits for the webhooks sent in the background. */
  idle(): Promise<void>;
  close(): Promise<void>;
}

const id = (prefix: string) => `${prefix}_test_${randomBytes(12).toString('hex')}`;
const now = () => Math.floor(Date.now() / 1000);

/** Decodes the SDK's form encoding (`a[b][0][c]=v`) into nested objects; arrays come back as arrays. */
export function decodeForm(text: string): Obj {
  const root: Obj = {};
  for (const [key, value] of new URLSearchParams(text)) {
    const parts = key.replace(/\]/g, '').split('[');
    let node = root;
    for (let i = 0; i < parts.length - 1; i++) node = node[parts[i]!] ??= {};
    node[parts[parts.length - 1]!] = value;
  }
  const arrays = (v: unknown): unknown => {
    if (v === null || typeof v !== 'object') return v;
    const o = v as Obj;
    const keys = Object.keys(o);
    const mapped = Object.fromEntries(keys.map((k) => [k, arrays(o[k])]));
    return keys.length > 0 && keys.every((k, i) => k === String(i)) ? keys.map((k) => mapped[k]) : mapped;
  };
  return arrays(root) as Obj;
}

export async function startPaymentsFake(opts: PaymentsFakeOptions): Promise<PaymentsFake> {
  const customers = new Map<string, Obj>();
  const sessions = new Map<string, Obj>();
  const intents = new Map<string, Obj>();
  const idempotent = new Map<string, { status: number; body: string }>();
  const requests: PaymentsFake['requests'] = [];
  const events: Obj[] = [];
  const background = new Set<Promise<unknown>>();
  let declineNext = false;

  const send = (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'request-id': id('req'), ...headers });
    res.end(text);
    return { status, body: text };
  };
  const error = (res: http.ServerResponse, status: number, err: Obj) => send(res, status, { error: err });
  const missing = (res: http.ServerResponse, kind: string, what: string, param: string) =>
    error(res, 404, { type: 'invalid_request_error', code: 'resource_missing', message: `No such ${kind}: '${what}'`, param });
  const invalid = (res: http.ServerResponse, param: string, message: string) =>
    error(res, 400, { type: 'invalid_request_error', code: 'parameter_missing', message, param });

  function makeEvent(type: string, object: Obj): Obj {
    const event = {
      id: id('evt'),
      object: 'event',
      api_version: '2025-01-01',
      created: now(),
      data: { object: structuredClone(object) },
      livemode: false,
      pending_webhooks: 1,
      request: { id: null, idempotency_key: null },
      type,
    };
    events.push(event);
    return event;
  }

  async function deliver(event: Obj, o: { timestamp?: number; secret?: string; signature?: string | null } = {}): Promise<Delivery> {
    if (!fake.webhookUrl) throw new Error('the payments fake has no webhookUrl');
    const payload = JSON.stringify(event, null, 2);
    const signature =
      o.signature !== undefined
        ? o.signature
        : Stripe.webhooks.generateTestHeaderString({ payload, secret: o.secret ?? opts.webhookSecret, timestamp: o.timestamp ?? now() });
    const res = await fetch(fake.webhookUrl, {
      method: 'POST',
      headers: {
        'content-type': 'application/json; charset=utf-8',
        'user-agent': 'Stripe/1.0 (+https://stripe.com/docs/webhooks)',
        ...(signature ? { 'stripe-signature': signature } : {}),
      },
      body: payload,
    });
    return { status: res.status, body: await res.text() };
  }

  function inBackground(event: Obj) {
    if (!fake.webhookUrl) return;
    const p = deliver(event).catch(() => undefined);
    background.add(p);
    void p.finally(() => background.delete(p));
  }

  function route(method: string, path: string, body: Obj, res: http.ServerResponse): Delivery {
    if (method === 'POST' && path === '/v1/customers') {
      const c = {
        id: id('cus'),
        object: 'customer',
        created: now(),
        description: body.description ?? null,
        email: body.email ?? null,
        metadata: body.metadata ?? {},
        livemode: false,
      };
      customers.set(c.id, c);
      return send(res, 200, c);
    }
    if (method === 'POST' && path === '/v1/checkout/sessions') {
      if (body.mode !== 'payment') return invalid(res, 'mode', 'Missing required param: mode.');
      if (!body.success_url) return invalid(res, 'success_url', 'Missing required param: success_url.');
      const items = body.line_items as Obj[] | undefined;
      if (!Array.isArray(items) || items.length === 0) return invalid(res, 'line_items', 'Missing required param: line_items.');
      if (body.customer && !customers.has(body.customer)) return missing(res, 'customer', body.customer, 'customer');
      const amount = items.reduce((sum, li) => sum + Number(li.price_data?.unit_amount ?? 0) * Number(li.quantity ?? 1), 0);
      const sid = id('cs');
      const s = {
        id: sid,
        object: 'checkout.session',
        amount_subtotal: amount,
        amount_total: amount,
        cancel_url: body.cancel_url ?? null,
        client_reference_id: body.client_reference_id ?? null,
        created: now(),
        currency: items[0]!.price_data?.currency ?? 'usd',
        customer: body.customer ?? null,
        expires_at: now() + 86_400,
        livemode: false,
        metadata: body.metadata ?? {},
        mode: 'payment',
        payment_intent: null,
        payment_status: 'unpaid',
        status: 'open',
        success_url: String(body.success_url).replace('{CHECKOUT_SESSION_ID}', sid),
        url: `${fake.url}/c/pay/${sid}`,
        _payment_intent_data: body.payment_intent_data ?? {},
        _line_items: items,
      };
      sessions.set(sid, s);
      return send(res, 200, publicOf(s));
    }
    let m = /^\/v1\/checkout\/sessions\/([^/]+)$/.exec(path);
    if (method === 'GET' && m) {
      const s = sessions.get(decodeURIComponent(m[1]!));
      return s ? send(res, 200, publicOf(s)) : missing(res, 'checkout.session', m[1]!, 'session');
    }
    m = /^\/v1\/payment_intents\/([^/]+)$/.exec(path);
    if (method === 'GET' && m) {
      const p = intents.get(decodeURIComponent(m[1]!));
      return p ? send(res, 200, p) : missing(res, 'payment_intent', m[1]!, 'intent');
    }
    if (method === 'POST' && path === '/v1/payment_intents') {
      const amount = Number(body.amount);
      if (!Number.isInteger(amount) || amount < 1) return invalid(res, 'amount', 'Missing required param: amount.');
      if (!body.currency) return invalid(res, 'currency', 'Missing required param: currency.');
      const customer = body.customer ? customers.get(body.customer) : undefined;
      if (body.customer && !customer) return missing(res, 'customer', body.customer, 'customer');
      if (body.payment_method && customer && !(customer._payment_methods as string[] | undefined)?.includes(body.payment_method))
        return error(res, 400, {
          type: 'invalid_request_error',
          code: 'resource_missing',
          message: `The payment method ${body.payment_method} does not belong to customer ${body.customer}.`,
          param: 'payment_method',
        });
      const p: Obj = {
        id: id('pi'),
        object: 'payment_intent',
        amount,
        amount_received: 0,
        created: now(),
        currency: body.currency,
        customer: body.customer ?? null,
        description: body.description ?? null,
        last_payment_error: null,
        livemode: false,
        metadata: body.metadata ?? {},
        payment_method: body.payment_method ?? null,
        status: 'requires_confirmation',
      };
      if (body.confirm !== 'true') {
        intents.set(p.id, p);
        return send(res, 200, p);
      }
      if (declineNext) {
        declineNext = false;
        const err = {
          type: 'card_error',
          code: 'card_declined',
          decline_code: 'insufficient_funds',
          message: 'Your card has insufficient funds.',
          charge: id('ch'),
        };
        Object.assign(p, {
          status: 'requires_payment_method',
          last_payment_error: { ...err, payment_method: { id: p.payment_method, object: 'payment_method' } },
        });
        intents.set(p.id, p);
        inBackground(makeEvent('payment_intent.payment_failed', p));
        return error(res, 402, { ...err, doc_url: 'https://stripe.com/docs/error-codes/card-declined', payment_intent: p });
      }
      Object.assign(p, { status: 'succeeded', amount_received: amount });
      intents.set(p.id, p);
      inBackground(makeEvent('payment_intent.succeeded', p));
      return send(res, 200, p);
    }
    return error(res, 404, { type: 'invalid_request_error', message: `Unrecognized request URL (${method}: ${path}).` });
  }

  const publicOf = (s: Obj) => Object.fromEntries(Object.entries(s).filter(([k]) => !k.startsWith('_')));

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const parsed = new URL(req.url ?? '/', 'http://loopback');
      const method = req.method ?? 'GET';
      const text = Buffer.concat(chunks).toString('utf8');
      if (text && !String(req.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded')) {
        error(res, 400, { type: 'invalid_request_error', message: 'Invalid request: the body must be application/x-www-form-urlencoded.' });
        return;
      }
      const body = decodeForm(method === 'GET' ? parsed.search.slice(1) : text);
      requests.push({ method, path: parsed.pathname, body, headers: req.headers });
      if (req.headers.authorization !== `Bearer ${opts.secretKey}`) {
        error(res, 401, { type: 'invalid_request_error', message: 'Invalid API Key provided.' });
        return;
      }
      const key = req.headers['idempotency-key'];
      const idemKey = method === 'POST' && typeof key === 'string' ? `${parsed.pathname}\n${key}` : null;
      const replay = idemKey ? idempotent.get(idemKey) : undefined;
      if (replay) {
        res.writeHead(replay.status, { 'content-type': 'application/json', 'idempotent-replayed': 'true', 'request-id': id('req') });
        res.end(replay.body);
        return;
      }
      const answer = route(method, parsed.pathname, body, res);
      if (idemKey && answer.status < 500) idempotent.set(idemKey, answer);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  const fake: PaymentsFake = {
    url: `http://127.0.0.1:${port}`,
    webhookUrl: opts.webhookUrl ?? null,
    customers,
    sessions,
    intents,
    requests,
    events,
    async pay(sessionId, o = {}) {
      const s = sessions.get(sessionId);
      if (!s) throw new Error(`no session ${sessionId}`);
      if (s.status !== 'open') throw new Error(`session ${sessionId} is ${s.status}`);
      const pm = id('pm');
      const customer = s.customer ? customers.get(s.customer) : undefined;
      if (customer && s._payment_intent_data?.setup_future_usage === 'off_session')
        customer._payment_methods = [...(customer._payment_methods ?? []), pm];
      const p = {
        id: id('pi'),
        object: 'payment_intent',
        amount: s.amount_total,
        amount_received: s.amount_total,
        created: now(),
        currency: s.currency,
        customer: s.customer,
        description: null,
        last_payment_error: null,
        livemode: false,
        metadata: s._payment_intent_data?.metadata ?? {},
        payment_method: pm,
        setup_future_usage: s._payment_intent_data?.setup_future_usage ?? null,
        status: 'succeeded',
      };
      intents.set(p.id, p);
      Object.assign(s, { status: 'complete', payment_status: 'paid', payment_intent: p.id, url: null });
      const event = makeEvent('checkout.session.completed', publicOf(s));
      return { event, delivery: o.deliver === false ? null : await deliver(event) };
    },
    async expire(sessionId, o = {}) {
      const s = sessions.get(sessionId);
      if (!s) throw new Error(`no session ${sessionId}`);
      Object.assign(s, { status: 'expired', url: null });
      const event = makeEvent('checkout.session.expired', publicOf(s));
      return { event, delivery: o.deliver === false ? null : await deliver(event) };
    },
    failNextCharge() {
      declineNext = true;
    },
    deliver,
    async idle() {
      while (background.size > 0) await Promise.all([...background]);
    },
    async close() {
      await fake.idle();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return fake;
}
