/**
 * Turns a template creation request (the package builder or a Dockerfile) into an ordered build plan.
 * Pure: no I/O. Templates are built on this server's own userland (Debian 12) by running each step as
 * root with `/bin/sh -ec <script>`; each script carries the environment and working directory it
 * needs, so a runner only has to run them in order.
 */
import { errors } from '../../platform/http/errors.js';
import { hasControlChar } from '../../platform/text.js';

/** Operating systems a template can be built on: only the host's own userland has a reachable package mirror. */
export const SUPPORTED_OS = ['debian-12'] as const;
export type SupportedOs = (typeof SUPPORTED_OS)[number];

/** Values `os` may name; all but the host's are refused with the reason. */
const KNOWN_OS = ['ubuntu-22.04', 'ubuntu-24.04', 'debian-12', 'alpine-3.19'] as const;

/** Dockerfile instructions a template build understands, in the order they are documented. */
export const DOCKERFILE_INSTRUCTIONS: readonly string[] = Object.freeze(['FROM', 'RUN', 'ENV', 'WORKDIR', 'ARG', 'LABEL']);

export interface BuildStep {
  kind: 'run';
  title: string;
  /** Run as `/bin/sh -ec script` as root; it exports its own env and `cd`s into its own workdir first. */
  script: string;
}

export interface BuildPlan {
  /** Parent template slug (Dockerfile FROM); null = the base layer. */
  from: string | null;
  steps: BuildStep[];
  /**
   * Env baked into the template, for sandboxes and templates built on it. Steps already export what
   * they should see, so a runner must not add this to them (an ENV after a RUN must not reach that RUN).
   */
  env: Record<string, string>;
  /** Default working directory for sandboxes (Dockerfile WORKDIR), absolute; null = the parent's. */
  workdir: string | null;
  labels: Record<string, string>;
  summary: {
    apt: string[];
    npm: string[];
    pip: string[];
    runtimes: { name: string; version: string; packages: string[] }[];
    dockerfileInstructions: string[];
  };
}

export interface BuilderInput {
  os?: string;
  runtimes?: { name: string; version: string }[];
  apt?: string[];
  npm?: string[];
  pip?: string[];
  env?: Record<string, string>;
}

/** What the parent template gives a Dockerfile: `$VAR` in ENV/WORKDIR/LABEL and relative WORKDIRs resolve against it. */
export interface InheritedContext {
  env?: Record<string, string>;
  workdir?: string | null;
}

const MAX_PACKAGES = 200;
const MAX_RUNTIMES = 16;
const MAX_ENV_KEYS = 100;
const MAX_LABELS = 100;
const MAX_VALUE_CHARS = 4096;
const MAX_NAME_CHARS = 256;
const MAX_WORKDIR_BYTES = 1024;
const MAX_DOCKERFILE_BYTES = 64 * 1024;
const MAX_INSTRUCTIONS = 200;
/** `${A:-${B:-...}}` nesting; the expander recurses per level, so thousands of levels overflowed the stack (a 500). */
const MAX_SUBSTITUTION_DEPTH = 32;
const TITLE_CHARS = 80;
/** PATH of the base layer, for `$PATH` in a Dockerfile when the parent's env is not given. */
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const SLUG = /^[a-z0-9][a-z0-9-]{0,62}$/;
const LABEL_KEY = /^[A-Za-z0-9][A-Za-z0-9._/-]*$/;
const APT_PACKAGE = /^[a-z0-9][a-z0-9+.-]+(?:=[A-Za-z0-9.+~:-]+)?$/;
const NPM_NAME = /^(?:@[a-z0-9][a-z0-9._-]*\/)?[A-Za-z0-9][A-Za-z0-9._-]*$/;
const NPM_RANGE = /^[A-Za-z0-9.^~<>=*|+ _-]+$/;
// npm and pip install a local file when the argument looks like an archive, whatever else it says.
const NPM_ARCHIVE = /\.(?:tgz|tar|tar\.gz)$/i;
const PIP_ARCHIVE = /\.(?:whl|zip|tar|tgz|tar\.gz|tbz|tar\.bz2|txz|tar\.xz|tlz|tar\.lz)$/i;
const PIP_NAME = '[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?';
const PIP_SPEC = '(?:~=|===|==|!=|<=|>=|<|>)\\s*[A-Za-z0-9.*+!_-]+';
const PIP_REQUIREMENT = new RegExp(
  `^${PIP_NAME}(?:\\s*\\[\\s*${PIP_NAME}(?:\\s*,\\s*${PIP_NAME})*\\s*\\])?(?:\\s*${PIP_SPEC}(?:\\s*,\\s*${PIP_SPEC})*)?$`,
);

// ---------------------------------------------------------------------------------------------
// Shell quoting

