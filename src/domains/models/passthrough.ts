import { STATUS_CODES } from 'node:http';
import { APICallError, generateId } from 'ai';
import { Agent, type Dispatcher } from 'undici';
import type { ModelsConfig } from '../../config.js';
import { callInput, contentText } from './messages.js';
import {
  contentParts,
  finishReasonOf,
  parseJson,
  ToolCallDeltas,
  toolInput,
  usageOf,
  type FinishReason,
  type WireChunk,
  type WireCompletion,
  type WireUsage,
} from './openai-wire.js';
import type { ProxyBody, ProxyResult, Usage } from './schemas.js';

/**
 * The model proxy's passthrough (ADR 0036): a call of a platform model on the OpenAI-compatible provider goes
 * straight to its POST /chat/completions over one keep-alive undici Agent, and its answer is read only as far as the
 * proxy's result, its NDJSON lines and metering need. What it reads, it reads as the AI SDK does (openai-wire.ts),
 * and failures become the errors the AI SDK raises (APICallError for HTTP), so `providerError` maps both alike.
 */

/** Bodies read whole (an answer, an error) and one pending SSE event are refused beyond this. */
const MAX_BODY_BYTES = 64 * 1024 * 1024;
const MAX_EVENT_CHARS = 64 * 1024 * 1024;
/** As many redirects as `fetch` follows. */
const MAX_REDIRECTIONS = 20;

type ProxyOptions = ProxyBody['options'];
type ProxyTool = NonNullable<ProxyOptions['tools']>[number];

/** The chat-completions request for one proxy call, and what reading its answer needs to know of it. */
export interface ChatRequest {
  body: Record<string, unknown>;
  /** Keyed like the AI SDK's tool set: a plain object, the last tool of a repeated name winning. */
  tools: Record<string, ProxyTool> | undefined;
  /** The tool choice the answer must honour, as the AI SDK enforces it. */
  enforced: EnforcedChoice | undefined;
}

/**
 * The AI SDK fails a call whose answer breaks its tool choice: with tools offered, `none` (any tool call),
 * `required` (none) or a named tool (no call of it); without tools, `none` only. A stream is held to `none` only:
 * its tool calls are withheld and the stream fails if there were any.
 */
type EnforcedChoice = { type: 'none' } | { type: 'required' } | { type: 'tool'; toolName: string };

function toolChoiceViolation(enforced: EnforcedChoice | undefined, calledTools: string[], stream: boolean): Error | null {
  if (!enforced || (stream && enforced.type !== 'none')) return null;
  if (enforced.type === 'none')
    return calledTools.length > 0 ? new Error('Model response contained a tool call even though tool choice was none.') : null;
  if (enforced.type === 'required')
    return calledTools.length === 0 ? new Error('Model response did not contain a tool call even though tool choice was required.') : null;
  return calledTools.includes(enforced.toolName)
    ? null
    : new Error(`Model response did not contain a call to the required tool '${enforced.toolName}'.`);
}

// Every proxy option, each translated below as the AI SDK's OpenAI-compatible provider sends it. An option added to
// the proxy later and not translated here sends the call through the AI SDK instead of being dropped.
const PASSABLE = new Set(['messages', 'system', 'maxTokens', 'temperature', 'topP', 'stop', 'seed', 'tools', 'toolChoice']);

/** The OpenAI chat-completions request for `options`, or null when an option cannot pass through faithfully. */
export function toChatRequest(model: string, options: ProxyOptions): ChatRequest | null {
  for (const key of Object.keys(options)) if (!PASSABLE.has(key)) return null;
  const o = options;
  const tools = o.tools?.length ? Object.fromEntries(o.tools.map((t) => [t.name, t])) : undefined;
  return {
    body: {
      model,
      max_tokens: o.maxTokens,
      temperature: o.temperature,
      top_p: o.topP,
      stop: o.stop,
      seed: o.seed,
      messages: messagesOf(o),
      // Without tools the AI SDK sends neither tools nor a tool choice.
      tools:
        tools &&
        Object.values(tools).map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.parameters } })),
      tool_choice: tools && wireToolChoice(o.toolChoice),
    },
    tools,
    enforced: enforcedChoice(tools !== undefined, o.toolChoice),
  };
}

