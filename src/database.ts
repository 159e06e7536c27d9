// Row types of every table, as Kysely sees them. Timestamps are ISO text; booleans 0/1; JSON is text.

export interface UsersTable {
  id: string;
  email: string | null;
  name: string | null;
  idp_issuer: string;
  idp_subject: string;
  created_at: string;
}

export interface OrganizationsTable {
  id: string;
  idp_org_id: string;
  name: string;
  slug: string;
  plan: string;
  enterprise: number;
  settings: string;
  default_project_id: string;
  created_by_user_id: string;
  created_at: string;
}

export interface MembershipsTable {
  org_id: string;
  user_id: string;
  role: string;
  created_at: string;
}

export interface ProjectsTable {
  id: string;
  org_id: string;
  name: string;
  is_default: number;
  resource_pins: string;
  created_at: string;
  updated_at: string;
}

export interface ApiKeysTable {
  id: string;
  org_id: string;
  user_id: string;
  name: string;
  environment: string;
  prefix: string;
  hash: string;
  scopes: string;
  created_at: string;
  last_used_at: string | null;
  expires_at: string | null;
  revoked_at: string | null;
}

export interface ActivityEventsTable {
  id: string;
  org_id: string;
  resource_type: string;
  resource_id: string;
  event_type: string;
  severity: string;
  status: string;
  title: string;
  summary: string;
  actor_user_id: string | null;
  actor_api_key_id: string | null;
  thread_id: string | null;
  agent_run_id: string | null;
  sandbox_id: string | null;
  workspace_id: string | null;
  tool_slug: string | null;
  installable_agent_install_id: string | null;
  code_execution_id: string | null;
  runmesh_node_id: string | null;
  metadata: string | null;
  occurred_at: string;
}

export interface WorkspacesTable {
  id: string;
  org_id: string;
  kind: string;
  name: string;
  owner_user_id: string | null;
  project_id: string | null;
  created_at: string;
}

export interface WorkspaceFilesTable {
  id: string;
  org_id: string;
  workspace_id: string;
  path: string;
  parent_path: string;
  name: string;
  type: string;
  size: number;
  mime_type: string;
  blob_key: string | null;
  sha256: string | null;
  created_by_user_id: string | null;
  created_at: string;
  mtime: string;
}

export interface StorageUsageTable {
  org_id: string;
  used_bytes: number;
  /** Bytes x seconds accumulated since the last daily charge took them. */
  byte_seconds: number;
  /** Up to when `byte_seconds` is accumulated (null: never, i.e. nothing stored yet). */
  accounted_at: string | null;
}

export interface CreditLedgerTable {
  id: string;
  org_id: string;
  kind: string;
  amount_cents: number;
  /** The exact amount in micro-dollars (1 cent = 10,000); the balance is summed from this. */
  amount_micros: number;
  idempotency_key: string;
  description: string;
  actor_user_id: string | null;
  metadata: string | null;
  created_at: string;
}

export interface BillingAccountsTable {
  org_id: string;
  plan: string;
  /** Cache of sum(credit_ledger.amount_micros), updated in the same transaction as every ledger insert. */
  balance_micros: number;
  /** Estimated cost of runtime still running (pending usage events), not yet in the ledger. */
  pending_micros: number;
  /** When the balance last reached zero or below (null while it is positive): the grace period runs from here. */
  exhausted_at: string | null;
  payment_customer_id: string | null;
  payment_method_id: string | null;
  auto_topup_enabled: number;
  auto_topup_threshold_cents: number;
  auto_topup_amount_cents: number;
  /** Auto top-up failures in a row; three disable it. */
  auto_topup_failures: number;
  created_at: string;
  updated_at: string;
}

export type UsageKind = 'model_tokens' | 'tool_execution' | 'code_execution' | 'sandbox_runtime' | 'storage';
export type UsageState = 'pending' | 'due' | 'settled' | 'forgiven';

export interface UsageEventsTable {
  id: string;
  org_id: string;
  user_id: string | null;
  kind: UsageKind;
  /** The metered record's id: (kind, source_id) is unique, so one record is metered once. */
  source_id: string;
  subject: string;
  tier: 'platform' | 'byok';
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
  reasoning_tokens: number;
  /** Seconds (runtime), CPU seconds (code), byte-seconds (storage), 1 (a tool call). */
  quantity: number;
  cost_micros: number;
  state: UsageState;
  ledger_entry_id: string | null;
  metadata: string | null;
  started_at: string;
  ended_at: string | null;
  created_at: string;
  updated_at: string;
}

