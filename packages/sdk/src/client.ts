import { Agents } from './agents.js';
import { Core, unwrap, type WebSocketConstructor } from './core.js';
import { HangarError } from './errors.js';
import { Runs } from './runs.js';
import { Sandboxes } from './sandboxes.js';
import { Threads } from './threads.js';
import type { RequestOptions } from './transport.js';
import type { ExecuteParams, ExecutionResult } from './types.js';

/** Options of {@link Hangar}. */
export interface HangarOptions {
  /** An API key (`hgr_live_…`/`hgr_test_…`) or a session token. Default: the `HANGAR_API_KEY` environment variable, where there is a `process`. */
  apiKey?: string;
  /** The API's address. Default: `HANGAR_BASE_URL`, else `http://127.0.0.1:8080` (a local `hangar serve`). */
  baseUrl?: string;
  /** The fetch to send requests with (default: the global `fetch`). */
  fetch?: (input: Request) => Promise<Response>;
  /** How many times a failed request is retried (429 and 503 for any request; network errors and timeouts for idempotent ones). Default 2. */
  maxRetries?: number;
  /** Milliseconds each attempt may take (for a stream: until it starts). Default 600 000 (10 minutes). */
  timeout?: number;
  /** The WebSocket constructor for `threads.subscribe` (default: the global one, else the `ws` package's). */
  WebSocket?: WebSocketConstructor;
}

const env = (name: string): string | undefined => (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.[name];

/**
 * The Hangar API client.
 * @example
 * ```ts
 * import { Hangar } from '@hangar/sdk';
 * const hangar = new Hangar(); // HANGAR_API_KEY, HANGAR_BASE_URL
 * const { run } = await hangar.execute({ language: 'python', code: 'print(6 * 7)' });
 * console.log(run.stdout); // 42
 * ```
 */
export class Hangar {
  /** Sandboxes: create, get, list, connect; each with commands and files. */
  readonly sandboxes: Sandboxes;
  /** Agents: create, get, list, update, delete. */
  readonly agents: Agents;
  /** Agent runs: create (wait for the end), stream, get, cancel. */
  readonly runs: Runs;
  /** Threads: create, get, list, and subscribe to their live frames. */
  readonly threads: Threads;
  /**
   * The typed client of every API operation (openapi-fetch over the types generated from the OpenAPI document),
   * with this client's credential, retries and timeout: for what the SDK has no method for.
   * @example `const { data, error } = await hangar.api.GET('/v1/me')`
   */
  readonly api: Core['api'];
  private readonly core: Core;

  constructor(options: HangarOptions = {}) {
    const apiKey = options.apiKey ?? env('HANGAR_API_KEY');
    if (!apiKey) throw new HangarError('no API key: pass `apiKey` to new Hangar() or set HANGAR_API_KEY', { code: 'missing_api_key' });
    const fetchImpl = options.fetch ?? ((input: Request) => globalThis.fetch(input));
    this.core = new Core(
      {
        apiKey,
        baseUrl: options.baseUrl ?? env('HANGAR_BASE_URL') ?? 'http://127.0.0.1:8080',
        fetch: fetchImpl,
        maxRetries: options.maxRetries ?? 2,
        timeout: options.timeout ?? 600_000,
      },
      options.WebSocket,
    );
    this.api = this.core.api;
    this.sandboxes = new Sandboxes(this.core);
    this.agents = new Agents(this.core);
    this.runs = new Runs(this.core);
    this.threads = new Threads(this.core);
  }

  /**
   * Runs a program once in a fresh isolated sandbox with no network (compiling it first where the language needs
   * it) and answers its output. A program that fails or times out is not an error: see `run.code` and `run.status`.
   * @example `const r = await hangar.execute({ language: 'python', code: 'print(input())', stdin: 'hi' })`
   */
  async execute(params: ExecuteParams, opts?: RequestOptions): Promise<ExecutionResult> {
    return unwrap(this.core.api.POST('/v1/execute', { body: params, ...this.core.init(opts) }));
  }
}
