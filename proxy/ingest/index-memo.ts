import { ByteLru } from '../../cmp/cache/memory-cache.js';
import { metrics } from '../../cmp/observe/metrics.js';
import type { TreeIndex } from '../../cmp/tar/tree-index.js';

/** Bytes an index entry costs besides its strings: the entry object, two map slots, a set slot. */
const ENTRY_OVERHEAD = 240;

/**
 * The tree indexes of tarballs ingested lately, by the sha256 of their gzip bytes, in a
 * byte-bounded LRU (CMP_OFFLOAD_INDEX_MEMO_BYTES). The repo-server sends the whole repository
 * for every Application, so most tarballs are ones the proxy has just indexed: with the memo,
 * ingest only hashes them. An index is remembered only after a full, verified ingest, under the
 * digest the proxy computed; the client's `checksum` merely names the entry to try, which is
 * used only when the bytes received hash to it.
 */
export class IndexMemo {
  private readonly lru: ByteLru<TreeIndex>;

  constructor(maxBytes: number) {
    this.lru = new ByteLru(maxBytes, Infinity, indexBytes);
  }

  /** The index remembered under `digest`, not counted as a use: a claim is not proof. */
  peek(digest: string): TreeIndex | undefined {
    return this.lru.peek(digest);
  }

  /** Remember (or refresh) the index of a tarball whose received bytes hashed to `digest`. */
  remember(digest: string, index: TreeIndex): void {
    // A hit only moves the entry up: sizing a large tree again would cost a walk of its entries.
    if (this.lru.get(digest) === index) return;
    this.lru.set(digest, index);
    metrics.indexMemoBytes.set(this.lru.stats().bytes);
  }

  stats(): { entries: number; bytes: number } {
    return this.lru.stats();
  }
}

/** Approximate heap size of an index: its paths (key, entry and name in its parent), digests and link targets. */
export function indexBytes(index: TreeIndex): number {
  let n = 0;
  for (const e of index.entries.values()) {
    n += ENTRY_OVERHEAD + 3 * 2 * e.path.length + (e.sha256 ? 2 * 64 : 0) + 2 * (e.linkTarget?.length ?? 0);
  }
  return n;
}