const SHELL_SAFE = /^[A-Za-z0-9_@%+=:,./-]+$/;

/** Quotes a word for /bin/sh, leaving words made only of harmless characters bare. */
function shellQuote(word: string): string {
  return SHELL_SAFE.test(word) ? word : singleQuote(word);
}

function singleQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

function exportLine(name: string, value: string): string {
  return `export ${name}=${singleQuote(value)}`;
}

function truncate(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max)}…` : flat;
}

// ---------------------------------------------------------------------------------------------
// Builder

interface RuntimeSpec {
  packages: string[];
  /** The version Debian 12 (or, for node, the base layer) provides; requests must be a prefix of it. */
  version: string;
  /** Says what is available, for the error when another version is asked for. */
  offers: (version: string) => string;
}

const RUNTIME_ALIASES: Record<string, string> = {
  python: 'python',
  python3: 'python',
  node: 'node',
  nodejs: 'node',
  go: 'go',
  golang: 'go',
  java: 'java',
  ruby: 'ruby',
  rust: 'rust',
};
const RUNTIME_NAMES = ['python', 'node', 'nodejs', 'go', 'golang', 'java', 'ruby', 'rust'];

function runtimeCatalogue(hostNodeVersion: string): Record<string, RuntimeSpec> {
  return {
    python: { packages: ['python3', 'python3-pip', 'python3-venv'], version: '3.11', offers: debian('python') },
    // The base layer's Node (with npm) is the only one: Debian's nodejs and npm packages conflict with it.
    node: {
      packages: [],
      version: hostNodeVersion.replace(/^v/, ''),
      offers: (v) => `the base layer has node ${v} (/usr/bin/node, with npm) and no other Node version can be installed here`,
    },
    go: { packages: ['golang-go'], version: '1.19', offers: debian('go') },
    java: { packages: ['openjdk-17-jdk-headless'], version: '17', offers: debian('java') },
    ruby: { packages: ['ruby-full'], version: '3.1', offers: debian('ruby') },
    rust: { packages: ['rustc', 'cargo'], version: '1.63', offers: debian('rust') },
  };
}

function debian(name: string): (version: string) => string {
  return (version) => `Debian 12 provides ${name} ${version} and no other ${name} version can be installed here`;
}

/** '*', 'latest', or a dotted prefix of the provided version (`3`, `3.11`, `3.x`, `v20`). */
function versionMatches(requested: string, provided: string): boolean {
  let wanted = requested.trim().toLowerCase();
  if (wanted === '*' || wanted === 'latest' || wanted === 'x') return true;
  wanted = wanted.replace(/^v/, '').replace(/(?:\.(?:x|\*))+$/, '');
  const want = wanted.split('.');
  const have = provided.split('.');
  if (want.length > have.length) return false;
  return want.every((part, i) => /^\d+$/.test(part) && part === have[i]);
}

function acceptedVersions(provided: string): string {
  const parts = provided.split('.');
  const prefixes = parts.map((_, i) => parts.slice(0, i + 1).join('.')).reverse();
  const all = [...prefixes, '*', 'latest'].map((v) => `"${v}"`);
  return `${all.slice(0, -1).join(', ')} or ${all[all.length - 1]}`;
}

/** Checks each entry (400 naming `field[i]`), then drops repeats keeping the first. */
function packageList(value: unknown, field: string, what: string, check: (item: string, field: string) => void): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw errors.invalidField(field, `must be a list of ${what}`);
  if (value.length > MAX_PACKAGES) throw errors.invalidField(field, `at most ${MAX_PACKAGES} packages (got ${value.length})`);
  value.forEach((item, i) => {
    if (typeof item !== 'string') throw errors.invalidField(`${field}[${i}]`, `must be a string naming one of ${what}`);
    check(item, `${field}[${i}]`);
  });
  return dedupe(value as string[]);
}

function checkApt(name: string, field: string): void {
  if (!APT_PACKAGE.test(name) || name.length > MAX_NAME_CHARS) {
    throw errors.invalidField(
      field,
      `"${name}" is not a Debian package name (lowercase letters, digits, "+", "-" and "." starting with a letter or digit, optionally "=version")`,
    );
  }
}

function checkNpm(spec: string, field: string): void {
  const bad = (why: string) => errors.invalidField(field, `"${spec}" ${why}`);
  if (spec.startsWith('-')) throw bad('must not start with "-" (options are not allowed)');
  if (/[:\\]/.test(spec) || spec.startsWith('.') || spec.startsWith('/') || spec.startsWith('~')) {
    throw bad('must be a registry package name, not a URL, path or git spec');
  }
  if (NPM_ARCHIVE.test(spec)) throw bad('looks like a tarball path; name a registry package instead');
  const versionAt = spec.indexOf('@', 1);
  const name = versionAt === -1 ? spec : spec.slice(0, versionAt);
  const range = versionAt === -1 ? null : spec.slice(versionAt + 1);
  if (!NPM_NAME.test(name) || name.length > 214) {
    throw bad('is not an npm package name ("name" or "@scope/name", optionally "@version", "@range" or "@tag")');
  }
  if (range !== null && (range === '' || range !== range.trim() || !NPM_RANGE.test(range))) {
    throw bad('has an invalid version, range or tag after "@"');
  }
}

function checkPip(requirement: string, field: string): void {
  const bad = (why: string) => errors.invalidField(field, `"${requirement}" ${why}`);
  if (requirement.startsWith('-')) throw bad('must not start with "-" (options are not allowed)');
  if (/[:/\\@;]/.test(requirement)) throw bad('must be a PyPI project name with optional version specifiers, not a URL, path or marker');
  if (PIP_ARCHIVE.test(requirement)) throw bad('looks like an archive file; name a PyPI project instead');
  if (!PIP_REQUIREMENT.test(requirement) || requirement.length > MAX_NAME_CHARS) {
    throw bad('is not a PyPI requirement (a name, optional [extras], optional specifiers such as "==1.2" or ">=2,<3")');
  }
}

function validateEnv(value: unknown): Record<string, string> {
  if (value === undefined) return {};
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw errors.invalidField('env', 'must be an object of NAME: "value" strings');
  }
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length > MAX_ENV_KEYS) throw errors.invalidField('env', `at most ${MAX_ENV_KEYS} variables (got ${entries.length})`);
  const env = new Map<string, string>();
  for (const [name, v] of entries) {
    checkEnvName(name, () => `env.${name}`);
    if (typeof v !== 'string') throw errors.invalidField(`env.${name}`, 'must be a string');
    checkEnvValue(v, (message) => errors.invalidField(`env.${name}`, message));
    env.set(name, v);
  }
  return Object.fromEntries(env);
}

function checkEnvName(name: string, field: () => string): void {
  if (!ENV_NAME.test(name) || name.length > MAX_NAME_CHARS) {
    throw errors.invalidField(field(), `"${name}" is not a valid variable name (letters, digits and "_", not starting with a digit)`);
  }
}

function checkEnvValue(value: string, fail: (message: string) => Error): void {
  if (value.length > MAX_VALUE_CHARS) throw fail(`value must be at most ${MAX_VALUE_CHARS} characters`);
  if (value.includes('\u0000')) throw fail('value must not contain NUL');
}

function checkOs(os: string | undefined, hostOs: string): void {
  if (os === undefined || os === hostOs) return;
  const others = KNOWN_OS.filter((k) => k !== hostOs);
  if (typeof os !== 'string' || !(KNOWN_OS as readonly string[]).includes(os)) {
    throw errors.invalidField(
      'os',
      `unknown operating system ${JSON.stringify(os)}; templates here are built on "${hostOs}" (this server's own userland), so use "${hostOs}" or leave os out (known values: ${KNOWN_OS.join(', ')})`,
    );
  }
  const list = others.length > 1 ? `${others.slice(0, -1).join(', ')} and ${others[others.length - 1]}` : others.join('');
  throw errors.invalidField(
    'os',
    `"${os}" cannot be built on this server: only "${hostOs}" (this server's own userland) can be built here; ${list} need a package mirror this server cannot reach. Use "${hostOs}" or leave os out`,
  );
}

