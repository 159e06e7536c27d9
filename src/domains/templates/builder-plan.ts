/**
 * Plans a template from the package builder (`os`, `runtimes`, `apt`, `npm`, `pip`, `env`): checks every
 * entry and turns them into apt (apk on Alpine), npm and pip steps for the distribution it is built on. Pure: no I/O.
 */
import { errors } from '../../platform/http/errors.js';
import {
  type BuildPlan,
  type BuildStep,
  type BuildBase,
  ENV_NAME,
  exportLine,
  KNOWN_OS,
  MAX_ENV_KEYS,
  MAX_NAME_CHARS,
  shellQuote,
  TITLE_CHARS,
  truncate,
  checkEnvValue,
} from './plan-common.js';

export interface BuilderInput {
  os?: string;
  runtimes?: { name: string; version: string }[];
  apt?: string[];
  npm?: string[];
  pip?: string[];
  env?: Record<string, string>;
}

const MAX_PACKAGES = 200;
const MAX_RUNTIMES = 16;
const APT_PACKAGE = /^[a-z0-9][a-z0-9+.-]+(?:=[A-Za-z0-9.+~:-]+)?$/;
const APK_PACKAGE = /^[a-z0-9][a-z0-9_+.-]*(?:[=~]?=[A-Za-z0-9._+-]+)?$/;
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

interface Distro {
  label: string;
  /** apt (Debian, Ubuntu) or apk (Alpine): how the system packages of a template are installed. */
  manager: 'apt' | 'apk';
  versions: Record<string, string>;
  packages: Record<string, string[]>;
}

/** What each distribution's own packages give (the release pocket plus -updates; Alpine's main and community), per runtime. */
const DISTRO_RUNTIMES: Record<string, Distro> = {
  'debian-12': {
    label: 'Debian 12',
    manager: 'apt',
    versions: { python: '3.11', node: '18', go: '1.19', java: '17', ruby: '3.1', rust: '1.63' },
    packages: { java: ['openjdk-17-jdk-headless'], rust: ['rustc', 'cargo'] },
  },
  'ubuntu-22.04': {
    label: 'Ubuntu 22.04',
    manager: 'apt',
    versions: { python: '3.10', node: '12', go: '1.18', java: '17', ruby: '3.0', rust: '1.75' },
    packages: { java: ['openjdk-17-jdk-headless'], rust: ['rustc', 'cargo'] },
  },
  'ubuntu-24.04': {
    label: 'Ubuntu 24.04',
    manager: 'apt',
    versions: { python: '3.12', node: '18', go: '1.22', java: '21', ruby: '3.2', rust: '1.75' },
    packages: { java: ['openjdk-21-jdk-headless'], rust: ['rustc', 'cargo'] },
  },
  // Alpine 3.19's own packages (venv is part of python3 there); go and openjdk17 come from community.
  'alpine-3.19': {
    label: 'Alpine 3.19',
    manager: 'apk',
    versions: { python: '3.11', node: '20', go: '1.21', java: '17', ruby: '3.2', rust: '1.72' },
    packages: {
      python: ['python3', 'py3-pip'],
      node: ['nodejs', 'npm'],
      go: ['go'],
      java: ['openjdk17-jdk'],
      ruby: ['ruby'],
      rust: ['rust', 'cargo'],
    },
  },
};
const COMMON_PACKAGES: Record<string, string[]> = {
  python: ['python3', 'python3-pip', 'python3-venv'],
  node: ['nodejs', 'npm'],
  go: ['golang-go'],
  ruby: ['ruby-full'],
};

