import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

/**
 * A loopback webhook receiver speaking Standard Webhooks: every request is recorded with its raw body and
 * checked against each secret it was told (`new Webhook(secret).verify(body, headers)`, which also checks the
 * timestamp tolerance). Answers 200 unless scripted (`script({ status: 500 })`, `{ status: 410 }`,
 * `{ status: 503, headers: { 'retry-after': '1' } }`), one scripted answer per request.
 */
export interface ScriptedAnswer {
  status: number;
  headers?: Record<string, string>;
  body?: string;
}

export interface ReceivedDelivery {
  at: number;
  path: string;
  headers: http.IncomingHttpHeaders;
  raw: string;
  body: any;
  /** The secrets (of those the receiver knows) whose signature verified. */
  verifiedWith: string[];
  status: number;
}

export class WebhookReceiver {
  readonly received: ReceivedDelivery[] = [];
  private readonly queue: ScriptedAnswer[] = [];
  private secrets: string[] = [];
  private server!: http.Server;
  url = '';

  /** The secrets signatures are verified with (a rotation: the new and the old). */
  trust(...secrets: string[]): this {
    this.secrets = secrets;
    return this;
  }

  script(...answers: ScriptedAnswer[]): this {
    this.queue.push(...answers);
    return this;
  }

  /** Verifies `d` with one secret, as a receiver would: true when it passes. */
  static verifies(secret: string, d: Pick<ReceivedDelivery, 'raw' | 'headers'>): boolean {
    try {
      new Webhook(secret).verify(d.raw, {
        'webhook-id': String(d.headers['webhook-id']),
        'webhook-timestamp': String(d.headers['webhook-timestamp']),
        'webhook-signature': String(d.headers['webhook-signature']),
      });
      return true;
    } catch {
      return false;
    }
  }

  async start(): Promise<this> {
    this.server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const raw = Buffer.concat(chunks).toString('utf8');
        let body: unknown = null;
        try {
          body = JSON.parse(raw);
        } catch {
          body = raw;
        }
        const answer = this.queue.shift() ?? { status: 200 };
        const verifiedWith = this.secrets.filter((s) => WebhookReceiver.verifies(s, { raw, headers: req.headers }));
        this.received.push({ at: Date.now(), path: req.url ?? '/', headers: req.headers, raw, body, verifiedWith, status: answer.status });
        res.writeHead(answer.status, { 'content-type': 'text/plain', ...answer.headers });
        res.end(answer.body ?? '');
      });
    });
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
