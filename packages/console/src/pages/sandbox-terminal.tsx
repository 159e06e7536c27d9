import { FitAddon } from '@xterm/addon-fit';
import { Terminal as XTerm } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useId, useRef, useState } from 'react';
import { type ApiError, page, toApiError, useSession } from '../api.js';
import { Button, ErrorBox } from '../ui.js';

/**
 * A terminal into a running sandbox: xterm.js on the shell WebSocket (`GET /v1/sandboxes/{id}/shell`, ADR 0046).
 * The browser's WebSocket cannot send headers, so the credential goes in the query (`api_key`, or `token` and
 * `org_id` for a session token). Binary frames are terminal bytes both ways; the only text frame sent is
 * `{"type":"resize",...}`; the server ends with `{"type":"exit","code":N,...}`.
 */

/** Input frames stay well under the server's 64 KiB frame limit (as the CLI's). */
const FRAME_BYTES = 32 * 1024;
/** Escape, then Tab within this long, leaves the terminal (every other key, Tab included, is the shell's). */
const LEAVE_WINDOW_MS = 2000;
const MODIFIERS = new Set(['Shift', 'Control', 'Alt', 'Meta']);

type Status =
  | { kind: 'connecting' }
  | { kind: 'connected' }
  | { kind: 'exited'; code: number | null; signal: string | null; timedOut: boolean }
  | { kind: 'disconnected'; why: string };

interface ServerFrame {
  type?: string;
  code?: number | string | null;
  signal?: string | null;
  timedOut?: boolean;
  message?: string;
}

/**
 * xterm writes its theme, scrollbar colours and cell sizes into `<style>` elements it creates, which the console's
 * CSP (`style-src 'self'`) refuses. It gets stand-ins instead: elements that render nothing and whose text goes to a
 * constructed style sheet adopted by the page (CSSOM, which the CSP allows). Its renderer creates them through its
 * `documentOverride` (a proxy of this document); its viewport, while `open()` runs, through `document` itself (xterm
 * 6 takes `window.document` there whatever the override), so `document.createElement` is swapped for that call only.
 */
class InlineStyles {
  readonly sheets: CSSStyleSheet[] = [];

  /** An element standing in for a `<style>`: its `textContent` is a constructed, adopted style sheet. */
  standIn = (): HTMLElement => {
    const el = Document.prototype.createElement.call(document, 'xterm-style');
    el.hidden = true;
    const sheet = new CSSStyleSheet();
    this.sheets.push(sheet);
    document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
    let text = '';
    Object.defineProperty(el, 'textContent', {
      get: () => text,
      set: (value: unknown) => {
        text = value == null ? '' : String(value);
        sheet.replaceSync(text);
      },
    });
    return el;
  };

