import path from 'node:path';
import { goMatch } from '../../cmp/discover/filepath-glob.js';

// Argo CD's rule (util/app/path: GetAppRefreshPaths, AppFilesHaveChanged; util/security:
// EnforceToCurrentRoot), written again here so that the derivation of manifest-generate-paths
// is checked against the rule and not against itself.

function goClean(p: string): string {
  const n = path.posix.normalize(p === '' ? '.' : p);
  return n.length > 1 && n.endsWith('/') ? n.slice(0, -1) : n;
}

/** GetAppRefreshPaths: absolute entries as they are, relative ones joined to each source path. */
export function refreshPaths(annotation: string | undefined, sourcePaths: string[]): string[] {
  const paths: string[] = [];
  if (annotation === undefined || annotation === '') return paths;
  for (const item of annotation.split(';')) {
    if (item === '') continue;
    if (item.startsWith('/')) paths.push(item);
    else for (const s of sourcePaths) paths.push(goClean([s, item].filter(x => x !== '').join('/')));
  }
  return paths;
}

const ensureAbs = (p: string) => (p.startsWith('/') ? p : `/${p}`);

/** EnforceToCurrentRoot: the changed file's directory is the entry or under it. */
function underRoot(root: string, requested: string): boolean {
  const r = goClean(root);
  const dir = goClean(path.posix.dirname(requested));
  if (r === '/' || r === dir) return true;
  return `${dir}/`.startsWith(`${r}/`);
}

/** AppFilesHaveChanged: whether Argo CD regenerates. */
export function filesHaveChanged(paths: string[], changed: string[]): boolean {
  if (changed.length === 0 || paths.length === 0) return true;
  for (const raw of changed) {
    const f = ensureAbs(raw);
    for (const raw2 of paths) {
      const item = ensureAbs(raw2);
      if (f === item || underRoot(item, f)) return true;
      try {
        if (goMatch(item, f)) return true;
      } catch {
        // a bad pattern matches nothing
      }
    }
  }
  return false;
}

/** Whether Argo CD regenerates an app of `sourcePath` with this annotation when `changed` (repository-relative) changed. */
export function argoRefreshes(annotation: string | undefined, sourcePath: string, changed: string[]): boolean {
  return filesHaveChanged(refreshPaths(annotation, [sourcePath]), changed);
}
