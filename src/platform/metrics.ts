/**
 * Prometheus metrics (ADR 0040): one prom-client registry per app, on `deps.metrics`. Domains make their own
 * instruments here (memoized by name, so two calls get the same one) and app.ts registers the gauges that are read
 * when scraped. Labels are bounded sets (route patterns, languages, states, model ids of the registry), never an
 * organization, user or resource id: the endpoint is the operator's, not a tenant's.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Logger } from 'pino';
import type { MetricsConfig } from '../config.js';

/** Latency buckets (seconds) from a cached page (~1 ms) to a long model call or build. */
const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export class Metrics {
  readonly registry = new Registry();
  /** Whether anyone can read them (a token or a port is configured): instruments on hot paths skip work when not. */
  readonly enabled: boolean;
  private readonly made = new Map<string, Counter | Gauge | Histogram>();
  /** Where the listener of its own answers (HANGAR_METRICS_PORT), once the app listens. */
  listening: { host: string; port: number } | null = null;

  constructor(
    readonly config: MetricsConfig,
    private readonly log: Pick<Logger, 'warn'>,
  ) {
    this.enabled = config.token !== null || config.port !== null;
    if (this.enabled) collectDefaultMetrics({ register: this.registry, prefix: 'hangar_' });
  }

  counter<L extends string>(name: string, help: string, labelNames: readonly L[]): Counter<L> {
    return this.make(name, () => new Counter({ name, help, labelNames, registers: [this.registry] })) as Counter<L>;
  }

  histogram<L extends string>(name: string, help: string, labelNames: readonly L[], buckets = BUCKETS): Histogram<L> {
    return this.make(name, () => new Histogram({ name, help, labelNames, buckets, registers: [this.registry] })) as Histogram<L>;
  }

  /**
   * A gauge read when scraped: `read` answers its values (one per label set); a failing read leaves the gauge
   * empty for that scrape rather than failing the others.
   */
  gauge<L extends string>(
    name: string,
    help: string,
    labelNames: readonly L[],
    read: () => Promise<[Partial<Record<L, string>>, number][]>,
  ): Gauge<L> {
    const log = this.log;
    return this.make(
      name,
      () =>
        new Gauge({
          name,
          help,
          labelNames,
          registers: [this.registry],
          async collect() {
            this.reset();
            const values = await read().catch((err: unknown) => {
              log.warn({ err, metric: name }, 'a metric could not be read for this scrape');
              return [];
            });
            for (const [labels, value] of values) this.set(labels as Record<L, string>, value);
          },
        }),
    ) as Gauge<L>;
  }

  /** The exposition text and its content type. */
  async scrape(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  private make(name: string, create: () => Counter | Gauge | Histogram): Counter | Gauge | Histogram {
    let m = this.made.get(name);
    if (!m) {
      m = create();
      this.made.set(name, m);
    }
    return m;
  }
}
