import type { AppPathsStore } from '../../cmp/cache/app-paths.js';
import type { Ctx } from '../../cmp/context.js';
import type { TracedRequest } from '../../cmp/cache/traced-key.js';
import type { PluginRequest, PluginResult } from '../../cmp/plugin/request.js';

/**
 * What a dispatcher needs of an ingested, verified tarball: its sha256 and size, and its bytes.
 * A small tarball stays in memory (`bytes`) and reaches the disk only when a run needs a file,
 * so a cache hit writes nothing; a large one was spooled while it arrived. Both stay valid until
 * the caller's release after the answer.
 */
export interface RepoRef {
  checksum: string;
  size: number;
  /** The whole tarball, when it was received into memory. */
  bytes?: Uint8Array;
  /** The tarball's file, written on first use when it is in memory. */
  file(): Promise<string>;
}

/**
 * Where a verified request goes after ingest: run in-process (standalone mode) or through the
 * queue to a worker (distributed mode). `key` is the output cache key, or undefined when the
 * request cannot be cached or coalesced (cache off, tree not indexable). `traced` is set when
 * the input-traced cache may answer it too (CMP_OFFLOAD_CACHE=traced, generate, simple tree).
 */
export interface Dispatcher {
  /** The apps' derived manifest-generate-paths (kept with CMP_OFFLOAD_CACHE=traced). */
  readonly paths: AppPathsStore;
  dispatch(req: PluginRequest, repo: RepoRef, key: string | undefined, ctx: Ctx, traced?: TracedRequest): Promise<PluginResult>;
  close(): Promise<void>;
}
