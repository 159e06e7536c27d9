import { describe, expect, it } from 'vitest';
import { capBytes, renderJson, renderMessage, renderTemplate, TemplateTooLargeError } from './template.js';

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

describe('templates over named roots (workflow steps)', () => {
  const roots = { input: { user: { name: 'Ada' }, tags: ['a', 'b'] }, steps: { fetch: { output: { items: [1, 2], status: 200 } } } };

  it('reads every root the caller names, and nothing else', () => {
    expect(renderTemplate('{{input.user.name}} {{steps.fetch.output.status}} {{input.tags.1}}', roots, 1e6)).toBe('Ada 200 b');
    expect(renderTemplate('[{{payload}}][{{env.HOME}}][{{steps.nope.output}}][{{__proto__}}][{{constructor}}]', roots, 1e6)).toBe('[][][][][]');
  });

  it('renders JSON values: a string that is one placeholder becomes the value itself, others become text', () => {
    const out = renderJson(
      {
        items: '{{steps.fetch.output.items}}',
        text: 'n={{steps.fetch.output.status}}',
        missing: '{{input.gone}}',
        list: ['{{input.user}}', 3, true, null],
      },
      roots,
      1e6,
    );
    expect(out).toEqual({ items: [1, 2], text: 'n=200', missing: null, list: [{ name: 'Ada' }, 3, true, null] });
  });

  it('drops keys that could reach prototypes, and refuses a rendering over the limit', () => {
    const out = renderJson(JSON.parse('{"__proto__":{"polluted":1},"ok":1}'), roots, 1e6) as Record<string, unknown>;
    expect(Object.keys(out)).toEqual(['ok']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(() => renderJson({ a: '{{input.tags}}'.repeat(100) }, roots, 50)).toThrow(TemplateTooLargeError);
  });
});
