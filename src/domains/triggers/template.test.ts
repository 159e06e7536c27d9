import { describe, expect, it } from 'vitest';
import { capBytes, renderMessage } from './template.js';

describe('trigger message templates', () => {
  const payload = { issue: { title: 'Broken build', labels: ['bug', { name: 'p1' }] }, n: 3, ok: false, none: null };

  it('puts in the whole payload as JSON and values by path (strings as is, others as JSON)', () => {
    expect(renderMessage('All: {{payload}}', payload, 1e6)).toBe(`All: ${JSON.stringify(payload)}`);
    expect(
      renderMessage(
        '{{payload.issue.title}} / {{ payload.issue.labels.0 }} / {{payload.issue.labels.1}} / {{payload.n}} {{payload.ok}} {{payload.none}}',
        payload,
        1e6,
      ),
    ).toBe('Broken build / bug / {"name":"p1"} / 3 false null');
    expect(renderMessage('text: {{payload}}', 'plain body', 1e6)).toBe('text: plain body');
  });

  it('renders what is not there, and anything that is not a payload path, as nothing', () => {
    expect(renderMessage('[{{payload.missing}}][{{payload.issue.labels.9}}][{{payload.n.x}}][{{payload.}}]', payload, 1e6)).toBe('[][][][]');
    expect(
      renderMessage('[{{constructor}}][{{payload.__proto__}}][{{payload.constructor}}][{{payload.issue.constructor.name}}][{{this}}]', payload, 1e6),
    ).toBe('[][][][][]');
    // A payload's own "__proto__" key (JSON.parse makes one) is not followed either.
    expect(renderMessage('[{{payload.__proto__.polluted}}]', JSON.parse('{"__proto__":{"polluted":"yes"}}'), 1e6)).toBe('[]');
  });

  it('evaluates nothing: expressions and helpers stay empty, text around them stays', () => {
    const globals = globalThis as Record<string, unknown>;
    const out = renderMessage('a {{process.exit(1)}} b {{payload.n + 1}} c {{#each payload}}x{{/each}} {{globalThis.x = 1}}', payload, 1e6);
    expect(out).toBe('a  b  c x ');
    expect(globals.x).toBeUndefined();
  });

  it('caps the prompt at the byte limit without splitting a character', () => {
    expect(Buffer.byteLength(renderMessage('{{payload}}', 'é'.repeat(100), 51))).toBeLessThanOrEqual(51);
    expect(capBytes('ééé', 3)).toBe('é');
    const big = renderMessage('{{payload}}'.repeat(1000), 'x'.repeat(10_000), 1024);
    expect(big.length).toBe(1024);
  });
});