/**
 * The messages, after the system prompt, as the AI SDK's OpenAI-compatible provider writes them: text parts joined;
 * an assistant's tool calls as `tool_calls` (input as JSON text, content null without text); a tool result as a
 * `tool` message of its call id.
 */
function messagesOf(o: ProxyOptions): Record<string, unknown>[] {
  const messages: Record<string, unknown>[] = o.messages.map((m) => {
    const content = contentText(m.content);
    if (m.role === 'assistant' && m.toolCalls)
      return {
        role: 'assistant',
        content: content || null,
        tool_calls: m.toolCalls.map((c) => ({
          id: c.id,
          type: 'function',
          function: { name: c.name, arguments: JSON.stringify(callInput(c.input)) },
        })),
      };
    if (m.role === 'tool') return { role: 'tool', tool_call_id: m.toolCallId, content };
    return { role: m.role, content };
  });
  if (o.system !== undefined) messages.unshift({ role: 'system', content: o.system });
  return messages;
}

/** With tools, the AI SDK's default choice is `auto`; a forced tool is named as a function. */
function wireToolChoice(choice: ProxyOptions['toolChoice']): unknown {
  if (choice === undefined) return 'auto';
  return typeof choice === 'string' ? choice : { type: 'function', function: { name: choice.tool } };
}

function enforcedChoice(withTools: boolean, choice: ProxyOptions['toolChoice']): EnforcedChoice | undefined {
  if (!withTools) return choice === 'none' ? { type: 'none' } : undefined;
  if (choice === undefined || choice === 'auto') return undefined;
  return typeof choice === 'string' ? { type: choice } : { type: 'tool', toolName: choice.tool };
}

type Answer = Omit<ProxyResult, 'model' | 'usage'> & { usage: Usage };

/** The platform's OpenAI-compatible provider, reached over one keep-alive Agent made on first use. */
export class OpenAIUpstream {
  private readonly origin: string;
  private readonly path: string;
  private readonly url: string;
  private readonly headers: Record<string, string>;
  private agent: Agent | null = null;

  constructor(config: NonNullable<ModelsConfig['openai']>) {
    // As the AI SDK builds it: the base URL without its trailing slash, then /chat/completions.
    const url = new URL(`${config.baseUrl.replace(/\/$/, '')}/chat/completions`);
    this.url = url.href;
    this.origin = url.origin;
    this.path = `${url.pathname}${url.search}`;
    this.headers = {
      'content-type': 'application/json',
      // Read as it comes: no compressed answers (fetch, under the AI SDK, would inflate them).
      'accept-encoding': 'identity',
      'user-agent': 'hangar-model-proxy',
      ...(config.apiKey ? { authorization: `Bearer ${config.apiKey}` } : {}),
    };
  }

  /** Closes the connections; a later call opens new ones (an app built again on the same deps). */
  async close(): Promise<void> {
    const agent = this.agent;
    this.agent = null;
    await agent?.close();
  }

  /** `POST /v1/model-proxy` through the passthrough: the whole answer. */
  async generate(req: ChatRequest, signal: AbortSignal): Promise<Answer> {
    const res = await this.post(req, false, signal);
    const text = await this.readAnswer(req, res, signal);
    let data: WireCompletion;
    try {
      data = parseJson(text) as WireCompletion;
    } catch (cause) {
      throw this.apiError(req, res.statusCode, 'Invalid JSON response', cause);
    }
    if (!isCompletion(data)) throw this.apiError(req, res.statusCode, 'Invalid JSON response');
    const choice = data.choices[0];
    if (!choice) throw new Error('Response did not contain any choices.');
    const answer = answerOf(choice, data.usage, req.tools);
    const violation = toolChoiceViolation(
      req.enforced,
      answer.toolCalls.map((c) => c.name),
      false,
    );
    if (violation) throw violation;
    return answer;
  }

