import { type Core, unwrap } from './core.js';
import { ConnectionError, HangarError } from './errors.js';
import { readEvents } from './sse.js';
import type { RequestOptions } from './transport.js';
import type { RunParams, RunResult, ThreadFrame } from './types.js';

/** The last frame of a run stream: the run's result. */
export interface RunResultFrame {
  type: 'result';
  result: RunResult;
}

/** A frame of {@link Runs.stream}: the thread's frames as the run makes them, then its `result`. */
export type RunStreamFrame = ThreadFrame | RunResultFrame;

/**
 * A streaming run: iterate it with `for await` for its frames (`run_started`, `assistant_message_delta`,
 * `tool_call`, `tool_result`, `run_completed`... then `result`). Breaking out of the loop, or aborting `signal`,
 * disconnects, which cancels the run.
 */
export class RunStream implements AsyncIterable<RunStreamFrame> {
  private started = false;
  /** The run's result, once the `result` frame has come. */
  result: RunResult | undefined;

  constructor(
    private readonly core: Core,
    private readonly params: RunParams,
    private readonly opts: RequestOptions,
  ) {}

  async *[Symbol.asyncIterator](): AsyncIterator<RunStreamFrame> {
    if (this.started) throw new HangarError('a run stream can be iterated once', { code: 'stream_consumed' });
    this.started = true;
    const response = await this.core.transport.request('POST', '/v1/run', {
      ...this.opts,
      stream: true,
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ ...this.params, stream: true }),
    });
    for await (const ev of readEvents(response.body, this.opts.signal)) {
      const data = JSON.parse(ev.data) as Record<string, unknown>;
      if (ev.event === 'result') {
        this.result = data as unknown as RunResult;
        yield { type: 'result', result: this.result };
        return;
      }
      if (ev.event === 'error') throw new HangarError(String(data.message ?? 'the run failed'), { code: String(data.code ?? 'run_error') });
      yield { ...data, type: typeof data.type === 'string' ? data.type : ev.event } as ThreadFrame;
    }
    throw new ConnectionError('the run’s stream ended before its result', { code: 'connection_error' });
  }

  /** Reads the rest of the stream and answers the run's result. */
  async finalResult(): Promise<RunResult> {
    if (!this.started) for await (const _ of this) void _;
    if (!this.result) throw new ConnectionError('the run’s stream ended before its result', { code: 'connection_error' });
    return this.result;
  }

  /** The answer's text as it streams (the `delta` of each `assistant_message_delta` frame). */
  async *text(): AsyncGenerator<string> {
    for await (const frame of this) if (frame.type === 'assistant_message_delta' && typeof frame.delta === 'string') yield frame.delta;
  }
}

/** Agent runs. `hangar.runs`. */
export class Runs {
  constructor(private readonly core: Core) {}

  /**
   * Runs an agent and answers when the run has ended (status completed, failed, cancelled or max_turns).
   * @example `const run = await hangar.runs.create({ agent: 'helper', prompt: 'Hi' }); console.log(run.result);`
   */
  async create(params: RunParams, opts?: RequestOptions): Promise<RunResult> {
    return (await unwrap(this.core.api.POST('/v1/run', { body: { ...params, stream: false }, ...this.core.init(opts) }))).data;
  }

  /**
   * Runs an agent, streaming its frames as they happen.
   * @example
   * ```ts
   * for await (const frame of hangar.runs.stream({ agent: 'helper', prompt: 'Hi' })) {
   *   if (frame.type === 'assistant_message_delta') process.stdout.write(frame.delta ?? '');
   * }
   * ```
   */
  stream(params: RunParams, opts: RequestOptions = {}): RunStream {
    return new RunStream(this.core, params, opts);
  }

  /** A run of yours, by id. */
  async get(runId: string, opts?: RequestOptions): Promise<RunResult> {
    return (await unwrap(this.core.api.GET('/v1/runs/{runId}', { params: { path: { runId } }, ...this.core.init(opts) }))).data;
  }

  /** Stops a running run at its next step; it ends `cancelled` (`ConflictError` when it is not running). */
  async cancel(runId: string, opts?: RequestOptions): Promise<RunResult> {
    return (await unwrap(this.core.api.POST('/v1/runs/{runId}/cancel', { params: { path: { runId } }, ...this.core.init(opts) }))).data;
  }
}
