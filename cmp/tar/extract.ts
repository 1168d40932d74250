import { extractPool } from './extract-pool.js';

/**
 * Argo's `Untgz` of the tarball at `tgzPath` into the absolute directory `dest` (docs/argo-contract.md#extraction),
 * plus our limits (RESOURCE_EXHAUSTED). Runs in a worker thread; the gzip is streamed, so memory
 * does not grow with the tarball. Rejects with a CmpError whose text is Untgz's own (the caller
 * adds `error decompressing tgz file: `).
 */
export async function extractTgz(
  tgzPath: string,
  dest: string,
  opts: { preserveFileMode: boolean; maxExtractedBytes: number; maxEntries: number; sha256?: string },
): Promise<{ files: number; bytes: number }> {
  return extractPool.run(tgzPath, dest, {
    preserveFileMode: opts.preserveFileMode,
    maxExtractedBytes: opts.maxExtractedBytes,
    maxEntries: opts.maxEntries,
    ...(opts.sha256 === undefined ? {} : { sha256: opts.sha256 }),
  });
}