/**
 * Plans a template from the package builder: one apt step (runtimes first), then npm, then pip, each
 * exporting `env` first. `hostNodeVersion` is the base layer's Node (this process runs on it).
 */
export function planFromBuilder(input: BuilderInput, hostOs: string, hostNodeVersion: string = process.versions.node): BuildPlan {
  checkOs(input.os, hostOs);
  if (!(SUPPORTED_OS as readonly string[]).includes(hostOs)) {
    throw errors.notImplemented(`building templates on a ${hostOs} host`);
  }

  const catalogue = runtimeCatalogue(hostNodeVersion);
  const runtimes: BuildPlan['summary']['runtimes'] = [];
  if (input.runtimes !== undefined) {
    if (!Array.isArray(input.runtimes)) throw errors.invalidField('runtimes', 'must be a list of { name, version }');
    if (input.runtimes.length > MAX_RUNTIMES) throw errors.invalidField('runtimes', `at most ${MAX_RUNTIMES} runtimes`);
    input.runtimes.forEach((runtime: unknown, i) => {
      const r = runtime as { name?: unknown; version?: unknown } | null;
      if (r === null || typeof r !== 'object') throw errors.invalidField(`runtimes[${i}]`, 'must be an object { name, version }');
      if (typeof r.name !== 'string') throw errors.invalidField(`runtimes[${i}].name`, `must be one of ${RUNTIME_NAMES.join(', ')}`);
      const name = RUNTIME_ALIASES[r.name.trim().toLowerCase()];
      if (!name) {
        throw errors.invalidField(`runtimes[${i}].name`, `unknown runtime ${JSON.stringify(r.name)}; known runtimes are ${RUNTIME_NAMES.join(', ')}`);
      }
      const spec = catalogue[name];
      if (typeof r.version !== 'string' || !versionMatches(r.version, spec.version)) {
        const asked = typeof r.version === 'string' ? JSON.stringify(r.version) : 'a version string';
        throw errors.invalidField(`runtimes[${i}].version`, `got ${asked}: ${spec.offers(spec.version)}; use ${acceptedVersions(spec.version)}`);
      }
      if (!runtimes.some((known) => known.name === name)) runtimes.push({ name, version: spec.version, packages: [...spec.packages] });
    });
  }

  const apt = packageList(input.apt, 'apt', 'Debian package names', checkApt);
  const npm = packageList(input.npm, 'npm', 'npm package names', checkNpm);
  const pip = packageList(input.pip, 'pip', 'PyPI requirements', checkPip);
  const env = validateEnv(input.env);

  const runtimePackages = dedupe(runtimes.flatMap((r) => r.packages));
  // pip needs python3-pip; the base layer may have python3 without it.
  const pipSupport = pip.length > 0 && !runtimePackages.includes('python3-pip') ? ['python3-pip'] : [];
  const extraApt = dedupe([...pipSupport, ...apt]).filter((p) => !runtimePackages.includes(p));
  const aptPackages = [...runtimePackages, ...extraApt];

  const head = Object.entries(env).map(([k, v]) => exportLine(k, v));
  const steps: BuildStep[] = [];
  if (aptPackages.length > 0) {
    const list = aptPackages.map(shellQuote).join(' ');
    steps.push({
      kind: 'run',
      title: truncate(`apt-get install ${aptPackages.join(' ')}`, TITLE_CHARS),
      script: [
        ...head,
        'export DEBIAN_FRONTEND=noninteractive',
        'apt-get update -q',
        `apt-get install -y -q --no-install-recommends ${list}`,
        'apt-get clean',
        'rm -rf /var/lib/apt/lists/*',
      ].join('\n'),
    });
  }
  if (npm.length > 0) {
    steps.push({
      kind: 'run',
      title: truncate(`npm install -g ${npm.join(' ')}`, TITLE_CHARS),
      script: [...head, `npm install -g --no-audit --no-fund ${npm.map(shellQuote).join(' ')}`].join('\n'),
    });
  }
  if (pip.length > 0) {
    steps.push({
      kind: 'run',
      title: truncate(`pip install ${pip.join(' ')}`, TITLE_CHARS),
      script: [
        ...head,
        `python3 -m pip install --no-cache-dir --break-system-packages --root-user-action=ignore ${pip.map(shellQuote).join(' ')}`,
      ].join('\n'),
    });
  }

  return {
    from: null,
    steps,
    env,
    workdir: null,
    labels: {},
    summary: { apt: extraApt, npm, pip, runtimes, dockerfileInstructions: [] },
  };
}

