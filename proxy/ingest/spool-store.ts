import { randomUUID } from 'node:crypto';
import { statSync, type Stats } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { metrics } from '../../cmp/observe/metrics.js';

/** A hold on a spooled tarball: the file stays until every holder released it. */
export interface SpoolLease {
  readonly path: string;
  /** Idempotent; removes the file when this was its last holder and it is not kept. Never rejects. */
  release(): Promise<void>;
}

/** Who is told of the files a process makes in the work root and removes again. */
export interface WorkPaths {
  held(path: string): void;
  released(path: string): void;
}

export interface SpoolStoreOptions {
  /**
   * Disk for copies that no request holds now, the most recently used kept
   * (CMP_OFFLOAD_SPOOL_KEEP_BYTES): a refresh sends the same tarball again seconds later, and a
   * kept copy is not written again. 0: a copy goes with its last holder.
   */
  keepBytes?: number;
  workPaths?: WorkPaths;
}

const BLOCK = 4096;

interface Spooled {
  path: string;
  refs: number;
  /** What it counts against the bound. */
  bytes: number;
  /** Inode, size and mtime when adopted: a copy found otherwise is not reused. */
  stamp: string;
}

const stampOf = (st: Stats): string => `${st.ino}:${st.size}:${st.mtimeMs}`;

/**
 * One spooled copy per distinct verified tarball, instead of one per request: a storm of
 * Applications from one repository holds one file. Requests hold leases; when the last lease is
 * released the file is kept while the copies nobody holds fit in `keepBytes` (least recently
 * used removed first), else removed. So the disk holds one copy per distinct tarball in flight
 * plus at most `keepBytes` (0 in standalone mode: see Options.spoolKeepBytes). Files live in the
 * work root (the same file system as the request dirs, for link()), where standalone plugin
 * commands (same uid) running meanwhile can reach them: a copy that is gone or whose inode, size
 * or mtime changed is dropped rather than reused, and whoever extracts one verifies its sha256
 * (local-dispatcher.ts), removing it when it changed.
 */
export class SpoolStore {
  /** Copies held (refs > 0) and kept (refs 0); kept ones in the order of their last release. */
  private readonly files = new Map<string, Spooled>();
  private keptBytes = 0;
  /** Removals of copies dropped when found changed: a release waits for them. */
  private readonly removing = new Set<Promise<void>>();
  private readonly keepBytes: number;

  constructor(
    private readonly dir: string,
    private readonly opts: SpoolStoreOptions = {},
  ) {
    this.keepBytes = opts.keepBytes ?? 0;
  }

  /** A lease on the copy of the tarball whose sha256 is `digest`, when one is held or kept now. */
  acquire(digest: string): SpoolLease | undefined {
    const file = this.files.get(digest);
    if (!file) return undefined;
    if (!intact(file)) {
      this.drop(digest, file);
      return undefined;
    }
    if (file.refs++ === 0) this.keptBytes -= file.bytes;
    return this.lease(digest, file);
  }

  /**
   * Make the verified tarball spooled at `spooled` (in a request dir, which goes with its request)
   * the shared copy of `digest`, or join the copy another request made meanwhile.
   */
  async adopt(digest: string, spooled: string, bytes: number): Promise<SpoolLease> {
    const held = this.acquire(digest);
    if (held) return held;
    const own = path.join(this.dir, `${randomUUID()}.tgz`);
    await fs.link(spooled, own);
    this.opts.workPaths?.held(own);
    return this.install(digest, own, bytes);
  }

  /** Make `bytes` (verified, received into memory) the shared copy of `digest`, or join the copy that exists. */
  async adoptBytes(digest: string, bytes: Uint8Array): Promise<SpoolLease> {
    const held = this.acquire(digest);
    if (held) return held;
    const own = path.join(this.dir, `${randomUUID()}.tgz`);
    this.opts.workPaths?.held(own);
    try {
      await fs.writeFile(own, bytes, { mode: 0o600, flag: 'wx' });
    } catch (err) {
      await this.remove(own);
      throw err;
    }
    return this.install(digest, own, bytes.length);
  }

  private async install(digest: string, own: string, bytes: number): Promise<SpoolLease> {
    const stamp = stampOf(await fs.stat(own));
    const raced = this.acquire(digest);
    if (raced) {
      await this.remove(own);
      return raced;
    }
    // At least a disk block each, so that the bound also bounds how many (empty ones included).
    const file = { path: own, refs: 1, bytes: Math.max(bytes, BLOCK), stamp };
    this.files.set(digest, file);
    metrics.spooledTarballs.set(this.files.size);
    return this.lease(digest, file);
  }

  private lease(digest: string, file: Spooled): SpoolLease {
    let released = false;
    return {
      path: file.path,
      release: async () => {
        if (released) return;
        released = true;
        if (--file.refs > 0) return;
        const gone: Spooled[] = [];
        if (this.files.get(digest) !== file) {
          gone.push(file); // dropped while held: found changed
        } else if (file.bytes > this.keepBytes) {
          this.files.delete(digest);
          gone.push(file);
        } else {
          // Kept, as the most recently used (last in the map's order); the least recently used go while over the bound.
          this.files.delete(digest);
          this.files.set(digest, file);
          this.keptBytes += file.bytes;
          for (const [d, f] of this.files) {
            if (this.keptBytes <= this.keepBytes) break;
            if (f.refs > 0) continue;
            this.files.delete(d);
            this.keptBytes -= f.bytes;
            gone.push(f);
          }
        }
        metrics.spooledTarballs.set(this.files.size);
        for (const f of gone) await this.remove(f.path);
        // Copies dropped meanwhile (found changed) are gone too once a release settles.
        await Promise.all(this.removing);
      },
    };
  }

  /** Forget a copy found changed; it is removed now if nobody holds it, else by its last holder. */
  private drop(digest: string, file: Spooled): void {
    this.files.delete(digest);
    metrics.spooledTarballs.set(this.files.size);
    if (file.refs > 0) return;
    this.keptBytes -= file.bytes;
    const removal = this.remove(file.path);
    this.removing.add(removal);
    void removal.then(() => this.removing.delete(removal));
  }

  private async remove(file: string): Promise<void> {
    // Never rejects (see SpoolLease): a file left behind goes with the work root at stop.
    await fs.rm(file, { force: true }).catch(() => {});
    this.opts.workPaths?.released(file);
  }
}

/**
 * A verified tarball held in memory whose shared copy is written on the first `file()` (a run
 * needs one); `release()` lets go of that copy, if it was made. A failed write is `failed(err)`.
 */
export function copyOnDemand(
  spools: SpoolStore,
  digest: string,
  bytes: Uint8Array,
  failed: (err: unknown) => unknown = err => err,
): { file(): Promise<string>; release(): Promise<void> } {
  let copy: Promise<SpoolLease> | undefined;
  return {
    file: async () => (await (copy ??= spools.adoptBytes(digest, bytes).catch(err => Promise.reject(failed(err))))).path,
    // A write that failed left no file: nothing to release.
    release: async () => void (await copy?.then(c => c.release(), () => undefined)),
  };
}

function intact(file: Spooled): boolean {
  try {
    return stampOf(statSync(file.path)) === file.stamp;
  } catch {
    return false; // gone: not intact, so not reused
  }
}
