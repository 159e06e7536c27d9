import { randomBytes } from 'node:crypto';
import { accessSync, constants, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { isIP, isIPv4, isIPv6 } from 'node:net';
import { availableParallelism, hostname, totalmem } from 'node:os';
import path from 'node:path';
import { z } from 'zod';

export const SERVICES = ['orchestrator', 'auth', 'tools', 'billing', 'storage'] as const;
export type ServiceName = (typeof SERVICES)[number];

/** A configuration problem, reported as one line naming the setting. */
export class ConfigError extends Error {
  constructor(
    readonly setting: string,
    message: string,
  ) {
    super(`${setting}: ${message}`);
    this.name = 'ConfigError';
  }
}

const intFrom = (min: number, max: number) => z.coerce.number().int().min(min).max(max);

const MIB = 1024 * 1024;

/** A package mirror's base URL: http(s), no spaces or credentials (it goes into apt's sources and into logs). */
const mirrorUrl = z
  .string()
  .regex(/^https?:\/\/[^\s@/]+(?:\/[^\s]*)?$/, 'must be an http:// or https:// URL without spaces or user:password@')
  .refine((v) => URL.canParse(v), 'must be a valid URL');

const EnvSchema = z.object({
  HOST: z.string().min(1).default('127.0.0.1'),
  PORT: intFrom(0, 65535).default(8080),
  HANGAR_DATA_DIR: z.string().min(1).default('./.hangar'),
  DATABASE_URL: z.string().optional(),
  REDIS_URL: z.string().optional(),
  HANGAR_SERVICES: z.string().optional(),
  HANGAR_BASE_URL: z.string().url().optional(),
  HANGAR_AUTH_URL: z.string().url().optional(),
  HANGAR_TOOLS_URL: z.string().url().optional(),
  HANGAR_BILLING_URL: z.string().url().optional(),
  HANGAR_STORAGE_URL: z.string().url().optional(),
  HANGAR_SECRET_KEY: z.string().optional(),
  HANGAR_OIDC_ISSUER: z.string().url().optional(),
  HANGAR_OIDC_AUDIENCE: z.string().min(1).optional(),
  HANGAR_OIDC_JWKS_URL: z.string().url().optional(),
  HANGAR_SESSION_TTL_SECONDS: intFrom(60, 60 * 60 * 24 * 30).default(60 * 60 * 12),
  HANGAR_BODY_LIMIT_BYTES: intFrom(1024, 1024 * 1024 * 1024).default(1024 * 1024),
  HANGAR_UPLOAD_LIMIT_BYTES: intFrom(1, 1024 ** 4).default(100 * 1024 * 1024),
  HANGAR_STORAGE_QUOTA_BYTES: intFrom(0, 1024 ** 5).default(1024 * 1024 * 1024),
  HANGAR_SIGNUP_CREDITS_CENTS: intFrom(0, 1_000_000_00).default(500),
  HANGAR_MAX_ORGS_PER_USER: intFrom(1, 100_000).default(10),
  HANGAR_VALIDATE_RESPONSES: z.enum(['true', 'false', '1', '0']).optional(),
  HANGAR_EXECUTE_CONCURRENCY: intFrom(1, 1024).optional(),
  HANGAR_EXECUTE_QUEUE: intFrom(0, 100_000).optional(),
  HANGAR_EXECUTE_ORG_CONCURRENCY: intFrom(1, 1024).optional(),
  HANGAR_EXECUTE_ORG_QUEUE: intFrom(0, 100_000).optional(),
  HANGAR_EXECUTE_MAX_RUN_TIMEOUT_MS: intFrom(1, 3_600_000).default(30_000),
  HANGAR_EXECUTE_MAX_COMPILE_TIMEOUT_MS: intFrom(1, 3_600_000).default(60_000),
  HANGAR_EXECUTE_RUN_MEMORY_BYTES: intFrom(MIB, 1024 ** 4).default(256 * MIB),
  HANGAR_EXECUTE_COMPILE_MEMORY_BYTES: intFrom(MIB, 1024 ** 4).default(1024 * MIB),
  HANGAR_EXECUTE_MAX_MEMORY_BYTES: intFrom(MIB, 1024 ** 4).default(2048 * MIB),
  HANGAR_EXECUTE_OUTPUT_LIMIT_BYTES: intFrom(1, 1024 ** 3).default(64 * 1024),
  HANGAR_EXECUTE_MAX_PROCESSES: intFrom(1, 100_000).default(128),
  HANGAR_EXECUTE_FILE_SIZE_BYTES: intFrom(1, 1024 ** 4).default(64 * MIB),
  HANGAR_EXECUTE_LANGUAGES: z.string().optional(),
  HANGAR_SANDBOX_DIR: z.string().min(1).default('/var/lib/hangar/sandboxes'),
  HANGAR_SANDBOX_DRIVER: z.enum(['runc']).default('runc'),
  HANGAR_NODE_ID: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,64}$/, 'letters, digits, ".", "_" and "-", at most 64')
    .optional(),
  HANGAR_NODE_URL: z.string().url().optional(),
  HANGAR_NODE_HEARTBEAT_MS: intFrom(50, 600_000).default(5_000),
  HANGAR_NODE_DEAD_AFTER_MS: intFrom(200, 86_400_000).default(60_000),
  HANGAR_NODE_MEMORY_MB: intFrom(16, 1024 ** 3).optional(),
  HANGAR_SANDBOX_MAX_RUNNING: intFrom(0, 100_000).default(10),
  HANGAR_SANDBOX_DEFAULT_CPU: z.coerce.number().min(0.1).max(1024).multipleOf(0.01).default(1),
  HANGAR_SANDBOX_MAX_CPU: z.coerce.number().min(0.1).max(1024).multipleOf(0.01).default(2),
  HANGAR_SANDBOX_DEFAULT_MEMORY_MB: intFrom(16, 1024 * 1024).default(512),
  HANGAR_SANDBOX_MAX_MEMORY_MB: intFrom(16, 1024 * 1024).default(4096),
  HANGAR_SANDBOX_DEFAULT_IDLE_SECONDS: intFrom(0, 30 * 86_400).default(900),
  HANGAR_SANDBOX_MAX_IDLE_SECONDS: intFrom(0, 30 * 86_400).default(86_400),
  HANGAR_SANDBOX_MAX_PROCESSES: intFrom(16, 1_000_000).default(1024),
  HANGAR_SANDBOX_DISK_MB: intFrom(64, 16 * 1024 * 1024).default(2048),
  HANGAR_SANDBOX_MAX_DISK_MB: intFrom(64, 16 * 1024 * 1024).default(10_240),
  HANGAR_SANDBOX_MIN_FREE_DISK_MB: intFrom(0, 1024 ** 4).default(2048),
  HANGAR_TEMPLATE_BUILD_DISK_MB: intFrom(64, 16 * 1024 * 1024).default(4096),
  HANGAR_SANDBOX_POOL: intFrom(0, 64).default(0),
  HANGAR_SANDBOX_POOL_NETWORK: intFrom(0, 64).optional(),
  HANGAR_SANDBOX_POOL_TEMPLATE: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'a template slug')
    .default('base-ubuntu'),
  HANGAR_SANDBOX_POOL_MIN_FREE_MEMORY_MB: intFrom(0, 1024 ** 3).default(1024),
  HANGAR_SANDBOX_SPARE_NETWORKS: intFrom(0, 64).default(2),
  HANGAR_SANDBOX_SUBNET: z
    .string()
    .regex(/^10\.(\d{1,3})\.0\.0\/16$/, 'must be a 10.N.0.0/16 subnet')
    .default('10.89.0.0/16'),
  HANGAR_SANDBOX_NETWORK_ALLOW: z.string().optional(),
  HANGAR_TEMPLATE_PREBUILD: z.enum(['true', 'false', '1', '0']).default('true'),
  HANGAR_TEMPLATE_BUILD_TIMEOUT_SECONDS: intFrom(10, 86_400).default(1800),
  HANGAR_MIRROR_DEBIAN: mirrorUrl.default('http://deb.debian.org/debian'),
  HANGAR_MIRROR_DEBIAN_SECURITY: mirrorUrl.default('http://deb.debian.org/debian-security'),
  HANGAR_MIRROR_UBUNTU: mirrorUrl.default('http://archive.ubuntu.com/ubuntu'),
  HANGAR_MIRROR_ALPINE: mirrorUrl.default('https://dl-cdn.alpinelinux.org/alpine'),
  HANGAR_UBUNTU_KEYRING: z.string().regex(/^\//, 'must be an absolute path').default('/usr/share/keyrings/ubuntu-archive-keyring.gpg'),
  HANGAR_OPENAI_BASE_URL: z.string().url().optional(),
  HANGAR_OPENAI_API_KEY: z.string().min(1).optional(),
  HANGAR_OPENAI_MODELS: z.string().optional(),
  HANGAR_ANTHROPIC_BASE_URL: z.string().url().optional(),
  HANGAR_ANTHROPIC_API_KEY: z.string().min(1).optional(),
  HANGAR_ANTHROPIC_MODELS: z.string().optional(),
  HANGAR_MODELS_FILE: z.string().min(1).optional(),
  HANGAR_MODEL_TIMEOUT_MS: intFrom(1000, 3_600_000).default(300_000),
  HANGAR_OAUTH_PROVIDERS_FILE: z.string().min(1).optional(),
  HANGAR_OAUTH_RETURN_URLS: z.string().optional(),
  HANGAR_OAUTH_TIMEOUT_MS: intFrom(500, 120_000).default(15_000),
  HANGAR_TOOLS_CATALOG_FILE: z.string().min(1).optional(),
  HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS: z.enum(['0', '1', 'true', 'false']).default('false'),
  HANGAR_TOOLS_TIMEOUT_MS: intFrom(500, 300_000).default(30_000),
  HANGAR_TOOLS_MAX_RESPONSE_BYTES: intFrom(1024, 64 * MIB).default(2 * MIB),
  HANGAR_TOOLS_MCP_REFRESH_MS: intFrom(0, 7 * 24 * 3600 * 1000).default(3600 * 1000),
  HANGAR_SEARCH_PROVIDER: z.enum(['brave']).optional(),
  HANGAR_SEARCH_API_KEY: z.string().min(1).optional(),
  HANGAR_SEARCH_URL: z.string().url().optional(),
  HANGAR_BILLING: z.enum(['on', 'off', 'true', 'false', '1', '0']).default('on'),
  HANGAR_BILLING_PLANS_FILE: z.string().min(1).optional(),
  HANGAR_BILLING_DEFAULT_PLAN: z
    .string()
    .regex(/^[a-z0-9][a-z0-9_-]{0,62}$/, 'a plan id')
    .default('free'),
  HANGAR_BILLING_GRACE_SECONDS: intFrom(0, 30 * 86_400).default(300),
  HANGAR_BILLING_SETTLE_MS: intFrom(50, 3_600_000).default(5_000),
  HANGAR_BILLING_RUNTIME_UPDATE_MS: intFrom(50, 3_600_000).default(60_000),
  HANGAR_BILLING_STORAGE_CHARGE_MS: intFrom(50, 7 * 86_400_000).default(86_400_000),
  HANGAR_BILLING_TOPUP_MIN_CENTS: intFrom(1, 100_000_000).default(500),
  HANGAR_BILLING_TOPUP_MAX_CENTS: intFrom(1, 100_000_000).default(100_000),
  HANGAR_BILLING_RETURN_URL: z.string().url().optional(),
  HANGAR_STRIPE_SECRET_KEY: z.string().min(1).optional(),
  HANGAR_STRIPE_WEBHOOK_SECRET: z.string().min(1).optional(),
  HANGAR_STRIPE_API_URL: z.string().url().optional(),
  HANGAR_STRIPE_WEBHOOK_TOLERANCE_SECONDS: intFrom(1, 3600).default(300),
  HANGAR_RUNMESH_CIDR: z
    .string()
    .regex(/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/, 'an IPv4 CIDR such as 100.64.0.0/10')
    .default('100.64.0.0/10'),
  HANGAR_RUNMESH_LINK_TTL_SECONDS: intFrom(30, 86_400).default(600),
  HANGAR_RUNMESH_POLL_INTERVAL_SECONDS: intFrom(1, 60).default(5),
  HANGAR_RUNMESH_DISPATCH_TIMEOUT_SECONDS: intFrom(1, 7 * 86_400).default(300),
  HANGAR_RUNMESH_HEARTBEAT_SECONDS: intFrom(1, 3600).default(15),
  HANGAR_CHANNELS_CHATBOT_API_URL: z.string().url().default('https://api.telegram.org'),
  HANGAR_CHANNELS_CHATBOT_LINK_URL: z.string().url().default('https://t.me'),
  HANGAR_CHANNELS_BUSINESS_API_URL: z.string().url().default('https://graph.facebook.com/v21.0'),
  HANGAR_CHANNELS_BUSINESS_LINK_URL: z.string().url().default('https://wa.me'),
  HANGAR_CHANNELS_PROVIDER_TIMEOUT_MS: intFrom(100, 120_000).default(10_000),
  HANGAR_CHANNELS_REQUEST_TTL_SECONDS: intFrom(60, 90 * 86_400).default(7 * 86_400),
  HANGAR_CHANNELS_REPLY_WINDOW_SECONDS: intFrom(1, 30 * 86_400).default(86_400),
  HANGAR_CHANNELS_LINK_TTL_SECONDS: intFrom(60, 86_400).default(900),
  HANGAR_CHANNELS_MAX_ATTEMPTS: intFrom(1, 50).default(6),
  HANGAR_CHANNELS_RETRY_BASE_MS: intFrom(10, 600_000).default(2000),
  HANGAR_SESSIONS_DEFAULT_MAX_TOKENS: intFrom(1000, 100_000_000).default(128_000),
  HANGAR_SESSIONS_MAX_BLOCK_BYTES: intFrom(1024, 10_000_000).default(1_000_000),
  HANGAR_SESSIONS_MAX_BLOCKS: intFrom(10, 10_000_000).default(100_000),
  HANGAR_SESSIONS_LOCK_WAIT_MS: intFrom(0, 600_000).default(30_000),
  HANGAR_SESSIONS_SUMMARY_TIMEOUT_MS: intFrom(1000, 600_000).default(60_000),
  HANGAR_SESSIONS_RUN_COMPACT_PCT: intFrom(10, 95).default(50),
  HANGAR_DEPLOYMENTS_MAX_QUEUED: intFrom(1, 100_000).default(100),
  HANGAR_WEBHOOKS_ALLOW_PRIVATE_NETWORKS: z.enum(['0', '1', 'true', 'false']).default('false'),
  HANGAR_WEBHOOKS_TIMEOUT_MS: intFrom(100, 120_000).default(10_000),
  HANGAR_WEBHOOKS_RETRY_SCHEDULE: z
    .string()
    .default('5s,5m,30m,2h,5h,10h')
    .refine((v) => v.split(',').every((d) => /^\d+(ms|s|m|h)$/.test(d.trim())), 'a comma-separated list of durations such as 5s,5m,2h'),
  HANGAR_WEBHOOKS_SECRET_OVERLAP_SECONDS: intFrom(0, 30 * 86_400).default(86_400),
  HANGAR_TRIGGERS_TRUSTED_PROXIES: z.string().default(''),
  HANGAR_TRIGGERS_MAX_BODY_BYTES: intFrom(1024, 64 * 1024 * 1024).default(1024 * 1024),
  HANGAR_TRIGGERS_TOLERANCE_SECONDS: intFrom(1, 3600).default(300),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  HANGAR_CONSOLE_DIR: z.string().min(1).optional(),
  HANGAR_METRICS_TOKEN: z.string().min(16, 'must be at least 16 characters').max(512).optional(),
  HANGAR_METRICS_PORT: intFrom(0, 65535).optional(),
  HANGAR_METRICS_HOST: z.string().min(1).default('127.0.0.1'),
});

