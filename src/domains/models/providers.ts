import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import type { LanguageModel } from 'ai';
import type { ModelsConfig } from '../../config.js';
import type { ModelEntry, ProviderName } from './catalogue.js';

/**
 * Our seam over the Vercel AI SDK: from a catalogue entry (and, for BYOK, the caller's key) to a language model.
 * OpenAI-compatible endpoints (OpenAI, OpenRouter, Ollama, vLLM, llama.cpp servers) and Anthropic.
 */
export interface ModelProvider {
  /** Why the platform tier of `provider` cannot be used, or null when it is configured. */
  platformUnavailable(provider: ProviderName): string | null;
  languageModel(entry: ModelEntry, byokKey?: string): LanguageModel;
}

export function createModelProvider(config: ModelsConfig): ModelProvider {
  const platformOpenAI = config.openai
    ? createOpenAICompatible({ name: 'openai', baseURL: config.openai.baseUrl, apiKey: config.openai.apiKey ?? undefined, includeUsage: true })
    : null;
  const platformAnthropic = config.anthropic
    ? createAnthropic({ apiKey: config.anthropic.apiKey, ...(config.anthropic.baseUrl ? { baseURL: config.anthropic.baseUrl } : {}) })
    : null;
  // A platform model object is made once per catalogue entry: building one costs ~0.3 ms (its schemas).
  const platformModels = new Map<string, LanguageModel>();
  return {
    platformUnavailable(provider) {
      if (provider === 'openai' && !platformOpenAI)
        return 'no OpenAI-compatible provider is configured (set HANGAR_OPENAI_BASE_URL and/or HANGAR_OPENAI_API_KEY)';
      if (provider === 'anthropic' && !platformAnthropic) return 'no Anthropic provider is configured (set HANGAR_ANTHROPIC_API_KEY)';
      return null;
    },
    languageModel(entry, byokKey) {
      if (entry.tier === 'platform') {
        let model = platformModels.get(entry.id);
        if (!model) {
          if (entry.provider === 'openai' && platformOpenAI) model = platformOpenAI.chatModel(entry.model);
          else if (entry.provider === 'anthropic' && platformAnthropic) model = platformAnthropic(entry.model);
          else throw new Error(this.platformUnavailable(entry.provider) ?? 'provider not configured');
          platformModels.set(entry.id, model);
        }
        return model;
      }
      if (entry.provider === 'anthropic')
        return createAnthropic({ apiKey: byokKey, ...(entry.baseUrl ? { baseURL: entry.baseUrl } : {}) })(entry.model);
      return createOpenAICompatible({
        name: 'openai',
        baseURL: entry.baseUrl ?? 'https://api.openai.com/v1',
        apiKey: byokKey,
        includeUsage: true,
      }).chatModel(entry.model);
    },
  };
}
