/**
 * What both template planners share: the plan's shape, the limits on names and values, and how a step's
 * shell script quotes words and exports variables. Pure: no I/O.
 */
/** The `os` values a template can name (the spec's list); see src/platform/sandboxes/os-images.ts. */
export const KNOWN_OS = ['ubuntu-22.04', 'ubuntu-24.04', 'debian-12', 'alpine-3.19'] as const;

/**
 * What a template is built on: an OS image built from the distribution's mirror (ADR 0022), or this server's
 * own userland (the host base layer, ADR 0010). `os` is the distribution either way.
 */
export interface BuildBase {
  os: string;
  kind: 'image' | 'host';
}

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
  /**
   * What the bottom of the template is (the parent's for a Dockerfile FROM another template); set by the
   * planner or the service. Absent in plans written before OS images: the host's userland.
   */
  base?: BuildBase;
  /** The OS image (its id) the template was built on; set when its build has made or found the image. */
  image?: string;
  /** Why a template whose request left `os` out stands on the host's userland rather than the default os. */
  fallback?: string;
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

export const MAX_ENV_KEYS = 100;
export const MAX_VALUE_CHARS = 4096;
export const MAX_NAME_CHARS = 256;
export const TITLE_CHARS = 80;

export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

// ---------------------------------------------------------------------------------------------
// Shell quoting

const SHELL_SAFE = /^[A-Za-z0-9_@%+=:,./-]+$/;

/** Quotes a word for /bin/sh, leaving words made only of harmless characters bare. */
export function shellQuote(word: string): string {
  return SHELL_SAFE.test(word) ? word : singleQuote(word);
}

function singleQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

export function exportLine(name: string, value: string): string {
  return `export ${name}=${singleQuote(value)}`;
}

export function truncate(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max)}…` : flat;
}

// ---------------------------------------------------------------------------------------------
// Values

export function checkEnvValue(value: string, fail: (message: string) => Error): void {
  if (value.length > MAX_VALUE_CHARS) throw fail(`value must be at most ${MAX_VALUE_CHARS} characters`);
  if (value.includes('\u0000')) throw fail('value must not contain NUL');
}