/** `GET /metrics` (ADR 0040). */
export interface MetricsConfig {
  /** `GET /metrics` on the API port answers only with `Authorization: Bearer <token>`; null: not on the API port. */
  token: string | null;
  /** A listener of its own for `GET /metrics` (no token asked: keep it on a private interface); null: none. */
  port: number | null;
  host: string;
}

export type Config = Readonly<{
  host: string;
  port: number;
  dataDir: string;
  database: { kind: 'sqlite'; file: string } | { kind: 'postgres'; url: string; schema?: string };
  redisUrl?: string;
  services: readonly ServiceName[];
  urls: Readonly<Record<ServiceName, string>>;
  /** HANGAR_BASE_URL when set: the address people use (links shown to them); null: the request's own origin. */
  publicBaseUrl: string | null;
  /** Master secret (32+ bytes) from which signing and encryption keys are derived. */
  secretKey: Buffer;
  oidc?: Readonly<{ issuer: string; audience: string; jwksUrl?: string }>;
  sessionTtlSeconds: number;
  bodyLimitBytes: number;
  uploadLimitBytes: number;
  storageQuotaBytes: number;
  signupCreditsCents: number;
  /** Organizations one user may create (being added to others' does not count). */
  maxOrgsPerUser: number;
  validateResponses: boolean;
  logLevel: string;
  /** `GET /metrics` (ADR 0040): behind a token on the API port, and/or on a port of its own; off when neither is set. */
  metrics: MetricsConfig;
  /** The built web console served at / (ADR 0047); default packages/console/dist (built by `npm install`). */
  consoleDir: string | undefined;
  execute: ExecuteConfig;
  sandboxes: SandboxConfig;
  nodes: NodesConfig;
  models: ModelsConfig;
  oauth: OAuthConfig;
  tools: ToolsConfig;
  billing: BillingConfig;
  runmesh: RunmeshConfig;
  channels: ChannelsConfig;
  sessions: SessionsConfig;
  deployments: DeploymentsConfig;
}>;