  /**
   * `POST /v1/model-proxy/stream` through the passthrough: NDJSON text, `hooks.start` first, then one string per
   * network chunk from the provider (every line it made), then the tool calls, and `finish` (after `hooks.finish`
   * has metered the usage) or an `error` line. Nothing follows once the client is gone (`signal`).
   */
  async *stream(req: ChatRequest, signal: AbortSignal, timeout: AbortSignal, hooks: StreamHooks): AsyncGenerator<string> {
    const opening = this.post(req, true, timeout); // goes out while `start` is written
    const relay = new SseRelay(req);
    let out = '';
    let error: unknown = null;
    try {
      yield hooks.start;
      yield* this.relay(req, await opening, relay, timeout);
      out = relay.end();
      error = relay.error;
    } catch (err) {
      // An aborted stream is the timeout's (or the client's, and then nobody reads the line).
      error = timeout.aborted ? timeout.reason : err;
    } finally {
      // Whatever is left of the answer (a client gone, a failure) is let go, and its connection with it.
      opening.then(
        (res) => res.body.destroy(),
        () => undefined,
      );
    }
    if (error) {
      if (!signal.aborted) yield out + hooks.errorLine(error);
      return;
    }
    // The answer is complete, so it is metered even if the client leaves now.
    const last = finishLine(hooks, usageOf(relay.usage), relay.finishReason!);
    if (out && !signal.aborted) yield out; // the tool calls, while the usage is recorded
    const line = await last;
    if (!signal.aborted) yield line;
  }

  /** The lines of the provider's events as they arrive, one string per network chunk that completed any. */
  private async *relay(req: ChatRequest, res: Dispatcher.ResponseData, relay: SseRelay, timeout: AbortSignal): AsyncGenerator<string> {
    const chunks = res.body.setEncoding('utf8')[Symbol.asyncIterator]() as AsyncIterator<string>;
    for (;;) {
      let next: IteratorResult<string>;
      try {
        next = await chunks.next();
      } catch (cause) {
        throw timeout.aborted ? timeout.reason : this.apiError(req, res.statusCode, 'Failed to process successful response', cause);
      }
      if (next.done) return;
      const lines = relay.feed(next.value);
      if (lines) yield lines;
    }
  }

  private agentOf(): Agent {
    this.agent ??= new Agent({ maxRedirections: MAX_REDIRECTIONS });
    return this.agent;
  }

  /** Sends the request; a failed status becomes the AI SDK's APICallError, a failed connection too. */
  private async post(req: ChatRequest, stream: boolean, signal: AbortSignal): Promise<Dispatcher.ResponseData> {
    const body = JSON.stringify(stream ? { ...req.body, stream: true, stream_options: { include_usage: true } } : req.body);
    let res: Dispatcher.ResponseData;
    try {
      res = await this.agentOf().request({
        origin: this.origin,
        path: this.path,
        method: 'POST',
        headers: this.headers,
        body,
        signal,
        maxRedirections: MAX_REDIRECTIONS,
      });
    } catch (cause) {
      if (signal.aborted) throw signal.reason;
      throw new APICallError({
        message: `Cannot connect to API: ${(cause as Error).message}`,
        cause,
        url: this.url,
        requestBodyValues: req.body,
        isRetryable: true,
      });
    }
    if (res.statusCode >= 200 && res.statusCode < 300) return res;
    throw await this.failure(req, res, signal);
  }

  /** A failed status as the AI SDK reports it: the provider's `error.message`, else the status text. */
  private async failure(req: ChatRequest, res: Dispatcher.ResponseData, signal: AbortSignal): Promise<unknown> {
    let text: string;
    try {
      text = await readText(res.body);
    } catch (cause) {
      return signal.aborted ? signal.reason : this.apiError(req, res.statusCode, 'Failed to process error response', cause);
    }
    let message = STATUS_CODES[res.statusCode] ?? '';
    if (text.trim() !== '') {
      try {
        const e = (parseJson(text) as { error?: { message?: unknown; type?: unknown; code?: unknown } } | null)?.error;
        const loose = (v: unknown, ...types: string[]) => v == null || types.includes(typeof v);
        if (typeof e?.message === 'string' && loose(e.type, 'string') && loose(e.code, 'string', 'number')) message = e.message;
      } catch {
        // not the OpenAI error shape: the status text stands
      }
    }
    return new APICallError({ message, url: this.url, requestBodyValues: req.body, statusCode: res.statusCode, responseBody: text });
  }