/** Daily sums of final usage events (settled, forgiven), kept in the transaction that makes an event final. */
export interface UsageRollupsTable {
  org_id: string;
  day: string;
  /** '' : no user. */
  user_id: string;
  kind: UsageKind;
  subject: string;
  tier: 'platform' | 'byok';
  state: 'settled' | 'forgiven';
  events: number;
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
  reasoning_tokens: number;
  quantity: number;
  cost_micros: number;
}

export interface TopupsTable {
  id: string;
  org_id: string;
  kind: 'checkout' | 'auto';
  provider_ref: string | null;
  amount_cents: number;
  status: 'pending' | 'completed' | 'failed' | 'expired';
  idempotency_key: string | null;
  url: string | null;
  failure_reason: string | null;
  created_by_user_id: string | null;
  created_at: string;
  updated_at: string;
  completed_at: string | null;
}

export interface PaymentEventsTable {
  id: string;
  type: string;
  received_at: string;
}

export interface PromoCodesTable {
  id: string;
  code: string;
  credits_cents: number;
  max_redemptions: number;
  redemptions: number;
  expires_at: string | null;
  created_at: string;
}

export interface PromoRedemptionsTable {
  id: string;
  promo_id: string;
  org_id: string;
  user_id: string;
  created_at: string;
}

export interface SystemSettingsTable {
  key: string;
  value: string;
}

export interface TemplatesTable {
  id: string;
  owner: string;
  slug: string;
  name: string;
  status: 'pending' | 'building' | 'ready' | 'failed';
  progress: number;
  os: string;
  source: 'base' | 'builder' | 'dockerfile';
  request: string;
  plan: string;
  parent_id: string | null;
  env: string;
  workdir: string | null;
  error: string | null;
  node_id: string | null;
  created_by_user_id: string | null;
  created_at: string;
  updated_at: string;
  build_started_at: string | null;
  build_finished_at: string | null;
}

export type SandboxState = 'starting' | 'running' | 'paused' | 'stopped' | 'error' | 'destroyed';

export interface SandboxesTable {
  id: string;
  org_id: string;
  name: string;
  template_id: string;
  template_slug: string;
  state: SandboxState;
  node_id: string;
  uid: number | null;
  network: number;
  cpu: number;
  memory_mb: number;
  /** Size of the sandbox's own filesystem image (its writable layer), MiB. */
  disk_mb: number;
  idle_timeout_seconds: number;
  env: string;
  metadata: string;
  error: string | null;
  created_by_user_id: string;
  created_at: string;
  updated_at: string;
  last_active_at: string;
  destroyed_at: string | null;
}

export interface SandboxRuntimeTable {
  id: string;
  org_id: string;
  sandbox_id: string;
  cpu: number;
  memory_mb: number;
  started_at: string;
  ended_at: string | null;
  seconds: number | null;
}

export interface ThreadsTable {
  id: string;
  org_id: string;
  owner_user_id: string | null;
  agent_id: string | null;
  title: string | null;
  execution_mode: string;
  archived: number;
  active_rollout_id: string | null;
  metadata: string;
  last_sequence: number;
  jsonl_bytes: number;
  created_at: string;
  updated_at: string;
}

export interface ThreadRolloutsTable {
  id: string;
  thread_id: string;
  position: number;
  kind: 'initial' | 'compaction';
  status: 'active' | 'closed';
  from_rollout_id: string | null;
  summary: string | null;
  summary_method: 'extractive' | 'model' | null;
  summary_model: string | null;
  created_at: string;
  closed_at: string | null;
}

export interface ThreadEventsTable {
  thread_id: string;
  sequence: number;
  rollout_id: string;
  run_id: string | null;
  type: string;
  payload: string;
  created_at: string;
}

export interface ThreadRunLocksTable {
  thread_id: string;
  run_id: string;
  holder: string;
  acquired_at: string;
  expires_at: string;
}

export interface SecretsTable {
  id: string;
  org_id: string;
  owner: string;
  name: string;
  ciphertext: string;
  created_by_user_id: string;
  created_at: string;
  updated_at: string;
}

