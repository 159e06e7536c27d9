/**
 * `hangar sandbox shell ID [--command CMD]` (ADR 0046): an interactive terminal into a sandbox over its shell
 * WebSocket (`GET /v1/sandboxes/{id}/shell`). On a terminal, standard input goes raw (every key, Ctrl-C included, is
 * the sandbox's), the window size follows SIGWINCH, and the terminal is restored on the way out. With piped input
 * the bytes are sent as they come (the sandbox's terminal echoes them and the shell runs them line by line); at the
 * end of the input the terminal's end-of-file character (^D) is sent every half second until the shell has ended.
 * Exits with the shell's exit code (128+n when a signal ended it).
 */
import { parseArgs } from 'node:util';
import { ClientCliError, credentials } from './cli.js';

const USAGE = 'usage: hangar sandbox shell ID [--command CMD]';
/** Input frames stay under the server's 64 KiB frame limit. */
const FRAME_BYTES = 32 * 1024;
const EOF_EVERY_MS = 500;

interface ServerFrame {
  type?: string;
  code?: number | string | null;
  signal?: string | null;
  timedOut?: boolean;
  message?: string;
}

export async function runShell(argv: string[], env: NodeJS.ProcessEnv, err: (text: string) => void): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { command: { type: 'string', short: 'c' }, help: { type: 'boolean', short: 'h', default: false } },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const [id] = positionals;
  if (!id || positionals.length > 1 || !/^[A-Za-z0-9_-]+$/.test(id)) throw new ClientCliError(USAGE);
  const c = await credentials(env);
  const { WebSocket } = await import('ws');

  const stdin = process.stdin;
  const stdout = process.stdout;
  const interactive = Boolean(stdin.isTTY && stdout.isTTY);
  const size = () => ({ cols: stdout.isTTY ? stdout.columns || 80 : 80, rows: stdout.isTTY ? stdout.rows || 24 : 24 });
  const url = new URL(`/v1/sandboxes/${encodeURIComponent(id)}/shell`, c.baseUrl);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  const { cols, rows } = size();
  url.searchParams.set('cols', String(cols));
  url.searchParams.set('rows', String(rows));
  if (values.command) url.searchParams.set('command', values.command);
  if (env.TERM && /^[A-Za-z0-9._+-]{1,64}$/.test(env.TERM)) url.searchParams.set('term', env.TERM);
  const headers: Record<string, string> = c.credential.startsWith('hgr_')
    ? { 'x-api-key': c.credential }
    : { authorization: `Bearer ${c.credential}` };

  return new Promise<number>((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    let opened = false;
    let exit: ServerFrame | null = null;
    let failure: string | null = null;
    let eofTimer: NodeJS.Timeout | null = null;

    const send = (data: Buffer) => {
      for (let at = 0; at < data.length; at += FRAME_BYTES) if (ws.readyState === ws.OPEN) ws.send(data.subarray(at, at + FRAME_BYTES));
    };
    const onData = (chunk: Buffer | string) => send(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
    const onEnd = () => {
      // No terminal here: the end of the input is ^D, repeated because one that reaches the sandbox's terminal while
      // it is in line mode is only the end of that line's input.
      const eof = () => ws.readyState === ws.OPEN && ws.send(Buffer.from([4]));
      eof();
      eofTimer = setInterval(eof, EOF_EVERY_MS);
    };
    const onResize = () => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ type: 'resize', ...size() }));
    };
    const restore = () => {
      if (eofTimer) clearInterval(eofTimer);
      stdin.off('data', onData);
      stdin.off('end', onEnd);
      stdout.off('resize', onResize);
      if (interactive && stdin.isTTY) stdin.setRawMode(false);
      stdin.pause();
      if (!interactive) stdin.destroy();
    };

    ws.on('unexpected-response', (req, res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => {
        if (body.length < 65_536) body += chunk.toString('utf8');
      });
      res.on('end', () => {
        let message = `${res.statusCode} ${res.statusMessage ?? ''}`.trim();
        try {
          const e = (JSON.parse(body) as { error?: { code?: string; message?: string; requestId?: string } }).error;
          if (e) message = `${res.statusCode} ${e.code}: ${e.message}${e.requestId ? ` (request ${e.requestId})` : ''}`;
        } catch {
          // not the envelope: the status line says it
        }
        req.destroy();
        reject(new ClientCliError(message));
      });
    });
    ws.on('error', (e) => {
      if (!opened) reject(new ClientCliError(`cannot open a shell at ${c.baseUrl}: ${e.message}`));
    });
    ws.on('open', () => {
      opened = true;
      if (interactive) stdin.setRawMode(true);
      stdin.on('data', onData);
      stdin.on('end', onEnd);
      stdout.on('resize', onResize);
      stdin.resume();
    });
    ws.on('message', (data, binary) => {
      if (binary) {
        stdout.write(data as Buffer);
        return;
      }
      let frame: ServerFrame;
      try {
        frame = JSON.parse(String(data)) as ServerFrame;
      } catch {
        return;
      }
      if (frame.type === 'exit') exit = frame;
      else if (frame.type === 'error') failure = `${frame.code ?? 'error'}: ${frame.message ?? ''}`;
    });
    ws.on('close', (code, reason) => {
      if (!opened) return;
      restore();
      const done = (n: number) => (stdout.writableNeedDrain ? stdout.once('drain', () => resolve(n)) : resolve(n));
      if (exit) {
        if (exit.timedOut) err('hangar: the shell reached its time limit');
        return done(typeof exit.code === 'number' ? exit.code : 1);
      }
      err(`hangar: the shell ended: ${failure ?? `connection closed (${code}${reason.length ? ` ${String(reason)}` : ''})`}`);
      done(1);
    });
  });
}
