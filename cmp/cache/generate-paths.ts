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
 * Characters an entry must not hold: Argo splits the value at `;`, and `filepath.Match` reads
 * `*?[\` as pattern syntax, so such a name matches itself only through Argo's literal equality
 * and prefix tests (and other files as a pattern). Its parent directory has no such doubt.
 */
const UNSAFE = /[*?[\\;]/;

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
 * `paths` or lies under one of them (paths relative to the repository root, `''` = the root):
 * root-relative entries, sorted, `;`-separated. A path with pattern characters becomes its
 * nearest clean ancestor; entries under another entry go (they match nothing more); while the
 * value is longer than `maxChars`, the deepest entries are replaced by their directories, the
 * groups saving most first, down to `/`, which matches everything.
 */
export function generatePathsValue(paths: Iterable<string>, maxChars = GENERATE_PATHS_MAX_CHARS): string {
  let entries = withoutCovered([...paths].map(safeAncestor));
  // Each entry costs its text, its leading `/` and a `;` (one `;` fewer than entries).
  const cost = (e: string) => e.length + 2;
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
  return [...entries].sort().map(e => `/${e}`).join(';');
}

/** `p` or its nearest ancestor without characters a literal entry cannot hold. */
function safeAncestor(p: string): string {
  const parts = p.split('/');
  const bad = parts.findIndex(part => UNSAFE.test(part) || part === '' || part === '.' || part === '..');
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
