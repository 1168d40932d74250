import type { GlobFs, GlobStat } from '../go/glob-fs.js';
import { goClean } from '../go/go-path.js';
import type { TreeEntry } from './tree-entry.js';

const MAX_HOPS = 40;

/**
 * The tree of an index seen as a read-only filesystem rooted at `root` (the absolute path the
 * tarball would be extracted to). The root itself is a directory; paths outside it are missing.
 * Symlinks are followed inside the tree the way Argo recreates them (the link name is joined to
 * the link's directory, absolute names included); one leaving the tree is broken.
 */
export class TreeGlobFs implements GlobFs {
  private readonly root: string;

  constructor(
    root: string,
    private readonly nodes: ReadonlyMap<string, TreeEntry>,
    private readonly children: ReadonlyMap<string, ReadonlySet<string>>,
    /** False lets every lookup be one map access. */
    private readonly hasSymlinks = true,
  ) {
    this.root = goClean(root);
  }

  async lstat(p: string): Promise<GlobStat | undefined> {
    const rel = this.relative(p);
    if (rel === '') return { isDir: true, isSymlink: false };
    const node = rel === undefined ? undefined : this.lookup(rel, false);
    return node && { isDir: node.type === 'dir', isSymlink: node.type === 'symlink' };
  }

  async stat(p: string): Promise<GlobStat | undefined> {
    const rel = this.relative(p);
    if (rel === '') return { isDir: true, isSymlink: false };
    const node = rel === undefined ? undefined : this.lookup(rel, true);
    return node && { isDir: node.type === 'dir', isSymlink: false };
  }

  async readdir(p: string): Promise<string[] | undefined> {
    const rel = this.relative(p);
    if (rel === undefined) return undefined;
    const dir = rel === '' ? '' : this.lookup(rel, true)?.path;
    const names = dir === undefined ? undefined : this.children.get(dir);
    return names && [...names];
  }

  private relative(p: string): string | undefined {
    const c = goClean(p);
    if (c === this.root) return '';
    return c.startsWith(this.root + '/') ? c.slice(this.root.length + 1) : undefined;
  }

  /** Resolves `rel` component by component, following symlinks in directories (and at the end when `follow`). */
  private lookup(rel: string, follow: boolean, hops = { n: 0 }): TreeEntry | undefined {
    // Nodes only exist below directories: a direct hit is the answer unless it is a link to
    // follow, and without symlinks a miss is final. Only paths through symlinks take the walk
    // below, whose cost grows with depth × length (bounded by the tar path limit).
    const direct = this.nodes.get(rel);
    if (direct ? direct.type !== 'symlink' || !follow : !this.hasSymlinks) return direct;
    const parts = rel.split('/');
    let at = '';
    for (let i = 0; i < parts.length; i++) {
      const path = at === '' ? parts[i]! : `${at}/${parts[i]}`;
      let node = this.nodes.get(path);
      if (!node) return undefined;
      const last = i === parts.length - 1;
      if (node.type === 'symlink' && (!last || follow)) {
        if (++hops.n > MAX_HOPS) return undefined;
        const target = this.linkTarget(node);
        if (target === undefined) return undefined;
        node = target === '' ? undefined : this.lookup(target, true, hops);
        if (!node) return undefined;
      }
      if (!last && node.type !== 'dir') return undefined;
      at = node.path;
    }
    return this.nodes.get(at);
  }

  /** The link's target relative to the root ('' for the root itself), undefined outside it. */
  private linkTarget(link: TreeEntry): string | undefined {
    const parts = link.path.split('/').slice(0, -1);
    for (const c of (link.linkTarget ?? '').split('/')) {
      if (c === '' || c === '.') continue;
      if (c !== '..') parts.push(c);
      else if (parts.pop() === undefined) return undefined;
    }
    return parts.join('/');
  }
}