function dedupe(list: string[]): string[] {
  return [...new Set(list)];
}

// ---------------------------------------------------------------------------------------------
// Dockerfile

const UNSUPPORTED: Record<string, string> = {
  COPY: 'a template build has no build context to copy from; fetch files in a RUN step (curl, wget, git clone) instead',
  ADD: 'a template build has no build context to add from; fetch files in a RUN step (curl, wget, git clone) instead',
  CMD: 'sandboxes have no default command; they run the commands you send them',
  ENTRYPOINT: 'sandboxes have no entrypoint; they run the commands you send them',
  EXPOSE: 'a template does not declare ports',
  VOLUME: "a persistent sandbox's whole filesystem already survives stops",
  HEALTHCHECK: 'Hangar watches sandboxes through its own agent',
  SHELL: 'steps always run with /bin/sh; call another shell explicitly (RUN bash -c "...")',
  ONBUILD: 'templates built on this one run only their own steps',
  STOPSIGNAL: 'Hangar decides how sandboxes are stopped',
  MAINTAINER: 'use LABEL maintainer="..." instead',
  USER: 'builds run as root and sandboxes always run as the unprivileged user "user"',
};

type Lookup = (name: string) => { value: string } | 'no-default' | undefined;

interface Instruction {
  line: number;
  keyword: string;
  args: string;
}

/** Every Dockerfile rejection names its line. */
function at(line: number, message: string) {
  return errors.invalidField('dockerfile', `line ${line}: ${message}`);
}

