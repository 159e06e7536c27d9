/**
 * The languages `POST /v1/execute` knows: names and aliases, how to find installed versions on this host
 * (each candidate toolchain's own version command, run once at start-up), and how to compile and run a
 * program inside the sandbox, where the work directory is `/box`. Toolchains are named by absolute paths
 * under /usr, the tree the sandbox mounts read-only, never through the server's PATH; the few tools that
 * come with Hangar itself (esbuild for TypeScript) are installed into the sandbox's tools dir, /.hangar.
 */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import semver from 'semver';

/** The sandbox's view of the work directory. */
export const BOX = '/box';
/** Reserved name inside the work directory for build outputs and tool caches; no user file may take it. */
export const BUILD_DIR_NAME = '.hangar';
const BUILD = `${BOX}/${BUILD_DIR_NAME}`;

export interface SourceFile {
  name: string;
  content: Buffer;
}

/** One installed version of a language: its exact version and the tools that serve it. */
export interface Toolchain {
  version: string;
  /** `version` coerced to semver (`6.8.0.105` -> `6.8.0`), for range matching. */
  semver: string;
  tools: Record<string, string>;
}

export interface Step {
  argv: string[];
  env: Record<string, string>;
}

export interface PlanInput {
  files: SourceFile[];
  args: string[];
  runMemoryBytes: number;
  compileMemoryBytes: number;
}

/** What to write into /box and which steps to run there. */
export interface Plan {
  files: SourceFile[];
  compile?: Step;
  run: Step;
  /** Rewrites the compile step's stderr for the response (e.g. a tool's terminal format as compiler lines). */
  compileStderr?: (stderr: string) => string;
  /** Run this instead when the compile step produced `file` in /box (no request file has that name). */
  runIfProduced?: { file: string; run: Step };
}

/** A host file a language's steps need inside the sandbox, installed read-only as `/.hangar/<name>`. */
export interface SandboxTool {
  name: string;
  hostPath: string;
  mode: number;
}

export interface Language {
  name: string;
  aliases: string[];
  /** Source file extensions; the first is the default entry's. */
  extensions: string[];
  /** Entry file name when the request gives none. */
  defaultEntry: string;
  /** What executes the program, as listed by GET /v1/runtimes. */
  runtime: string;
  /** Has a compile step, reported as `compile` in the response. */
  compiled: boolean;
  /** Installed toolchains on this host, newest first. */
  detect(): Promise<Toolchain[]>;
  /** Files of Hangar's own the steps run in the sandbox (installed at start-up; without them the language is not offered). */
  tools?(): SandboxTool[];
  /** Throws an AppError-ready message (as a PlanError) when the files cannot make a program. */
  plan(tc: Toolchain, input: PlanInput): Plan;
}

/** A request the language cannot build, with the field to name in the 400. */
export class PlanError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

/** Laid over the sandbox's own environment (HOME and TMPDIR are its private /tmp). */
const BASE_ENV: Record<string, string> = {
  PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
  LANG: 'C.UTF-8',
  LC_ALL: 'C.UTF-8',
};
const COMPILE_ENV: Record<string, string> = { ...BASE_ENV };

const MIB = 1024 * 1024;
/** Heap size for a VM given the sandbox's memory limit: room left for code, stacks and the runtime itself. */
const heapMib = (memoryBytes: number) => Math.max(16, Math.floor((memoryBytes * 0.6) / MIB));

// ---- detection ---------------------------------------------------------------------------------

/** Runs `bin args` on the host and returns its combined output, or null when it cannot run. */
function probe(bin: string, args: string[], env: Record<string, string> = BASE_ENV): Promise<string | null> {
  return new Promise((resolve) => {
    execFile(bin, args, { timeout: 15_000, env, maxBuffer: 1024 * 1024 }, (err, stdout, stderr) => {
      if (err && (err as NodeJS.ErrnoException).code === 'ENOENT') return resolve(null);
      const out = `${stdout}\n${stderr}`;
      resolve(err && !out.trim() ? null : out);
    });
  });
}