/** Deployments, their outbound webhooks and agent triggers (ADR 0033). */
export type DeploymentsConfig = Readonly<{
  /** Invocations of one deployment waiting for a free slot before another answers 429. */
  maxQueued: number;
  /** Outbound webhooks may reach loopback and private addresses (tests; an operator's internal receivers). */
  webhooksAllowPrivateNetworks: boolean;
  /** Each webhook delivery attempt. */
  webhookTimeoutMs: number;
  /** Delays before each retry of a failed delivery (the receiver's Retry-After wins when longer). */
  webhookRetryScheduleMs: readonly number[];
  /** After a secret rotation, deliveries are signed with the previous secret too for this long. */
  secretOverlapSeconds: number;
  /** Proxies (IPs and CIDRs) whose X-Forwarded-For is believed for trigger IP allowlists. */
  trustedProxies: readonly string[];
  /** The largest trigger invoke body (413 beyond). */
  triggerMaxBodyBytes: number;
  /** The optional timestamped signature scheme of triggers accepts timestamps this far from now. */
  triggerToleranceSeconds: number;
}>;

/** Context sessions (ADR 0031). */
export type SessionsConfig = Readonly<{
  /** A session's window (`metrics.maxTokens`) when its default agent's model declares none. */
  defaultMaxTokens: number;
  /** The largest block content, in UTF-8 bytes (413 beyond). */
  maxBlockBytes: number;
  /** Blocks one session may hold. */
  maxBlocks: number;
  /** How long a write waits for a session another run, fork or compaction holds before 409 `session_busy`. */
  lockWaitMs: number;
  /** Each model call writing a compaction summary. */
  summaryTimeoutMs: number;
  /** A run that finds its session over the window compacts it to this percentage of the window. */
  runCompactPct: number;
}>;

/** Messaging channels (ADR 0030). Provider API addresses are the operator's (tests point them at loopback fakes). */
export type ChannelsConfig = Readonly<{
  /** The chat-bot provider's Bot API (Telegram Bot API wire format): `<url>/bot<token>/<method>`. */
  chatbotApiUrl: string;
  /** Its deep links: `<url>/<bot username>?start=<payload>`. */
  chatbotLinkUrl: string;
  /** The business messaging provider's Graph API (WhatsApp Cloud API wire format), version included. */
  businessApiUrl: string;
  /** Its click-to-chat links: `<url>/<phone digits>?text=<text>`. */
  businessLinkUrl: string;
  /** Each call to a provider. */
  providerTimeoutMs: number;
  /** How long an unknown sender's access request stays pending. */
  requestTtlSeconds: number;
  /** An unknown sender gets the unauthorized reply at most once per this window. */
  replyWindowSeconds: number;
  /** How long a product link session's `pcl_` token can be completed. */
  linkTtlSeconds: number;
  /** Processing attempts of an inbound message (run and reply) before it is marked failed. */
  maxAttempts: number;
  /** The first retry's delay; each next one doubles, with jitter (a provider's `retry_after` wins when longer). */
  retryBaseMs: number;
}>;

/** The device mesh (ADR 0029). */
export type RunmeshConfig = Readonly<{
  /** Mesh addresses are handed out from this IPv4 range. */
  cidr: string;
  /** How long a device link code can be approved. */
  linkTtlSeconds: number;
  /** The polling interval a device is told; polling faster answers slow_down. */
  pollIntervalSeconds: number;
  /** A local-device run not accepted by its device this long after it was made (or after the device was last seen) fails. */
  dispatchTimeoutSeconds: number;
  /** How often a device reports in; it counts as offline after three missed beats. */
  heartbeatSeconds: number;
}>;