  /** This document, but `createElement('style')` gives a stand-in. */
  document(): Document {
    const standIn = this.standIn;
    return new Proxy(document, {
      get(target, prop) {
        if (prop === 'createElement') {
          return (tag: string, options?: ElementCreationOptions) => (tag.toLowerCase() === 'style' ? standIn() : target.createElement(tag, options));
        }
        const value: unknown = Reflect.get(target, prop, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  }

  /** Runs `fn` (synchronous) with `document.createElement('style')` giving stand-ins. */
  during(fn: () => void): void {
    const original = Document.prototype.createElement;
    const standIn = this.standIn;
    Object.defineProperty(document, 'createElement', {
      configurable: true,
      writable: true,
      value(this: Document, tag: string, options?: ElementCreationOptions) {
        return String(tag).toLowerCase() === 'style' ? standIn() : original.call(this, tag, options);
      },
    });
    try {
      fn();
    } finally {
      delete (document as { createElement?: unknown }).createElement;
    }
  }

  dispose(): void {
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => !this.sheets.includes(s));
  }
}

function shellUrl(sandboxId: string, credential: string, orgId: string | null | undefined, cols: number, rows: number): string {
  const url = new URL(`/v1/sandboxes/${encodeURIComponent(sandboxId)}/shell`, window.location.origin);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  if (credential.startsWith('hgr_')) url.searchParams.set('api_key', credential);
  else {
    url.searchParams.set('token', credential);
    if (orgId) url.searchParams.set('org_id', orgId);
  }
  url.searchParams.set('cols', String(cols));
  url.searchParams.set('rows', String(rows));
  return url.toString();
}

function statusText(s: Status): string {
  switch (s.kind) {
    case 'connecting':
      return 'Connecting…';
    case 'connected':
      return 'Connected';
    case 'exited':
      return s.timedOut
        ? 'Exited: the shell reached its time limit'
        : `Exited with code ${s.code ?? (s.signal ? `unknown (${s.signal})` : 'unknown')}`;
    case 'disconnected':
      return `Disconnected: ${s.why}`;
  }
}

export function Terminal({ sandboxId }: { sandboxId: string }) {
  const session = useSession();
  const canWrite = session.can('sandbox:write');
  const host = useRef<HTMLDivElement>(null);
  const hintId = useId();
  const [status, setStatus] = useState<Status>({ kind: 'connecting' });
  const [refusal, setRefusal] = useState<ApiError | null>(null);
  const [attempt, setAttempt] = useState(0);
  const { credential } = session;
  const orgId = session.me.currentOrganizationId;
  // The client object is made anew with each render of the session: the socket must not follow it.
  const hangar = useRef(session.hangar);
  hangar.current = session.hangar;

  // biome-ignore lint/correctness/useExhaustiveDependencies: `attempt` is the Reconnect button's: a new socket and terminal
  useEffect(() => {
    const el = host.current;
    if (!canWrite || !el) return;
    const styles = new InlineStyles();
    const term = new XTerm({
      documentOverride: styles.document(),
      cursorBlink: true,
      fontSize: 14,
      fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, monospace',
      scrollback: 5000,
      theme: { background: '#0b0e12', foreground: '#e6e6e6' },
    });
    const fit = new FitAddon();
    term.loadAddon(fit);
    styles.during(() => term.open(el));
    term.textarea?.setAttribute('aria-describedby', hintId);
    // No keyboard trap: Escape then Tab (or Shift+Tab) moves the focus on, as in code editors.
    let escapeAt = 0;
    term.attachCustomKeyEventHandler((e) => {
      if (e.type !== 'keydown' || MODIFIERS.has(e.key)) return true;
      if (e.key === 'Tab' && !e.ctrlKey && !e.altKey && !e.metaKey && Date.now() - escapeAt < LEAVE_WINDOW_MS) {
        escapeAt = 0;
        return false;
      }
      escapeAt = e.key === 'Escape' ? Date.now() : 0;
      return true;
    });
    fit.fit();
    setStatus({ kind: 'connecting' });
    setRefusal(null);

    const ws = new WebSocket(shellUrl(sandboxId, credential, orgId, term.cols, term.rows));
    ws.binaryType = 'arraybuffer';
    let opened = false;
    let exited = false;
    let failure: string | null = null;
    let disposed = false;
    const encoder = new TextEncoder();
    const send = (bytes: Uint8Array) => {
      for (let at = 0; at < bytes.length; at += FRAME_BYTES) if (ws.readyState === WebSocket.OPEN) ws.send(bytes.subarray(at, at + FRAME_BYTES));
    };
    const subscriptions = [
      term.onData((text) => send(encoder.encode(text))),
      term.onBinary((text) => send(Uint8Array.from(text, (c) => c.charCodeAt(0) & 0xff))),
      term.onResize(({ cols, rows }) => {
        if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'resize', cols, rows }));
      }),
    ];
    ws.onopen = () => {
      opened = true;
      setStatus({ kind: 'connected' });
      fit.fit();
      term.focus();
    };
    ws.onmessage = (ev: MessageEvent<ArrayBuffer | string>) => {
      if (typeof ev.data !== 'string') {
        term.write(new Uint8Array(ev.data));
        return;
      }
      let frame: ServerFrame;
      try {
        frame = JSON.parse(ev.data) as ServerFrame;
      } catch {
        return;
      }
      if (frame.type === 'exit') {
        exited = true;
        setStatus({
          kind: 'exited',
          code: typeof frame.code === 'number' ? frame.code : null,
          signal: frame.signal ?? null,
          timedOut: frame.timedOut === true,
        });
      } else if (frame.type === 'error') failure = `${frame.message ?? 'the shell failed'} (${frame.code ?? 'error'})`;
    };
    ws.onclose = (ev) => {
      if (disposed || exited) return;
      if (opened) {
        setStatus({ kind: 'disconnected', why: failure ?? (ev.reason || `the connection closed (${ev.code})`) });
        return;
      }
      // A refused upgrade is opaque to a browser: the same checks answer a plain GET with the API's error.
      setStatus({ kind: 'disconnected', why: 'the shell could not be opened' });
      page(hangar.current.api.GET('/v1/sandboxes/{id}/shell', { params: { path: { id: sandboxId } } })).then(
        () => undefined,
        (err) => {
          const e = toApiError(err);
          // 400 "this is a WebSocket": every check passed, so the socket itself failed (network, proxy).
          if (!disposed && e.status !== 400) setRefusal(e);
        },
      );
    };
    const observer = new ResizeObserver(() => {
      if (el.clientWidth > 0 && el.clientHeight > 0) fit.fit();
    });
    observer.observe(el);

    return () => {
      disposed = true;
      observer.disconnect();
      for (const s of subscriptions) s.dispose();
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(1000, 'closed in the console');
      term.dispose();
      styles.dispose();
    };
  }, [sandboxId, credential, orgId, canWrite, attempt, hintId]);

  if (!canWrite) {
    return (
      <section className="panel" aria-label="Terminal">
        <p className="muted">A terminal needs the sandbox:write scope, which this credential lacks.</p>
      </section>
    );
  }
  const ended = status.kind === 'exited' || status.kind === 'disconnected';
  return (
    <section className="terminal-panel" aria-label="Terminal">
      <div className="terminal-bar">
        <p role="status" aria-live="polite" data-testid="terminal-status" className={`terminal-status terminal-${status.kind}`}>
          {statusText(status)}
        </p>
        {ended ? (
          <Button kind="primary" onClick={() => setAttempt((n) => n + 1)}>
            Reconnect
          </Button>
        ) : null}
      </div>
      <ErrorBox error={refusal} title="The shell could not be opened" />
      <div className="terminal" ref={host} data-testid="terminal" />
      <p className="muted terminal-hint" id={hintId}>
        Every key goes to the shell, Tab included: press Escape, then Tab, to move on from the terminal.
      </p>
    </section>
  );
}
