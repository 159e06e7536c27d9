import WebSocket from 'ws';
import { until } from './helpers.js';

/** Terminal control sequences (CSI: bracketed paste, colours), to read a terminal's output as text. */
export const CSI = new RegExp(`${String.fromCharCode(27)}\\[[0-9;?]*[A-Za-z]`, 'g');

/** A client of the shell socket: terminal bytes collected as text, text frames parsed, the close recorded. */
export class ShellClient {
  output = '';
  frames: Array<Record<string, any>> = [];
  closed: Promise<{ code: number; reason: string }>;
  constructor(readonly ws: WebSocket) {
    ws.on('message', (data, binary) => {
      if (binary) this.output += (data as Buffer).toString('utf8');
      else this.frames.push(JSON.parse(String(data)));
    });
    this.closed = new Promise((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: String(reason) })));
  }

  /** Opens the socket; rejects with the HTTP status when the server answers the upgrade with an error. */
  static open(base: string, id: string, headers: Record<string, string>, query = ''): Promise<ShellClient> {
    const ws = new WebSocket(`${base.replace('http', 'ws')}/v1/sandboxes/${id}/shell${query}`, { headers });
    return new Promise((resolve, reject) => {
      ws.once('open', () => resolve(new ShellClient(ws)));
      ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c));
        res.on('end', () => reject(Object.assign(new Error(`HTTP ${res.statusCode}: ${body}`), { status: res.statusCode, body })));
      });
      ws.once('error', reject);
    });
  }

  type(text: string) {
    this.ws.send(Buffer.from(text));
  }

  resize(cols: number, rows: number) {
    this.ws.send(JSON.stringify({ type: 'resize', cols, rows }));
  }

  /** The output without terminal control sequences (bracketed paste, colours). */
  get text() {
    return this.output.replace(CSI, '');
  }

  waitFor(what: RegExp) {
    return until(`${what} in the terminal`, () => what.exec(this.text), {
      timeoutMs: 15_000,
      detail: () => ({ output: this.text.slice(-300), frames: this.frames }),
    });
  }
}

/** The HTTP answer to an upgrade the server refuses: its status and error envelope. */
export async function openError(base: string, id: string, headers: Record<string, string>, query = '') {
  const err = await ShellClient.open(base, id, headers, query).then(
    (c) => {
      c.ws.close();
      throw new Error('the socket opened');
    },
    (e: Error & { status?: number; body?: string }) => e,
  );
  return { status: err.status, body: err.body ? JSON.parse(err.body) : null };
}