/** Billing (ADR 0028): whether usage is charged, the plans, the payment provider, grace and sweeps. */
export type BillingConfig = Readonly<{
  /** Off: usage is still metered and reported, nothing is charged and nothing is refused for credit. */
  enabled: boolean;
  /** A JSON file of plans added to (or replacing by id) the built-in `free` plan. */
  plansFile: string | null;
  /** The plan a new organization is on. */
  defaultPlan: string;
  /** How long running sandboxes keep running after the credits ran out, before they are paused. */
  graceSeconds: number;
  /** How often due usage left uncharged (a crash between metering and charging) is swept into the ledger. */
  settleMs: number;
  /** How often running sandboxes' pending charges are re-estimated. */
  runtimeUpdateMs: number;
  /** How often workspace storage byte-seconds are charged (a day by default). */
  storageChargeMs: number;
  topupMinCents: number;
  topupMaxCents: number;
  /** Where the checkout sends the browser back to (default: the billing service's own /v1/billing/success). */
  returnUrl: string | null;
  /** The payment provider (Stripe's API); null: top-ups and auto top-up answer 409 payments_not_configured. */
  payments: Readonly<{ provider: 'stripe'; secretKey: string; webhookSecret: string; apiUrl: string | null; toleranceSeconds: number }> | null;
}>;

/** Tools (ADR 0027): the catalogue, the egress guard every outbound tool request goes through, web search. */
export type ToolsConfig = Readonly<{
  /** A JSON file of catalogue entries added to (or replacing by slug) the shipped ones. */
  catalogFile: string | null;
  /** Whether tool requests may reach loopback, link-local and private addresses (tests' loopback fakes). */
  allowPrivateNetworks: boolean;
  /** Each outbound tool request (all redirects included) gives up after this long. */
  timeoutMs: number;
  /** A tool's answer larger than this fails the call. */
  maxResponseBytes: number;
  /** How often registered MCP servers' tool lists are refreshed (0: only on demand). */
  mcpRefreshMs: number;
  /** The provider behind `web_search`; null: web_search cannot run here. */
  search: Readonly<{ provider: 'brave'; apiKey: string; url: string }> | null;
}>;

/** OAuth connections (ADR 0026): extra provider definitions, platform clients, where a flow may return to. */
export type OAuthConfig = Readonly<{
  /** A JSON file of provider definitions added to (or replacing by slug) the built-in ones. */
  providersFile: string | null;
  /** The platform's own client per provider slug, from HANGAR_OAUTH_<SLUG>_CLIENT_ID / _CLIENT_SECRET. */
  clients: Readonly<Record<string, Readonly<{ clientId: string; clientSecret: string | null }>>>;
  /** Origins (or URL prefixes) a flow's `returnUrl` may point at; the auth service's own origin always may. */
  returnUrls: readonly string[];
  /** Each request to a provider gives up after this long. */
  timeoutMs: number;
}>;

/** Replicas that run sandboxes (ADR 0024): how this node is reached by the others, and when a silent one is dead. */
export type NodesConfig = Readonly<{
  /** The address other replicas forward this node's sandbox requests to; null: derived from the address it listens on. */
  url: string | null;
  heartbeatMs: number;
  /** A node whose last heartbeat is older than this has its sandboxes marked `stopped` by the other replicas. */
  deadAfterMs: number;
  /** Memory this node offers sandboxes, in MiB (placement compares it with their memory limits). */
  memoryMb: number;
}>;

/** Model providers for the platform tier, and the models file naming what is offered (see src/domains/models/catalogue.ts). */
export type ModelsConfig = Readonly<{
  openai: Readonly<{ baseUrl: string; apiKey: string | null; models: readonly string[] }> | null;
  anthropic: Readonly<{ baseUrl: string | null; apiKey: string; models: readonly string[] }> | null;
  file: string | null;
  timeoutMs: number;
}>;

/** Persistent sandboxes and template builds (runc). */
export type SandboxConfig = Readonly<{
  /** Which SandboxRuntime runs containers (ADR 0025): only `runc` is built. */
  driver: 'runc';
  /** Root of layers, sandbox upper layers and bundles; survives restarts. */
  dir: string;
  /** This host's name among replicas; a sandbox lives on the node that created it. */
  nodeId: string;
  /** Running sandboxes per organization; more are refused with 429 limit_exceeded. */
  maxRunningPerOrg: number;
  defaultCpu: number;
  maxCpu: number;
  defaultMemoryMb: number;
  maxMemoryMb: number;
  /** Seconds without API use after which a sandbox pauses itself (0 = never). */
  defaultIdleSeconds: number;
  maxIdleSeconds: number;
  maxProcesses: number;
  /** Size of a sandbox's disk (its writable layer: a sized filesystem image of its own) when the request names none, in MiB. */
  defaultDiskMb: number;
  maxDiskMb: number;
  /** New sandboxes, resumes and template builds are refused (507) while the sandbox folder's filesystem has less free than this, in MiB. */
  minFreeDiskMb: number;
  /** Size of a template build's writable layer, in MiB; writing past it fails the build with ENOSPC. */
  buildDiskMb: number;
  /** Second octet of the 10.N.0.0/16 network that sandboxes with network on use. */
  subnetOctet: number;
  /** Networks (CIDRs) sandboxes and builds may reach although they are private, e.g. an internal package mirror. */
  networkAllow: readonly string[];
  /** Warm pool (ADR 0023): ready, unassigned sandboxes of one system template that a create takes instead of building one. */
  pool: Readonly<{
    /** Pooled sandboxes kept without network, and with network. 0 and 0: no pool. */
    size: number;
    networkSize: number;
    /** Slug of the system template pooled. */
    template: string;
    /** The pool holds no more than leaves this much host memory (MemAvailable) beyond the pooled sandboxes' limits, in MiB. */
    minFreeMemoryMb: number;
  }>;
  /** Network namespaces (veth, address, route) kept made ahead, so a start with network takes one. */
  spareNetworks: number;
  /** Build the system templates that need a build (desktop-ubuntu) at start-up. */
  prebuildTemplates: boolean;
  buildTimeoutSeconds: number;
  /** Package mirrors OS images are built from, and the keyring Ubuntu's is verified with (ADR 0022). */
  mirrors: Readonly<{ debian: string; debianSecurity: string; ubuntu: string; alpine: string; ubuntuKeyring: string }>;
}>;

/** Limits of one-shot code execution (`POST /v1/execute`). */
export type ExecuteConfig = Readonly<{
  /** Executions running at once; more wait in the queue. */
  concurrency: number;
  /** Executions waiting for a slot; beyond this a request is refused with 429. */
  queue: number;
  /** Executions of one organization running at once (at most `concurrency`). */
  orgConcurrency: number;
  /** Executions of one organization waiting (at most `queue`); beyond this that organization gets 429. */
  orgQueue: number;
  maxRunTimeoutMs: number;
  maxCompileTimeoutMs: number;
  /** Memory limit of the run step and of the compile step when the request names none. */
  runMemoryBytes: number;
  compileMemoryBytes: number;
  /** The most a request may ask for, either step. */
  maxMemoryBytes: number;
  /** stdout and stderr of each step are each cut at this many bytes. */
  outputLimitBytes: number;
  /** Processes and threads alive at once in one sandbox. */
  maxProcesses: number;
  /** Largest file a program may write. */
  fileSizeBytes: number;
  /** Languages offered (canonical names), or null for every installed one. */
  languages: readonly string[] | null;
}>;

/**
 * An IPv4 or IPv6 network as `address/prefix` (a bare address is a single host), in the form nftables takes;
 * or why it is not one. Host bits must be zero, so a typo cannot silently widen or shift the network.
 */
