import { afterAll, beforeAll, expect, it } from 'vitest';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { detectInstalled } from './service.js';
import { findLanguage } from './languages.js';
import { createIsolation } from '../../platform/isolation/index.js';
import { describeNeeding, isolationNeed, itNeeding, toolchainNeed } from '../../../test/needs.js';

/**
 * Every language, through the HTTP API in a real sandbox: hello world, stdin echo, a compile error (a
 * syntax error for interpreted languages) and a runtime error with its exit code. A language whose
 * toolchain is not installed here is skipped on a developer's machine and fails on CI (scripts/setup.sh
 * installs them all).
 */

interface Programs {
  hello: string;
  echo: string;
  compileError: { code: string; stderr: RegExp };
  runtimeError: { code: string; exit: number | null; signal?: string; stderr: RegExp };
}

const PROGRAMS: Record<string, Programs> = {
  python: {
    hello: 'print("Hello, World!")',
    echo: 'import sys\nsys.stdout.write(sys.stdin.read())',
    compileError: { code: 'def f(:\n  pass', stderr: /SyntaxError/ },
    runtimeError: { code: 'print("before")\nraise ValueError("boom")', exit: 1, stderr: /ValueError: boom/ },
  },
  javascript: {
    hello: 'console.log("Hello, World!")',
    echo: 'process.stdout.write(require("fs").readFileSync(0, "utf8"))',
    compileError: { code: 'function f( {', stderr: /SyntaxError/ },
    runtimeError: { code: 'console.log("before");\nthrow new Error("boom")', exit: 1, stderr: /Error: boom/ },
  },
  typescript: {
    hello: 'const greeting: string = "Hello, World!";\nconsole.log(greeting);',
    echo: 'import { readFileSync } from "fs";\nconst input: string = readFileSync(0, "utf8");\nprocess.stdout.write(input);',
    compileError: { code: 'const x: number = ;', stderr: /main\.ts:1:19: error: Unexpected ";"/ },
    runtimeError: {
      code: 'interface E { m: string }\nconsole.log("before");\nconst e: E = { m: "boom" };\nthrow new Error(e.m);',
      exit: 1,
      stderr: /Error: boom/,
    },
  },
  bash: {
    hello: 'echo "Hello, World!"',
    echo: 'cat',
    compileError: { code: 'if then fi', stderr: /syntax error/ },
    runtimeError: { code: 'echo before\nno_such_command_here', exit: 127, stderr: /command not found/ },
  },
  c: {
    hello: '#include <stdio.h>\nint main(void) { printf("Hello, World!\\n"); return 0; }',
    echo: '#include <stdio.h>\nint main(void) { int c; while ((c = getchar()) != EOF) putchar(c); return 0; }',
    compileError: { code: 'int main(void) { return undefined_name; }', stderr: /undefined_name/ },
    runtimeError: {
      code: '#include <stdio.h>\n#include <stdlib.h>\nint main(void) { puts("before"); fprintf(stderr, "boom\\n"); exit(3); }',
      exit: 3,
      stderr: /boom/,
    },
  },
  'c++': {
    hello: '#include <iostream>\nint main() { std::cout << "Hello, World!" << std::endl; }',
    echo: '#include <iostream>\nint main() { std::cout << std::cin.rdbuf(); }',
    compileError: { code: 'int main() { std::string s; }', stderr: /error/ },
    runtimeError: {
      code: '#include <iostream>\n#include <stdexcept>\nint main() { std::cout << "before" << std::endl; throw std::runtime_error("boom"); }',
      exit: null,
      signal: 'SIGABRT',
      stderr: /boom/,
    },
  },
  go: {
    hello: 'package main\nimport "fmt"\nfunc main() { fmt.Println("Hello, World!") }',
    echo: 'package main\nimport ("io"; "os")\nfunc main() { io.Copy(os.Stdout, os.Stdin) }',
    compileError: { code: 'package main\nfunc main() { x := 1 }', stderr: /declared (and|but) not used/ },
    runtimeError: { code: 'package main\nimport "fmt"\nfunc main() { fmt.Println("before"); panic("boom") }', exit: 2, stderr: /panic: boom/ },
  },
  ruby: {
    hello: 'puts "Hello, World!"',
    echo: 'print STDIN.read',
    compileError: { code: 'def f(\n', stderr: /syntax error/ },
    runtimeError: { code: 'puts "before"\nraise "boom"', exit: 1, stderr: /boom \(RuntimeError\)/ },
  },
  rust: {
    hello: 'fn main() { println!("Hello, World!"); }',
    echo: 'use std::io;\nfn main() { io::copy(&mut io::stdin(), &mut io::stdout()).unwrap(); }',
    compileError: { code: 'fn main() { let x: i32 = "no"; }', stderr: /mismatched types/ },
    runtimeError: { code: 'fn main() { println!("before"); panic!("boom"); }', exit: 101, stderr: /panicked at .*boom/ },
  },
  java: {
    hello: 'public class Main { public static void main(String[] args) { System.out.println("Hello, World!"); } }',
    echo: 'public class Echo { public static void main(String[] args) throws Exception { System.in.transferTo(System.out); } }',
    compileError: { code: 'public class Main { public static void main(String[] args) { int x = "no"; } }', stderr: /incompatible types/ },
    runtimeError: {
      code: 'class Main { public static void main(String[] args) { System.out.println("before"); throw new IllegalStateException("boom"); } }',
      exit: 1,
      stderr: /IllegalStateException: boom/,
    },
  },
  csharp: {
    hello: 'using System;\nclass Program { static void Main() { Console.WriteLine("Hello, World!"); } }',
    echo: 'using System;\nclass Program { static void Main() { Console.Out.Write(Console.In.ReadToEnd()); } }',
    compileError: { code: 'class Program { static void Main() { int x = "no"; } }', stderr: /error CS0029/ },
    runtimeError: {
      code: 'using System;\nclass Program { static void Main() { Console.WriteLine("before"); throw new InvalidOperationException("boom"); } }',
      exit: 1,
      stderr: /InvalidOperationException: boom/,
    },
  },
};

