import { jsonSchema, tool, type ToolSet } from 'ai';
import path from 'node:path';
import type { Readable } from 'node:stream';

/**
 * The four agent tools (exec_command, write_stdin, apply_patch, view_image) over any host that can run processes
 * and move files: the sandbox's agent (src/domains/runs) or a device's workspace folder (src/device). Pure: no
 * domain imports, no state of its own.
 */

/** A process's output as the host streams it: base64 chunks, then its exit. */
export type ToolHostEvent =
  | { type: 'stdout' | 'stderr'; data: string }
  | { type: 'exit'; exitCode: number | null; signal: string | null; timedOut: boolean };

/** Exactly what the tools need of a host (the sandbox AgentClient satisfies it structurally). */
export interface ToolHost {
  startProcess(body: { cmd: string; cwd?: string; keepStdin?: boolean; timeoutMs?: number }): Promise<{ pid: number }>;
  output(pid: number, opts: { follow: boolean; signal?: AbortSignal }): AsyncIterable<ToolHostEvent>;
  /** `data` is base64. */
  sendStdin(pid: number, data: string, eof: boolean): Promise<unknown>;
  write(path: string, body: Buffer): Promise<unknown>;
  read(path: string): Promise<{ stream: Readable; size: number }>;
}

/** What a tool call gives back: text for the model (and the thread), optionally an image, and whether it failed. */
export interface ToolOutcome {
  output: string;
  isError: boolean;
  image?: { data: string; mediaType: string };
}

export interface ToolEnv {
  host: ToolHost;
  /** The home directory: relative paths resolve against it and apply_patch runs in it (the sandbox's is /home/user). */
  home: string;
  /** Where apply_patch keeps its scratch files (default /tmp). */
  tmp?: string;
  /** Pids this run started (write_stdin may only reach those). */
  pids: Set<number>;
  /** Streams live output (tool_output_delta frames). */
  onOutput: (chunk: string) => void;
  signal: AbortSignal;
}

/** What the model sees of a command's output: the head and tail of each stream past this many bytes. */
const OUTPUT_CAP = 32 * 1024;
const DEFAULT_TIMEOUT_MS = 60_000;
const MAX_TIMEOUT_MS = 15 * 60_000;
const IMAGE_MAX_BYTES = 5 * 1024 * 1024;
const IMAGE_TYPES: Record<string, string> = {
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
};

/** Where the tools act, in their descriptions: the sandbox's wording by default. */
export interface ToolPlace {
  /** e.g. `in your sandbox, as the unprivileged user "user" in /home/user` */
  where: string;
  /** The home directory (relative paths resolve against it). */
  home: string;
  /** Where view_image reads from, e.g. `in your sandbox`. */
  imagesIn: string;
}

export const SANDBOX_PLACE: ToolPlace = {
  where: 'in your sandbox, as the unprivileged user "user" in /home/user',
  home: '/home/user',
  imagesIn: 'in your sandbox',
};

/** One tool as plain JSON: what a model route takes (`parameters` is a JSON Schema). */
export interface ToolSpec {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
}

const schema = (properties: Record<string, unknown>, required: string[]) => ({ type: 'object', properties, required, additionalProperties: false });

/** The tools' names, descriptions and JSON Schemas, for the names given (unknown names are left out). */
export function toolSpecs(names: readonly string[], place: ToolPlace = SANDBOX_PLACE): ToolSpec[] {
  const all: ToolSpec[] = [
    {
      name: 'exec_command',
      description: `Run a shell command (bash) ${place.where}. Returns exit code, stdout and stderr (long output is cut in the middle). Set background true for a long-running process: you get its pid and its first output; send it input with write_stdin.`,
      parameters: schema(
        {
          cmd: { type: 'string', description: 'The command line' },
          cwd: { type: 'string', description: `Working directory (default ${place.home})` },
          timeout_ms: { type: 'integer', description: `Kill it after this long (default ${DEFAULT_TIMEOUT_MS}, at most ${MAX_TIMEOUT_MS})` },
          background: { type: 'boolean', description: 'Start it and return at once with its pid' },
        },
        ['cmd'],
      ),
    },
    {
      name: 'write_stdin',
      description: 'Write to the standard input of a background process you started with exec_command, then return its output so far.',
      parameters: schema(
        {
          pid: { type: 'integer' },
          data: { type: 'string', description: 'Text to write (include a trailing newline to send a line)' },
          close: { type: 'boolean', description: 'Close its stdin afterwards' },
        },
        ['pid', 'data'],
      ),
    },
    {
      name: 'apply_patch',
      description: `Apply a patch in unified diff format (as produced by \`diff -u\` or \`git diff\`; paths relative to ${place.home}, a/ and b/ prefixes allowed; /dev/null creates or deletes a file). Refused, changing nothing, when a hunk does not apply.`,
      parameters: schema({ patch: { type: 'string' } }, ['patch']),
    },
    {
      name: 'view_image',
      description: `Look at an image file (PNG, JPEG, GIF, WebP, at most 5 MB) ${place.imagesIn}.`,
      parameters: schema({ path: { type: 'string', description: `Absolute, or relative to ${place.home}` } }, ['path']),
    },
  ];
  return all.filter((t) => names.includes(t.name));
}

