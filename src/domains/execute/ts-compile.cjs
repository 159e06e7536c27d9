'use strict';
/**
 * TypeScript's compile step. It runs INSIDE the sandbox (installed read-only as /.hangar/ts-compile.cjs), with
 * the step's time and memory limits, as `node /.hangar/ts-compile.cjs FILE...` in /box: esbuild's JS API
 * (/.hangar/esbuild.js, driving the static binary /.hangar/esbuild) strips the types of each file. A program
 * that crashes or exhausts the transpiler fails only this step of its own execution.
 *
 * Each .ts/.tsx/.mts/.cts file becomes JavaScript beside it (`main.ts` -> `main.js`, `.mts` -> `.mjs`,
 * `.cts` -> `.cjs`), CommonJS so that extension-less relative imports resolve; a file using top-level await
 * becomes an ES module (`.mjs`). The entry (the first FILE) is transpiled whatever its extension
 * (`main` -> `main.js`); other files pass through. Messages are `file:line:col: error: text` lines on
 * stderr; any error exits 1. No output replaces an existing file.
 * See docs/adr/0009-code-execution-api.md.
 */
const fs = require('node:fs');
const path = require('node:path');
const { transform } = require(path.join(__dirname, 'esbuild.js'));

const OUT_EXT = { '.ts': '.js', '.tsx': '.js', '.mts': '.mjs', '.cts': '.cjs' };
const TLA = 'Top-level await is currently not supported';

function format(kind, messages) {
  return messages
    .map((m) => {
      const at = m.location ? `${m.location.file}:${m.location.line}:${m.location.column + 1}: ` : '';
      const line = m.location && m.location.lineText ? `\n    ${m.location.lineText}\n    ${' '.repeat(m.location.column)}^` : '';
      return `${at}${kind}: ${m.text}${line}\n`;
    })
    .join('');
}

async function main(files) {
  const names = new Set(files);
  const produced = new Set();
  let stderr = '';
  let ok = true;
  for (const [i, file] of files.entries()) {
    const dot = file.lastIndexOf('.');
    const extension = dot > 0 ? file.slice(dot) : '';
    const outExt = OUT_EXT[extension];
    if (!outExt && i > 0) continue;
    const base = outExt ? file.slice(0, dot) : file;
    const source = fs.readFileSync(file, 'utf8');
    // platform node: CommonJS output carries the export-name annotation Node's ESM loader reads, so an ES
    // module entry (top-level await) can import a CommonJS neighbour by name.
    const options = { loader: extension === '.tsx' ? 'tsx' : 'ts', target: 'node20', platform: 'node', sourcefile: file };
    let ext = outExt || '.js';
    let code;
    try {
      const r = await transform(source, { ...options, format: ext === '.mjs' ? 'esm' : 'cjs' });
      code = r.code;
      stderr += format('warning', r.warnings);
    } catch (err) {
      const errors = err && err.errors;
      if (!Array.isArray(errors) || errors.length === 0) throw err;
      if (errors.every((e) => e.text.startsWith(TLA))) {
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
    if (name !== file && (names.has(name) || produced.has(name))) {
      stderr += `${file}: error: transpiles to ${name}, which another file already uses\n`;
      ok = false;
      continue;
    }
    fs.writeFileSync(name, code, { flag: 'wx', mode: 0o644 });
    produced.add(name);
  }
  return { stderr, ok };
}

main(process.argv.slice(2)).then(
  ({ stderr, ok }) => {
    process.stderr.write(stderr);
    process.exitCode = ok ? 0 : 1;
  },
  (err) => {
    process.stderr.write(`error: the TypeScript transpiler failed: ${err && err.message ? err.message : err}\n`);
    process.exitCode = 1;
  },
);