const supportedList = () => `Supported instructions are ${DOCKERFILE_INSTRUCTIONS.join(', ')}`;

/** Splits a Dockerfile into instructions the way Docker does: comments, blank lines and `\` continuations. */
function splitInstructions(text: string): Instruction[] {
  const lines = text.replace(/^\uFEFF/, '').split(/\r?\n/);
  const isSkippable = (l: string) => l.trim() === '' || l.trimStart().startsWith('#');
  const out: Instruction[] = [];
  let i = 0;
  // Parser directives: `# name=value` lines at the very top.
  for (; i < lines.length; i++) {
    const directive = /^#\s*([A-Za-z][A-Za-z0-9]*)\s*=\s*(.*?)\s*$/.exec(lines[i]);
    if (!directive) break;
    if (directive[1].toLowerCase() === 'escape' && directive[2] !== '\\') {
      throw at(i + 1, `the escape directive is not supported; lines continue with "\\"`);
    }
  }
  while (i < lines.length) {
    const first = lines[i];
    const line = i + 1;
    i++;
    if (isSkippable(first)) continue;
    let text = first.trimStart();
    for (let cont = /\\[ \t]*$/.exec(text); cont; cont = /\\[ \t]*$/.exec(text)) {
      text = text.slice(0, cont.index);
      let next: string | undefined;
      while (i < lines.length) {
        const candidate = lines[i++];
        if (isSkippable(candidate)) continue;
        next = candidate;
        break;
      }
      if (next === undefined) break;
      text += next;
    }
    text = text.trimEnd();
    const m = /^(\S+)(?:\s+([\s\S]*))?$/.exec(text)!;
    if (out.length >= MAX_INSTRUCTIONS) throw at(line, `too many instructions; a Dockerfile may have at most ${MAX_INSTRUCTIONS}`);
    out.push({ line, keyword: m[1].toUpperCase(), args: m[2] ?? '' });
  }
  return out;
}

/** Splits at unquoted whitespace, keeping quotes and escapes in the words (Docker's parseWords). */
function splitWords(text: string): string[] {
  const words: string[] = [];
  let current = '';
  let inWord = false;
  let quote: string | null = null;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quote) {
      current += ch;
      if (ch === '\\' && quote === '"' && i + 1 < text.length) current += text[++i];
      else if (ch === quote) quote = null;
      continue;
    }
    if (ch === '\\') {
      current += ch;
      if (i + 1 < text.length) current += text[++i];
      inWord = true;
      continue;
    }
    if (/\s/.test(ch)) {
      if (inWord) words.push(current);
      current = '';
      inWord = false;
      continue;
    }
    if (ch === '"' || ch === "'") quote = ch;
    current += ch;
    inWord = true;
  }
  if (inWord) words.push(current);
  return words;
}

/** Docker's word processing: quote removal, backslash escapes and `$NAME`, `${NAME}`, `${NAME:-word}` and kin. */
class WordExpander {
  private pos = 0;
  private quiet = 0;
  private depth = 0;
  constructor(
    private readonly text: string,
    private readonly lookup: Lookup,
    private readonly line: number,
  ) {}

  expand(): string {
    return this.word(null);
  }

  private word(stop: string | null): string {
    const s = this.text;
    let out = '';
    while (this.pos < s.length) {
      const ch = s[this.pos];
      if (stop !== null && ch === stop) return out;
      if (ch === '\\') {
        out += this.pos + 1 < s.length ? s[this.pos + 1] : '\\';
        this.pos += 2;
      } else if (ch === "'") {
        const end = s.indexOf("'", this.pos + 1);
        if (end === -1) throw at(this.line, 'unterminated single quote');
        out += s.slice(this.pos + 1, end);
        this.pos = end + 1;
      } else if (ch === '"') {
        this.pos++;
        out += this.doubleQuoted();
      } else if (ch === '$') {
        out += this.dollar();
      } else {
        out += ch;
        this.pos++;
      }
    }
    if (stop !== null) throw at(this.line, `missing "${stop}" in variable substitution`);
    return out;
  }

  private doubleQuoted(): string {
    const s = this.text;
    let out = '';
    while (this.pos < s.length) {
      const ch = s[this.pos];
      if (ch === '"') {
        this.pos++;
        return out;
      }
      if (ch === '\\' && this.pos + 1 < s.length) {
        const next = s[this.pos + 1];
        out += next === '"' || next === '$' || next === '\\' ? next : `\\${next}`;
        this.pos += 2;
      } else if (ch === '$') {
        out += this.dollar();
      } else {
        out += ch;
        this.pos++;
      }
    }
    throw at(this.line, 'unterminated double quote');
  }

