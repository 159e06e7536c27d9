import { ConnectionError, RequestAbortedError } from './errors.js';

/** One Server-Sent Event: its `event` name and `data` (lines joined). */
export interface ServerSentEvent {
  event: string;
  data: string;
}

/** The events of a `text/event-stream` body, one per blank-line-ended block (comments skipped). */
export async function* readEvents(body: ReadableStream<Uint8Array> | null, signal?: AbortSignal): AsyncGenerator<ServerSentEvent> {
  if (!body) return;
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  let event = 'message';
  let data: string[] = [];
  try {
    for (;;) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (err) {
        if (signal?.aborted) throw new RequestAbortedError(signal.reason);
        throw new ConnectionError(`the event stream broke off: ${(err as Error)?.message ?? String(err)}`, { code: 'connection_error', cause: err });
      }
      if (chunk.done) break;
      buffered += decoder.decode(chunk.value, { stream: true });
      let nl = buffered.indexOf('\n');
      while (nl >= 0) {
        const line = buffered.slice(0, nl).replace(/\r$/, '');
        buffered = buffered.slice(nl + 1);
        if (line === '') {
          if (data.length) yield { event, data: data.join('\n') };
          event = 'message';
          data = [];
        } else if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
        nl = buffered.indexOf('\n');
      }
    }
  } finally {
    // Stopping early (break, an error, abort) closes the connection.
    await reader.cancel().catch(() => undefined);
  }
}
