import type { ModelMessage } from 'ai';
import { errors } from '../../platform/http/errors.js';
import type { ProxyMessage } from './schemas.js';

/**
 * The proxy's messages (ADR 0012, tool turns ADR 0042): text, an assistant's tool calls and the tool results that
 * answer them, checked once and translated for the AI SDK path here (the passthrough's wire translation mirrors it
 * in passthrough.ts, and the comparison tests hold the two to the same request).
 */

/** A message's text: a string as it is, text parts joined, none for an assistant turn of tool calls only. */
export function contentText(content: ProxyMessage['content'] | undefined): string {
  if (content === undefined) return '';
  return typeof content === 'string' ? content : content.map((p) => p.text).join('');
}

/** A tool call's input as sent back to the provider (a call sent without one had none). */
export const callInput = (input: unknown): unknown => (input === undefined ? {} : input);

/** What the messages and their tool fields are called in errors: the proxy's names, or a wire format's. */
export interface MessageNames {
  messages: string;
  toolCallId: string;
  toolCalls: string;
}

const PROXY_NAMES: MessageNames = { messages: 'options.messages', toolCallId: 'toolCallId', toolCalls: 'toolCalls' };

/**
 * Checks that tool turns pair up as providers require (OpenAI, Anthropic, and the AI SDK before either): every
 * `tool` message answers a call of the assistant message before it, not answered yet, and every call is answered
 * before the next message that is not a tool result (and before the end). Answers the tool name of each call id.
 */
export function checkToolTurns(messages: readonly ProxyMessage[], names: MessageNames = PROXY_NAMES): Map<string, string> {
  const toolNames = new Map<string, string>();
  let open = new Map<string, number>(); // call id -> the index of the assistant message that made it
  const unanswered = () => {
    const [id, from] = open.entries().next().value as [string, number];
    return errors.invalidField(
      `${names.messages}.${from}.${names.toolCalls}`,
      `tool call "${id}" has no tool message answering it: one with ${names.toolCallId} "${id}" must follow this message`,
    );
  };
  messages.forEach((m, i) => {
    if (m.role === 'tool') {
      if (!open.has(m.toolCallId))
        throw errors.invalidField(
          `${names.messages}.${i}.${names.toolCallId}`,
          toolNames.has(m.toolCallId)
            ? `tool call "${m.toolCallId}" is answered already`
            : `"${m.toolCallId}" is not the id of a tool call in the assistant message before it`,
        );
      open.delete(m.toolCallId);
      return;
    }
    if (open.size > 0) throw unanswered();
    open = new Map();
    if (m.role === 'assistant' && m.toolCalls)
      m.toolCalls.forEach((c, j) => {
        if (open.has(c.id)) throw errors.invalidField(`${names.messages}.${i}.${names.toolCalls}.${j}.id`, `"${c.id}" is used twice in this message`);
        open.set(c.id, i);
        toolNames.set(c.id, c.name);
      });
  });
  if (open.size > 0) throw unanswered();
  return toolNames;
}

/** The messages as the AI SDK's ModelMessages (after `checkToolTurns`, whose names it takes). */
export function modelMessages(messages: readonly ProxyMessage[], names: Map<string, string>): ModelMessage[] {
  return messages.map((m): ModelMessage => {
    const text = contentText(m.content);
    if (m.role === 'assistant' && m.toolCalls)
      return {
        role: 'assistant',
        content: [
          ...(text ? [{ type: 'text' as const, text }] : []),
          ...m.toolCalls.map((c) => ({ type: 'tool-call' as const, toolCallId: c.id, toolName: c.name, input: callInput(c.input) })),
        ],
      };
    if (m.role === 'tool')
      return {
        role: 'tool',
        content: [{ type: 'tool-result', toolCallId: m.toolCallId, toolName: names.get(m.toolCallId) ?? '', output: { type: 'text', value: text } }],
      };
    return { role: m.role, content: text };
  });
}
