/**
 * The Dockerfile lexer: splits a Dockerfile into instructions and words the way Docker does, and expands
 * words (quotes, escapes, `$NAME` and `${NAME:-word}` substitutions). Pure: no I/O.
 */
import { errors } from '../../platform/http/errors.js';

const MAX_INSTRUCTIONS = 200;
/** `${A:-${B:-...}}` nesting; the expander recurses per level, so thousands of levels overflowed the stack (a 500). */
const MAX_SUBSTITUTION_DEPTH = 32;

export type Lookup = (name: string) => { value: string } | 'no-default' | undefined;

export interface Instruction {
  line: number;
  keyword: string;
  args: string;
}

/** Every Dockerfile rejection names its line. */
export function at(line: number, message: string) {
  return errors.invalidField('dockerfile', `line ${line}: ${message}`);
}

/** Splits a Dockerfile into instructions the way Docker does: comments, blank lines and `\` continuations. */
export function splitInstructions(text: string): Instruction[] {
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
export function splitWords(text: string): string[] {
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
export class WordExpander {
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

export function argWithoutDefault(name: string): string {
  return `ARG ${name} has no default and is used here; Hangar builds take no build arguments, so give it one (ARG ${name}=value)`;
}

export function expandWord(raw: string, lookup: Lookup, line: number): string {
  return new WordExpander(raw, lookup, line).expand();
}

/** `k=v k2="v 2"` or the legacy `k v with spaces`, expanded with the variables as they were before this line. */
export function parsePairs(keyword: string, args: string, lookup: Lookup, line: number): [string, string][] {
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