const isExecutable = (file: string) => {
  try {
    const st = statSync(file);
    return st.isFile() && (st.mode & 0o111) !== 0;
  } catch {
    return false;
  }
};

/** Executables in `dir` whose names match, plus `fixed` paths; one per real file, fixed ones first. */
function candidates(fixed: string[], dir?: string, pattern?: RegExp): string[] {
  const all = [...fixed];
  if (dir && pattern) {
    try {
      for (const name of readdirSync(dir).sort()) if (pattern.test(name)) all.push(path.join(dir, name));
    } catch {
      // no such directory: nothing installed there
    }
  }
  const seen = new Set<string>();
  const out: string[] = [];
  for (const file of all) {
    if (!isExecutable(file)) continue;
    let real: string;
    try {
      real = realpathSync(file);
    } catch {
      continue;
    }
    if (seen.has(real)) continue;
    seen.add(real);
    out.push(file);
  }
  return out;
}

function toolchain(version: string, tools: Record<string, string>): Toolchain | null {
  const coerced = semver.coerce(version)?.version;
  return coerced ? { version, semver: coerced, tools } : null;
}

/** Newest first, one toolchain per version. */
function newestFirst(found: (Toolchain | null)[]): Toolchain[] {
  const byVersion = new Map<string, Toolchain>();
  for (const tc of found) if (tc && !byVersion.has(tc.version)) byVersion.set(tc.version, tc);
  return [...byVersion.values()].sort((a, b) => semver.rcompare(a.semver, b.semver) || b.version.localeCompare(a.version));
}

/** The usual case: each candidate binary's version command, one toolchain per version. */
async function detectBinaries(bins: string[], args: string[], pattern: RegExp, tool: string): Promise<Toolchain[]> {
  const found = await Promise.all(
    bins.map(async (bin) => {
      const out = await probe(bin, args);
      const m = out?.match(pattern);
      return m ? toolchain(m[1]!, { [tool]: bin }) : null;
    }),
  );
  return newestFirst(found);
}

// ---- helpers for plans -------------------------------------------------------------------------

const ext = (name: string) => {
  const i = name.lastIndexOf('.');
  return i > 0 ? name.slice(i) : '';
};
const boxPath = (name: string) => `${BOX}/${name}`;

function requireEntryExtension(lang: string, entry: SourceFile, exts: string[]): void {
  if (!exts.includes(ext(entry.name))) {
    throw new PlanError('body.files.0.name', `the ${lang} entry file must end in ${exts.join(' or ')} (got "${entry.name}")`);
  }
}

const sourcesOf = (files: SourceFile[], exts: string[]) => files.filter((f) => exts.includes(ext(f.name))).map((f) => boxPath(f.name));

// ---- the languages -----------------------------------------------------------------------------

const python: Language = {
  name: 'python',
  aliases: ['py', 'python3'],
  extensions: ['.py'],
  defaultEntry: 'main.py',
  runtime: 'cpython',
  compiled: false,
  detect: () => detectBinaries(candidates(['/usr/bin/python3'], '/usr/bin', /^python3\.\d+$/), ['--version'], /Python (\d+\.\d+\.\d+)/, 'python'),
  plan: (tc, { files, args }) => ({
    files,
    run: { argv: [tc.tools.python!, boxPath(files[0]!.name), ...args], env: { ...BASE_ENV, PYTHONDONTWRITEBYTECODE: '1' } },
  }),
};

const nodeVersions = () => detectBinaries(candidates(['/usr/bin/node', '/usr/bin/nodejs']), ['--version'], /v(\d+\.\d+\.\d+)/, 'node');
const nodeRun = (tc: Toolchain, entry: string, args: string[], memoryBytes: number): Step => ({
  argv: [tc.tools.node!, `--max-old-space-size=${heapMib(memoryBytes)}`, boxPath(entry), ...args],
  env: { ...BASE_ENV },
});

const javascript: Language = {
  name: 'javascript',
  aliases: ['js', 'node', 'nodejs'],
  extensions: ['.js', '.mjs', '.cjs'],
  defaultEntry: 'main.js',
  runtime: 'node',
  compiled: false,
  detect: nodeVersions,
  plan: (tc, { files, args, runMemoryBytes }) => ({ files, run: nodeRun(tc, files[0]!.name, args, runMemoryBytes) }),
};