function runtimeCatalogue(base: BuildBase, hostNodeVersion: string): Record<string, RuntimeSpec> {
  if (base.kind === 'image') {
    const distro = DISTRO_RUNTIMES[base.os];
    if (!distro) throw errors.notImplemented(`runtimes on ${base.os}`);
    const offers = (name: string) => (version: string) =>
      `${distro.label} provides ${name} ${version} and no other ${name} version can be installed here`;
    return Object.fromEntries(
      Object.entries(distro.versions).map(([name, version]) => [
        name,
        { packages: distro.packages[name] ?? COMMON_PACKAGES[name]!, version, offers: offers(name) },
      ]),
    );
  }
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

function checkApk(name: string, field: string): void {
  if (!APK_PACKAGE.test(name) || name.length > MAX_NAME_CHARS) {
    throw errors.invalidField(
      field,
      `"${name}" is not an Alpine package name (lowercase letters, digits, "_", "+", "-" and "." starting with a letter or digit, optionally "=version"); on alpine-3.19 these are installed with apk`,
    );
  }
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

/** `os` as named in a request: one of the spec's values (400 naming them otherwise). */
export function checkOs(os: unknown): string {
  if (typeof os !== 'string' || !(KNOWN_OS as readonly string[]).includes(os)) {
    throw errors.invalidField('os', `unknown operating system ${JSON.stringify(os)}; use one of ${KNOWN_OS.join(', ')} or leave os out`);
  }
  return os;
}

/**
 * Plans a template from the package builder: one apt step (runtimes first), then npm, then pip, each
 * exporting `env` first. `base` is what it is built on, chosen by the caller (the os the request named, or the
 * default); `hostNodeVersion` is the host base layer's Node (this process runs on it).
 */
export function planFromBuilder(input: BuilderInput, base: BuildBase, hostNodeVersion: string = process.versions.node): BuildPlan {
  if (input.os !== undefined) checkOs(input.os);
  if (base.kind === 'host' && base.os !== 'debian-12') throw errors.notImplemented(`building templates on a ${base.os} host`);
  if (base.kind === 'image' && !DISTRO_RUNTIMES[base.os]) throw errors.notImplemented(`building templates on ${base.os}`);

  const catalogue = runtimeCatalogue(base, hostNodeVersion);
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

  const apk = base.kind === 'image' && DISTRO_RUNTIMES[base.os]!.manager === 'apk';
  const apt = apk ? packageList(input.apt, 'apt', 'Alpine package names', checkApk) : packageList(input.apt, 'apt', 'Debian package names', checkApt);
  const npm = packageList(input.npm, 'npm', 'npm package names', checkNpm);
  const pip = packageList(input.pip, 'pip', 'PyPI requirements', checkPip);
  const env = validateEnv(input.env);

  const runtimePackages = dedupe(runtimes.flatMap((r) => r.packages));
  // pip needs python3-pip (the base layer may have python3 without it); on an OS image npm needs npm (with nodejs).
  const pipPackage = apk ? 'py3-pip' : 'python3-pip';
  const pipSupport = pip.length > 0 && !runtimePackages.includes(pipPackage) ? [pipPackage] : [];
  const npmSupport = base.kind === 'image' && npm.length > 0 && !runtimePackages.includes('npm') ? ['npm'] : [];
  const extraApt = dedupe([...pipSupport, ...npmSupport, ...apt]).filter((p) => !runtimePackages.includes(p));
  const aptPackages = [...runtimePackages, ...extraApt];

  const head = Object.entries(env).map(([k, v]) => exportLine(k, v));
  const steps: BuildStep[] = [];
  if (aptPackages.length > 0 && apk) {
    steps.push({
      kind: 'run',
      title: truncate(`apk add ${aptPackages.join(' ')}`, TITLE_CHARS),
      script: [...head, `apk add --no-cache --no-progress ${aptPackages.map(shellQuote).join(' ')}`].join('\n'),
    });
  } else if (aptPackages.length > 0) {
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
      script: [...head, `python3 -m pip install --no-cache-dir ${pipFlags(base)}${pip.map(shellQuote).join(' ')}`].join('\n'),
    });
  }

  return {
    from: null,
    base,
    steps,
    env,
    workdir: null,
    labels: {},
    summary: { apt: extraApt, npm, pip, runtimes, dockerfileInstructions: [] },
  };
}

/**
 * pip 23 and later (debian-12, ubuntu-24.04) refuse to install into the system Python without
 * --break-system-packages and warn about root without --root-user-action; Ubuntu 22.04's pip 22.0 knows neither
 * option (and refuses neither).
 */
function pipFlags(base: BuildBase): string {
  return base.kind === 'image' && base.os === 'ubuntu-22.04' ? '' : '--break-system-packages --root-user-action=ignore ';
}

function dedupe(list: string[]): string[] {
  return [...new Set(list)];
}