  private readName(): string {
    const m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(this.text.slice(this.pos));
    if (!m) return '';
    this.pos += m[0].length;
    return m[0];
  }

  private resolve(name: string): string | undefined {
    const found = this.lookup(name);
    if (found === 'no-default') {
      if (this.quiet > 0) return undefined;
      throw at(this.line, argWithoutDefault(name));
    }
    return found?.value;
  }

  private dollar(): string {
    const s = this.text;
    this.pos++; // '$'
    if (s[this.pos] !== '{') {
      const name = this.readName();
      return name ? (this.resolve(name) ?? '') : '$';
    }
    const start = this.pos - 1;
    this.pos++; // '{'
    const name = this.readName();
    if (!name) throw at(this.line, `bad substitution "${s.slice(start, s.indexOf('}', start) + 1 || undefined)}"`);
    if (s[this.pos] === '}') {
      this.pos++;
      return this.resolve(name) ?? '';
    }
    if (this.pos >= s.length) throw at(this.line, 'missing "}" in variable substitution');
    const modifier = [':-', ':+', ':?', '-', '+', '?'].find((m) => s.startsWith(m, this.pos));
    if (!modifier) {
      throw at(
        this.line,
        `unsupported substitution "${s.slice(start, s.indexOf('}', start) + 1 || undefined)}"; use $NAME, \${NAME}, \${NAME:-default} or \${NAME:+alternative}`,
      );
    }
    this.pos += modifier.length;
    if (++this.depth > MAX_SUBSTITUTION_DEPTH) throw at(this.line, `variable substitutions are nested more than ${MAX_SUBSTITUTION_DEPTH} deep`);
    const found = this.lookup(name);
    const value = found === undefined || found === 'no-default' ? undefined : found.value;
    const set = modifier.startsWith(':') ? value !== undefined && value !== '' : value !== undefined;
    const useWord = modifier.endsWith('-') ? !set : modifier.endsWith('+') ? set : !set;
    if (!useWord) this.quiet++;
    const word = this.word('}');
    if (!useWord) this.quiet--;
    this.depth--;
    this.pos++; // '}'
    if (modifier.endsWith('?')) {
      if (!set) throw at(this.line, `${name}: ${word || 'is not set'}`);
      return value!;
    }
    if (modifier.endsWith('-')) return set ? value! : word;
    return set ? word : '';
  }
}

function argWithoutDefault(name: string): string {
  return `ARG ${name} has no default and is used here; Hangar builds take no build arguments, so give it one (ARG ${name}=value)`;
}

function expandWord(raw: string, lookup: Lookup, line: number): string {
  return new WordExpander(raw, lookup, line).expand();
}

/** `k=v k2="v 2"` or the legacy `k v with spaces`, expanded with the variables as they were before this line. */
function parsePairs(keyword: string, args: string, lookup: Lookup, line: number): [string, string][] {
  const words = splitWords(args);
  if (words.length === 0) throw at(line, `${keyword} needs a name and a value (${keyword} NAME=value)`);
  if (!words[0].includes('=')) {
    const legacy = /^(\S+)\s+([\s\S]+)$/.exec(args.trim());
    if (!legacy) throw at(line, `${keyword} ${words[0]} has no value; write ${keyword} NAME=value`);
    return [[expandWord(legacy[1], lookup, line), expandWord(legacy[2], lookup, line)]];
  }
  return words.map((word) => {
    const eq = word.indexOf('=');
    if (eq === -1) throw at(line, `${keyword} expects NAME=value pairs; "${word}" has no "="`);
    if (eq === 0) throw at(line, `${keyword} has a pair with no name ("${word}")`);
    return [expandWord(word.slice(0, eq), lookup, line), expandWord(word.slice(eq + 1), lookup, line)];
  });
}

function resolvePath(base: string, path: string): string {
  const parts: string[] = [];
  for (const segment of (path.startsWith('/') ? path : `${base}/${path}`).split('/')) {
    if (segment === '' || segment === '.') continue;
    if (segment === '..') parts.pop();
    else parts.push(segment);
  }
  return `/${parts.join('/')}`;
}

