import { createHash } from 'node:crypto';
import type { TreeIndex } from '../tar/tree-index.js';
import type { RecordedReads } from '../trace/read-recorder.js';

/**
 * Which inputs one run depended on, by name only: the paths it touched (their type and
 * content count) and the directories whose entry names count. The same shape is checked
 * against any later tree; the states it finds there decide the entry key. `revision`: the
 * output quoted the revision, so the entry is bound to it.
 */
export interface Shape {
  touched: string[];
  listed: string[];
  revision: boolean;
}

const SHAPE_VERSION = 'cmp-offload/shape/v2';

/**
 * The shape of a completely recorded run over the tree it ran on, or undefined when the record
 * cannot be trusted for this tree: a renamed directory (its files were then read under other
 * names), or a renamed symlink (lookups through it, a concurrent one too, changed). Conservative rule of the issue: the directory containing each touched path that is
 * not itself a directory counts as listed, so a new file next to a probed one invalidates. A
 * touched directory counts as listed itself: its metadata reveals its entries (the link count
 * is 2 + its subdirectories, the size grows with its entries), not only that it is one.
 */
export function shapeOf(reads: Extract<RecordedReads, { complete: true }>, index: TreeIndex, revision: boolean): Shape | undefined {
  for (const m of reads.moved) {
    const type = index.entries.get(m)?.type;
    if (m === '' || type === 'dir' || type === 'symlink') return undefined;
  }
  const listed = new Set(reads.listed);
  for (const p of reads.touched) listed.add(p === '' || index.entries.get(p)?.type === 'dir' ? p : parentOf(p));
  const touched = new Set(reads.touched);
  const passedDirs: string[] = [];
  for (const p of reads.traversed) {
    if (p === '' || index.entries.get(p)?.type === 'dir') passedDirs.push(p);
    else {
      // Absent, a file (ENOTDIR) or a symlink crossed: its state, as a touched path.
      touched.add(p);
      listed.add(parentOf(p));
    }
  }
  for (const w of witnesses(index, passedDirs, [...touched, ...listed])) touched.add(w);
  return { touched: [...touched].sort(), listed: [...listed].sort(), revision };
}

/**
 * A directory a lookup only passed (left with `..`) reveals only that it is one, which holds
 * exactly while something under it exists. For each such directory: nothing when an existing
 * path under it is keyed already, else its first file, whose absence then shows the directory
 * gone. Keying the directory itself would do for the key but not for manifest-generate-paths,
 * where a directory matches every change under it.
 */
function witnesses(index: TreeIndex, dirs: readonly string[], keyed: readonly string[]): string[] {
  if (dirs.length === 0) return [];
  const existing = keyed.filter(p => p !== '' && index.entries.has(p)).sort();
  const children = childrenOf(index);
  const out: string[] = [];
  for (const d of dirs) {
    const prefix = d === '' ? '' : `${d}/`;
    let lo = 0;
    let hi = existing.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (existing[mid]! < prefix) lo = mid + 1;
      else hi = mid;
    }
    if (lo < existing.length && existing[lo]!.startsWith(prefix)) continue;
    out.push(firstFileUnder(index, children, d) ?? d);
  }
  return out;
}

function firstFileUnder(index: TreeIndex, children: Map<string, string[]>, dir: string): string | undefined {
  for (const name of children.get(dir) ?? []) {
    const p = dir === '' ? name : `${dir}/${name}`;
    if (index.entries.get(p)?.type !== 'dir') return p;
    const below = firstFileUnder(index, children, p);
    if (below !== undefined) return below;
  }
  return undefined;
}

/** A stable name of a shape. */
export function shapeId(shape: Shape): string {
  return createHash('sha256').update(JSON.stringify([SHAPE_VERSION, shape.touched, shape.listed, shape.revision])).digest('hex');
}

const ids = new WeakMap<Shape, string>();

/**
 * shapeId, hashed once per shape object: the standalone store hands out the same objects on
 * every lookup. `known` is the id a signed record filed the shape under (Redis), taken as is.
 */
export function shapeIdOf(shape: Shape, known?: string): string {
  let id = ids.get(shape);
  if (id === undefined) {
    id = known ?? shapeId(shape);
    ids.set(shape, id);
  }
  return id;
}

/**
 * sha256 of what the shape's paths are in `index`: for each touched path its type and content
 * digest (or absence; modes only with preserveFileMode), for each listed directory its entry
 * names and types (getdents gives both; the types make its link count); for each symlink its raw
 * target and whether that existed when the link was made. Equal digests mean the run would have
 * seen the same inputs. Needs a traceable tree: only then is the index exactly the extracted tree.
 */
export function stateDigest(index: TreeIndex, shape: Shape, preserveFileMode: boolean): string {
  const children = childrenOf(index);
  const h = createHash('sha256');
  h.update(`${SHAPE_VERSION}\n`);
  for (const p of shape.touched) h.update(`t ${JSON.stringify(p)} ${stateOf(index, p, preserveFileMode)}\n`);
  for (const d of shape.listed) {
    const node = d === '' ? 'd' : stateOf(index, d, false);
    const names = node === 'd' ? (children.get(d) ?? []).map(n => `${JSON.stringify(n)}${typeLetter(index, d === '' ? n : `${d}/${n}`)}`).join(',') : node;
    h.update(`l ${JSON.stringify(d)} ${names}\n`);
  }
  return h.digest('hex');
}

function typeLetter(index: TreeIndex, p: string): string {
  const type = index.entries.get(p)?.type;
  return type === 'dir' ? 'd' : type === 'symlink' ? 'l' : 'f';
}

function stateOf(index: TreeIndex, p: string, preserveFileMode: boolean): string {
  if (p === '') return 'd';
  const e = index.entries.get(p);
  if (!e) return '-';
  const mode = preserveFileMode ? ` ${e.mode.toString(8)}` : '';
  if (e.type === 'file') return `f ${e.sha256 ?? ''}${mode}`;
  if (e.type === 'dir') return preserveFileMode ? `d${mode}` : 'd';
  return `l ${JSON.stringify(e.linkTarget ?? '')}${e.targetExisted ? ' e' : ''}`;
}

const childrenCache = new WeakMap<TreeIndex, Map<string, string[]>>();

/** Sorted entry names of every directory of the index (computed once per index). */
function childrenOf(index: TreeIndex): Map<string, string[]> {
  let map = childrenCache.get(index);
  if (!map) {
    map = new Map();
    for (const p of index.entries.keys()) {
      const parent = parentOf(p);
      let list = map.get(parent);
      if (!list) map.set(parent, (list = []));
      list.push(p.slice(parent === '' ? 0 : parent.length + 1));
    }
    for (const list of map.values()) list.sort();
    childrenCache.set(index, map);
  }
  return map;
}

function parentOf(p: string): string {
  const i = p.lastIndexOf('/');
  return i < 0 ? '' : p.slice(0, i);
}