export interface ModelUsageTable {
  id: string;
  org_id: string;
  user_id: string | null;
  model: string;
  tier: 'platform' | 'byok';
  source: 'proxy' | 'run' | 'session';
  run_id: string | null;
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
  reasoning_tokens: number;
  cost_micros: number;
  created_at: string;
}

export interface AgentsTable {
  id: string;
  org_id: string;
  slug: string;
  name: string;
  description: string | null;
  execution_mode: string;
  target_device_id: string | null;
  model: string | null;
  instructions: string | null;
  tools: string;
  config: string;
  sandbox_template: string | null;
  metadata: string;
  created_by_user_id: string;
  created_at: string;
  updated_at: string;
}

export interface AgentRunsTable {
  id: string;
  org_id: string;
  agent_id: string;
  agent_slug: string;
  thread_id: string;
  rollout_id: string | null;
  sandbox_id: string | null;
  target_device_id: string | null;
  execution_mode: string;
  model: string | null;
  status: string;
  result: string | null;
  error: string | null;
  usage: string;
  iterations: number;
  node_id: string;
  metadata: string;
  created_by_user_id: string;
  created_at: string;
  finished_at: string | null;
}

export interface ToolExecutionsTable {
  id: string;
  org_id: string;
  user_id: string | null;
  run_id: string | null;
  tool: string;
  via: 'api' | 'run';
  status: 'completed' | 'failed';
  error_code: string | null;
  /** JSON object: credential field -> the step that supplied it (names only, never values). */
  credential_sources: string | null;
  duration_ms: number;
  created_at: string;
}

export interface ToolInstallsTable {
  id: string;
  org_id: string;
  /** '' : organization-wide. */
  user_id: string;
  slug: string;
  installed_by_user_id: string;
  created_at: string;
}

export interface ToolCredentialsTable {
  id: string;
  org_id: string;
  /** '' : organization-wide. */
  user_id: string;
  slug: string;
  /** JSON array of the stored field names. */
  fields: string;
  values_ciphertext: string;
  updated_by_user_id: string;
  created_at: string;
  updated_at: string;
}

export interface CustomToolsTable {
  id: string;
  org_id: string;
  slug: string;
  kind: 'http' | 'openapi' | 'mcp';
  name: string;
  description: string;
  /** JSON: what the admin sent. */
  source: string;
  /** JSON array of catalogue entries. */
  tools: string;
  /** JSON array of { name, reason }. */
  skipped: string;
  last_refreshed_at: string | null;
  last_error: string | null;
  created_by_user_id: string;
  created_at: string;
  updated_at: string;
}

export interface InstallableAgentInstallsTable {
  id: string;
  org_id: string;
  user_id: string;
  slug: string;
  agent_id: string;
  created_at: string;
}

export interface ThreadSandboxesTable {
  thread_id: string;
  sandbox_id: string;
}

/** The node registry (platform/nodes, ADR 0024): one row per Hangar node, written by its heartbeat. */
export interface NodesTable {
  id: string;
  url: string | null;
  sandboxes_available: number;
  running_sandboxes: number;
  memory_capacity_mb: number;
  memory_committed_mb: number;
  started_at: string;
  heartbeat_at: string;
  declared_dead_at: string | null;
}

/** OAuth (domains/oauth, ADR 0026): an organization's own client for a provider; the secret is ciphertext. */
export interface OAuthConfigsTable {
  id: string;
  org_id: string;
  provider: string;
  client_id: string;
  client_secret_ciphertext: string;
  secret_hint: string;
  scopes: string | null;
  enabled: number;
  created_by_user_id: string;
  created_at: string;
  updated_at: string;
}

/** A user's connected provider account; tokens are ciphertext bound to the row's id. */
export interface OAuthConnectionsTable {
  id: string;
  org_id: string;
  user_id: string;
  provider: string;
  account_id: string;
  email: string | null;
  username: string | null;
  display_name: string | null;
  scopes: string;
  status: 'active' | 'expired' | 'revoked' | 'error';
  is_default: number;
  client_source: 'platform' | 'organization';
  client_id: string;
  access_token_ciphertext: string;
  refresh_token_ciphertext: string | null;
  token_type: string;
  expires_at: string | null;
  token_version: number;
  refresh_lease_until: string | null;
  last_error: string | null;
  created_at: string;
  updated_at: string;
  last_refreshed_at: string | null;
}