  private async readAnswer(req: ChatRequest, res: Dispatcher.ResponseData, signal: AbortSignal): Promise<string> {
    try {
      return await readText(res.body);
    } catch (cause) {
      if (signal.aborted) throw signal.reason;
      throw this.apiError(req, res.statusCode, 'Failed to process successful response', cause);
    }
  }

  private apiError(req: ChatRequest, statusCode: number, message: string, cause?: unknown): APICallError {
    return new APICallError({ message, cause, url: this.url, requestBodyValues: req.body, statusCode });
  }
}

export interface StreamHooks {
  /** The `start` line. */
  start: string;
  /** Meters the call and answers the `finish` line. */
  finish(usage: Usage, finishReason: FinishReason): Promise<string>;
  /** The `error` line for a failure. */
  errorLine(err: unknown): string;
}

/**
 * Meters a complete stream and answers its `finish` line (or the `error` line if metering failed). Metering (a
 * transaction, and billing's settlement) waits for one full turn of the event loop: the lines just written, and the
 * I/O of other connections that is ready meanwhile, go before this call's bookkeeping.
 */
async function finishLine(hooks: StreamHooks, usage: Usage, finishReason: FinishReason): Promise<string> {
  await new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
  try {
    return await hooks.finish(usage, finishReason);
  } catch (err) {
    return hooks.errorLine(err);
  }
}

