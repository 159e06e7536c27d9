import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { ConfigError, type ModelsConfig } from '../../config.js';

/**
 * The models Hangar offers. Platform models run on the platform's provider credentials (environment) and are
 * metered; bring-your-own-key (BYOK) models run on a secret of the caller or organization and cost nothing.
 *
 * HANGAR_MODELS_FILE (JSON) lists them with display names, context windows and prices:
 *   { "platform": [{ "id": "gpt-4o-mini", "provider": "openai", "displayName": "GPT-4o mini",
 *                    "contextWindow": 128000, "pricing": { "inputPerMTok": 0.15, "outputPerMTok": 0.6 } }],
 *     "byok": [{ "id": "byok/openrouter/llama-3.1-70b", "provider": "openai", "model": "meta-llama/llama-3.1-70b-instruct",
 *                "baseUrl": "https://openrouter.ai/api/v1", "requiresSecret": "OPENROUTER_API_KEY" }] }
 * Without a file: the platform models named by HANGAR_OPENAI_MODELS / HANGAR_ANTHROPIC_MODELS, and a default BYOK
 * list for OpenAI (secret OPENAI_API_KEY) and Anthropic (secret ANTHROPIC_API_KEY).
 */

export const PROVIDERS = ['openai', 'anthropic'] as const;
export type ProviderName = (typeof PROVIDERS)[number];

const Pricing = z
  .object({
    inputPerMTok: z.number().min(0),
    outputPerMTok: z.number().min(0),
    cachedInputPerMTok: z.number().min(0).optional(),
  })
  .strict();

const Base = z.object({
  id: z.string().min(1).max(200),
  provider: z.enum(PROVIDERS),
  /** The provider's own model id; default `id`. */
  model: z.string().min(1).max(200).optional(),
  displayName: z.string().min(1).max(200).optional(),
  contextWindow: z.number().int().positive().optional(),
  /** The model's class ("small", "large", ...): a plan's `modelClasses` price for it overrides `pricing`. */
  class: z.string().min(1).max(100).optional(),
});

const ModelsFile = z
  .object({
    platform: z.array(Base.extend({ pricing: Pricing.optional() }).strict()).default([]),
    byok: z.array(Base.extend({ requiresSecret: z.string().regex(/^[A-Z][A-Z0-9_]*$/), baseUrl: z.string().url().optional() }).strict()).default([]),
  })
  .strict();

export interface ModelEntry {
  id: string;
  tier: 'platform' | 'byok';
  provider: ProviderName;
  model: string;
  displayName: string;
  contextWindow: number | null;
  /** USD per million tokens (platform models). */
  pricing: { inputPerMTok: number; outputPerMTok: number; cachedInputPerMTok: number } | null;
  /** The models file's `class`, looked up in the organization's plan (its price wins over `pricing`). */
  modelClass: string | null;
  requiresSecret: string | null;
  /** A BYOK model's own endpoint (OpenAI-compatible), else the provider's default. */
  baseUrl: string | null;
}

const DEFAULT_BYOK: readonly Omit<ModelEntry, 'tier' | 'pricing' | 'baseUrl' | 'modelClass'>[] = [
  {
    id: 'byok/openai/gpt-4.1',
    provider: 'openai',
    model: 'gpt-4.1',
    displayName: 'GPT-4.1 (your OpenAI key)',
    contextWindow: 1_047_576,
    requiresSecret: 'OPENAI_API_KEY',
  },
  {
    id: 'byok/openai/gpt-4o-mini',
    provider: 'openai',
    model: 'gpt-4o-mini',
    displayName: 'GPT-4o mini (your OpenAI key)',
    contextWindow: 128_000,
    requiresSecret: 'OPENAI_API_KEY',
  },
  {
    id: 'byok/anthropic/claude-sonnet-4-5',
    provider: 'anthropic',
    model: 'claude-sonnet-4-5',
    displayName: 'Claude Sonnet 4.5 (your Anthropic key)',
    contextWindow: 200_000,
    requiresSecret: 'ANTHROPIC_API_KEY',
  },
  {
    id: 'byok/anthropic/claude-haiku-4-5',
    provider: 'anthropic',
    model: 'claude-haiku-4-5',
    displayName: 'Claude Haiku 4.5 (your Anthropic key)',
    contextWindow: 200_000,
    requiresSecret: 'ANTHROPIC_API_KEY',
  },
];

export function loadCatalogue(config: ModelsConfig): ModelEntry[] {
  if (config.file) {
    let parsed: z.infer<typeof ModelsFile>;
    try {
      parsed = ModelsFile.parse(JSON.parse(readFileSync(config.file, 'utf8')));
    } catch (err) {
      const detail = err instanceof z.ZodError ? err.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ') : (err as Error).message;
      throw new ConfigError('HANGAR_MODELS_FILE', `${config.file} is not a valid models file: ${detail}`);
    }
    const entries: ModelEntry[] = [
      ...parsed.platform.map((m) => ({
        id: m.id,
        tier: 'platform' as const,
        provider: m.provider,
        model: m.model ?? m.id,
        displayName: m.displayName ?? m.id,
        contextWindow: m.contextWindow ?? null,
        pricing: m.pricing ? { ...m.pricing, cachedInputPerMTok: m.pricing.cachedInputPerMTok ?? m.pricing.inputPerMTok } : null,
        modelClass: m.class ?? null,
        requiresSecret: null,
        baseUrl: null,
      })),
      ...parsed.byok.map((m) => ({
        id: m.id,
        tier: 'byok' as const,
        provider: m.provider,
        model: m.model ?? m.id,
        displayName: m.displayName ?? m.id,
        contextWindow: m.contextWindow ?? null,
        pricing: null,
        modelClass: m.class ?? null,
        requiresSecret: m.requiresSecret,
        baseUrl: m.baseUrl ?? null,
      })),
    ];
    const ids = new Set<string>();
    for (const e of entries) {
      if (ids.has(e.id)) throw new ConfigError('HANGAR_MODELS_FILE', `model id "${e.id}" is listed twice`);
      ids.add(e.id);
    }
    return entries;
  }
  const platform = (provider: ProviderName, names: readonly string[]): ModelEntry[] =>
    names.map((n) => ({
      id: n,
      tier: 'platform',
      provider,
      model: n,
      displayName: n,
      contextWindow: null,
      pricing: null,
      modelClass: null,
      requiresSecret: null,
      baseUrl: null,
    }));
  return [
    ...platform('openai', config.openai?.models ?? []),
    ...platform('anthropic', config.anthropic?.models ?? []),
    ...DEFAULT_BYOK.map((m) => ({ ...m, tier: 'byok' as const, pricing: null, modelClass: null, baseUrl: null })),
  ];
}