/** Where the sandbox sees Hangar's tools dir (src/platform/isolation, native/common.h). */
const TOOLS = '/.hangar';
const TS_OUT_EXT: Record<string, string> = { '.ts': '.js', '.tsx': '.js', '.mts': '.mjs', '.cts': '.cjs' };

/** esbuild's native binary (a static Go executable) on the host; null when esbuild is not installed. */
export function esbuildBinary(): string | null {
  try {
    const fromApi = createRequire(createRequire(import.meta.url).resolve('esbuild'));
    for (const candidate of [`@esbuild/${process.platform}-${process.arch}/bin/esbuild`, 'esbuild/bin/esbuild']) {
      let binary: string;
      try {
        binary = fromApi.resolve(candidate);
      } catch {
        continue;
      }
      // The native executable, not the JS shim some installs leave at esbuild/bin.
      if (
        readFileSync(binary)
          .subarray(0, 4)
          .equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]))
      )
        return binary;
    }
    return null;
  } catch {
    return null;
  }
}

/** What each file transpiles to (null: passes through), before top-level await may make one `.mjs`; a clash is a 400. */
function typescriptOutputs(files: SourceFile[]): (string | null)[] {
  const names = new Set(files.map((f) => f.name));
  const outs = new Set<string>();
  return files.map((f, i) => {
    const e = ext(f.name);
    const outExt = TS_OUT_EXT[e];
    if (!outExt && i > 0) return null;
    const out = `${outExt ? f.name.slice(0, -e.length) : f.name}${outExt ?? '.js'}`;
    if (out !== f.name && (names.has(out) || outs.has(out))) {
      throw new PlanError(`body.files.${i}.name`, `${f.name} transpiles to ${out}, which another file already uses`);
    }
    outs.add(out);
    return out;
  });
}

/**
 * The compile step's script, run by /bin/sh in /box with triples SOURCE LOADER OUTPUT: esbuild strips the
 * types of each SOURCE into OUTPUT (CommonJS, or ESM for `.mjs`); a file that fails only because of
 * top-level await is made an ES module instead (OUTPUT with `.mjs`), unless that name is taken. esbuild's
 * messages go to stderr (reformatted by formatEsbuildLog); any failure exits 1.
 */
const TS_COMPILE_SCRIPT = `
rc=0
while [ $# -ge 3 ]; do
  src=$1; loader=$2; out=$3; shift 3
  fmt=cjs; case "$out" in *.mjs) fmt=esm ;; esac
  if ! ${TOOLS}/esbuild --loader=$loader --format=$fmt --platform=node --target=node20 --log-level=warning --color=false --sourcefile="$src" < "$src" > "$out" 2> /tmp/esbuild.log; then
    rm -f "$out"
    if [ $fmt = cjs ] && grep -qF '[ERROR] Top-level await is currently not supported' /tmp/esbuild.log && ! grep -F '[ERROR]' /tmp/esbuild.log | grep -vqF 'Top-level await is currently not supported'; then
      mjs="\${out%.*}.mjs"
      if [ -e "$mjs" ]; then
        echo "$src: error: transpiles to $mjs, which another file already uses" >&2; rc=1; continue
      fi
      ${TOOLS}/esbuild --loader=$loader --format=esm --platform=node --target=node20 --log-level=warning --color=false --sourcefile="$src" < "$src" > "$mjs" 2> /tmp/esbuild.log || { rm -f "$mjs"; rc=1; }
    else
      rc=1
    fi
  fi
  cat /tmp/esbuild.log >&2
done
exit $rc
`;

const ESBUILD_MESSAGE = /^(?:✘ \[(ERROR)\]|▲ \[(WARNING)\]) (.*?)(?: \[[a-z0-9-]+\])?$/;
const ESBUILD_LOCATION = /^ {4}(.+):(\d+):(\d+):$/;
const ESBUILD_SOURCE = /^ +\d+ │ (.*)$/;
const ESBUILD_MARKER = /^ +╵ /;

