import { describe, expect, it } from 'vitest';
import { findLanguage, javaEntry, LANGUAGES, formatEsbuildLog } from './languages.js';

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
    // A nested record or class declared before main is not the main class (issue 23); a sibling that ends before it neither.
    expect(
      javaEntry(
        'public class Main {\n  record Pair(int a, int b) {}\n  static class Box<T> { T t; }\n  public static void main(String[] args) { System.out.println(new Pair(1, 2)); }\n}',
      ),
    ).toEqual({ pkg: null, publicType: 'Main', mainClass: 'Main' });
    expect(javaEntry('class Helper { void x() {} }\nclass App { public static void main(String[] a) {} }').mainClass).toBe('App');
    expect(javaEntry('public class Outer {\n  static class Inner { public static void main(String[] a) {} }\n}').mainClass).toBe('Outer$Inner');
    expect(javaEntry('interface I {}')).toEqual({ pkg: null, publicType: null, mainClass: null });
  });
});

describe("TypeScript's compile messages", () => {
  it('turns esbuild’s terminal messages into compiler lines, columns from 1, notes dropped', () => {
    const log = [
      '✘ [ERROR] Unexpected ";"',
      '',
      '    main.ts:1:18:',
      '      1 │ const x: number = ;',
      '        ╵                   ^',
      '',
      '▲ [WARNING] Comparison with -0 using the "==" operator will also match 0 [equals-negative-zero]',
      '',
      '    lib.ts:3:20:',
      '      3 │ let a = 1; if (a == -0) {}',
      '        ╵                     ~~',
      '',
      '  Floating-point equality is defined such that 0 and -0 are equal.',
      '',
      '✘ [ERROR] Could not read the input',
      '',
      '',
    ].join('\n');
    expect(formatEsbuildLog(log)).toBe(
      [
        'main.ts:1:19: error: Unexpected ";"',
        '    const x: number = ;',
        '                      ^',
        'lib.ts:3:21: warning: Comparison with -0 using the "==" operator will also match 0',
        '    let a = 1; if (a == -0) {}',
        '                        ^',
        'error: Could not read the input',
        '',
      ].join('\n'),
    );
  });

  it('passes anything else through (esbuild itself crashing, the driver’s own lines)', () => {
    const crash = 'runtime: goroutine stack exceeds 1000000000-byte limit\nfatal error: stack overflow\n';
    expect(formatEsbuildLog(crash)).toBe(crash);
    expect(formatEsbuildLog('')).toBe('');
  });
});
