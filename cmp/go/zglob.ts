import { posix } from 'node:path';
import { compareGoStrings, realFs, type GlobFs } from './glob-fs.js';

/*
 * mattn/go-zglob v0.0.6 `zglob.Glob` (no symlink following), as docs/argo-contract.md#matchrepository describes it.
 * zglob turns the pattern into a Go (RE2) regexp and walks the tree under the pattern's static
 * prefix, matching every visited path. The regexp text is rebuilt here exactly as zglob builds
 * it, then translated into an equivalent JS RegExp by a parser that follows Go's regexp/syntax
 * rules (and its error texts) for everything zglob's output can contain.
 */

/** go-zglob's `os.ErrNotExist` text for a literal pattern that does not stat. */
export const FILE_DOES_NOT_EXIST_TEXT = 'file does not exist';

/**
 * go-zglob `Glob(pattern)` against `fs`. Throws with the inner error text only (the caller adds
 * Argo's `error finding glob match for pattern "<abs>": ` prefix). Matches are returned in
 * Go string order (go-zglob's own order depends on a concurrent walk).
 */
export async function zglob(pattern: string, fs: GlobFs = realFs): Promise<string[]> {
  const root = walkRoot(pattern);
  if (root === undefined) {
    // Literal mode: os.Stat, and any failure is reported as ErrNotExist.
    const st = await fs.stat(pattern).catch(() => undefined); // reported as ErrNotExist below
    if (!st) throw new Error(FILE_DOES_NOT_EXIST_TEXT);
    return [pattern];
  }
  const re = compileGoRegexp('^' + zglobRegexp(goClean(pattern)) + '$');
  const rootStat = await fs.stat(root);
  if (!rootStat) throw new Error(`stat ${root}: ${await missingReason(root, fs)}`);
  if (!rootStat.isDir) return re.test(root) ? [root] : [];
  return (await walk(root, re, fs)).sort(compareGoStrings);
}

/**
 * The directory zglob walks: the path before the first segment containing `*` or `{`, or
 * undefined when there is none (literal mode).
 */
function walkRoot(pattern: string): string | undefined {
  const segments = pattern.split('/');
  const i = segments.findIndex(s => s.includes('*') || s.includes('{'));
  if (i < 0) return undefined;
  const prefix = segments.slice(0, i);
  if (prefix.length === 0) return '.';
  if (prefix.length === 1 && prefix[0] === '') return '/';
  return goClean(prefix.join('/'));
}

// Go's path.Clean (normalize, minus the trailing slash it keeps).
function goClean(p: string): string {
  const n = posix.normalize(p);
  return n.length > 1 && n.endsWith('/') ? n.slice(0, -1) : n;
}

// Why an os.Stat of a missing path fails: ENOTDIR when the nearest existing ancestor is not a
// directory, ENOENT otherwise.
async function missingReason(p: string, fs: GlobFs): Promise<string> {
  for (let dir = posix.dirname(p); ; dir = posix.dirname(dir)) {
    const st = await fs.stat(dir).catch(() => undefined); // not there: try its parent
    if (st) return st.isDir ? 'no such file or directory' : 'not a directory';
    if (dir === '/' || dir === '.') return 'no such file or directory';
  }
}

// Bounded parallelism for the per-entry lstat calls of one directory.
const LSTAT_BATCH = 64;

// fastwalk without symlink following: every entry below root is visited, real directories
// are descended (also when they match), symlinks are visited as themselves.
async function walk(root: string, re: RegExp, fs: GlobFs): Promise<string[]> {
  const matches: string[] = [];
  const pending = [root];
  for (let dir = pending.pop(); dir !== undefined; dir = pending.pop()) {
    const names = (await fs.readdir(dir)) ?? [];
    for (let i = 0; i < names.length; i += LSTAT_BATCH) {
      // fastwalk joins with a plain "/", even after a root of "/".
      const paths = names.slice(i, i + LSTAT_BATCH).map(n => `${dir}/${n}`);
      const stats = await Promise.all(paths.map(p => fs.lstat(p)));
      paths.forEach((p, k) => {
        const st = stats[k];
        if (!st) return; // vanished while walking
        if (re.test(p)) matches.push(p);
        if (st.isDir && !st.isSymlink) pending.push(p);
      });
    }
  }
  return matches;
}

function isAlnum(c: string): boolean {
  return /^[0-9a-zA-Z]$/.test(c);
}