export function parseCidr(text: string): { cidr: string } | { error: string } {
  const [addr = '', prefixText, extra] = text.split('/');
  if (extra !== undefined) return { error: 'is not a CIDR such as 10.0.5.0/24 or fd12:3456::/48' };
  const v4 = isIPv4(addr);
  if (!v4 && !isIPv6(addr)) return { error: 'is not an IPv4 or IPv6 network such as 10.0.5.0/24 or fd12:3456::/48' };
  const bits = v4 ? 32 : 128;
  const prefix = prefixText === undefined ? bits : /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : NaN;
  if (!(prefix >= 0 && prefix <= bits)) return { error: `has a prefix length that is not 0 to ${bits}` };
  const value = v4 ? addr.split('.').reduce((acc, o) => (acc << 8n) | BigInt(o), 0n) : ipv6Value(addr);
  const hostBits = (1n << BigInt(bits - prefix)) - 1n;
  if (value & hostBits) return { error: `has host bits set; the network is ${formatAddr(value & ~hostBits, v4)}/${prefix}` };
  return { cidr: `${formatAddr(value, v4)}/${prefix}` };
}

function ipv6Value(addr: string): bigint {
  let text = addr;
  const v4Tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4Tail) {
    const o = v4Tail[1]!.split('.').map(Number);
    text = `${text.slice(0, -v4Tail[1]!.length)}${((o[0]! << 8) | o[1]!).toString(16)}:${((o[2]! << 8) | o[3]!).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return groups.reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g, 16)), 0n);
}

function formatAddr(value: bigint, v4: boolean): string {
  if (v4) return [24n, 16n, 8n, 0n].map((s) => String((value >> s) & 255n)).join('.');
  const groups = Array.from({ length: 8 }, (_, i) => ((value >> BigInt(112 - 16 * i)) & 0xffffn).toString(16));
  // The longest run of zero groups becomes "::".
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  if (best === -1) return groups.join(':');
  return `${groups.slice(0, best).join(':')}::${groups.slice(best + bestLen).join(':')}`;
}

const list = (v: string | undefined): string[] =>
  (v ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

export function parseServices(value: string | undefined): ServiceName[] {
  if (!value || value.trim() === '') return [...SERVICES];
  const names = value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const name of names) {
    if (!(SERVICES as readonly string[]).includes(name)) {
      throw new ConfigError('--service', `unknown service "${name}"; expected one or more of ${SERVICES.join(', ')}`);
    }
  }
  return [...new Set(names)] as ServiceName[];
}

/** `5s`, `250ms`, `5m`, `2h` in milliseconds. */
function durationMs(d: string): number {
  const m = /^(\d+)(ms|s|m|h)$/.exec(d);
  if (!m) throw new ConfigError('HANGAR_WEBHOOKS_RETRY_SCHEDULE', `"${d}" is not a duration such as 5s, 5m or 2h`);
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as 'ms' | 's' | 'm' | 'h'];
}

/** HANGAR_TRIGGERS_TRUSTED_PROXIES: IPs and CIDRs, comma-separated. */
function trustedProxies(v: string): string[] {
  const list = v
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);
  for (const p of list) {
    const [addr, bits] = p.split('/');
    const family = isIP(addr ?? '');
    const max = family === 4 ? 32 : 128;
    if (!family || (bits !== undefined && !(/^\d+$/.test(bits) && Number(bits) <= max)))
      throw new ConfigError('HANGAR_TRIGGERS_TRUSTED_PROXIES', `"${p}" is not an IP address or CIDR range`);
  }
  return list;
}

function parseDatabaseUrl(url: string | undefined, dataDir: string): Config['database'] {
  if (!url) return { kind: 'sqlite', file: path.join(dataDir, 'hangar.db') };
  if (url.startsWith('sqlite:')) {
    const file = url.slice('sqlite:'.length).replace(/^\/\//, '');
    if (!file) throw new ConfigError('DATABASE_URL', 'sqlite: URL needs a file path, e.g. sqlite:./data/hangar.db');
    return { kind: 'sqlite', file };
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError('DATABASE_URL', 'is not a valid URL; expected postgres://user@host:5432/database');
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
    throw new ConfigError('DATABASE_URL', `unsupported scheme "${parsed.protocol}"; expected postgres:// or sqlite:`);
  }
  if (!parsed.hostname || parsed.pathname.length <= 1) {
    throw new ConfigError('DATABASE_URL', 'must name a host and a database, e.g. postgres://user@host:5432/database');
  }
  const schema = parsed.searchParams.get('schema') ?? undefined;
  if (schema && !/^[a-z_][a-z0-9_]*$/i.test(schema)) {
    throw new ConfigError('DATABASE_URL', 'schema parameter must be a plain identifier');
  }
  parsed.searchParams.delete('schema');
  return { kind: 'postgres', url: parsed.toString(), schema };
}

/** `HANGAR_SEARCH_*`: the web_search provider, complete or absent (a half-configured one stops start-up). */
function searchConfig(e: z.infer<typeof EnvSchema>): ToolsConfig['search'] {
  if (!e.HANGAR_SEARCH_PROVIDER) {
    if (e.HANGAR_SEARCH_API_KEY) throw new ConfigError('HANGAR_SEARCH_PROVIDER', 'must be set (to "brave") when HANGAR_SEARCH_API_KEY is');
    return null;
  }
  if (!e.HANGAR_SEARCH_API_KEY) throw new ConfigError('HANGAR_SEARCH_API_KEY', `is required by HANGAR_SEARCH_PROVIDER=${e.HANGAR_SEARCH_PROVIDER}`);
  return Object.freeze({
    provider: e.HANGAR_SEARCH_PROVIDER,
    apiKey: e.HANGAR_SEARCH_API_KEY,
    url: e.HANGAR_SEARCH_URL ?? 'https://api.search.brave.com/res/v1/web/search',
  });
}

function paymentsConfig(e: z.infer<typeof EnvSchema>): BillingConfig['payments'] {
  if (!e.HANGAR_STRIPE_SECRET_KEY) {
    if (e.HANGAR_STRIPE_WEBHOOK_SECRET) throw new ConfigError('HANGAR_STRIPE_SECRET_KEY', 'must be set when HANGAR_STRIPE_WEBHOOK_SECRET is');
    return null;
  }
  if (!e.HANGAR_STRIPE_WEBHOOK_SECRET)
    throw new ConfigError(
      'HANGAR_STRIPE_WEBHOOK_SECRET',
      'is required with HANGAR_STRIPE_SECRET_KEY (webhooks credit top-ups; their signature is checked with it)',
    );
  if (e.HANGAR_BILLING_TOPUP_MIN_CENTS > e.HANGAR_BILLING_TOPUP_MAX_CENTS)
    throw new ConfigError('HANGAR_BILLING_TOPUP_MIN_CENTS', 'must not be above HANGAR_BILLING_TOPUP_MAX_CENTS');
  return Object.freeze({
    provider: 'stripe' as const,
    secretKey: e.HANGAR_STRIPE_SECRET_KEY,
    webhookSecret: e.HANGAR_STRIPE_WEBHOOK_SECRET,
    apiUrl: e.HANGAR_STRIPE_API_URL ?? null,
    toleranceSeconds: e.HANGAR_STRIPE_WEBHOOK_TOLERANCE_SECONDS,
  });
}

