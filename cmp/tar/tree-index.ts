import { createHash, type Hash } from 'node:crypto';
import type { GlobFs } from '../go/glob-fs.js';
import type { TarHeader, TarVisitor } from '../go/go-tar-reader.js';
import { TgzStream } from './tgz-stream.js';
import type { TreeEntry } from './tree-entry.js';
import { TreeGlobFs } from './tree-glob-fs.js';

export type { TreeEntry };


/** What the proxy knows about a tarball without extracting it. */
export interface TreeIndex {
  /** The final tree, implicit parent directories included (last entry wins on duplicates). */
  readonly entries: ReadonlyMap<string, TreeEntry>;
  /**
   * True when extraction is a pure function of `entries`: no symlinks, no duplicate paths,
   * no path conflicts (a file where a directory is needed or the reverse), no ignored
   * entry types, no name leaving the root. Only then may discovery be answered from the index.
   */
  readonly simple: boolean;
  /**
   * True when the extracted tree is a pure function of `entries` with symlinks as plain leaves:
   * simple apart from symlinks, and each symlink's target (taken as extraction takes it) is
   * inside the tree and crosses no symlink or file as the tree stood when the link was made, and
   * nothing is written under a symlink. The traced cache keys such trees per app: a link is an
   * input like a file (its target and `targetExisted`), and reads through it are recorded at the
   * paths they reach.
   */
  readonly traceable: boolean;
  /**
   * sha256 hex over a versioned encoding of the tree: paths, types, content digests, link
   * targets and, only with `preserveFileMode`, permission bits; not mtimes, owners or entry
   * order. For a non-simple archive the ordered entry list is digested instead, so two
   * archives that could extract differently never share a digest.
   */
  contentDigest(preserveFileMode: boolean): string;
  /** A read-only view of the tree as if extracted at the absolute path `root`. */
  globFs(root: string): GlobFs;
}

const BATCH = 64 * 1024;
/**
 * Bytes of path the index may spend on directories no entry names (parents it creates itself).
 * The repo-server sends an entry for every directory, so its tarballs imply none; a crafted one
 * implies depth × length bytes per name (4 MiB for one 4096-byte name). Past the budget the tree
 * is given up as not simple: the proxy then extracts it instead of answering from the index.
 */
export const IMPLIED_PATH_BYTES = 16 * 1024 * 1024;
const VERSION = 'cmp-offload/tree-digest/v1';

/**
 * Builds a {@link TreeIndex} from the raw gzip bytes as they arrive, with the extractor's
 * parser, limits and error texts. `write` never throws: the first error is kept in `error`,
 * later input is dropped, and `end()` rejects with it. Memory holds the index only (O(entries)).
 */
export class TreeIndexer {
  private readonly builder = new TreeBuilder();
  private readonly stream: TgzStream;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private failure: Error | undefined;

  constructor(opts: { maxExtractedBytes: number; maxEntries: number }) {
    this.stream = new TgzStream(this.builder, opts);
  }

  /** The first parse or limit error, if any. */
  get error(): Error | undefined {
    return this.failure;
  }

  write(chunk: Buffer): void {
    if (this.failure || this.stream.done) return;
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    if (this.pendingBytes >= BATCH) this.flush();
  }

  end(): Promise<TreeIndex> {
    this.flush();
    if (!this.failure) this.guard(() => this.stream.finish());
    this.stream.close();
    return this.failure ? Promise.reject(this.failure) : Promise.resolve(this.builder.build());
  }

  private flush(): void {
    if (this.pendingBytes === 0) return;
    const batch = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending, this.pendingBytes);
    this.pending = [];
    this.pendingBytes = 0;
    if (!this.failure && !this.stream.done) this.guard(() => this.stream.push(batch));
  }

  private guard(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.failure = err instanceof Error ? err : new Error(String(err));
      this.stream.close();
    }
  }
}

/** Splits a tar name the way clean(join(D, name)) places it; undefined when it leaves D or is D. */
function relativePath(name: string): string | undefined {
  const parts: string[] = [];
  for (const c of name.split('/')) {
    if (c === '' || c === '.') continue;
    if (c === '..') {
      if (parts.length === 0) return undefined;
      parts.pop();
    } else parts.push(c);
  }
  return parts.length === 0 ? undefined : parts.join('/');
}

function parentOf(p: string): string {
  const i = p.lastIndexOf('/');
  return i < 0 ? '' : p.slice(0, i);
}

/** Replays the extraction on an in-memory tree. */
class TreeBuilder implements TarVisitor {
  private readonly nodes = new Map<string, TreeEntry>();
  private readonly children = new Map<string, Set<string>>([['', new Set()]]);
  private readonly explicit = new Set<string>();
  private simple = true;
  private traceable = true;
  private symlinks = 0;
  private impliedBytes = 0;
  /** False once the budget above is spent: the tree is no longer built, only digested in order. */
  private building = true;
  private readonly ordered: [Hash, Hash] = [createHash('sha256'), createHash('sha256')];
  private file: { entry: TreeEntry | undefined; hash: Hash; size: number; line: unknown[] } | undefined;