// zglob escapes every rune <= 255 that is not alphanumeric as a one-rune class.
function zglobLiteral(c: string): string {
  const cp = c.codePointAt(0)!;
  if (isAlnum(c) || cp > 255) return c;
  return `[\\x${cp.toString(16).toUpperCase().padStart(2, '0')}]`;
}

/** The regexp body go-zglob builds from a cleaned pattern (without the `^`/`$` anchors). */
export function zglobRegexp(globmask: string): string {
  const cc = Array.from(globmask);
  let mask = '';
  for (let i = 0; i < cc.length; i++) {
    const c = cc[i]!;
    if (i < cc.length - 2 && c === '*' && cc[i + 1] === '*' && cc[i + 2] === '/') {
      mask += '(.*/)?';
      i += 2;
    } else if (c === '*') {
      mask += '[^/]*';
    } else if (c === '{') {
      // An unclosed brace still emits its group and leaves the loop at the brace (as zglob).
      let alt = '';
      for (let j = i + 1; j < cc.length; j++) {
        const d = cc[j]!;
        if (d === ',') alt += '|';
        else if (d === '}') {
          i = j;
          break;
        } else alt += d === '/' ? d : zglobLiteral(d);
      }
      if (alt !== '') mask += `(${alt})`;
    } else if (c === '[') {
      // Class contents are copied verbatim: RE2 decides what they mean.
      let cls = '';
      for (let j = i + 1; j < cc.length; j++) {
        if (cc[j] === ']') {
          i = j;
          break;
        }
        cls += cc[j];
      }
      if (cls !== '') mask += `[${cls}]`;
    } else {
      mask += c === '/' ? c : zglobLiteral(c);
    }
  }
  return mask;
}

// ---- Go regexp/syntax (Perl flags) → JS RegExp with the `u` flag -------------------------------

/** Go's `*syntax.Error` text. */
function goRegexpError(code: string, expr: string): Error {
  return new Error(`error parsing regexp: ${code}: \`${expr}\``);
}

const INVALID_RANGE = 'invalid character class range';
const MAX_RUNE = 0x10ffff;

type Ranges = Array<[number, number]>;

/** A class item: explicit code point ranges, or a JS `\p{…}`/`\P{…}` property escape. */
type ClassItem = { ranges: Ranges } | { prop: string };

function negateRanges(ranges: Ranges): Ranges {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  const out: Ranges = [];
  let next = 0;
  for (const [lo, hi] of sorted) {
    if (lo > next) out.push([next, lo - 1]);
    next = Math.max(next, hi + 1);
  }
  if (next <= MAX_RUNE) out.push([next, MAX_RUNE]);
  return out;
}

function r(...pairs: Array<[number | string, number | string]>): Ranges {
  const cp = (x: number | string) => (typeof x === 'number' ? x : x.codePointAt(0)!);
  return pairs.map(([lo, hi]) => [cp(lo), cp(hi)]);
}

// Go's posixGroup and perlGroup tables (ASCII-only by definition).
const POSIX: Record<string, Ranges> = {
  '[:alnum:]': r(['0', '9'], ['A', 'Z'], ['a', 'z']),
  '[:alpha:]': r(['A', 'Z'], ['a', 'z']),
  '[:ascii:]': r([0, 0x7f]),
  '[:blank:]': r(['\t', '\t'], [' ', ' ']),
  '[:cntrl:]': r([0, 0x1f], [0x7f, 0x7f]),
  '[:digit:]': r(['0', '9']),
  '[:graph:]': r(['!', '~']),
  '[:lower:]': r(['a', 'z']),
  '[:print:]': r([' ', '~']),
  '[:punct:]': r(['!', '/'], [':', '@'], ['[', '`'], ['{', '~']),
  '[:space:]': r(['\t', '\r'], [' ', ' ']),
  '[:upper:]': r(['A', 'Z']),
  '[:word:]': r(['0', '9'], ['A', 'Z'], ['a', 'z'], ['_', '_']),
  '[:xdigit:]': r(['0', '9'], ['A', 'F'], ['a', 'f']),
};
const PERL: Record<string, Ranges> = {
  d: r(['0', '9']),
  s: r(['\t', '\n'], ['\f', '\r'], [' ', ' ']),
  w: POSIX['[:word:]']!,
};