/** A browser (state + PKCE) or device-code flow in progress, bound to the user who started it. */
export interface OAuthFlowsTable {
  id: string;
  org_id: string;
  user_id: string;
  provider: string;
  kind: 'browser' | 'device';
  state_hash: string | null;
  secret_ciphertext: string | null;
  user_code: string | null;
  verification_uri: string | null;
  verification_uri_complete: string | null;
  interval_seconds: number | null;
  scopes: string;
  return_url: string | null;
  redirect_uri: string | null;
  client_source: 'platform' | 'organization';
  client_id: string;
  status: 'pending' | 'completed' | 'failed';
  error: string | null;
  connection_id: string | null;
  expires_at: string;
  created_at: string;
  updated_at: string;
}

/** A device link code from start to its end (runmesh, ADR 0029). */
export interface RunmeshLinksTable {
  id: string;
  code: string;
  /** sha256 of the start secret the device got at start: only it can collect the credential. */
  secret_hash: string;
  public_key: string;
  device_label: string;
  os: string;
  app_version: string;
  /** pending | approved | completed | expired */
  status: string;
  org_id: string | null;
  /** The organization whose member looked the code up (the approval page), for the admins' list. */
  opened_org_id: string | null;
  approved_by_user_id: string | null;
  node_id: string | null;
  interval_seconds: number;
  last_polled_at: string | null;
  source_ip: string | null;
  created_at: string;
  expires_at: string;
  approved_at: string | null;
  completed_at: string | null;
}

/** A linked device (runmesh). */
export interface RunmeshNodesTable {
  id: string;
  org_id: string;
  owner_user_id: string;
  name: string;
  os: string;
  app_version: string;
  public_key: string;
  mesh_ip: string;
  credential_hash: string;
  /** active | revoked */
  status: string;
  /** JSON array of "host:port" strings the device reported. */
  endpoints: string;
  connected: number;
  connected_via: string | null;
  last_seen_at: string | null;
  link_id: string | null;
  revoked_at: string | null;
  revoked_by_user_id: string | null;
  revoked_reason: string | null;
  created_at: string;
  updated_at: string;
}

export interface RunmeshSettingsTable {
  org_id: string;
  /** owner | organization: which nodes appear in each other's peer configs. */
  peer_scope: string;
  updated_at: string;
}

export interface RunmeshAuditTable {
  id: string;
  org_id: string;
  node_id: string | null;
  link_id: string | null;
  actor_user_id: string | null;
  /** user | device | system */
  actor: string;
  event: string;
  reason: string | null;
  metadata: string;
  created_at: string;
}

/** A local-device run on its way to its node. */
export interface RunmeshDispatchesTable {
  run_id: string;
  org_id: string;
  node_id: string;
  thread_id: string;
  /** queued | delivered | accepted | done */
  state: string;
  attempts: number;
  /** The highest device frame counter accepted for this run (idempotent retries of POST /v1/thread-events). */
  device_seq: number;
  deadline_at: string;
  delivered_at: string | null;
  accepted_at: string | null;
  created_at: string;
  updated_at: string;
}

/** An agent's connection to a chat provider account (channels, ADR 0030). */
export interface ChannelsTable {
  id: string;
  org_id: string;
  agent_id: string;
  agent_slug: string;
  /** chatbot_provider | business_messaging_provider */
  provider: string;
  /** byok */
  mode: string;
  /** active */
  status: string;
  /** The bot's id, or the business phone number id. */
  account_id: string;
  /** The bot's username, or the display phone number. */
  account_name: string | null;
  business_account_id: string | null;
  bot_token_secret: string | null;
  access_token_secret: string | null;
  app_secret_secret: string | null;
  /** Encrypted: the chat-bot provider's webhook secret token, or the business provider's verify token. */
  webhook_secret_ciphertext: string;
  webhook_registered_at: string | null;
  /** approved_only | open | disabled */
  privacy_mode: string;
  allow_private_chats: number;
  allow_groups: number;
  /** message | silent */
  unauthorized_reply: string;
  unauthorized_message: string | null;
  created_by_user_id: string;
  created_at: string;
  updated_at: string;
}

export interface ChannelConversationsTable {
  id: string;
  org_id: string;
  channel_id: string;
  external_conversation_id: string;
  sender_scope: string;
  /** private | group */
  conversation_type: string;
  display_name: string | null;
  thread_id: string | null;
  owner_user_id: string;
  created_at: string;
  updated_at: string;
}

