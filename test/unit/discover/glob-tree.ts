import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { posix } from 'node:path';
import type { GlobFs, GlobStat } from '../../../cmp/go/glob-fs.js';

/**
 * The tree both glob engines are tested on: `<root>/app` is the app directory, `<root>/other`
 * a sibling. Entries: `d` = directory, `f` = file, `l:<target>` = symlink.
 */
export const TREE: Record<string, string> = {
  app: 'd',
  'app/kustomization.yaml': 'f',
  'app/a': 'd',
  'app/a/kustomization.yaml': 'f',
  'app/a/b': 'd',
  'app/a/b/kustomization.yaml': 'f',
  'app/config': 'd',
  'app/config/plugin.yaml': 'f',
  'app/sub': 'd',
  'app/sub/x.yaml': 'f',
  'app/sub/deep': 'd',
  'app/sub/deep/y.yaml': 'f',
  'app/Chart.yaml': 'f',
  'app/values.yaml': 'f',
  'app/.hidden.yaml': 'f',
  'app/Chart.yam?': 'f',
  'app/!x': 'f',
  'app/a*b': 'f',
  'app/empty': 'd',
  'app/broken': 'l:does-not-exist',
  'app/linkdir': 'l:../other',
  other: 'd',
  'other/one.yaml': 'f',
};

/** Creates TREE in a fresh temp directory; returns its real absolute path. */
export async function makeTree(): Promise<{ root: string; cleanup: () => Promise<void> }> {
  const root = await realpath(await mkdtemp(posix.join(tmpdir(), 'glob-')));
  for (const [rel, kind] of Object.entries(TREE)) {
    const p = posix.join(root, rel);
    if (kind === 'd') await mkdir(p, { recursive: true });
    else if (kind === 'f') await writeFile(p, 'x');
    else await symlink(kind.slice(2), p);
  }
  return { root, cleanup: () => rm(root, { recursive: true, force: true }) };
}

/** A GlobFs over TREE mounted at `root`, without touching the disk. */
export function memoryFs(root: string, tree: Record<string, string> = TREE): GlobFs {
  const entries = new Map(Object.entries(tree).map(([rel, kind]) => [posix.join(root, rel), kind]));
  entries.set(root, 'd');
  for (let dir = posix.dirname(root); ; dir = posix.dirname(dir)) {
    entries.set(dir, 'd');
    if (dir === '/') break;
  }
  // Resolves symlinks in every component, as the kernel does for stat.
  const resolve = (p: string, hops = 0): string | undefined => {
    let cur = '/';
    for (const part of p.split('/').filter(Boolean)) {
      if (entries.get(cur) !== 'd') return undefined;
      const next = posix.join(cur, part);
      const kind = entries.get(next);
      if (kind === undefined) return undefined;
      if (!kind.startsWith('l:')) cur = next;
      else {
        const target = hops < 40 ? resolve(posix.resolve(cur, kind.slice(2)), hops + 1) : undefined;
        if (target === undefined) return undefined;
        cur = target;
      }
    }
    return cur;
  };
  const statOf = (kind: string | undefined): GlobStat | undefined =>
    kind === undefined ? undefined : { isDir: kind === 'd', isSymlink: kind.startsWith('l:') };
  return {
    async lstat(p) {
      const parent = resolve(posix.dirname(p));
      return parent === undefined || entries.get(parent) !== 'd'
        ? undefined : statOf(entries.get(posix.join(parent, posix.basename(p))));
    },
    async stat(p) {
      const r = resolve(p);
      return r === undefined ? undefined : statOf(entries.get(r));
    },
    async readdir(p) {
      const r = resolve(p);
      if (r === undefined || entries.get(r) !== 'd') return undefined;
      const prefix = r === '/' ? '/' : r + '/';
      return [...entries.keys()]
        .filter(k => k.startsWith(prefix) && k !== r && !k.slice(prefix.length).includes('/'))
        .map(k => k.slice(prefix.length));
    },
  };
}