function hexDigit(c: string | undefined): number {
  return c !== undefined && /^[0-9a-fA-F]$/.test(c) ? parseInt(c, 16) : -1;
}

function codePointAt(s: string, i: number): [string, number] {
  const cp = s.codePointAt(i);
  if (cp === undefined) return ['', i];
  const ch = String.fromCodePoint(cp);
  return [ch, i + ch.length];
}

// Go has no \b here: it would be ambiguous with the word boundary.
const C_ESCAPES: Record<string, number> = { a: 7, f: 12, n: 10, r: 13, t: 9, v: 11 };

// Go's parseEscape: the rune a `\…` sequence at s[i] denotes, and the index after it.
function parseEscape(s: string, i: number): [number, number] {
  let t = i + 1;
  if (t >= s.length) throw goRegexpError('trailing backslash at end of expression', '');
  let c: string;
  [c, t] = codePointAt(s, t);
  const invalid = () => goRegexpError('invalid escape sequence', s.slice(i, t));
  const cp = c.codePointAt(0)!;
  if (cp < 0x80 && !isAlnum(c)) return [cp, t];
  if (c >= '0' && c <= '7') {
    const isOctal = (x: string | undefined) => x !== undefined && x >= '0' && x <= '7';
    // A single non-zero digit would be a backreference, which RE2 rejects.
    if (c !== '0' && !isOctal(s[t])) throw invalid();
    let v = cp - 0x30;
    for (let k = 1; k < 3 && isOctal(s[t]); k++) v = v * 8 + (s.charCodeAt(t++) - 0x30);
    return [v, t];
  }
  if (c === 'x') {
    if (t >= s.length) throw invalid();
    [c, t] = codePointAt(s, t);
    if (c === '{') {
      let v = 0;
      let digits = 0;
      for (;;) {
        if (t >= s.length) throw invalid();
        [c, t] = codePointAt(s, t);
        if (c === '}') break;
        const h = hexDigit(c);
        if (h < 0) throw invalid();
        v = v * 16 + h;
        if (v > MAX_RUNE) throw invalid();
        digits++;
      }
      if (digits === 0) throw invalid();
      return [v, t];
    }
    const x = hexDigit(c);
    [c, t] = codePointAt(s, t);
    const y = hexDigit(c);
    if (x < 0 || y < 0) throw invalid();
    return [x * 16 + y, t];
  }
  const simple = C_ESCAPES[c];
  if (simple !== undefined) return [simple, t];
  throw invalid();
}

// Go's parseClassChar: `classStart` is where the class began (for "missing closing ]").
function parseClassChar(s: string, i: number, classStart: number): [number, number] {
  if (i >= s.length) throw goRegexpError('missing closing ]', s.slice(classStart));
  if (s[i] === '\\') return parseEscape(s, i);
  const [c, t] = codePointAt(s, i);
  return [c.codePointAt(0)!, t];
}

function validProperty(expr: string): boolean {
  try {
    new RegExp(expr, 'u');
    return true;
  } catch {
    return false; // not a Unicode property this engine knows
  }
}

// Go's parseUnicodeClass (`\pL`, `\p{Greek}`, `\P{^Lu}`), or undefined when s[i] is not one.
function parseUnicodeClass(s: string, i: number): [ClassItem, number] | undefined {
  if (s[i] !== '\\' || (s[i + 1] !== 'p' && s[i + 1] !== 'P')) return undefined;
  let negate = s[i + 1] === 'P';
  const [c, afterName] = codePointAt(s, i + 2);
  let seq: string;
  let name: string;
  let end: number;
  if (c !== '{') {
    seq = s.slice(i, afterName);
    name = seq.slice(2);
    end = afterName;
  } else {
    const close = s.indexOf('}', i);
    if (close < 0) throw goRegexpError(INVALID_RANGE, s.slice(i));
    seq = s.slice(i, close + 1);
    name = s.slice(i + 3, close);
    end = close + 1;
  }
  if (name.startsWith('^')) {
    negate = !negate;
    name = name.slice(1);
  }
  if (name === 'Any') return [{ ranges: negate ? [] : [[0, MAX_RUNE]] }, end];
  const p = negate ? 'P' : 'p';
  // Go looks names up among general categories first, then scripts.
  const candidates = /^\w+$/.test(name) ? [`\\${p}{gc=${name}}`, `\\${p}{sc=${name}}`] : [];
  const prop = candidates.find(validProperty);
  if (prop) return [{ prop }, end];
  throw goRegexpError(INVALID_RANGE, seq);
}