export interface ChannelMessagesTable {
  id: string;
  org_id: string;
  channel_id: string;
  provider_message_id: string;
  external_conversation_id: string;
  conversation_type: string;
  conversation_name: string | null;
  sender_id: string;
  sender_name: string | null;
  sender_username: string | null;
  text: string;
  /** received | processing | replied | ignored | failed */
  status: string;
  /** Why it ended as it did (e.g. privacy_pending, unlinked, group_disabled). */
  outcome: string | null;
  attempts: number;
  next_attempt_at: string;
  lease_until: string | null;
  thread_id: string | null;
  run_id: string | null;
  reply_text: string | null;
  reply_parts_sent: number;
  error: string | null;
  received_at: string;
  updated_at: string;
}

export interface ChannelPrivacyRequestsTable {
  id: string;
  org_id: string;
  channel_id: string;
  external_conversation_id: string;
  conversation_type: string;
  conversation_display_name: string | null;
  external_user_id: string;
  display_name: string | null;
  username: string | null;
  first_message: string | null;
  /** pending | approved | expired */
  status: string;
  replied_at: string | null;
  expires_at: string;
  decided_by_user_id: string | null;
  decided_at: string | null;
  grant_id: string | null;
  created_at: string;
  updated_at: string;
}

export interface ChannelPrivacyGrantsTable {
  id: string;
  org_id: string;
  channel_id: string;
  /** conversation */
  scope: string;
  external_conversation_id: string;
  conversation_type: string;
  conversation_display_name: string | null;
  /** granted | revoked */
  status: string;
  active_key: string | null;
  request_id: string | null;
  created_by_user_id: string;
  created_at: string;
  revoked_at: string | null;
  revoked_by_user_id: string | null;
}

export interface ProductAppsTable {
  id: string;
  org_id: string;
  slug: string;
  name: string;
  created_by_user_id: string;
  created_at: string;
  updated_at: string;
}

export interface ProductEndUsersTable {
  id: string;
  org_id: string;
  app_id: string;
  product_external_user_id: string;
  created_at: string;
}

export interface ChannelBindingsTable {
  id: string;
  org_id: string;
  app_id: string;
  channel_id: string;
  /** link_required */
  identity_policy: string;
  /** disabled | sender_scoped */
  group_policy: string;
  unknown_sender_reply: string;
  /** JSON object */
  metadata: string;
  created_by_user_id: string;
  created_at: string;
}

export interface ChannelLinkSessionsTable {
  id: string;
  org_id: string;
  app_id: string;
  channel_id: string;
  token_hash: string;
  external_user_id: string | null;
  external_conversation_id: string | null;
  /** The product user who started it (only they can complete it), when the product named one. */
  product_external_user_id: string | null;
  return_url: string | null;
  /** api | chat */
  origin: string;
  /** created | completed | expired */
  status: string;
  link_id: string | null;
  expires_at: string;
  created_at: string;
  completed_at: string | null;
}

export interface ContextSessionsTable {
  id: string;
  org_id: string;
  created_by_user_id: string;
  name: string;
  default_agent: string | null;
  /** JSON array of strings. */
  tags: string;
  forked_from: string | null;
  /** The encoding its blocks are counted with (o200k_base, cl100k_base). */
  tokenizer: string;
  total_tokens: number;
  block_count: number;
  compaction_count: number;
  invocation_count: number;
  next_position: number;
  lease_holder: string | null;
  lease_until: string | null;
  created_at: string;
  updated_at: string;
}

export interface ContextSessionTagsTable {
  session_id: string;
  org_id: string;
  tag: string;
}

export interface ContextBlocksTable {
  id: string;
  org_id: string;
  session_id: string;
  position: number;
  /** instruction | document | message | tool_result | summary | note */
  kind: string;
  content: string;
  /** JSON array of strings. */
  tags: string;
  pinned: number;
  tokens: number;
  /** JSON object: where the block came from (a run, a thread, a forked block, the blocks a summary replaced). */
  source: string | null;
  created_at: string;
  updated_at: string;
}

