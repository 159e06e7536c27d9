/**
 * A slot of runtime state a domain keeps per app (queues, maps of running work, registries): declared once at
 * module level (the key is immutable), its value made the first time one set of Deps asks for it.
 */
export interface StateKey<T> {
  readonly name: string;
  readonly create: () => T;
}

export const stateKey = <T>(name: string, create: () => T): StateKey<T> => ({ name, create });

/**
 * The runtime state of one app, built by createDeps and hung off Deps: two apps in one process (two harnesses,
 * a CLI command beside a server) share none of it. Domains reach their own slot through their key, so the
 * platform names no domain.
 */
export class RuntimeState {
  private readonly slots = new Map<StateKey<unknown>, unknown>();

  get<T>(key: StateKey<T>): T {
    if (!this.slots.has(key)) this.slots.set(key, key.create());
    return this.slots.get(key) as T;
  }
}