// Go's parseNamedClass (`[:alpha:]`, `[:^alpha:]`), or undefined when there is no `:]` ahead.
function parseNamedClass(s: string, i: number): [ClassItem, number] | undefined {
  const close = s.indexOf(':]', i + 2);
  if (close < 0) return undefined;
  const name = s.slice(i, close + 2);
  const negated = name.startsWith('[:^');
  const ranges = POSIX[negated ? `[:${name.slice(3)}` : name];
  if (!ranges) throw goRegexpError(INVALID_RANGE, name);
  return [{ ranges: negated ? negateRanges(ranges) : ranges }, close + 2];
}

function parsePerlClassEscape(s: string, i: number): [ClassItem, number] | undefined {
  if (s[i] !== '\\') return undefined;
  const c = s[i + 1];
  if (c === undefined) return undefined;
  const ranges = PERL[c.toLowerCase()];
  if (!ranges || !'dswDSW'.includes(c)) return undefined;
  return [{ ranges: c === c.toUpperCase() ? negateRanges(ranges) : ranges }, i + 2];
}

function jsRune(cp: number): string {
  return `\\u{${cp.toString(16)}}`;
}

// Go's parseClass starting at the `[` at s[start]; returns JS class source and the index after.
function parseClass(s: string, start: number): [string, number] {
  let t = start + 1;
  let negate = false;
  if (s[t] === '^') {
    negate = true;
    t++;
  }
  const items: ClassItem[] = [];
  let first = true; // a leading ] is a literal
  while (t >= s.length || s[t] !== ']' || first) {
    first = false;
    const special =
      (s.length - t > 2 && s[t] === '[' && s[t + 1] === ':' ? parseNamedClass(s, t) : undefined) ??
      parseUnicodeClass(s, t) ??
      parsePerlClassEscape(s, t);
    if (special) {
      items.push(special[0]);
      t = special[1];
      continue;
    }
    const rangeStart = t;
    let lo: number;
    [lo, t] = parseClassChar(s, t, start);
    let hi = lo;
    if (s.length - t >= 2 && s[t] === '-' && s[t + 1] !== ']') {
      [hi, t] = parseClassChar(s, t + 1, start);
      if (hi < lo) throw goRegexpError(INVALID_RANGE, s.slice(rangeStart, t));
    }
    items.push({ ranges: [[lo, hi]] });
  }
  const body = items
    .map(item =>
      'prop' in item
        ? item.prop
        : item.ranges.map(([lo, hi]) => (lo === hi ? jsRune(lo) : `${jsRune(lo)}-${jsRune(hi)}`)).join(''),
    )
    .join('');
  // An empty set: JS `[]` matches nothing and `[^]` everything, as Go's empty class would.
  return [`[${negate ? '^' : ''}${body}]`, t + 1];
}

/**
 * Compile a Go regexp as produced by zglob into a JS RegExp. Throws Go's `error parsing
 * regexp: …` texts. Outside classes zglob only emits literals, `.`, `*`, `?`, `|`, groups and
 * anchors, so that is all this accepts there.
 */
export function compileGoRegexp(re: string): RegExp {
  let out = '';
  let depth = 0;
  for (let i = 0; i < re.length; ) {
    const c = re[i]!;
    if (c === '[') {
      const [cls, next] = parseClass(re, i);
      out += cls;
      i = next;
      continue;
    }
    if (c === '(') depth++;
    if (c === ')' && depth-- === 0) throw goRegexpError('unexpected )', re);
    if ('()|*?^$'.includes(c)) out += c;
    else if (c === '.') out += '[^\\n]'; // Go's . excludes only \n
    else {
      const cp = re.codePointAt(i)!;
      out += isAlnum(c) || c === '/' ? c : jsRune(cp);
      i += cp > 0xffff ? 2 : 1;
      continue;
    }
    i++;
  }
  if (depth > 0) throw goRegexpError('missing closing )', re);
  // JS backtracks where RE2 does not: collapse the equivalent runs zglob emits for `**`, `***/`
  // or `**/**/` so hostile names cannot make matching polynomially slow.
  out = out.replace(/(\[\^\\u\{2f\}\]\*){2,}/g, '$1').replace(/(\(\[\^\\n\]\*\/\)\?){2,}/g, '$1');
  return new RegExp(out, 'u');
}