export interface JobsTable {
  id: string;
  queue: string;
  key: string | null;
  /** JSON. */
  data: string;
  /** created | retry | active | completed | failed | cancelled */
  state: string;
  attempts: number;
  retry_limit: number;
  run_after: string;
  expires_at: string | null;
  last_error: string | null;
  created_at: string;
  finished_at: string | null;
}

export interface JobSchedulesTable {
  name: string;
  cron: string;
  tz: string;
  queue: string;
  /** JSON. */
  data: string;
  last_tick: string | null;
  created_at: string;
  updated_at: string;
}

export interface DeploymentsTable {
  id: string;
  org_id: string;
  created_by_user_id: string;
  api_slug: string;
  /** The agent it runs (the spec's runtimeSlug). */
  agent_slug: string;
  template_slug: string | null;
  webhook_url: string | null;
  /** JSON array of event types. */
  webhook_events: string;
  webhook_secret_ciphertext: string;
  webhook_previous_secret_ciphertext: string | null;
  webhook_previous_until: string | null;
  webhook_disabled_at: string | null;
  webhook_disabled_reason: string | null;
  max_concurrent: number;
  timeout_seconds: number;
  created_at: string;
  updated_at: string;
}

export interface DeploymentInvocationsTable {
  id: string;
  org_id: string;
  deployment_id: string;
  created_by_user_id: string;
  /** JSON array: the invoking credential's scopes. */
  scopes: string;
  /** api | trigger */
  source: string;
  trigger_id: string | null;
  input: string;
  /** queued | running | completed | failed | cancelled | timed_out */
  status: string;
  run_id: string | null;
  thread_id: string | null;
  error: string | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  /** When it found every slot of its deployment taken (null until then): woken by the next one that ends. */
  slot_wait_since: string | null;
}

export interface WebhookDeliveriesTable {
  id: string;
  org_id: string;
  deployment_id: string;
  event_type: string;
  /** JSON: the body sent. */
  payload: string;
  /** pending | delivered | failed | disabled */
  status: string;
  attempts: number;
  next_attempt_at: string | null;
  last_status_code: number | null;
  last_error: string | null;
  created_at: string;
  delivered_at: string | null;
}

export interface WebhookDeliveryAttemptsTable {
  id: string;
  org_id: string;
  delivery_id: string;
  attempt: number;
  status_code: number | null;
  error: string | null;
  duration_ms: number;
  at: string;
}

export interface TriggersTable {
  id: string;
  org_id: string;
  created_by_user_id: string;
  deployment_id: string;
  /** JSON array: the creating credential's scopes. */
  scopes: string;
  /** webhook | code_host | payment_provider | chat_workspace */
  source: string;
  /** JSON array of strings. */
  events: string;
  message: string;
  /** JSON array of IPs and CIDRs. */
  allowed_ips: string;
  repo: string | null;
  secret_ciphertext: string | null;
  /** active | paused */
  status: string;
  created_at: string;
  updated_at: string;
}

export interface TriggerDeliveriesTable {
  trigger_id: string;
  delivery_id: string;
  org_id: string;
  received_at: string;
}

export interface WorkflowsTable {
  id: string;
  org_id: string;
  slug: string;
  name: string;
  description: string | null;
  /** The current version (the one a new run runs). */
  version: number;
  created_by_user_id: string;
  created_at: string;
  updated_at: string;
}

export interface WorkflowVersionsTable {
  workflow_id: string;
  version: number;
  org_id: string;
  /** JSON array of steps. */
  steps: string;
  created_by_user_id: string;
  created_at: string;
}

export interface WorkflowRunsTable {
  id: string;
  org_id: string;
  workflow_id: string;
  version: number;
  /** queued | running | completed | failed | cancelled */
  status: string;
  /** JSON: the run's input (a trigger's payload). */
  input: string;
  trigger_id: string | null;
  dedupe_key: string | null;
  started_by_user_id: string;
  /** JSON array: the starting credential's scopes. */
  scopes: string;
  step_index: number;
  output: string | null;
  error: string | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  updated_at: string;
}

export interface WorkflowStepRunsTable {
  run_id: string;
  idx: number;
  org_id: string;
  name: string;
  type: string;
  /** pending | running | completed | failed | skipped */
  status: string;
  attempts: number;
  input: string | null;
  output: string | null;
  error: string | null;
  started_at: string | null;
  finished_at: string | null;
  next_attempt_at: string | null;
}