/**
 * esbuild's terminal messages as compiler lines (`main.ts:1:19: error: Unexpected ";"`, the source line and
 * a caret; columns from 1), as TypeScript's compile step has always reported them. Notes and anything
 * else (a crash of esbuild itself) pass through.
 */
export function formatEsbuildLog(log: string): string {
  const lines = log.split('\n');
  const out: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const m = ESBUILD_MESSAGE.exec(lines[i]!);
    if (!m) {
      if (lines[i] !== '' || (out.length > 0 && out.at(-1) !== '')) out.push(lines[i]!);
      continue;
    }
    const kind = m[1] ? 'error' : 'warning';
    let j = i + 1;
    while (lines[j] === '') j++;
    const at = ESBUILD_LOCATION.exec(lines[j] ?? '');
    if (!at) {
      out.push(`${kind}: ${m[3]}`);
      continue;
    }
    const [, file, line, col] = at;
    out.push(`${file}:${line}:${Number(col) + 1}: ${kind}: ${m[3]}`);
    i = j;
    const source = ESBUILD_SOURCE.exec(lines[i + 1] ?? '');
    const marker = lines[i + 2] ?? '';
    if (source && ESBUILD_MARKER.test(marker)) {
      const start = marker.indexOf('╵') + 2;
      const caret = marker.slice(start).search(/[~^]/);
      out.push(`    ${source[1]}`, `    ${' '.repeat(Math.max(0, caret))}^`);
      i += 2;
    }
    // Skip the blank line and the indented notes that follow; the next message or other text starts at column 0.
    while (i + 1 < lines.length && (lines[i + 1] === '' || lines[i + 1]!.startsWith('  '))) i++;
  }
  const text = out.join('\n').replace(/\n+$/, '');
  return text ? `${text}\n` : '';
}

/**
 * TypeScript's compile step runs in the sandbox like any other (its limits, its own failure): the esbuild
 * binary, installed read-only in the tools dir, strips the types of each file into JavaScript beside it
 * (TS_COMPILE_SCRIPT); Node then runs the entry's JavaScript, its `.mjs` when top-level await made it one.
 */
const typescript: Language = {
  name: 'typescript',
  aliases: ['ts'],
  extensions: ['.ts', '.mts', '.cts', '.tsx'],
  defaultEntry: 'main.ts',
  runtime: 'node',
  compiled: true,
  detect: async () => (esbuildBinary() ? nodeVersions() : []),
  tools: () => {
    const binary = esbuildBinary();
    return binary ? [{ name: 'esbuild', hostPath: binary, mode: 0o755 }] : [];
  },
  plan: (tc, { files, args, runMemoryBytes }) => {
    const outputs = typescriptOutputs(files);
    const entry = outputs[0]!;
    const esm = `${entry.slice(0, -ext(entry).length)}.mjs`;
    const triples = files.flatMap((f, i) => (outputs[i] ? [f.name, ext(f.name) === '.tsx' ? 'tsx' : 'ts', outputs[i]!] : []));
    return {
      files,
      compile: {
        argv: ['/bin/sh', '-c', TS_COMPILE_SCRIPT, 'ts-compile', ...triples],
        // esbuild's Go runtime: two threads of work at most (the sandbox's process limit counts threads).
        env: { ...COMPILE_ENV, GOMAXPROCS: '2' },
      },
      compileStderr: formatEsbuildLog,
      run: nodeRun(tc, entry, args, runMemoryBytes),
      runIfProduced:
        ext(entry) === '.mjs' || files.some((f) => f.name === esm) ? undefined : { file: esm, run: nodeRun(tc, esm, args, runMemoryBytes) },
    };
  },
};

const bash: Language = {
  name: 'bash',
  aliases: ['sh'],
  extensions: ['.sh', '.bash'],
  defaultEntry: 'main.sh',
  runtime: 'bash',
  compiled: false,
  detect: () => detectBinaries(candidates(['/usr/bin/bash']), ['--version'], /version (\d+\.\d+\.\d+)/, 'bash'),
  plan: (tc, { files, args }) => ({ files, run: { argv: [tc.tools.bash!, boxPath(files[0]!.name), ...args], env: { ...BASE_ENV } } }),
};

