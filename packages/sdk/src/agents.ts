import { type Core, unwrap } from './core.js';
import type { RequestOptions } from './transport.js';
import type { Agent, CreateAgentParams, UpdateAgentParams } from './types.js';

/** Agents: a model, instructions, tools and an execution mode, named by a slug. `hangar.agents`. */
export class Agents {
  constructor(private readonly core: Core) {}

  /**
   * Creates an agent.
   * @example `await hangar.agents.create({ slug: 'helper', model: 'gpt-4o-mini', instructions: 'Be brief.' })`
   */
  async create(params: CreateAgentParams, opts?: RequestOptions): Promise<Agent> {
    return (await unwrap(this.core.api.POST('/v1/agents', { body: params, ...this.core.init(opts) }))).data;
  }

  /** The agent with this slug (`NotFoundError` when there is none). */
  async get(slug: string, opts?: RequestOptions): Promise<Agent> {
    return (await unwrap(this.core.api.GET('/v1/agents/{slug}', { params: { path: { slug } }, ...this.core.init(opts) }))).data;
  }

  /** The organization's agents. */
  async list(opts?: RequestOptions): Promise<Agent[]> {
    return (await unwrap(this.core.api.GET('/v1/agents', this.core.init(opts)))).data;
  }

  /** Changes the given fields of an agent and answers it. */
  async update(slug: string, params: UpdateAgentParams, opts?: RequestOptions): Promise<Agent> {
    return (await unwrap(this.core.api.PATCH('/v1/agents/{slug}', { params: { path: { slug } }, body: params, ...this.core.init(opts) }))).data;
  }

  /** Deletes an agent. */
  async delete(slug: string, opts?: RequestOptions): Promise<void> {
    await unwrap(this.core.api.DELETE('/v1/agents/{slug}', { params: { path: { slug } }, ...this.core.init(opts) }));
  }
}