  constructor() {
    this.ordered[0].update(`${VERSION}\nordered\nnomodes\n`);
    this.ordered[1].update(`${VERSION}\nordered\nmodes\n`);
  }

  entry(h: TarHeader): boolean {
    if (h.name === '.' || h.name === './') return false;
    const rel = relativePath(h.name);
    const line: unknown[] = [rel ?? h.name, h.typeflag, h.linkname, h.mode & 0o777];
    if (rel === undefined || this.explicit.has(rel)) this.notSimple();
    else this.explicit.add(rel);
    if (!this.building) {
      if (h.typeflag !== '0') this.digestLine(line);
      else this.file = { entry: undefined, hash: createHash('sha256'), size: 0, line };
      return h.typeflag === '0';
    }
    if (rel !== undefined && h.typeflag === '0') {
      this.file = { entry: this.createFile(rel, h.mode & 0o777), hash: createHash('sha256'), size: 0, line };
      return true;
    }
    if (h.typeflag === '0') {
      this.file = { entry: undefined, hash: createHash('sha256'), size: 0, line };
      return true;
    }
    if (rel !== undefined && h.typeflag === '5') this.mkdirAll(rel, h.mode & 0o777);
    else if (rel !== undefined && h.typeflag === '2') this.symlink(rel, h.linkname, h.mode & 0o777);
    else this.notSimple();
    this.digestLine(line);
    return false;
  }

  data(chunk: Buffer): void {
    this.file!.hash.update(chunk);
    this.file!.size += chunk.length;
  }

  end(): void {
    const f = this.file!;
    this.file = undefined;
    const sha256 = f.hash.digest('hex');
    if (f.entry) {
      f.entry.sha256 = sha256;
      f.entry.size = f.size;
    }
    this.digestLine([...f.line, sha256]);
  }

  build(): TreeIndex {
    const ordered = this.ordered.map(h => h.digest('hex'));
    return treeIndex(this.nodes, this.children, this.simple, this.traceable && this.building, this.symlinks > 0, ordered);
  }

  /** Extraction is no longer a pure function of the final entries. */
  private notSimple(): void {
    this.simple = false;
    this.traceable = false;
  }

  private digestLine(line: unknown[]): void {
    const [path, type, link, mode, sha = ''] = line;
    this.ordered[0].update(JSON.stringify([path, type, link, null, sha]) + '\n');
    this.ordered[1].update(JSON.stringify([path, type, link, mode, sha]) + '\n');
  }

  private add(entry: TreeEntry): TreeEntry {
    this.nodes.set(entry.path, entry);
    const parent = parentOf(entry.path);
    this.children.get(parent)!.add(entry.path.slice(parent === '' ? 0 : parent.length + 1));
    if (entry.type === 'dir') this.children.set(entry.path, new Set());
    return entry;
  }

  /**
   * os.MkdirAll on the tree; false (and not simple) when a non-directory is in the way.
   * Walks up from `rel` to its deepest existing node instead of down from the root: nodes only
   * exist below directories, so that node is the obstacle or the place to grow from, and every
   * other probe names a directory about to be created. The cost is that of the created paths
   * plus one lookup, where probing every prefix from the root cost depth × length per entry.
   */
  private mkdirAll(rel: string, mode: number, explicitLast = true): boolean {
    const missing: number[] = [];
    let end = rel.length;
    let node: TreeEntry | undefined;
    while (end > 0) {
      node = this.nodes.get(end === rel.length ? rel : rel.slice(0, end));
      if (node) break;
      missing.push(end);
      end = rel.lastIndexOf('/', end - 1);
    }
    if (node && node.type !== 'dir') {
      this.notSimple();
      return false;
    }
    // missing[i] is the length of a path to create; rel itself (missing[0]) may be an entry's own.
    for (let i = explicitLast ? 1 : 0; i < missing.length; i++) this.impliedBytes += missing[i]!;
    if (this.impliedBytes > IMPLIED_PATH_BYTES) {
      this.notSimple();
      this.building = false;
      return false;
    }
    for (let i = missing.length - 1; i >= 0; i--) this.add({ path: rel.slice(0, missing[i]), type: 'dir', mode, size: 0 });
    return true;
  }

  private createFile(rel: string, mode: number): TreeEntry | undefined {
    const parent = parentOf(rel);
    if (parent !== '' && !this.mkdirAll(parent, 0o755, false)) return undefined;
    const node = this.nodes.get(rel);
    if (!node) return this.add({ path: rel, type: 'file', mode, size: 0 });
    this.notSimple();
    // An existing file is overwritten and keeps its mode; a directory or symlink is not replaced.
    return node.type === 'file' ? node : undefined;
  }

  private symlink(rel: string, linkname: string, mode: number): void {
    this.simple = false;
    const parent = parentOf(rel);
    const parentNode = parent === '' ? undefined : this.nodes.get(parent);
    if (this.nodes.has(rel) || (parent !== '' && parentNode?.type !== 'dir')) {
      this.traceable = false;
      return;
    }
    const targetExisted = this.plainTarget(parent, linkname);
    if (targetExisted === undefined) this.traceable = false;
    this.symlinks++;
    this.add({ path: rel, type: 'symlink', mode, size: 0, linkTarget: linkname, ...(targetExisted === undefined ? {} : { targetExisted }) });
  }

