/**
 * Plans a template from a Dockerfile: FROM, RUN, ENV, WORKDIR, ARG and LABEL with Docker's scoping, on
 * top of the lexer in dockerfile-lexer.ts. Pure: no I/O.
 */
import { errors } from '../../platform/http/errors.js';
import { hasControlChar } from '../../platform/text.js';
import { argWithoutDefault, at, expandWord, type Lookup, parsePairs, splitInstructions, splitWords } from './dockerfile-lexer.js';
import {
  type BuildPlan,
  type BuildStep,
  checkEnvValue,
  DOCKERFILE_INSTRUCTIONS,
  ENV_NAME,
  exportLine,
  MAX_ENV_KEYS,
  MAX_NAME_CHARS,
  shellQuote,
  TITLE_CHARS,
  truncate,
} from './plan-common.js';

/** What the parent template gives a Dockerfile: `$VAR` in ENV/WORKDIR/LABEL and relative WORKDIRs resolve against it. */
export interface InheritedContext {
  env?: Record<string, string>;
  workdir?: string | null;
}

const MAX_LABELS = 100;
const MAX_WORKDIR_BYTES = 1024;
const MAX_DOCKERFILE_BYTES = 64 * 1024;
/** PATH of the base layer, for `$PATH` in a Dockerfile when the parent's env is not given. */
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

const SLUG = /^[a-z0-9][a-z0-9-]{0,62}$/;
const LABEL_KEY = /^[A-Za-z0-9][A-Za-z0-9._/-]*$/;

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

const supportedList = () => `Supported instructions are ${DOCKERFILE_INSTRUCTIONS.join(', ')}`;

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
