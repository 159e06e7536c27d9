/**
 * TypeScript's compile step: esbuild strips the types on the host, in-process, and Node runs the result
 * in the sandbox. Transpiling parses the program but runs none of it, so it needs no sandbox; types are
 * not checked (as with tsx or `node --experimental-strip-types`). See docs/adr/0009-code-execution-api.md.
 */
import { transform, type Message } from 'esbuild';
import { PlanError, type SourceFile } from './languages.js';

export interface TranspileResult {
  files: SourceFile[];
  /** esbuild's errors and warnings, one `file:line:col: error: text` line each. */
  stderr: string;
  ok: boolean;
  timeMs: number;
}

const OUT_EXT: Record<string, string> = { '.ts': '.js', '.tsx': '.js', '.mts': '.mjs', '.cts': '.cjs' };
const TLA = 'Top-level await is currently not supported';

function format(kind: 'error' | 'warning', messages: Message[]): string {
  return messages
    .map((m) => {
      const at = m.location ? `${m.location.file}:${m.location.line}:${m.location.column + 1}: ` : '';
      const line = m.location?.lineText ? `\n    ${m.location.lineText}\n    ${' '.repeat(m.location.column)}^` : '';
      return `${at}${kind}: ${m.text}${line}\n`;
    })
    .join('');
}

/**
 * Transpiles every .ts/.tsx/.mts/.cts file to JavaScript beside it (`main.ts` -> `main.js`), CommonJS so
 * that extension-less relative imports resolve; a file using top-level await becomes an ES module (.mjs).
 * Other files pass through. The entry stays first.
 */
export async function transpileTypeScript(files: SourceFile[]): Promise<TranspileResult> {
  const t0 = performance.now();
  const out: SourceFile[] = [];
  let stderr = '';
  let ok = true;
  const names = new Set(files.map((f) => f.name));
  for (const [i, file] of files.entries()) {
    const dot = file.name.lastIndexOf('.');
    const extension = dot > 0 ? file.name.slice(dot) : '';
    const outExt = OUT_EXT[extension];
    if (!outExt && i > 0) {
      out.push(file);
      continue;
    }
    const base = outExt ? file.name.slice(0, dot) : file.name;
    const source = file.content.toString('utf8');
    // platform node: CommonJS output carries the export-name annotation Node's ESM loader reads, so an ES module
    // entry (top-level await) can import a CommonJS neighbour by name.
    const loader = extension === '.tsx' ? ('tsx' as const) : ('ts' as const);
    const options = { loader, target: 'node20', platform: 'node' as const, sourcefile: file.name };
    let code: string;
    let ext = outExt ?? '.js';
    try {
      const r = await transform(source, { ...options, format: ext === '.mjs' ? 'esm' : 'cjs' });
      code = r.code;
      stderr += format('warning', r.warnings);
    } catch (err) {
      const errors = (err as { errors?: Message[] }).errors;
      if (!errors) throw err;
      if (errors.length > 0 && errors.every((e) => e.text.startsWith(TLA))) {
        const r = await transform(source, { ...options, format: 'esm' });
        code = r.code;
        ext = '.mjs';
        stderr += format('warning', r.warnings);
      } else {
        stderr += format('error', errors);
        ok = false;
        continue;
      }
    }
    const name = `${base}${ext}`;
    if (name !== file.name && names.has(name)) {
      throw new PlanError(`body.files.${i}.name`, `${file.name} transpiles to ${name}, which another file already uses`);
    }
    out.push({ name, content: Buffer.from(code) });
  }
  return { files: out, stderr, ok, timeMs: performance.now() - t0 };
}
