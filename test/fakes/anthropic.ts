import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A scripted Anthropic Messages API server on loopback (POST /v1/messages, streamed as Anthropic streams), so the
 * product's real Anthropic client runs in tests. Each answer is text with the web-search citations given; the
 * request bodies are kept.
 */
export interface AnthropicAnswer {
  text: string;
  citations?: { url: string; title: string; citedText: string }[];
}

export class FakeAnthropic {
  readonly requests: any[] = [];
  private readonly queue: AnthropicAnswer[] = [];
  private server!: http.Server;
  url = '';

  script(...answers: AnthropicAnswer[]): this {
    this.queue.push(...answers);
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
    if (req.method !== 'POST' || req.url !== '/v1/messages') {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"type":"error","error":{"type":"not_found_error","message":"not found"}}');
      return;
    }
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    this.requests.push(body);
    const answer = this.queue.shift() ?? { text: 'ok' };
    const usage = { input_tokens: 12, output_tokens: 1, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
    const message = {
      id: 'msg_fake',
      type: 'message',
      role: 'assistant',
      model: body.model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage,
    };
    const events: [string, unknown][] = [
      ['message_start', { type: 'message_start', message }],
      ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
      ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: answer.text } }],
      ...(answer.citations ?? []).map((c, i): [string, unknown] => [
        'content_block_delta',
        {
          type: 'content_block_delta',
          index: 0,
          delta: {
            type: 'citations_delta',
            citation: { type: 'web_search_result_location', cited_text: c.citedText, url: c.url, title: c.title, encrypted_index: `idx${i}` },
          },
        },
      ]),
      ['content_block_stop', { type: 'content_block_stop', index: 0 }],
      ['message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 9 } }],
      ['message_stop', { type: 'message_stop' }],
    ];
    if (!body.stream) {
      const content = [{ type: 'text', text: answer.text }];
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ ...message, content, stop_reason: 'end_turn' }));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    for (const [event, data] of events) res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    res.end();
  }
}
