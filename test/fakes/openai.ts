import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A scripted OpenAI-compatible server on loopback (POST /v1/chat/completions), so the product's real HTTP
 * client and streaming code run in tests. Queue responses with `script()`; with an empty queue it answers "ok".
 */
export interface ScriptedResponse {
  /** Text, as the chunks to stream (a string is one chunk). */
  text?: string | string[];
  /** Reasoning chunks (`reasoning_content`). */
  reasoning?: string[];
  toolCalls?: { id: string; name: string; arguments: string }[];
  usage?: { prompt: number; completion: number; cached?: number; reasoning?: number };
  finishReason?: 'stop' | 'length' | 'tool_calls';
  /** Answer this HTTP status with an OpenAI-style error body instead. */
  status?: number;
  errorMessage?: string;
  /** Wait before answering (ms), and between streamed chunks. */
  delayMs?: number;
  chunkDelayMs?: number;
  /** Streaming: cut the connection after this many chunks (a provider failing mid-stream). */
  dropAfterChunks?: number;
}

export interface RecordedRequest {
  path: string;
  headers: http.IncomingHttpHeaders;
  body: any;
}

export class FakeOpenAI {
  readonly requests: RecordedRequest[] = [];
  /** Requests whose client went away before the answer was complete. */
  aborted = 0;
  private readonly queue: ScriptedResponse[] = [];
  private server!: http.Server;
  url = '';

  script(...responses: ScriptedResponse[]): this {
    this.queue.push(...responses);
    return this;
  }

  async start(): Promise<this> {
    this.server = http.createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
    return this;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse) {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    let body: any = {};
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
    } catch {
      /* recorded as {} */
    }
    this.requests.push({ path: req.url ?? '', headers: req.headers, body });
    let finished = false;
    res.on('close', () => {
      if (!finished) this.aborted++;
    });
    if (!req.url?.endsWith('/chat/completions')) {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'not found' } }));
      finished = true;
      return;
    }
    const r = this.queue.shift() ?? { text: 'ok', usage: { prompt: 5, completion: 1 } };
    if (r.delayMs) await sleep(r.delayMs);
    if (res.destroyed) return;
    if (r.status) {
      res.writeHead(r.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: r.errorMessage ?? `scripted ${r.status}`, type: 'scripted', code: null } }));
      finished = true;
      return;
    }
    const text = typeof r.text === 'string' ? [r.text] : (r.text ?? []);
    const usage = r.usage ?? { prompt: 10, completion: text.join('').length };
    const usageJson = {
      prompt_tokens: usage.prompt,
      completion_tokens: usage.completion,
      total_tokens: usage.prompt + usage.completion,
      prompt_tokens_details: { cached_tokens: usage.cached ?? 0 },
      completion_tokens_details: { reasoning_tokens: usage.reasoning ?? 0 },
    };
    const finish = r.finishReason ?? (r.toolCalls?.length ? 'tool_calls' : 'stop');
    const base = { id: 'chatcmpl-fake', created: Math.floor(Date.now() / 1000), model: body.model ?? 'fake' };
    if (!body.stream) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          ...base,
          object: 'chat.completion',
          choices: [
            {
              index: 0,
              message: {
                role: 'assistant',
                content: text.join('') || null,
                ...(r.reasoning ? { reasoning_content: r.reasoning.join('') } : {}),
                ...(r.toolCalls?.length
                  ? { tool_calls: r.toolCalls.map((t) => ({ id: t.id, type: 'function', function: { name: t.name, arguments: t.arguments } })) }
                  : {}),
              },
              finish_reason: finish,
            },
          ],
          usage: usageJson,
        }),
      );
      finished = true;
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const deltas: object[] = [
      { role: 'assistant', content: '' },
      ...(r.reasoning ?? []).map((t) => ({ reasoning_content: t })),
      ...text.map((t) => ({ content: t })),
      ...(r.toolCalls ?? []).map((t, index) => ({
        tool_calls: [{ index, id: t.id, type: 'function', function: { name: t.name, arguments: t.arguments } }],
      })),
    ];
    let sent = 0;
    for (const delta of deltas) {
      if (res.destroyed) return;
      if (r.dropAfterChunks !== undefined && sent >= r.dropAfterChunks) {
        res.destroy();
        return;
      }
      res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`);
      sent++;
      if (r.chunkDelayMs) await sleep(r.chunkDelayMs);
    }
    res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: finish }] })}\n\n`);
    res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [], usage: usageJson })}\n\n`);
    res.write('data: [DONE]\n\n');
    res.end();
    finished = true;
  }
}