const BINARY = `${BUILD}/main`;
const runBinary = (args: string[]): Step => ({ argv: [BINARY, ...args], env: { ...BASE_ENV } });

const C_EXT = ['.c'];
const c: Language = {
  name: 'c',
  aliases: ['gcc'],
  extensions: C_EXT,
  defaultEntry: 'main.c',
  runtime: 'gcc',
  compiled: true,
  detect: () => detectBinaries(candidates(['/usr/bin/gcc'], '/usr/bin', /^gcc-\d+$/), ['-dumpfullversion'], /^(\d+\.\d+(?:\.\d+)?)/m, 'gcc'),
  plan: (tc, { files, args }) => {
    requireEntryExtension('c', files[0]!, C_EXT);
    return {
      files,
      compile: { argv: [tc.tools.gcc!, '-std=gnu17', '-O2', '-o', BINARY, ...sourcesOf(files, C_EXT), '-lm'], env: COMPILE_ENV },
      run: runBinary(args),
    };
  },
};

const CPP_EXT = ['.cpp', '.cc', '.cxx', '.c++'];
const cpp: Language = {
  name: 'c++',
  aliases: ['cpp', 'g++', 'cxx'],
  extensions: CPP_EXT,
  defaultEntry: 'main.cpp',
  runtime: 'gcc',
  compiled: true,
  detect: () => detectBinaries(candidates(['/usr/bin/g++'], '/usr/bin', /^g\+\+-\d+$/), ['-dumpfullversion'], /^(\d+\.\d+(?:\.\d+)?)/m, 'gxx'),
  plan: (tc, { files, args }) => {
    requireEntryExtension('c++', files[0]!, CPP_EXT);
    return {
      files,
      compile: { argv: [tc.tools.gxx!, '-std=gnu++17', '-O2', '-o', BINARY, ...sourcesOf(files, CPP_EXT), '-lm'], env: COMPILE_ENV },
      run: runBinary(args),
    };
  },
};

const go: Language = {
  name: 'go',
  aliases: ['golang'],
  extensions: ['.go'],
  defaultEntry: 'main.go',
  runtime: 'go',
  compiled: true,
  detect: () => detectBinaries(candidates(['/usr/bin/go', ...goInLib()]), ['version'], /go(\d+\.\d+(?:\.\d+)?)/, 'go'),
  plan: (tc, { files, args }) => {
    requireEntryExtension('go', files[0]!, ['.go']);
    const sources = files.filter((f) => f.name.endsWith('.go') && !f.name.endsWith('_test.go')).map((f) => boxPath(f.name));
    return {
      files,
      compile: {
        argv: [tc.tools.go!, 'build', '-o', BINARY, ...sources],
        // GOPATH mode, no network, the build cache in the sandbox's private /tmp: the build reads only the
        // toolchain's precompiled standard library and the request's files.
        env: {
          ...COMPILE_ENV,
          GOCACHE: '/tmp/go-cache',
          GOPATH: '/tmp/go',
          GO111MODULE: 'off',
          GOPROXY: 'off',
          GOTOOLCHAIN: 'local',
          CGO_ENABLED: '0',
          // A bounded build: `go build` otherwise runs one compiler per core, each with a thread per core,
          // which on a large host exceeds the sandbox's process limit.
          GOFLAGS: '-buildvcs=false -p=2',
          GOMAXPROCS: '2',
        },
      },
      run: runBinary(args),
    };
  },
};

/** `/usr/lib/go-1.xx/bin/go` for each Go installed side by side. */
function goInLib(): string[] {
  try {
    return readdirSync('/usr/lib')
      .filter((d) => /^go-\d+\.\d+$/.test(d))
      .sort()
      .map((d) => `/usr/lib/${d}/bin/go`);
  } catch {
    return [];
  }
}