/**
 * Platform OAuth clients: `HANGAR_OAUTH_<SLUG>_CLIENT_ID` (and `_CLIENT_SECRET`, absent for a public client), the
 * slug upper-cased with `-` as `_` (`HANGAR_OAUTH_GOOGLE_CLIENT_ID` for `google`).
 */
function oauthClients(env: Record<string, string | undefined>): Record<string, { clientId: string; clientSecret: string | null }> {
  const out: Record<string, { clientId: string; clientSecret: string | null }> = {};
  for (const [name, value] of Object.entries(env)) {
    const m = /^HANGAR_OAUTH_([A-Z0-9_]+)_CLIENT_ID$/.exec(name);
    if (!m || !value) continue;
    const key = m[1]!.toLowerCase();
    out[key] = { clientId: value, clientSecret: env[`HANGAR_OAUTH_${m[1]}_CLIENT_SECRET`] || null };
  }
  for (const name of Object.keys(env)) {
    const m = /^HANGAR_OAUTH_([A-Z0-9_]+)_CLIENT_SECRET$/.exec(name);
    if (m && env[name] && !out[m[1]!.toLowerCase()]) throw new ConfigError(name, `set HANGAR_OAUTH_${m[1]}_CLIENT_ID too`);
  }
  return out;
}

function ensureWritableDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    accessSync(dir, constants.W_OK | constants.R_OK);
  } catch (err) {
    throw new ConfigError('HANGAR_DATA_DIR', `directory "${dir}" is not writable (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
}

/**
 * Parses the environment once into a frozen Config. Nothing else reads process.env.
 * The secret key is resolved by the caller (see loadSecretKey) so tests can inject one.
 */
export function parseConfig(env: Record<string, string | undefined>, overrides: { services?: string; secretKey?: Buffer } = {}): Config {
  const result = EnvSchema.safeParse(env);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new ConfigError(String(issue.path[0] ?? 'environment'), issue.message);
  }
  const e = result.data;
  const dataDir = path.resolve(e.HANGAR_DATA_DIR);
  ensureWritableDir(dataDir);
  const services = parseServices(overrides.services ?? e.HANGAR_SERVICES);
  const database = parseDatabaseUrl(e.DATABASE_URL, dataDir);
  if (e.REDIS_URL && !/^rediss?:\/\//.test(e.REDIS_URL)) {
    throw new ConfigError('REDIS_URL', 'expected redis://host:6379');
  }
  if ((e.HANGAR_OIDC_ISSUER && !e.HANGAR_OIDC_AUDIENCE) || (!e.HANGAR_OIDC_ISSUER && e.HANGAR_OIDC_AUDIENCE)) {
    throw new ConfigError('HANGAR_OIDC_ISSUER', 'HANGAR_OIDC_ISSUER and HANGAR_OIDC_AUDIENCE must be set together');
  }
  if (
    e.HANGAR_EXECUTE_RUN_MEMORY_BYTES > e.HANGAR_EXECUTE_MAX_MEMORY_BYTES ||
    e.HANGAR_EXECUTE_COMPILE_MEMORY_BYTES > e.HANGAR_EXECUTE_MAX_MEMORY_BYTES
  ) {
    throw new ConfigError(
      'HANGAR_EXECUTE_MAX_MEMORY_BYTES',
      'must be at least HANGAR_EXECUTE_RUN_MEMORY_BYTES and HANGAR_EXECUTE_COMPILE_MEMORY_BYTES',
    );
  }
  if (e.HANGAR_SANDBOX_DEFAULT_CPU > e.HANGAR_SANDBOX_MAX_CPU)
    throw new ConfigError('HANGAR_SANDBOX_MAX_CPU', 'must be at least HANGAR_SANDBOX_DEFAULT_CPU');
  if (e.HANGAR_SANDBOX_DEFAULT_MEMORY_MB > e.HANGAR_SANDBOX_MAX_MEMORY_MB)
    throw new ConfigError('HANGAR_SANDBOX_MAX_MEMORY_MB', 'must be at least HANGAR_SANDBOX_DEFAULT_MEMORY_MB');
  if (e.HANGAR_SANDBOX_DISK_MB > e.HANGAR_SANDBOX_MAX_DISK_MB)
    throw new ConfigError('HANGAR_SANDBOX_MAX_DISK_MB', 'must be at least HANGAR_SANDBOX_DISK_MB');
  if (e.HANGAR_SANDBOX_DEFAULT_IDLE_SECONDS > e.HANGAR_SANDBOX_MAX_IDLE_SECONDS && e.HANGAR_SANDBOX_MAX_IDLE_SECONDS !== 0)
    throw new ConfigError('HANGAR_SANDBOX_MAX_IDLE_SECONDS', 'must be at least HANGAR_SANDBOX_DEFAULT_IDLE_SECONDS');
  if (e.HANGAR_NODE_DEAD_AFTER_MS < 3 * e.HANGAR_NODE_HEARTBEAT_MS)
    throw new ConfigError(
      'HANGAR_NODE_DEAD_AFTER_MS',
      'must be at least three times HANGAR_NODE_HEARTBEAT_MS (one late heartbeat is not a dead node)',
    );
  const subnetOctet = Number(/^10\.(\d{1,3})\./.exec(e.HANGAR_SANDBOX_SUBNET)![1]);
  if (subnetOctet > 255) throw new ConfigError('HANGAR_SANDBOX_SUBNET', 'must be a 10.N.0.0/16 subnet with N at most 255');
  const networkAllow = list(e.HANGAR_SANDBOX_NETWORK_ALLOW).map((cidr) => {
    const parsed = parseCidr(cidr);
    if ('error' in parsed) throw new ConfigError('HANGAR_SANDBOX_NETWORK_ALLOW', `"${cidr}" ${parsed.error}`);
    return parsed.cidr;
  });
  const concurrency = e.HANGAR_EXECUTE_CONCURRENCY ?? availableParallelism();
  const queue = e.HANGAR_EXECUTE_QUEUE ?? 4 * concurrency;
  const half = (n: number) => Math.max(1, Math.ceil(n / 2));
  const languages = e.HANGAR_EXECUTE_LANGUAGES?.split(',')
    .map((l) => l.trim().toLowerCase())
    .filter(Boolean);
  const host = e.HOST === '0.0.0.0' || e.HOST === '::' ? '127.0.0.1' : e.HOST;
  const local = `http://${host.includes(':') ? `[${host}]` : host}:${e.PORT}`;
  const urls = {
    orchestrator: e.HANGAR_BASE_URL ?? local,
    auth: e.HANGAR_AUTH_URL ?? e.HANGAR_BASE_URL ?? local,
    tools: e.HANGAR_TOOLS_URL ?? e.HANGAR_BASE_URL ?? local,
    billing: e.HANGAR_BILLING_URL ?? e.HANGAR_BASE_URL ?? local,
    storage: e.HANGAR_STORAGE_URL ?? e.HANGAR_BASE_URL ?? local,
  };
  let secretKey = overrides.secretKey;
  if (!secretKey && e.HANGAR_SECRET_KEY) {
    secretKey = Buffer.from(e.HANGAR_SECRET_KEY, /^[0-9a-f]{64,}$/i.test(e.HANGAR_SECRET_KEY) ? 'hex' : 'base64');
    if (secretKey.length < 32) throw new ConfigError('HANGAR_SECRET_KEY', 'must hold at least 32 bytes (64 hex characters or base64)');
  }
  if (!secretKey) throw new ConfigError('HANGAR_SECRET_KEY', 'no secret key (set it, or let loadConfig create one in the data directory)');
  return Object.freeze({
    host: e.HOST,
    port: e.PORT,
    dataDir,
    database,
    redisUrl: e.REDIS_URL,
    services: Object.freeze(services),
    urls: Object.freeze(urls),
    publicBaseUrl: e.HANGAR_BASE_URL?.replace(/\/+$/, '') ?? null,
    secretKey,
    oidc: e.HANGAR_OIDC_ISSUER
      ? Object.freeze({ issuer: e.HANGAR_OIDC_ISSUER, audience: e.HANGAR_OIDC_AUDIENCE!, jwksUrl: e.HANGAR_OIDC_JWKS_URL })
      : undefined,
    sessionTtlSeconds: e.HANGAR_SESSION_TTL_SECONDS,
    bodyLimitBytes: e.HANGAR_BODY_LIMIT_BYTES,
    uploadLimitBytes: e.HANGAR_UPLOAD_LIMIT_BYTES,
    storageQuotaBytes: e.HANGAR_STORAGE_QUOTA_BYTES,
    signupCreditsCents: e.HANGAR_SIGNUP_CREDITS_CENTS,
    maxOrgsPerUser: e.HANGAR_MAX_ORGS_PER_USER,
    validateResponses: e.HANGAR_VALIDATE_RESPONSES === 'true' || e.HANGAR_VALIDATE_RESPONSES === '1',
    logLevel: e.LOG_LEVEL,
    consoleDir: e.HANGAR_CONSOLE_DIR,
    metrics: Object.freeze({ token: e.HANGAR_METRICS_TOKEN ?? null, port: e.HANGAR_METRICS_PORT ?? null, host: e.HANGAR_METRICS_HOST }),
    execute: Object.freeze({
      concurrency,
      queue,
      orgConcurrency: Math.min(concurrency, e.HANGAR_EXECUTE_ORG_CONCURRENCY ?? half(concurrency)),
      orgQueue: Math.min(queue, e.HANGAR_EXECUTE_ORG_QUEUE ?? half(queue)),
      maxRunTimeoutMs: e.HANGAR_EXECUTE_MAX_RUN_TIMEOUT_MS,
      maxCompileTimeoutMs: e.HANGAR_EXECUTE_MAX_COMPILE_TIMEOUT_MS,
      runMemoryBytes: e.HANGAR_EXECUTE_RUN_MEMORY_BYTES,
      compileMemoryBytes: e.HANGAR_EXECUTE_COMPILE_MEMORY_BYTES,
      maxMemoryBytes: e.HANGAR_EXECUTE_MAX_MEMORY_BYTES,
      outputLimitBytes: e.HANGAR_EXECUTE_OUTPUT_LIMIT_BYTES,
      maxProcesses: e.HANGAR_EXECUTE_MAX_PROCESSES,
      fileSizeBytes: e.HANGAR_EXECUTE_FILE_SIZE_BYTES,
      languages: languages?.length ? Object.freeze(languages) : null,
    }),
    nodes: Object.freeze({
      url: e.HANGAR_NODE_URL?.replace(/\/+$/, '') ?? null,
      heartbeatMs: e.HANGAR_NODE_HEARTBEAT_MS,
      deadAfterMs: e.HANGAR_NODE_DEAD_AFTER_MS,
      memoryMb: e.HANGAR_NODE_MEMORY_MB ?? Math.floor(totalmem() / MIB),
    }),
    models: Object.freeze({
      openai:
        e.HANGAR_OPENAI_BASE_URL || e.HANGAR_OPENAI_API_KEY
          ? Object.freeze({
              baseUrl: e.HANGAR_OPENAI_BASE_URL ?? 'https://api.openai.com/v1',
              apiKey: e.HANGAR_OPENAI_API_KEY ?? null,
              models: Object.freeze(list(e.HANGAR_OPENAI_MODELS)),
            })
          : null,
      anthropic: e.HANGAR_ANTHROPIC_API_KEY
        ? Object.freeze({
            baseUrl: e.HANGAR_ANTHROPIC_BASE_URL ?? null,
            apiKey: e.HANGAR_ANTHROPIC_API_KEY,
            models: Object.freeze(list(e.HANGAR_ANTHROPIC_MODELS)),
          })
        : null,
      file: e.HANGAR_MODELS_FILE ? path.resolve(e.HANGAR_MODELS_FILE) : null,
      timeoutMs: e.HANGAR_MODEL_TIMEOUT_MS,
    }),
    oauth: Object.freeze({
      providersFile: e.HANGAR_OAUTH_PROVIDERS_FILE ? path.resolve(e.HANGAR_OAUTH_PROVIDERS_FILE) : null,
      clients: Object.freeze(oauthClients(env)),
      returnUrls: Object.freeze(
        list(e.HANGAR_OAUTH_RETURN_URLS).map((u) => {
          if (!/^https?:\/\/[^/?#]+/.test(u)) throw new ConfigError('HANGAR_OAUTH_RETURN_URLS', `"${u}" is not an http(s) URL or origin`);
          return u;
        }),
      ),
      timeoutMs: e.HANGAR_OAUTH_TIMEOUT_MS,
    }),
    billing: Object.freeze({
      enabled: ['on', 'true', '1'].includes(e.HANGAR_BILLING),
      plansFile: e.HANGAR_BILLING_PLANS_FILE ? path.resolve(e.HANGAR_BILLING_PLANS_FILE) : null,
      defaultPlan: e.HANGAR_BILLING_DEFAULT_PLAN,
      graceSeconds: e.HANGAR_BILLING_GRACE_SECONDS,
      settleMs: e.HANGAR_BILLING_SETTLE_MS,
      runtimeUpdateMs: e.HANGAR_BILLING_RUNTIME_UPDATE_MS,
      storageChargeMs: e.HANGAR_BILLING_STORAGE_CHARGE_MS,
      topupMinCents: e.HANGAR_BILLING_TOPUP_MIN_CENTS,
      topupMaxCents: e.HANGAR_BILLING_TOPUP_MAX_CENTS,
      returnUrl: e.HANGAR_BILLING_RETURN_URL ?? null,
      payments: paymentsConfig(e),
    }),
    runmesh: Object.freeze({
      cidr: e.HANGAR_RUNMESH_CIDR,
      linkTtlSeconds: e.HANGAR_RUNMESH_LINK_TTL_SECONDS,
      pollIntervalSeconds: e.HANGAR_RUNMESH_POLL_INTERVAL_SECONDS,
      dispatchTimeoutSeconds: e.HANGAR_RUNMESH_DISPATCH_TIMEOUT_SECONDS,
      heartbeatSeconds: e.HANGAR_RUNMESH_HEARTBEAT_SECONDS,
    }),
    channels: Object.freeze({
      chatbotApiUrl: e.HANGAR_CHANNELS_CHATBOT_API_URL.replace(/\/+$/, ''),
      chatbotLinkUrl: e.HANGAR_CHANNELS_CHATBOT_LINK_URL.replace(/\/+$/, ''),
      businessApiUrl: e.HANGAR_CHANNELS_BUSINESS_API_URL.replace(/\/+$/, ''),
      businessLinkUrl: e.HANGAR_CHANNELS_BUSINESS_LINK_URL.replace(/\/+$/, ''),
      providerTimeoutMs: e.HANGAR_CHANNELS_PROVIDER_TIMEOUT_MS,
      requestTtlSeconds: e.HANGAR_CHANNELS_REQUEST_TTL_SECONDS,
      replyWindowSeconds: e.HANGAR_CHANNELS_REPLY_WINDOW_SECONDS,
      linkTtlSeconds: e.HANGAR_CHANNELS_LINK_TTL_SECONDS,
      maxAttempts: e.HANGAR_CHANNELS_MAX_ATTEMPTS,
      retryBaseMs: e.HANGAR_CHANNELS_RETRY_BASE_MS,
    }),
    deployments: Object.freeze({
      maxQueued: e.HANGAR_DEPLOYMENTS_MAX_QUEUED,
      webhooksAllowPrivateNetworks: e.HANGAR_WEBHOOKS_ALLOW_PRIVATE_NETWORKS === '1' || e.HANGAR_WEBHOOKS_ALLOW_PRIVATE_NETWORKS === 'true',
      webhookTimeoutMs: e.HANGAR_WEBHOOKS_TIMEOUT_MS,
      webhookRetryScheduleMs: Object.freeze(e.HANGAR_WEBHOOKS_RETRY_SCHEDULE.split(',').map((d) => durationMs(d.trim()))),
      secretOverlapSeconds: e.HANGAR_WEBHOOKS_SECRET_OVERLAP_SECONDS,
      trustedProxies: Object.freeze(trustedProxies(e.HANGAR_TRIGGERS_TRUSTED_PROXIES)),
      triggerMaxBodyBytes: e.HANGAR_TRIGGERS_MAX_BODY_BYTES,
      triggerToleranceSeconds: e.HANGAR_TRIGGERS_TOLERANCE_SECONDS,
    }),
    sessions: Object.freeze({
      defaultMaxTokens: e.HANGAR_SESSIONS_DEFAULT_MAX_TOKENS,
      maxBlockBytes: e.HANGAR_SESSIONS_MAX_BLOCK_BYTES,
      maxBlocks: e.HANGAR_SESSIONS_MAX_BLOCKS,
      lockWaitMs: e.HANGAR_SESSIONS_LOCK_WAIT_MS,
      summaryTimeoutMs: e.HANGAR_SESSIONS_SUMMARY_TIMEOUT_MS,
      runCompactPct: e.HANGAR_SESSIONS_RUN_COMPACT_PCT,
    }),
    tools: Object.freeze({
      catalogFile: e.HANGAR_TOOLS_CATALOG_FILE ? path.resolve(e.HANGAR_TOOLS_CATALOG_FILE) : null,
      allowPrivateNetworks: e.HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS === '1' || e.HANGAR_TOOLS_ALLOW_PRIVATE_NETWORKS === 'true',
      timeoutMs: e.HANGAR_TOOLS_TIMEOUT_MS,
      maxResponseBytes: e.HANGAR_TOOLS_MAX_RESPONSE_BYTES,
      mcpRefreshMs: e.HANGAR_TOOLS_MCP_REFRESH_MS,
      search: searchConfig(e),
    }),
    sandboxes: Object.freeze({
      driver: e.HANGAR_SANDBOX_DRIVER,
      dir: path.resolve(e.HANGAR_SANDBOX_DIR),
      nodeId:
        e.HANGAR_NODE_ID ??
        (hostname()
          .replace(/[^A-Za-z0-9._-]/g, '-')
          .slice(0, 64) ||
          'node'),
      maxRunningPerOrg: e.HANGAR_SANDBOX_MAX_RUNNING,
      defaultCpu: e.HANGAR_SANDBOX_DEFAULT_CPU,
      maxCpu: e.HANGAR_SANDBOX_MAX_CPU,
      defaultMemoryMb: e.HANGAR_SANDBOX_DEFAULT_MEMORY_MB,
      maxMemoryMb: e.HANGAR_SANDBOX_MAX_MEMORY_MB,
      defaultIdleSeconds: e.HANGAR_SANDBOX_DEFAULT_IDLE_SECONDS,
      maxIdleSeconds: e.HANGAR_SANDBOX_MAX_IDLE_SECONDS,
      maxProcesses: e.HANGAR_SANDBOX_MAX_PROCESSES,
      defaultDiskMb: e.HANGAR_SANDBOX_DISK_MB,
      maxDiskMb: e.HANGAR_SANDBOX_MAX_DISK_MB,
      minFreeDiskMb: e.HANGAR_SANDBOX_MIN_FREE_DISK_MB,
      buildDiskMb: e.HANGAR_TEMPLATE_BUILD_DISK_MB,
      subnetOctet: subnetOctet,
      networkAllow: Object.freeze(networkAllow),
      pool: Object.freeze({
        size: e.HANGAR_SANDBOX_POOL,
        networkSize: e.HANGAR_SANDBOX_POOL_NETWORK ?? e.HANGAR_SANDBOX_POOL,
        template: e.HANGAR_SANDBOX_POOL_TEMPLATE,
        minFreeMemoryMb: e.HANGAR_SANDBOX_POOL_MIN_FREE_MEMORY_MB,
      }),
      spareNetworks: e.HANGAR_SANDBOX_SPARE_NETWORKS,
      prebuildTemplates: e.HANGAR_TEMPLATE_PREBUILD === 'true' || e.HANGAR_TEMPLATE_PREBUILD === '1',
      buildTimeoutSeconds: e.HANGAR_TEMPLATE_BUILD_TIMEOUT_SECONDS,
      mirrors: Object.freeze({
        debian: e.HANGAR_MIRROR_DEBIAN.replace(/\/+$/, ''),
        debianSecurity: e.HANGAR_MIRROR_DEBIAN_SECURITY.replace(/\/+$/, ''),
        ubuntu: e.HANGAR_MIRROR_UBUNTU.replace(/\/+$/, ''),
        alpine: e.HANGAR_MIRROR_ALPINE.replace(/\/+$/, ''),
        ubuntuKeyring: e.HANGAR_UBUNTU_KEYRING,
      }),
    }),
  });
}

/**
 * The CLI's entry: like parseConfig, but on the embedded default with no HANGAR_SECRET_KEY it keeps
 * a generated key in `<data dir>/secret.key` (mode 0600) so tokens and encrypted records survive restarts.
 */
export function loadConfig(env: Record<string, string | undefined>, overrides: { services?: string } = {}): Config {
  if (env.HANGAR_SECRET_KEY) return parseConfig(env, overrides);
  const dataDir = path.resolve(env.HANGAR_DATA_DIR || './.hangar');
  ensureWritableDir(dataDir);
  const file = path.join(dataDir, 'secret.key');
  let key: Buffer;
  try {
    key = Buffer.from(readFileSync(file, 'utf8').trim(), 'hex');
  } catch {
    key = randomBytes(32);
    try {
      writeFileSync(file, `${key.toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new ConfigError('HANGAR_DATA_DIR', `cannot write ${file} (${(err as NodeJS.ErrnoException).code})`);
      }
      key = Buffer.from(readFileSync(file, 'utf8').trim(), 'hex');
    }
  }
  if (key.length < 32) throw new ConfigError('HANGAR_SECRET_KEY', `${file} is damaged; delete it or set HANGAR_SECRET_KEY`);
  return parseConfig(env, { ...overrides, secretKey: key });
}
