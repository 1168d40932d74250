import fs from 'node:fs';
import path from 'node:path';

/**
 * Relative links and #anchors of the repository's Markdown pages, and the docs/… references of
 * code comments, checked against the files and headings they name (test/unit/docs/links.test.ts).
 * Anchors are computed as GitHub renders headings: inline markup dropped, lower case, every
 * character but letters, digits, `_`, `-` and spaces removed, spaces turned into `-`, and a
 * repeated heading suffixed `-1`, `-2`, … in page order.
 */

/** GitHub's anchor of one heading text (before duplicate suffixes). */
export function slug(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/<[^>]+>/g, '')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M}_\- ]/gu, '')
    .replace(/ /g, '-');
}

/** Lines of a Markdown text outside fenced code blocks. */
function proseLines(text: string): string[] {
  const out: string[] = [];
  let fence: string | undefined;
  for (const line of text.split('\n')) {
    const m = /^\s{0,3}(`{3,}|~{3,})/.exec(line);
    if (m) {
      if (fence === undefined) fence = m[1]![0]!.repeat(m[1]!.length);
      else if (m[1]!.startsWith(fence)) fence = undefined;
      out.push('');
      continue;
    }
    out.push(fence === undefined ? line : '');
  }
  return out;
}

/** Every anchor a page defines: its headings (with duplicate suffixes) and explicit `id`/`name` attributes. */
export function anchorsOf(text: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of proseLines(text)) {
    const h = /^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$/.exec(line);
    if (h) {
      const base = slug(h[1]!);
      const n = seen.get(base) ?? 0;
      seen.set(base, n + 1);
      anchors.add(n === 0 ? base : `${base}-${n}`);
    }
    for (const m of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(m[1]!);
  }
  return anchors;
}

/** The link targets of a page: inline links and images, and reference definitions; code spans left out. */
export function linksOf(text: string): { line: number; target: string }[] {
  const out: { line: number; target: string }[] = [];
  proseLines(text).forEach((raw, i) => {
    const line = raw.replace(/(`+)[\s\S]*?\1/g, '');
    for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) out.push({ line: i + 1, target: m[1]! });
    const def = /^ {0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)/.exec(line);
    if (def) out.push({ line: i + 1, target: def[1]! });
  });
  return out;
}

/** The Markdown pages whose links are checked, relative to `root`. */
export function pagesToCheck(root: string): string[] {
  const pages = ['README.md', 'SECURITY.md', 'CHANGELOG.md'].filter(p => fs.existsSync(path.join(root, p)));
  const walk = (dir: string): void => {
    if (!fs.existsSync(path.join(root, dir))) return;
    for (const e of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
      const rel = path.posix.join(dir, e.name);
      if (e.isDirectory()) walk(rel);
      else if (e.name.endsWith('.md')) pages.push(rel);
    }
  };
  walk('docs');
  walk('examples');
  return pages;
}

/**
 * Whether `target` (a path relative to the repository root, with an optional #anchor) names a
 * file or directory that exists and, for a Markdown file, an anchor it defines. Undefined when
 * it resolves, else why not.
 */
export function resolveTarget(root: string, target: string): string | undefined {
  const hash = target.indexOf('#');
  const file = hash < 0 ? target : target.slice(0, hash);
  const anchor = hash < 0 ? undefined : decodeURIComponent(target.slice(hash + 1));
  const abs = path.join(root, decodeURIComponent(file));
  if (path.relative(root, abs).startsWith('..')) return 'leaves the repository';
  if (!fs.existsSync(abs)) return 'no such file';
  if (anchor === undefined || anchor === '') return undefined;
  if (!abs.endsWith('.md')) return /^L\d+(-L\d+)?$/.test(anchor) ? undefined : `an anchor on a file that is not Markdown`;
  return anchorsOf(fs.readFileSync(abs, 'utf8')).has(anchor) ? undefined : `no heading with the anchor #${anchor}`;
}

/** Every broken relative link of the pages, as `page:line: target (why)`. */
export function brokenLinks(root: string): string[] {
  const broken: string[] = [];
  for (const page of pagesToCheck(root)) {
    const text = fs.readFileSync(path.join(root, page), 'utf8');
    for (const { line, target } of linksOf(text)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
      const rel = target.startsWith('#') ? `${page}${target}` : path.posix.join(path.posix.dirname(page), target);
      const why = resolveTarget(root, rel);
      if (why) broken.push(`${page}:${line}: ${target} (${why})`);
    }
  }
  return broken;
}

/** The source folders whose comments may point at the docs. */
const CODE_DIRS = ['bin', 'bench', 'cmp', 'proxy', 'worker', 'proto', 'test', 'infra', 'examples', '.ci'];
const CODE_FILE = /\.(ts|c|h|sh|proto|ya?ml)$|Dockerfile$/;

/**
 * The comments of a source file: `//` and block comments in TS, C and proto, string literals
 * skipped; the whole text of YAML, shell and Dockerfiles (their references are in comments and values).
 */
function commentsOf(file: string, text: string): string {
  if (!/\.(ts|c|h|proto)$/.test(file)) return text;
  const out: string[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"' || c === "'" || c === '`') {
      for (i++; i < text.length && text[i] !== c; i++) if (text[i] === '\\') i++;
    } else if (c === '/' && text[i + 1] === '/') {
      const end = text.indexOf('\n', i);
      out.push(text.slice(i, end < 0 ? undefined : end));
      i = end < 0 ? text.length : end;
    } else if (c === '/' && text[i + 1] === '*') {
      const end = text.indexOf('*/', i + 2);
      out.push(text.slice(i, end < 0 ? undefined : end + 2));
      i = end < 0 ? text.length : end + 1;
    }
  }
  return out.join('\n');
}

/** Every docs/… reference in code comments that does not resolve, as `file:  reference (why)`. */
export function brokenCodeReferences(root: string): string[] {
  const broken: string[] = [];
  const walk = (dir: string): void => {
    if (!fs.existsSync(path.join(root, dir))) return;
    for (const e of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
      const rel = path.posix.join(dir, e.name);
      if (e.isDirectory()) {
        if (e.name !== 'node_modules' && e.name !== 'fixtures') walk(rel);
      } else if (CODE_FILE.test(e.name)) {
        const comments = commentsOf(rel, fs.readFileSync(path.join(root, rel), 'utf8'));
        for (const m of comments.matchAll(/(?<![\w/.-])docs\/[\w./-]*\.md(?:#[\w-]+)?/g)) {
          const why = resolveTarget(root, m[0]);
          if (why) broken.push(`${rel}: ${m[0]} (${why})`);
        }
      }
    }
  };
  for (const d of CODE_DIRS) walk(d);
  return broken;
}
