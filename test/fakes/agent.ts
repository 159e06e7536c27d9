import fs from 'node:fs';
import net from 'node:net';

/**
 * A misbehaving sandbox agent on a Unix socket: what a sandbox user who took over the real one could answer.
 * It reads the request head, then answers as `mode` says, writing as fast as the client takes it, and
 * counts what it wrote and when the client hung up.
 */
export type FakeAgentMode =
  /** 200, chunked, a JSON array that never ends. */
  | 'endless-chunked'
  /** 200 with Content-Length 1 GiB, then bytes as fast as the client reads. */
  | 'huge'
  /** Reads the request and never answers. */
  | 'silent'
  /** 200 NDJSON whose first line never ends. */
  | 'endless-line'
  /** 200 with a body that is not JSON. */
  | 'not-json'
  /** 500 with an error body that never ends. */
  | 'endless-error'
  /** An honest follow stream: announces keepalives (every 0.1 s), sends `lines` output lines at once, keepalives every 100 ms, then the exit line after `quietMs`. */
  | 'keepalives'
  /** Announces keepalives, sends one line, then goes silent for good (a stopped agent). */
  | 'keepalive-then-silent';

export class FakeAgent {
  private server: net.Server | null = null;
  private readonly sockets = new Set<net.Socket>();
  written = 0;
  /** For `keepalives`: output lines sent at once, and how long the process then stays quiet. */
  lines = 3;
  quietMs = 500;
  requests: string[] = [];
  hangups = 0;

  constructor(
    readonly socketPath: string,
    public mode: FakeAgentMode,
  ) {}

  async start(): Promise<this> {
    fs.rmSync(this.socketPath, { force: true });
    this.server = net.createServer((s) => this.serve(s));
    await new Promise<void>((resolve, reject) => this.server!.once('error', reject).listen(this.socketPath, resolve));
    return this;
  }

  private serve(s: net.Socket): void {
    this.sockets.add(s);
    s.on('error', () => undefined);
    s.on('close', () => {
      this.sockets.delete(s);
      this.hangups++;
    });
    let head = '';
    const onData = (d: Buffer) => {
      head += d.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      s.off('data', onData);
      this.requests.push(head.split('\r\n')[0]!);
      this.answer(s);
    };
    s.on('data', onData);
  }

  private answer(s: net.Socket): void {
    const pump = (piece: Buffer) => {
      const more = () => {
        while (!s.destroyed) {
          this.written += piece.length;
          if (!s.write(piece)) return void s.once('drain', more);
        }
      };
      more();
    };
    switch (this.mode) {
      case 'silent':
        return;
      case 'not-json':
        s.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5\r\n\r\nhello');
        return;
      case 'huge':
        s.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${1 << 30}\r\n\r\n`);
        pump(Buffer.alloc(64 * 1024, 0x20));
        return;
      case 'endless-chunked':
      case 'endless-error': {
        const status = this.mode === 'endless-error' ? '500 Internal Server Error' : '200 OK';
        s.write(`HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n`);
        const body = Buffer.from('{"pid":1,"cmd":"x"},'.repeat(3000));
        pump(Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n')]));
        return;
      }
      case 'keepalives':
      case 'keepalive-then-silent': {
        const chunk = (text: string) => {
          if (s.destroyed) return;
          const b = Buffer.from(text);
          this.written += b.length;
          s.write(`${b.length.toString(16)}\r\n${text}\r\n`);
        };
        s.write('HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\nx-hangar-keepalive: 0.1\r\ntransfer-encoding: chunked\r\n\r\n');
        const n = this.mode === 'keepalives' ? this.lines : 1;
        for (let i = 0; i < n; i++) chunk(`{"type":"stdout","data":"${Buffer.from(`line ${i}\n`).toString('base64')}","offset":${i * 7}}\n`);
        if (this.mode === 'keepalive-then-silent') return;
        const tick = setInterval(() => chunk('{"type":"keepalive"}\n'), 100);
        setTimeout(() => {
          clearInterval(tick);
          chunk('{"type":"exit","exitCode":0,"signal":null,"timedOut":false,"durationMs":1,"truncated":false}\n');
          if (!s.destroyed) s.write('0\r\n\r\n');
        }, this.quietMs);
        s.once('close', () => clearInterval(tick));
        return;
      }
      case 'endless-line': {
        s.write('HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n');
        const body = Buffer.alloc(60_000, 0x41);
        pump(Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n')]));
        return;
      }
    }
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}
