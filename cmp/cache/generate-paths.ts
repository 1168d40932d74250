import path from 'node:path';
import type { Shape } from './read-set.js';

/** The Application annotation that lets Argo CD skip regeneration when no changed file matches it. */
export const GENERATE_PATHS_ANNOTATION = 'argocd.argoproj.io/manifest-generate-paths';

/**
 * Longest value we derive. Beyond it entries are collapsed to their directories: an
 * annotation of thousands of files is unreadable, and Kubernetes caps all annotations of an
 * object at 256 KiB together.
 */
export const GENERATE_PATHS_MAX_CHARS = 2048;

/**
 * Characters a component of an entry must not hold: Argo splits the value at `;`; `filepath.Match`
 * reads `*?[\` as pattern syntax, so such a name matches itself only through Argo's literal
 * equality and prefix tests (and other files as a pattern); control characters have no place in
 * an annotation; U+FFFD stands for bytes that were not UTF-8, whose real name is unknown. Its
 * parent directory has no such doubt.
 */
const UNSAFE = /[*?[\\;\u0000-\u001f\u007f\ufffd]/;

/**
 * Whitespace at either end of a component (Go's unicode.IsSpace: `\s` and U+0085): newer Argo
 * CD trims each entry (strings.TrimSpace), which would cut it off an entry that ends with it.
 */
const EDGE_SPACE = /^[\s\u0085]|[\s\u0085]$/;

/** The annotation's value, or why there is none. */
export type Derivation = { value: string } | { reason: string };

/**
 * Where the tarball root lies in the repository (`''` = the repository root): the app's source
 * path (ARGOCD_APP_SOURCE_PATH) minus the app path the request names inside the tarball. They
 * differ when the repo-server sends the common root of manifest-generate-paths
 * (`--plugin-use-manifest-generate-paths`). Undefined when they do not fit together.
 */
export function tarballRoot(sourcePath: string | undefined, appRelPath: string): string | undefined {
  if (sourcePath === undefined) return undefined;
  const source = relativeClean(sourcePath);
  const app = relativeClean(appRelPath);
  if (source === undefined || app === undefined) return undefined;
  if (app === '') return source;
  if (source === app) return '';
  return source.endsWith(`/${app}`) ? source.slice(0, -app.length - 1) : undefined;
}

/** `p` cleaned and relative to the repository root (`''` for the root), undefined if it leaves it. */
function relativeClean(p: string): string | undefined {
  const c = path.posix.normalize(p.replace(/^\/+/, '') || '.');
  if (c === '..' || c.startsWith('../')) return undefined;
  return c === '.' || c === './' ? '' : c.replace(/\/+$/, '');
}

/**
 * The value for one traced run: every path its shape touched (read, or probed and absent) and
 * every directory it listed, moved from the tarball root to the repository root. None when the
 * output is bound to the revision (every commit changes it: skipping one would keep manifests
 * that quote an old commit), when the run read `.git` (no change list names those files) or
 * when it read nothing (an empty annotation means "always refresh" to Argo CD).
 */
export function deriveFromShape(shape: Shape, root: string, maxChars = GENERATE_PATHS_MAX_CHARS): Derivation {
  if (shape.revision) return { reason: 'the output is bound to the revision (it quotes it, or CMP_OFFLOAD_CACHE_REVISION=always)' };
  const inRepo = (p: string) => (root === '' ? p : p === '' ? root : `${root}/${p}`);
  const paths = [...shape.touched, ...shape.listed].map(inRepo);
  if (paths.some(p => p === '.git' || p.startsWith('.git/'))) return { reason: 'the run read .git, whose files no change list names' };
  if (paths.length === 0) return { reason: 'the run read no path of the repository' };
  return { value: generatePathsValue(paths, maxChars) };
}

/**
 * An annotation value that matches, under Argo CD's rule, every changed file that is one of
 * `paths` or lies under one of them (paths relative to the repository root, `''` = the root),
 * however Argo learns of it: as the name itself (webhook payloads) or as `git diff --name-only`
 * prints it, C-quoted when git quotes it (see gitQuoted). Each entry appears as itself and as
 * git's quoted form opened (`"apps/web`: the directory of every quoted file under it, which is
 * how Argo's prefix test sees them), and, when git quotes the entry itself, closed
 * (`"shared/v\303\244rden.yaml"`, matched by equality). A path with characters an entry cannot
 * hold becomes its nearest clean ancestor; entries under another entry go (they match nothing
 * more); while the value is longer than `maxChars`, the deepest entries are replaced by their
 * directories, the groups saving most first, down to `/`, which matches everything.
 */
export function generatePathsValue(paths: Iterable<string>, maxChars = GENERATE_PATHS_MAX_CHARS): string {
  let entries = withoutCovered([...paths].map(safeAncestor));
  // Each form costs its text, its leading `/` and a `;` (one `;` fewer than forms).
  const costs = new Map<string, number>();
  const cost = (e: string) => {
    let c = costs.get(e);
    if (c === undefined) costs.set(e, (c = formsOf(e).reduce((n, f) => n + f.length + 2, 0)));
    return c;
  };
  let length = [...entries].reduce((n, e) => n + cost(e), -1);
  for (let depth = maxDepth(entries); length > maxChars && depth > 0; depth--) {
    const groups = new Map<string, string[]>();
    for (const e of entries) {
      if (depthOf(e) !== depth) continue;
      const parent = parentOf(e);
      const group = groups.get(parent);
      if (group) group.push(e);
      else groups.set(parent, [e]);
    }
    const saving = new Map([...groups].map(([parent, children]) => [parent, children.reduce((n, c) => n + cost(c), 0) - (entries.has(parent) ? 0 : cost(parent))]));
    const order = [...groups.keys()].sort((a, b) => saving.get(b)! - saving.get(a)! || (a < b ? -1 : a > b ? 1 : 0));
    for (const parent of order) {
      if (length <= maxChars) break;
      length -= saving.get(parent)!;
      for (const c of groups.get(parent)!) entries.delete(c);
      entries.add(parent);
    }
    if (entries.has('')) entries = new Set(['']);
  }
  return [...entries]
    .flatMap(formsOf)
    .sort()
    .map(f => `/${f}`)
    .join(';');
}

/**
 * The entry texts (without the leading `/`) that stand for `e`: itself, and git's quoted forms,
 * with core.quotePath (git's default) and without (bytes from 0x80 as they are).
 */
function formsOf(e: string): string[] {
  if (e === '') return [''];
  const forms = new Set([e]);
  for (const body of [gitQuotedBody(e), gitQuotedBody(e, false)]) {
    forms.add(`"${body}`);
    if (body !== e) forms.add(`"${body}"`);
  }
  return [...forms];
}

/** Escapes of git's C-quoting (quote_c_style) other than octal. */
const SHORT_ESCAPES: Record<number, string> = { 0x07: 'a', 0x08: 'b', 0x09: 't', 0x0a: 'n', 0x0b: 'v', 0x0c: 'f', 0x0d: 'r', 0x22: '"', 0x5c: '\\' };

/**
 * `p` between the quotes git prints it in, or `p` itself when git prints it as it is. Git
 * quotes a name holding a control character, DEL, `"` or `\` and, with core.quotePath (its
 * default, `quotePath`), a byte from 0x80; it escapes each such byte alone (octal unless it has
 * a short escape), so the quoted form of a path begins with that of each of its ancestors.
 */
export function gitQuotedBody(p: string, quotePath = true): string {
  const bytes = Buffer.from(p, 'utf8');
  const quote = (b: number) => needsQuote(b) || (quotePath && b >= 0x80);
  if (!bytes.some(quote)) return p;
  const out: number[] = [];
  for (const b of bytes) {
    if (!quote(b)) out.push(b);
    else if (SHORT_ESCAPES[b] !== undefined) out.push(0x5c, SHORT_ESCAPES[b]!.charCodeAt(0));
    else out.push(0x5c, ...Buffer.from(b.toString(8).padStart(3, '0')));
  }
  return Buffer.from(out).toString('utf8');
}

/** `p` as `git diff --name-only` prints it (without -z): quoted in `"` when it must be. */
export function gitQuoted(p: string, quotePath = true): string {
  const body = gitQuotedBody(p, quotePath);
  return body === p ? p : `"${body}"`;
}

/** Bytes git quotes whatever core.quotePath says. */
function needsQuote(b: number): boolean {
  return b < 0x20 || b === 0x22 || b === 0x5c || b === 0x7f;
}

/** `p` or its nearest ancestor without characters a literal entry cannot hold. */
function safeAncestor(p: string): string {
  const parts = p.split('/');
  const bad = parts.findIndex(part => UNSAFE.test(part) || EDGE_SPACE.test(part) || part === '' || part === '.' || part === '..');
  return p === '' || bad < 0 ? p : parts.slice(0, bad).join('/');
}

/** The distinct entries, without those under another entry (they match nothing more than it). */
function withoutCovered(paths: string[]): Set<string> {
  const all = new Set(paths);
  if (all.has('')) return new Set(['']);
  const kept = new Set<string>();
  for (const p of all) {
    let covered = false;
    for (let i = p.indexOf('/'); i >= 0 && !covered; i = p.indexOf('/', i + 1)) covered = all.has(p.slice(0, i));
    if (!covered) kept.add(p);
  }
  return kept;
}

function depthOf(p: string): number {
  return p === '' ? 0 : p.split('/').length;
}

function maxDepth(entries: Set<string>): number {
  let d = 0;
  for (const e of entries) d = Math.max(d, depthOf(e));
  return d;
}

function parentOf(p: string): string {
  const i = p.lastIndexOf('/');
  return i < 0 ? '' : p.slice(0, i);
}
