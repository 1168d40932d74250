import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { metrics } from '../../cmp/observe/metrics.js';

/** A hold on a spooled tarball: the file stays until every holder released it. */
export interface SpoolLease {
  readonly path: string;
  /** Idempotent; removes the file when this was its last holder. Never rejects. */
  release(): Promise<void>;
}

interface Spooled {
  path: string;
  refs: number;
}

/**
 * One spooled copy per distinct verified tarball in use, instead of one per request: a storm of
 * Applications from one repository holds one file. Requests hold leases; the file is removed when
 * the last lease is released, so the disk holds at most one tarball per distinct tarball in
 * flight. Files live in the work root (the same file system as the request dirs, for link()).
 */
export class SpoolStore {
  private readonly files = new Map<string, Spooled>();

  constructor(private readonly dir: string) {}

  /** A lease on the copy of the tarball whose sha256 is `digest`, when one is held by a request now. */
  acquire(digest: string): SpoolLease | undefined {
    const file = this.files.get(digest);
    if (!file) return undefined;
    file.refs++;
    return this.lease(digest, file);
  }

  /**
   * Make the verified tarball spooled at `spooled` (in a request dir, which goes with its request)
   * the shared copy of `digest`, or join the copy another request made meanwhile.
   */
  async adopt(digest: string, spooled: string): Promise<SpoolLease> {
    const held = this.acquire(digest);
    if (held) return held;
    const own = path.join(this.dir, `${randomUUID()}.tgz`);
    await fs.link(spooled, own);
    const raced = this.acquire(digest);
    if (raced) {
      await fs.rm(own, { force: true }).catch(() => {});
      return raced;
    }
    const file = { path: own, refs: 1 };
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
        this.files.delete(digest);
        metrics.spooledTarballs.set(this.files.size);
        await fs.rm(file.path, { force: true }).catch(() => {});
      },
    };
  }
}
