import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { goMatch } from '../../cmp/go/filepath-glob.js';

// Argo CD's rule, written again here so that the derivation of manifest-generate-paths is checked
// against the rule and not against itself:
// - util/app/path: GetAppRefreshPaths (2.x, and the webhook handler), GetSourceRefreshPaths (the
//   controller's per-source call of newer versions, which trims each entry with
//   strings.TrimSpace), AppFilesHaveChanged; util/security: EnforceToCurrentRoot.
// - How Argo learns the changed files. Webhooks (GitHub, GitLab, Gogs, Bitbucket's diffstat):
//   the names as the payload has them, raw UTF-8. The controller's UpdateRevisionForPaths on the
//   repo-server (reposerver/repository; util/git ChangedFiles): `git diff --name-only A..B`
//   without -z, HOME=/dev/null, so git's defaults: core.quotePath (names with control
//   characters, `"`, `\` or bytes from 0x80 come C-quoted, e.g. "shared/v\303\244rden.yaml")
//   and rename detection (a renamed file is listed under its new name only). The output loses
//   its last "\n" and is split at "\n"; an empty list there means "no change", where
//   AppFilesHaveChanged alone means "refresh".

/** Go's filepath.Clean (Unix). */
export function goClean(p: string): string {
  const n = path.posix.normalize(p === '' ? '.' : p);
  return n.length > 1 && n.endsWith('/') ? n.slice(0, -1) : n;
}

/** Go's filepath.Dir (Unix): everything up to the last `/`, cleaned. */
export function goDir(p: string): string {
  const i = p.lastIndexOf('/');
  return goClean(p.slice(0, i + 1));
}

/** Go's unicode.IsSpace: Latin-1 spaces and the Unicode White_Space property. */
const GO_SPACE = '[\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]';
const EDGES = new RegExp(`^${GO_SPACE}+|${GO_SPACE}+$`, 'g');

/** Go's strings.TrimSpace. */
function goTrimSpace(s: string): string {
  return s.replace(EDGES, '');
}

export interface RefreshPathsOptions {
  /** GetSourceRefreshPaths of newer versions trims every entry; GetAppRefreshPaths does not. */
  trimSpace?: boolean;
}

/** GetAppRefreshPaths / GetSourceRefreshPaths: absolute entries without their `/`, relative ones joined to each source path. */
export function refreshPaths(annotation: string | undefined, sourcePaths: string[], options: RefreshPathsOptions = {}): string[] {
  const paths: string[] = [];
  if (annotation === undefined || annotation === '') return paths;
  for (const raw of annotation.split(';')) {
    const item = options.trimSpace ? goTrimSpace(raw) : raw;
    if (item === '') continue;
    if (item.startsWith('/')) paths.push(item.slice(1));
    else for (const s of sourcePaths) paths.push(goClean([s, item].filter(x => x !== '').join('/')));
  }
  return paths;
}

const ensureAbs = (p: string) => (p.startsWith('/') ? p : `/${p}`);

/** EnforceToCurrentRoot: the requested path's directory is the root or under it. */
function underRoot(root: string, requested: string): boolean {
  const r = goClean(root);
  const dir = goDir(requested);
  if (r === '/' || r === dir) return true;
  return dir.startsWith(`${r}/`);
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

/** ChangedFiles: the list Argo makes of `git diff --name-only` output. */
export function changedFilesOf(gitOutput: string): string[] {
  const out = gitOutput.endsWith('\n') ? gitOutput.slice(0, -1) : gitOutput;
  return out === '' ? [] : out.split('\n');
}

/**
 * UpdateRevisionForPaths: whether the repo-server reports changes (and the app is regenerated)
 * for the raw output of `git diff --name-only synced..new`.
 */
export function repoServerRefreshes(annotation: string | undefined, sourcePath: string, gitOutput: string, options: RefreshPathsOptions = {}): boolean {
  const paths = refreshPaths(annotation, [sourcePath], options);
  if (paths.length === 0) return true;
  const files = changedFilesOf(gitOutput);
  return files.length !== 0 && filesHaveChanged(paths, files);
}

/** Whether Argo CD regenerates an app of `sourcePath` with this annotation when `changed` (repository-relative, as a webhook names them) changed. */
export function argoRefreshes(annotation: string | undefined, sourcePath: string, changed: string[], options: RefreshPathsOptions = {}): boolean {
  return filesHaveChanged(refreshPaths(annotation, [sourcePath], options), changed);
}

/**
 * The environment the repo-server runs git in (HOME=/dev/null, so no user configuration), and
 * no system configuration either: git's defaults, whatever this machine's configuration says.
 */
const ARGO_GIT_ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: '/dev/null', GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null', LC_ALL: 'C' };

/** git as the repo-server runs it, in `dir`; its stdout. */
export function gitAsArgo(dir: string, args: string[], input?: string): string {
  return execFileSync('git', args, { cwd: dir, env: { ...ARGO_GIT_ENV, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' }, input, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
}