const ruby: Language = {
  name: 'ruby',
  aliases: ['rb'],
  extensions: ['.rb'],
  defaultEntry: 'main.rb',
  runtime: 'ruby',
  compiled: false,
  detect: () => detectBinaries(candidates(['/usr/bin/ruby'], '/usr/bin', /^ruby\d+\.\d+$/), ['--version'], /ruby (\d+\.\d+\.\d+)/, 'ruby'),
  plan: (tc, { files, args }) => ({
    files,
    run: { argv: [tc.tools.ruby!, boxPath(files[0]!.name), ...args], env: { ...BASE_ENV } },
  }),
};

const rust: Language = {
  name: 'rust',
  aliases: ['rs', 'rustc'],
  extensions: ['.rs'],
  defaultEntry: 'main.rs',
  runtime: 'rustc',
  compiled: true,
  detect: () => detectBinaries(candidates(['/usr/bin/rustc'], '/usr/bin', /^rustc-\d+\.\d+$/), ['--version'], /rustc (\d+\.\d+\.\d+)/, 'rustc'),
  plan: (tc, { files, args }) => {
    requireEntryExtension('rust', files[0]!, ['.rs']);
    // Default optimisation level: compile time dominates one-shot programs. Other files are modules (`mod x;`).
    return {
      files,
      compile: { argv: [tc.tools.rustc!, '--edition', '2021', '-o', BINARY, boxPath(files[0]!.name)], env: COMPILE_ENV },
      run: runBinary(args),
    };
  },
};

const JAVA_CLASSES = `${BUILD}/classes`;
/** JVM start-up flags: one GC thread set, no perf-data file in /tmp, class-data sharing. */
const JVM_FLAGS = ['-XX:+UseSerialGC', '-XX:-UsePerfData', '-Xshare:auto'];