/** The definitions the model gets (no `execute`: the run loop executes calls itself, streaming their output into the thread). */
export function toolDefinitions(names: readonly string[], place: ToolPlace = SANDBOX_PLACE): ToolSet {
  const specs = new Map(toolSpecs(names, place).map((t) => [t.name, t]));
  // In the order of `names`, as before.
  return Object.fromEntries(
    names
      .filter((n) => specs.has(n))
      .map((n) => {
        const t = specs.get(n)!;
        return [n, tool({ description: t.description, inputSchema: jsonSchema(t.parameters as never) })];
      }),
  );
}

/** Quotes a path for bash when it needs it (the sandbox's /home/user does not, so its command stays as it was). */
const shq = (s: string) => (/^[\w/.,:@%+=-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);

function cap(text: string): string {
  if (Buffer.byteLength(text) <= OUTPUT_CAP) return text;
  const half = OUTPUT_CAP / 2;
  return `${text.slice(0, half)}\n… [${Buffer.byteLength(text) - OUTPUT_CAP} bytes cut] …\n${text.slice(-half)}`;
}

async function collect(env: ToolEnv, pid: number, follow: boolean, waitMs = 0) {
  let stdout = '';
  let stderr = '';
  let exit: { exitCode: number | null; signal: string | null; timedOut: boolean } | null = null;
  const controller = new AbortController();
  const stop = () => controller.abort();
  env.signal.addEventListener('abort', stop);
  const timer = waitMs ? setTimeout(stop, waitMs) : null;
  try {
    for await (const ev of env.host.output(pid, { follow, signal: controller.signal })) {
      if (ev.type === 'exit') {
        exit = ev;
        break;
      }
      const text = Buffer.from(ev.data, 'base64').toString('utf8');
      env.onOutput(text);
      if (ev.type === 'stdout') stdout += text;
      else stderr += text;
    }
  } catch (err) {
    if (!controller.signal.aborted) throw err;
  } finally {
    if (timer) clearTimeout(timer);
    env.signal.removeEventListener('abort', stop);
  }
  return { stdout, stderr, exit };
}

function describeRun(r: Awaited<ReturnType<typeof collect>>, pid: number): ToolOutcome {
  const head = r.exit
    ? r.exit.timedOut
      ? 'timed out (killed)'
      : r.exit.signal
        ? `killed by ${r.exit.signal}`
        : `exit code ${r.exit.exitCode}`
    : `still running (pid ${pid})`;
  const parts = [head];
  if (r.stdout) parts.push(`stdout:\n${cap(r.stdout)}`);
  if (r.stderr) parts.push(`stderr:\n${cap(r.stderr)}`);
  return { output: parts.join('\n'), isError: !!r.exit && (r.exit.exitCode !== 0 || r.exit.timedOut || !!r.exit.signal) };
}

const str = (v: unknown, name: string): string => {
  if (typeof v !== 'string' || !v) throw new ToolInputError(`"${name}" must be a non-empty string`);
  return v;
};

export class ToolInputError extends Error {}

/** Runs one tool call on the host. Failures the model can act on are outcomes with isError, not exceptions. */
export async function runTool(name: string, input: unknown, env: ToolEnv): Promise<ToolOutcome> {
  const args = (input ?? {}) as Record<string, unknown>;
  try {
    switch (name) {
      case 'exec_command': {
        const timeout = Math.min(MAX_TIMEOUT_MS, Math.max(1, Number(args.timeout_ms ?? DEFAULT_TIMEOUT_MS) || DEFAULT_TIMEOUT_MS));
        const background = args.background === true;
        const { pid } = await env.host.startProcess({
          cmd: str(args.cmd, 'cmd'),
          cwd: typeof args.cwd === 'string' ? args.cwd : undefined,
          keepStdin: background,
          timeoutMs: background ? 0 : timeout,
        });
        env.pids.add(pid);
        const r = await collect(env, pid, true, background ? 1000 : 0);
        return describeRun(r, pid);
      }
      case 'write_stdin': {
        const pid = Number(args.pid);
        if (!env.pids.has(pid)) return { output: `pid ${args.pid} is not a process this run started`, isError: true };
        await env.host.sendStdin(pid, Buffer.from(str(args.data, 'data')).toString('base64'), args.close === true);
        await new Promise((r) => setTimeout(r, 200));
        return describeRun(await collect(env, pid, false), pid);
      }
      case 'apply_patch': {
        const patch = str(args.patch, 'patch');
        const tmp = env.tmp ?? '/tmp';
        const file = `${tmp}/.hangar-patch-${Date.now()}-${Math.random().toString(36).slice(2)}.diff`;
        const out = `${tmp}/.hangar-patch.out`;
        await env.host.write(file, Buffer.from(patch.endsWith('\n') ? patch : `${patch}\n`));
        // Dry run first, so a patch that does not apply changes nothing; -p1 for a/ b/ prefixes, else -p0.
        const strip = /^(---|\+\+\+) (a|b)\//m.test(patch) ? 1 : 0;
        const [f, o] = [shq(file), shq(out)];
        const cmd = `cd ${shq(env.home)} && patch -p${strip} --forward --batch --dry-run -i ${f} >${o} 2>&1 && patch -p${strip} --forward --batch -i ${f}; code=$?; [ $code -ne 0 ] && cat ${o}; rm -f ${f} ${o}; exit $code`;
        const { pid } = await env.host.startProcess({ cmd, timeoutMs: 60_000 });
        const r = await collect(env, pid, true);
        const ok = r.exit?.exitCode === 0;
        return {
          output: ok ? `applied:\n${r.stdout.trim()}` : `the patch does not apply; nothing was changed:\n${cap(r.stdout + r.stderr).trim()}`,
          isError: !ok,
        };
      }
      case 'view_image': {
        const p = str(args.path, 'path');
        const abs = p.startsWith('/') ? p : path.posix.join(env.home, p);
        const mediaType = IMAGE_TYPES[path.posix.extname(abs).toLowerCase()];
        if (!mediaType) return { output: `${abs} is not a PNG, JPEG, GIF or WebP file`, isError: true };
        const { stream, size } = await env.host.read(abs);
        if (size > IMAGE_MAX_BYTES) {
          stream.destroy();
          return { output: `${abs} is ${size} bytes; images up to ${IMAGE_MAX_BYTES} bytes can be viewed`, isError: true };
        }
        const chunks: Buffer[] = [];
        for await (const c of stream) chunks.push(c as Buffer);
        return {
          output: `image ${abs} (${mediaType}, ${size} bytes)`,
          isError: false,
          image: { data: Buffer.concat(chunks).toString('base64'), mediaType },
        };
      }
      default:
        return { output: `unknown tool ${name}`, isError: true };
    }
  } catch (err) {
    return { output: `${name} failed: ${(err as Error).message}`, isError: true };
  }
}

/**
 * What the model gets back for a tool call (an AI SDK `tool-result` part), whoever ran it: a sandbox run's loop
 * or a device's. An image goes with its text; a failure is `error-text`, so the model knows it failed.
 */
export function toolResultPart(call: { id: string; name: string }, outcome: ToolOutcome) {
  return {
    type: 'tool-result' as const,
    toolCallId: call.id,
    toolName: call.name,
    output: outcome.image
      ? {
          type: 'content' as const,
          value: [
            { type: 'text' as const, text: outcome.output },
            { type: 'image-data' as const, data: outcome.image.data, mediaType: outcome.image.mediaType },
          ],
        }
      : outcome.isError
        ? { type: 'error-text' as const, value: outcome.output }
        : { type: 'text' as const, value: outcome.output },
  };
}