const ALIASES: Record<string, string> = {
  python: 'py',
  javascript: 'js',
  typescript: 'ts',
  bash: 'sh',
  'c++': 'cpp',
  go: 'golang',
  rust: 'rs',
  csharp: 'cs',
};

const installed = await detectInstalled();
const isolation = await createIsolation();
const COMPILED = new Set(['c', 'c++', 'go', 'rust', 'java', 'csharp', 'typescript']);
const STDIN = 'line one\nline two: ü ✓\n';

describeNeeding(isolationNeed(isolation), 'execute: every language', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness();
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h?.close());

  const run = async (payload: Record<string, unknown>) => {
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/execute',
      headers: admin.headers,
      payload: { compile_timeout: 30_000, run_timeout: 15_000, ...payload },
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers['x-execution-id']).toMatch(/^cex_/);
    return json(res);
  };

  for (const [language, p] of Object.entries(PROGRAMS)) {
    const toolchains = installed.get(findLanguage(language)!) ?? [];
    describeNeeding(toolchainNeed(language, toolchains), language, () => {
      it('hello world, with the exact version and no envelope', async () => {
        const body = await run({ language: ALIASES[language] ?? language, code: p.hello });
        expect(body.language).toBe(language);
        expect(body.version).toBe(toolchains[0]!.version);
        expect(body.data).toBeUndefined();
        expect(body.run).toMatchObject({ stdout: 'Hello, World!\n', code: 0, signal: null, status: 'exited', message: null });
        expect(body.run.time_ms).toBeGreaterThanOrEqual(0);
        expect(body.run.memory_kb).toBeGreaterThan(0);
        if (COMPILED.has(language)) expect(body.compile).toMatchObject({ code: 0, signal: null, status: 'exited' });
        else expect(body.compile).toBeUndefined();
        expect(Object.keys(body)).toEqual(COMPILED.has(language) ? ['language', 'version', 'compile', 'run'] : ['language', 'version', 'run']);
      });

      it('echoes stdin', async () => {
        const body = await run({ language, code: p.echo, stdin: STDIN });
        expect(body.run).toMatchObject({ stdout: STDIN, code: 0, status: 'exited' });
      });

      it(COMPILED.has(language) ? 'a compile error fails the compile step and skips the run' : 'a syntax error fails the run', async () => {
        const body = await run({ language, code: p.compileError.code });
        if (COMPILED.has(language)) {
          expect(body.compile.code).not.toBe(0);
          expect(body.compile.stdout + body.compile.stderr).toMatch(p.compileError.stderr);
          expect(body.run).toMatchObject({ status: 'skipped', code: null, stdout: '', message: expect.stringContaining('compile') });
        } else {
          expect(body.compile).toBeUndefined();
          expect(body.run.code).not.toBe(0);
          expect(body.run.stderr).toMatch(p.compileError.stderr);
        }
      });

      it('a runtime error reports its exit code and stderr', async () => {
        const body = await run({ language, code: p.runtimeError.code });
        expect(body.run.stdout).toBe('before\n');
        expect(body.run.stderr).toMatch(p.runtimeError.stderr);
        expect(body.run.code).toBe(p.runtimeError.exit);
        expect(body.run.signal).toBe(p.runtimeError.signal ?? null);
        expect(body.run.status).toBe(p.runtimeError.signal ? 'signaled' : 'exited');
      });
    });
  }

  itNeeding(toolchainNeed('python', installed.get(findLanguage('python')!)), 'files sit beside the entry, and args reach the program', async () => {
    const body = await run({
      language: 'python',
      files: [
        { name: 'app.py', content: 'import sys, helper\nprint(helper.greet(sys.argv[1:]), open("data.txt").read().strip())' },
        { name: 'helper.py', content: 'def greet(a): return "hi " + ",".join(a)' },
        { name: 'data.txt', content: Buffer.from('from base64\n').toString('base64'), encoding: 'base64' },
      ],
      args: ['a b', '--c', ''],
    });
    expect(body.run).toMatchObject({ stdout: 'hi a b,--c, from base64\n', code: 0 });
  });

  itNeeding(toolchainNeed('c', installed.get(findLanguage('c')!)), 'c: headers and other sources beside the entry are compiled in', async () => {
    const body = await run({
      language: 'c',
      files: [
        { name: 'main.c', content: '#include <stdio.h>\n#include "add.h"\nint main(void) { printf("%d\\n", add(2, 3)); return 0; }' },
        { name: 'add.h', content: 'int add(int a, int b);' },
        { name: 'add.c', content: '#include "add.h"\nint add(int a, int b) { return a + b; }' },
      ],
    });
    expect(body.run).toMatchObject({ stdout: '5\n', code: 0 });
  });

  itNeeding(
    toolchainNeed('java', installed.get(findLanguage('java')!)),
    'java: the entry is named after its public class, and the version range picks the JDK',
    async () => {
      const body = await run({
        language: 'java',
        files: [
          {
            name: 'whatever.java',
            content:
              'public class Greeter { public static void main(String[] a) { System.out.println(Helper.name() + " " + Runtime.version().feature()); } }',
          },
          { name: 'Helper.java', content: 'class Helper { static String name() { return "helper"; } }' },
        ],
      });
      const java = installed.get(findLanguage('java')!)!;
      expect(body.run).toMatchObject({ stdout: `helper ${java[0]!.version.split('.')[0]}\n`, code: 0 });
      for (const tc of java) {
        const major = tc.version.split('.')[0]!;
        const pinned = await run({ language: 'java', version: major, code: PROGRAMS.java!.hello });
        expect(pinned.version).toBe(tc.version);
      }
    },
  );

  itNeeding(
    toolchainNeed('java', installed.get(findLanguage('java')!)),
    'java: the class declaring main runs, not a nested record or class declared before it (issue 23)',
    async () => {
      const body = await run({
        language: 'java',
        code: 'public class Main {\n  record Pair(int a, int b) {}\n  static class Box { int n = 2; }\n  public static void main(String[] args) {\n    System.out.println(new Pair(1, new Box().n));\n  }\n}\n',
      });
      expect(body.run).toMatchObject({ stdout: 'Pair[a=1, b=2]\n', code: 0 });
      const nested = await run({
        language: 'java',
        code: 'public class Outer {\n  static class Inner { public static void main(String[] a) { System.out.println("inner"); } }\n}\n',
      });
      expect(nested.run).toMatchObject({ stdout: 'inner\n', code: 0 });
    },
  );

  itNeeding(
    toolchainNeed('typescript', installed.get(findLanguage('typescript')!)),
    'typescript: modules beside the entry, and top-level await',
    async () => {
      const lib = { name: 'lib.ts', content: 'export const twice = (n: number): number => n * 2;' };
      const plain = await run({
        language: 'ts',
        files: [{ name: 'main.ts', content: 'import { twice } from "./lib";\nconsole.log(twice(21));' }, lib],
      });
      expect(plain.run).toMatchObject({ stdout: '42\n', code: 0 });
      // Top-level await makes the entry an ES module, which names its imports' files, as Node's ESM wants.
      const tla = await run({
        language: 'ts',
        files: [
          { name: 'main.ts', content: 'import { twice } from "./lib.js";\nconst n: number = await Promise.resolve(21);\nconsole.log(twice(n));' },
          lib,
        ],
      });
      // The compile step runs in the sandbox (esbuild's binary), so it reports its own memory.
      expect(tla.compile).toMatchObject({ code: 0, status: 'exited' });
      expect(tla.compile.memory_kb).toBeGreaterThan(0);
      expect(tla.run).toMatchObject({ stdout: '42\n', code: 0 });
    },
  );
});