/** Shell-form RUN text with a heredoc (`<<EOF`), which would swallow the following lines in BuildKit. */
const HEREDOC = /(?:^|\s)\d*<<-?(?!<)\s*["']?[A-Za-z_]/;

/**
 * Plans a template from a Dockerfile: FROM <template slug> first, then RUN, ENV, WORKDIR, ARG and LABEL
 * with Docker's parsing, substitution and scoping. Each RUN becomes a step that exports the ENV and ARG
 * values declared before it and `cd`s into the current WORKDIR, then runs the command as `/bin/sh -c`
 * would (errors do not stop it midway; its exit status decides).
 */
export function planFromDockerfile(dockerfile: string, inherited: InheritedContext = {}): BuildPlan {
  if (typeof dockerfile !== 'string') throw errors.invalidField('dockerfile', 'must be a string');
  if (Buffer.byteLength(dockerfile) > MAX_DOCKERFILE_BYTES) {
    throw errors.invalidField('dockerfile', `must be at most 64 KiB (got ${Buffer.byteLength(dockerfile)} bytes)`);
  }
  if (dockerfile.includes('\u0000')) throw errors.invalidField('dockerfile', 'must not contain NUL');

  const instructions = splitInstructions(dockerfile);
  const inheritedEnv: Record<string, string> = { PATH: DEFAULT_PATH, ...(inherited.env ?? {}) };
  const globalArgs = new Map<string, string | undefined>();
  const stageArgs = new Map<string, string | undefined>();
  const env = new Map<string, string>();
  const scriptEnv = new Map<string, string>();
  const labels = new Map<string, string>();
  const steps: BuildStep[] = [];
  const described: string[] = [];
  let from: string | null = null;
  let workdir: string | null = null;
  let workdirPending = false;

  const globalLookup: Lookup = (name) => {
    if (!globalArgs.has(name)) return undefined;
    const v = globalArgs.get(name);
    return v === undefined ? 'no-default' : { value: v };
  };
  const stageLookup: Lookup = (name) => {
    if (env.has(name)) return { value: env.get(name)! };
    if (stageArgs.has(name)) {
      const v = stageArgs.get(name);
      return v === undefined ? 'no-default' : { value: v };
    }
    return Object.hasOwn(inheritedEnv, name) ? { value: inheritedEnv[name] } : undefined;
  };

  for (const { line, keyword, args } of instructions) {
    described.push(args ? `${keyword} ${args.replace(/\s+/g, ' ')}` : keyword);
    if (from === null && keyword !== 'FROM' && keyword !== 'ARG') {
      if (DOCKERFILE_INSTRUCTIONS.includes(keyword)) {
        throw at(
          line,
          `${keyword} comes before FROM; a Dockerfile must start with FROM <template>, such as FROM base-ubuntu (only ARG may come first)`,
        );
      }
    }
    switch (keyword) {
      case 'FROM': {
        if (from !== null) throw at(line, 'only one FROM is allowed; multi-stage builds are not supported');
        const words = splitWords(args);
        if (words.length === 0) throw at(line, 'FROM needs a template slug, such as FROM base-ubuntu');
        if (words[0].startsWith('--')) throw at(line, `FROM ${words[0].split('=')[0]} is not supported`);
        if (words.length > 1) {
          if (words[1].toLowerCase() === 'as') throw at(line, 'FROM ... AS <name> is not supported: a template is built in one stage');
          throw at(line, 'FROM takes exactly one template slug, such as FROM base-ubuntu');
        }
        const slug = expandWord(words[0], globalLookup, line);
        if (/[:/@]/.test(slug)) {
          throw at(
            line,
            `FROM names a Hangar template slug such as base-ubuntu, not a container image ("${slug}"); templates build on this server's own userland`,
          );
        }
        if (slug === 'scratch') {
          throw at(
            line,
            'FROM scratch is not supported: every template builds on the base layer; FROM names a Hangar template slug such as base-ubuntu',
          );
        }
        if (!SLUG.test(slug)) {
          throw at(line, `FROM "${slug}" is not a template slug (lowercase letters, digits and "-", up to 63 characters), such as base-ubuntu`);
        }
        from = slug;
        break;
      }
      case 'ARG': {
        const words = splitWords(args);
        if (words.length === 0) throw at(line, 'ARG needs a name (ARG NAME or ARG NAME=default)');
        for (const word of words) {
          const eq = word.indexOf('=');
          const name = eq === -1 ? word : word.slice(0, eq);
          if (!ENV_NAME.test(name)) throw at(line, `ARG name "${name}" must be letters, digits and "_", not starting with a digit`);
          if (from === null) {
            globalArgs.set(name, eq === -1 ? undefined : expandWord(word.slice(eq + 1), globalLookup, line));
            continue;
          }
          let value: string | undefined;
          if (eq !== -1) value = expandWord(word.slice(eq + 1), stageLookup, line);
          else value = stageArgs.get(name) ?? globalArgs.get(name);
          if (value !== undefined) checkEnvValue(value, (m) => at(line, `ARG ${name}: ${m}`));
          stageArgs.set(name, value);
          if (value !== undefined && !env.has(name)) scriptEnv.set(name, value);
        }
        break;
      }
      case 'RUN': {
        const rest = args.trim();
        if (rest.startsWith('--')) {
          const flag = /^\S+/.exec(rest)![0].split('=')[0];
          throw at(line, `RUN ${flag} is not supported: a build step is a plain shell command`);
        }
        if (rest === '') throw at(line, 'RUN needs a command');
        let command: string | null = null;
        if (rest.startsWith('[')) {
          try {
            const parsed: unknown = JSON.parse(rest);
            if (Array.isArray(parsed) && parsed.every((p) => typeof p === 'string')) {
              if (parsed.length === 0) throw at(line, 'RUN [] has no command');
              command = (parsed as string[]).map(shellQuote).join(' ');
            }
          } catch (err) {
            if (!(err instanceof SyntaxError)) throw err;
          }
        }
        if (command === null) {
          if (HEREDOC.test(rest)) {
            throw at(line, 'RUN with a heredoc (<<EOF) is not supported; write the lines with "\\" continuations, or printf into a file');
          }
          for (const [name, value] of stageArgs) {
            if (value !== undefined || env.has(name)) continue;
            const used = new RegExp(`\\$(?:${name}(?![A-Za-z0-9_])|\\{${name}(?:\\}|:?\\?))`);
            if (used.test(rest)) throw at(line, argWithoutDefault(name));
          }
          command = rest;
        }
        const lines = [...scriptEnv].map(([k, v]) => exportLine(k, v));
        if (workdir !== null) lines.push(`mkdir -p ${shellQuote(workdir)}`, `cd ${shellQuote(workdir)}`);
        // Docker runs RUN with `/bin/sh -c`: a failing command in the middle does not stop it.
        lines.push('set +e', command);
        steps.push({ kind: 'run', title: `RUN ${truncate(command, TITLE_CHARS)}`, script: lines.join('\n') });
        workdirPending = false;
        break;
      }
      case 'ENV': {
        // All pairs see the variables as they were before this line, like Docker.
        const pairs = parsePairs('ENV', args, stageLookup, line);
        for (const [name, value] of pairs) {
          if (!ENV_NAME.test(name) || name.length > MAX_NAME_CHARS) {
            throw at(line, `ENV name "${name}" must be letters, digits and "_", not starting with a digit`);
          }
          checkEnvValue(value, (m) => at(line, `ENV ${name}: ${m}`));
        }
        for (const [name, value] of pairs) {
          env.set(name, value);
          scriptEnv.set(name, value);
        }
        if (env.size > MAX_ENV_KEYS) throw at(line, `too many ENV variables; at most ${MAX_ENV_KEYS}`);
        break;
      }
      case 'WORKDIR': {
        if (args.trim() === '') throw at(line, 'WORKDIR needs a path, such as WORKDIR /home/user/app');
        const path = expandWord(args.trim(), stageLookup, line);
        if (path === '') throw at(line, 'WORKDIR path is empty after substitution');
        if (hasControlChar(path)) throw at(line, 'WORKDIR path must not contain control characters');
        const resolved = resolvePath(workdir ?? inherited.workdir ?? '/', path);
        if (Buffer.byteLength(resolved) > MAX_WORKDIR_BYTES) throw at(line, `WORKDIR path must be at most ${MAX_WORKDIR_BYTES} bytes`);
        workdir = resolved;
        workdirPending = true;
        break;
      }
      case 'LABEL': {
        const pairs = parsePairs('LABEL', args, stageLookup, line);
        for (const [key, value] of pairs) {
          if (!LABEL_KEY.test(key) || key.length > MAX_NAME_CHARS) {
            throw at(line, `LABEL key "${key}" must be letters, digits, ".", "_", "-" and "/", starting with a letter or digit`);
          }
          checkEnvValue(value, (m) => at(line, `LABEL ${key}: ${m}`));
          labels.set(key, value);
        }
        if (labels.size > MAX_LABELS) throw at(line, `too many labels; at most ${MAX_LABELS}`);
        break;
      }
      default: {
        const reason = UNSUPPORTED[keyword];
        if (reason) throw at(line, `${keyword} is not supported: ${reason}. ${supportedList()}`);
        throw at(line, `unknown instruction "${keyword}". ${supportedList()}`);
      }
    }
  }

  if (from === null) {
    throw errors.invalidField('dockerfile', 'FROM <template> is required, naming the template to build on, such as FROM base-ubuntu');
  }
  // WORKDIR creates its folder even when no RUN follows it.
  if (workdir !== null && workdirPending) {
    steps.push({ kind: 'run', title: `WORKDIR ${workdir}`, script: `mkdir -p ${shellQuote(workdir)}` });
  }

  return {
    from,
    steps,
    env: Object.fromEntries(env),
    workdir,
    labels: Object.fromEntries(labels),
    summary: { apt: [], npm: [], pip: [], runtimes: [], dockerfileInstructions: described },
  };
}