/** Removes comments, string and char literals (keeping line structure), so declarations can be found by pattern. */
function stripJava(src: string): string {
  return src.replace(/\/\*[\s\S]*?\*\/|\/\/[^\n]*|"""[\s\S]*?"""|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'/g, (m) => m.replace(/[^\n]/g, ' '));
}

/** The index of the `}` closing the `{` at `open` (the source's end when it is not closed). */
function closingBrace(src: string, open: number): number {
  let depth = 0;
  for (let i = open; i < src.length; i++) {
    if (src[i] === '{') depth++;
    else if (src[i] === '}' && --depth === 0) return i;
  }
  return src.length;
}

/** The entry file's package, its public top-level type, and the class holding `main`. */
export function javaEntry(source: string): { pkg: string | null; publicType: string | null; mainClass: string | null } {
  const src = stripJava(source);
  const pkg = src.match(/^\s*package\s+([\w.]+)\s*;/m)?.[1] ?? null;
  const modifiers = '(?:(?:final|abstract|sealed|non-sealed|strictfp|static)\\s+)*';
  const publicDecl = new RegExp(`(?:^|[\\s;}])public\\s+${modifiers}(?:class|interface|enum|record)\\s+([A-Za-z_$][\\w$]*)`);
  const publicType = src.match(publicDecl)?.[1] ?? null;
  const mainAt = src.search(/\bstatic\s+(?:(?:public|final|synchronized)\s+)*void\s+main\s*\(|\bvoid\s+main\s*\(/);
  let mainClass: string | null = null;
  if (mainAt >= 0) {
    // The types whose bodies enclose `main`, outermost first (a nested record or class declared before `main` does
    // not): `Outer$Inner` when `main` is in a nested type, as the JVM names it.
    const enclosing: string[] = [];
    for (const d of src.slice(0, mainAt).matchAll(/\b(?:class|interface|enum|record)\s+([A-Za-z_$][\w$]*)/g)) {
      const open = src.indexOf('{', d.index + d[0].length);
      if (open < 0 || open > mainAt) continue;
      if (closingBrace(src, open) > mainAt) enclosing.push(d[1]!);
    }
    mainClass = enclosing.length ? enclosing.join('$') : null;
  }
  return { pkg, publicType, mainClass: mainClass ?? publicType };
}

const java: Language = {
  name: 'java',
  aliases: ['jdk'],
  extensions: ['.java'],
  defaultEntry: 'Main.java',
  runtime: 'openjdk',
  compiled: true,
  detect: async () => {
    const homes = candidates(
      (() => {
        try {
          return readdirSync('/usr/lib/jvm')
            .sort()
            .map((d) => `/usr/lib/jvm/${d}/bin/javac`);
        } catch {
          return [];
        }
      })(),
    ).filter((javac) => isExecutable(path.join(path.dirname(javac), 'java')));
    const found = await Promise.all(
      homes.map(async (javac) => {
        const m = (await probe(javac, ['-version']))?.match(/javac (\d+(?:\.\d+)*)/);
        return m ? toolchain(m[1]!, { javac, java: path.join(path.dirname(javac), 'java') }) : null;
      }),
    );
    return newestFirst(found);
  },
  plan: (tc, { files, args, runMemoryBytes, compileMemoryBytes }) => {
    requireEntryExtension('java', files[0]!, ['.java']);
    const entry = files[0]!;
    const { pkg, publicType, mainClass } = javaEntry(entry.content.toString('utf8'));
    if (!mainClass) throw new PlanError('body.files.0.content', 'the java entry file declares no class with a main method');
    // javac wants a public class in a file of the same name: name the entry after it.
    let out = files;
    if (publicType && entry.name !== `${publicType}.java`) {
      const name = `${publicType}.java`;
      if (files.some((f, i) => i > 0 && f.name === name)) {
        throw new PlanError(
          'body.files.0.name',
          `the entry file declares public ${publicType}, so it must be ${name}, which another file already uses`,
        );
      }
      out = [{ ...entry, name }, ...files.slice(1)];
    }
    return {
      files: out,
      compile: {
        argv: [
          tc.tools.javac!,
          ...JVM_FLAGS.map((f) => `-J${f}`),
          '-J-XX:TieredStopAtLevel=1',
          `-J-Xmx${heapMib(compileMemoryBytes)}m`,
          '-encoding',
          'UTF-8',
          '-d',
          JAVA_CLASSES,
          ...sourcesOf(out, ['.java']),
        ],
        env: COMPILE_ENV,
      },
      run: {
        argv: [
          tc.tools.java!,
          ...JVM_FLAGS,
          `-Xmx${heapMib(runMemoryBytes)}m`,
          '-cp',
          JAVA_CLASSES,
          pkg ? `${pkg}.${mainClass}` : mainClass,
          ...args,
        ],
        env: { ...BASE_ENV },
      },
    };
  },
};

const CS_EXE = `${BUILD}/main.exe`;
const csharp: Language = {
  name: 'csharp',
  aliases: ['cs', 'c#', 'mono'],
  extensions: ['.cs'],
  defaultEntry: 'Main.cs',
  runtime: 'mono',
  compiled: true,
  detect: async () => {
    const mcs = candidates(['/usr/bin/mcs'])[0];
    if (!mcs) return [];
    const monos = candidates(['/usr/bin/mono']);
    const found = await Promise.all(
      monos.map(async (mono) => {
        const m = (await probe(mono, ['--version']))?.match(/version (\d+(?:\.\d+)+)/);
        return m ? toolchain(m[1]!, { mono, mcs }) : null;
      }),
    );
    return newestFirst(found);
  },
  plan: (tc, { files, args }) => {
    requireEntryExtension('csharp', files[0]!, ['.cs']);
    return {
      files,
      compile: { argv: [tc.tools.mcs!, '-nologo', '-optimize+', `-out:${CS_EXE}`, ...sourcesOf(files, ['.cs'])], env: COMPILE_ENV },
      run: { argv: [tc.tools.mono!, CS_EXE, ...args], env: { ...BASE_ENV } },
    };
  },
};

export const LANGUAGES: readonly Language[] = [python, javascript, typescript, bash, c, cpp, go, ruby, rust, java, csharp];

const byAlias = new Map<string, Language>();
for (const lang of LANGUAGES) for (const n of [lang.name, ...lang.aliases]) byAlias.set(n, lang);

/** A language by its name or an alias, case-insensitively. */
export const findLanguage = (name: string): Language | undefined => byAlias.get(name.trim().toLowerCase());