async function readText(body: Dispatcher.ResponseData['body']): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new Error(`the provider's answer exceeded ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  const text = chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks, size).toString('utf8');
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text; // a decoder drops the byte order mark
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The shape the AI SDK checks an answer against, as far as this reads it. */
function isCompletion(data: unknown): data is WireCompletion {
  if (!isObject(data) || !Array.isArray(data.choices)) return false;
  return data.choices.every((c: unknown) => {
    if (!isObject(c) || !isObject(c.message)) return false;
    const calls = c.message.tool_calls;
    return (
      calls == null ||
      (Array.isArray(calls) &&
        calls.every(
          (t: unknown) => isObject(t) && isObject(t.function) && typeof t.function.name === 'string' && typeof t.function.arguments === 'string',
        ))
    );
  });
}

function answerOf(choice: WireCompletion['choices'][number], usage: WireUsage | null | undefined, tools: ChatRequest['tools']): Answer {
  const m = choice.message;
  let reasoning = typeof (m.reasoning_content ?? m.reasoning) === 'string' ? (m.reasoning_content ?? m.reasoning)! : '';
  let text = '';
  for (const part of contentParts(m.content)) {
    if (part.reasoning) reasoning += part.text;
    else text += part.text;
  }
  return {
    text,
    reasoning,
    toolCalls: (m.tool_calls ?? []).map((t) => ({
      id: t.id ?? generateId(),
      name: t.function.name,
      input: toolInput(tools, t.function.name, t.function.arguments),
    })),
    finishReason: finishReasonOf(choice.finish_reason),
    usage: usageOf(usage),
  };
}

// ---- the stream -------------------------------------------------------------------------------------------------

const textLine = (type: 'text-delta' | 'reasoning-delta', text: string) => `{"type":"${type}","text":${JSON.stringify(text)}}\n`;

/**
 * The provider's server-sent events to NDJSON lines, as they arrive. Events are split on blank lines (LF, CRLF or CR
 * line ends); each `data:` is parsed once, and only for what the lines and metering need. Like the AI SDK, a bad or
 * `error` event does not stop the stream: the last one is the stream's error, reported instead of `finish`.
 */
class SseRelay {
  usage: WireUsage | null | undefined;
  finishReason: FinishReason | undefined;
  error: unknown = null;
  private rest = '';
  private data: string | null = null;
  private first = true;
  private readonly toolCalls = new ToolCallDeltas();

  constructor(private readonly req: ChatRequest) {}

  /** The lines of the events completed by `chunk` ('' for none). */
  feed(chunk: string): string {
    let buf = this.rest ? this.rest + chunk : chunk;
    if (this.first) {
      this.first = false;
      if (buf.charCodeAt(0) === 0xfeff) buf = buf.slice(1);
    }
    let held = '';
    if (buf.includes('\r')) {
      // A CR at the very end may be the first half of a CRLF: it waits for the next chunk.
      if (buf.endsWith('\r')) {
        held = '\r';
        buf = buf.slice(0, -1);
      }
      buf = buf.replace(/\r\n?/g, '\n');
    }
    let out = '';
    let start = 0;
    for (let nl = buf.indexOf('\n'); nl !== -1; nl = buf.indexOf('\n', start)) {
      if (nl === start) {
        if (this.data !== null) {
          const data = this.data;
          this.data = null;
          out += this.event(data);
        }
      } else if (buf.startsWith('data', start)) {
        const colon = start + 4;
        if (colon === nl || buf.charCodeAt(colon) === 58) {
          const value = colon === nl ? '' : buf.slice(buf.charCodeAt(colon + 1) === 32 ? colon + 2 : colon + 1, nl);
          this.data = this.data === null ? value : `${this.data}\n${value}`;
        }
      }
      start = nl + 1;
    }
    this.rest = buf.slice(start) + held;
    if (this.rest.length + (this.data?.length ?? 0) > MAX_EVENT_CHARS)
      throw new Error(`an event from the provider exceeded ${MAX_EVENT_CHARS} characters`);
    return out;
  }

  /** At the end of the provider's stream: the tool-call lines, and the error of a stream that never said why it finished. */
  end(): string {
    const calls = this.toolCalls.finish();
    if (this.finishReason === undefined) this.fail(new Error('Response stream ended without a finish reason.'));
    const violation = toolChoiceViolation(
      this.req.enforced,
      calls.map((c) => c.name),
      true,
    );
    if (violation) this.fail(violation);
    // Under tool choice `none` the calls are withheld.
    if (this.req.enforced?.type === 'none') return '';
    let out = '';
    for (const c of calls)
      out += `${JSON.stringify({ type: 'tool-call', id: c.id, name: c.name, input: toolInput(this.req.tools, c.name, c.args) })}\n`;
    return out;
  }

  private fail(error: unknown): string {
    this.error = error;
    this.finishReason = 'error';
    return '';
  }

  private event(data: string): string {
    if (data === '[DONE]') return '';
    let chunk: WireChunk;
    try {
      chunk = parseJson(data) as WireChunk;
    } catch (cause) {
      return this.fail(new Error(`JSON parsing failed: Text: ${data}.\nError message: ${(cause as Error).message}`, { cause }));
    }
    if (!isObject(chunk)) return this.fail(new Error(`Type validation failed: Value: ${data}.`));
    if ('error' in chunk) return this.fail(chunk.error);
    if (!Array.isArray(chunk.choices)) return this.fail(new Error(`Type validation failed: Value: ${data}.`));
    if (chunk.usage != null) this.usage = chunk.usage;
    const choice = chunk.choices[0];
    if (choice?.finish_reason != null) this.finishReason = finishReasonOf(choice.finish_reason);
    const delta = choice?.delta;
    if (delta == null) return '';
    let out = '';
    const reasoning = delta.reasoning_content ?? delta.reasoning;
    if (typeof reasoning === 'string' && reasoning) out += textLine('reasoning-delta', reasoning);
    const content = delta.content;
    if (typeof content === 'string') {
      if (content) out += textLine('text-delta', content);
    } else for (const part of contentParts(content)) out += textLine(part.reasoning ? 'reasoning-delta' : 'text-delta', part.text);
    if (delta.tool_calls?.length) for (const d of delta.tool_calls) this.toolCalls.add(d);
    return out;
  }
}