  /**
   * Whether a link's target exists now, when extraction resolves it through nothing but
   * directories; undefined when it would not: the target is the root or outside the tree, or a
   * symlink or a file stands on its way (extraction would then follow the link or fail, as the
   * entries before it decide). Go's Join: an absolute link name is taken below the link's dir.
   */
  private plainTarget(dir: string, linkname: string): boolean | undefined {
    const target = relativePath(dir === '' ? linkname : `${dir}/${linkname}`);
    if (target === undefined) return undefined;
    for (let end = target.indexOf('/'); ; end = target.indexOf('/', end + 1)) {
      const node = this.nodes.get(end < 0 ? target : target.slice(0, end));
      if (!node) return false;
      if (node.type === 'symlink') return undefined;
      if (end < 0) return true;
      if (node.type !== 'dir') return undefined;
    }
  }
}

function treeIndex(
  nodes: ReadonlyMap<string, TreeEntry>,
  children: ReadonlyMap<string, ReadonlySet<string>>,
  simple: boolean,
  traceable: boolean,
  hasSymlinks: boolean,
  ordered: string[],
): TreeIndex {
  const digests = new Map<boolean, string>();
  return {
    entries: nodes,
    simple,
    traceable,
    contentDigest(preserveFileMode: boolean): string {
      if (!simple) {
        const d = ordered[preserveFileMode ? 1 : 0];
        // An index rebuilt from its entries lacks the entry order a non-simple tree is keyed by.
        if (d === undefined) throw new Error('tree index: no content digest for a tree rebuilt from its entries');
        return d;
      }
      let d = digests.get(preserveFileMode);
      if (d === undefined) {
        d = sortedDigest(nodes, children, preserveFileMode);
        digests.set(preserveFileMode, d);
      }
      return d;
    },
    globFs: (root: string) => new TreeGlobFs(root, nodes, children, hasSymlinks),
  };
}

/**
 * The index of a traceable tree again, from its entries in the order `entries` iterates them
 * (parents first): how a coordinator process gets the index an ingest process built, which
 * reaches it as plain data. Only traceable trees travel (the traced cache wants no other).
 */
export function traceableIndexOf(entries: Iterable<TreeEntry>): TreeIndex {
  const nodes = new Map<string, TreeEntry>();
  const children = new Map<string, Set<string>>([['', new Set()]]);
  let symlinks = false;
  for (const e of entries) {
    const parent = parentOf(e.path);
    const siblings = children.get(parent);
    if (!siblings || nodes.has(e.path)) throw new Error(`tree index: ${JSON.stringify(e.path)} out of order or repeated`);
    nodes.set(e.path, e);
    siblings.add(e.path.slice(parent === '' ? 0 : parent.length + 1));
    if (e.type === 'dir') children.set(e.path, new Set());
    if (e.type === 'symlink') symlinks = true;
  }
  return treeIndex(nodes, children, !symlinks, true, symlinks, []);
}

function sortedDigest(
  nodes: ReadonlyMap<string, TreeEntry>,
  children: ReadonlyMap<string, ReadonlySet<string>>,
  preserveFileMode: boolean,
): string {
  const hash = createHash('sha256');
  hash.update(`${VERSION}\nsorted\n${preserveFileMode ? 'modes' : 'nomodes'}\n`);
  for (const p of sortedPaths(children)) {
    const e = nodes.get(p)!;
    const line = [p, e.type, e.sha256 ?? e.linkTarget ?? '', preserveFileMode ? e.mode : null];
    hash.update(JSON.stringify(line) + '\n');
  }
  return hash.digest('hex');
}

/**
 * Every path of the tree in the order of `[...paths].sort()` (UTF-16 code units), found by
 * sorting names directory by directory, so that no comparison costs more than a name (NAME_MAX)
 * where sorting whole paths costs up to their shared prefix. In a directory, child `n` sorts as
 * the key `n` and the paths below it as one group keyed `n/`: they all continue with `n/`, and
 * as no name contains `/`, these keys order the paths exactly as whole-path comparisons do.
 */
export function sortedPaths(children: ReadonlyMap<string, ReadonlySet<string>>): string[] {
  const out: string[] = [];
  // Recursion is as deep as the tree, which the path limit keeps under 2049 levels.
  const visit = (dir: string): void => {
    const keys: string[] = [];
    for (const name of children.get(dir) ?? []) {
      keys.push(name);
      if ((children.get(dir === '' ? name : `${dir}/${name}`)?.size ?? 0) > 0) keys.push(`${name}/`);
    }
    keys.sort();
    for (const k of keys) {
      const group = k.endsWith('/');
      const name = group ? k.slice(0, -1) : k;
      const p = dir === '' ? name : `${dir}/${name}`;
      if (group) visit(p);
      else out.push(p);
    }
  };
  visit('');
  return out;
}
