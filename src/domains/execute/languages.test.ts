import { describe, expect, it } from 'vitest';
import { findLanguage, javaEntry, LANGUAGES } from './languages.js';

describe('language registry', () => {
  it('finds every language by name and alias, case-insensitively', () => {
    const names = LANGUAGES.map((l) => l.name);
    expect(names).toEqual(['python', 'javascript', 'typescript', 'bash', 'c', 'c++', 'go', 'ruby', 'rust', 'java', 'csharp']);
    for (const [alias, name] of [
      ['py', 'python'],
      ['JS', 'javascript'],
      ['ts', 'typescript'],
      ['sh', 'bash'],
      ['cpp', 'c++'],
      ['golang', 'go'],
      ['rs', 'rust'],
      ['cs', 'csharp'],
      ['C#', 'csharp'],
      [' Python ', 'python'],
    ]) {
      expect(findLanguage(alias)?.name, alias).toBe(name);
    }
    expect(findLanguage('cobol')).toBeUndefined();
    const all = LANGUAGES.flatMap((l) => [l.name, ...l.aliases]);
    expect(new Set(all).size).toBe(all.length);
  });

  it('reads a Java entry’s package, public type and main class, ignoring comments and strings', () => {
    expect(javaEntry('package a.b;\n// public class Fake\npublic final class Greeter { public static void main(String[] a) {} }')).toEqual({
      pkg: 'a.b',
      publicType: 'Greeter',
      mainClass: 'Greeter',
    });
    expect(javaEntry('class Helper {}\nclass Main { public static void main(String[] a) { String s = "public class X"; } }')).toEqual({
      pkg: null,
      publicType: null,
      mainClass: 'Main',
    });
    expect(javaEntry('/* no main */ public class Lib {}')).toEqual({ pkg: null, publicType: 'Lib', mainClass: 'Lib' });
    expect(javaEntry('interface I {}')).toEqual({ pkg: null, publicType: null, mainClass: null });
  });
});