export interface WorkflowTriggersTable {
  id: string;
  org_id: string;
  workflow_id: string;
  /** cron | webhook */
  type: string;
  name: string;
  /** 1 or 0. */
  enabled: number;
  webhook_slug: string | null;
  secret_ciphertext: string | null;
  schedule: string | null;
  timezone: string | null;
  /** JSON: a cron trigger's run input (null: the default). */
  input: string | null;
  created_by_user_id: string;
  scopes: string;
  last_fired_at: string | null;
  created_at: string;
  updated_at: string;
}

export interface ChannelLinksTable {
  id: string;
  org_id: string;
  app_id: string;
  channel_id: string;
  end_user_id: string;
  product_external_user_id: string;
  provider_external_user_id: string;
  external_conversation_id: string | null;
  display_name: string | null;
  username: string | null;
  /** session | import */
  source: string;
  session_id: string | null;
  /** active | revoked */
  status: string;
  active_key: string | null;
  created_by_user_id: string;
  created_at: string;
  revoked_at: string | null;
}

export interface Database {
  channels: ChannelsTable;
  channel_conversations: ChannelConversationsTable;
  channel_messages: ChannelMessagesTable;
  channel_privacy_requests: ChannelPrivacyRequestsTable;
  channel_privacy_grants: ChannelPrivacyGrantsTable;
  product_apps: ProductAppsTable;
  product_end_users: ProductEndUsersTable;
  channel_bindings: ChannelBindingsTable;
  channel_link_sessions: ChannelLinkSessionsTable;
  channel_links: ChannelLinksTable;
  context_sessions: ContextSessionsTable;
  context_session_tags: ContextSessionTagsTable;
  context_blocks: ContextBlocksTable;
  jobs: JobsTable;
  job_schedules: JobSchedulesTable;
  deployments: DeploymentsTable;
  deployment_invocations: DeploymentInvocationsTable;
  webhook_deliveries: WebhookDeliveriesTable;
  webhook_delivery_attempts: WebhookDeliveryAttemptsTable;
  triggers: TriggersTable;
  trigger_deliveries: TriggerDeliveriesTable;
  workflows: WorkflowsTable;
  workflow_versions: WorkflowVersionsTable;
  workflow_runs: WorkflowRunsTable;
  workflow_step_runs: WorkflowStepRunsTable;
  workflow_triggers: WorkflowTriggersTable;
  runmesh_links: RunmeshLinksTable;
  runmesh_nodes: RunmeshNodesTable;
  runmesh_settings: RunmeshSettingsTable;
  runmesh_audit: RunmeshAuditTable;
  runmesh_dispatches: RunmeshDispatchesTable;
  users: UsersTable;
  organizations: OrganizationsTable;
  memberships: MembershipsTable;
  projects: ProjectsTable;
  api_keys: ApiKeysTable;
  activity_events: ActivityEventsTable;
  workspaces: WorkspacesTable;
  workspace_files: WorkspaceFilesTable;
  storage_usage: StorageUsageTable;
  credit_ledger: CreditLedgerTable;
  system_settings: SystemSettingsTable;
  templates: TemplatesTable;
  sandboxes: SandboxesTable;
  sandbox_runtime: SandboxRuntimeTable;
  threads: ThreadsTable;
  thread_rollouts: ThreadRolloutsTable;
  thread_events: ThreadEventsTable;
  thread_run_locks: ThreadRunLocksTable;
  secrets: SecretsTable;
  model_usage: ModelUsageTable;
  agents: AgentsTable;
  agent_runs: AgentRunsTable;
  thread_sandboxes: ThreadSandboxesTable;
  tool_executions: ToolExecutionsTable;
  nodes: NodesTable;
  oauth_configs: OAuthConfigsTable;
  oauth_connections: OAuthConnectionsTable;
  oauth_flows: OAuthFlowsTable;
  tool_installs: ToolInstallsTable;
  tool_credentials: ToolCredentialsTable;
  custom_tools: CustomToolsTable;
  installable_agent_installs: InstallableAgentInstallsTable;
  billing_accounts: BillingAccountsTable;
  usage_events: UsageEventsTable;
  usage_rollups: UsageRollupsTable;
  topups: TopupsTable;
  payment_events: PaymentEventsTable;
  promo_codes: PromoCodesTable;
  promo_redemptions: PromoRedemptionsTable;
}
