import type { AppPathsStore } from '../../cmp/cache/app-paths.js';
import type { Ctx } from '../../cmp/context.js';
import type { TracedRequest } from '../../cmp/cache/traced-key.js';
import type { PluginRequest, PluginResult } from '../../cmp/plugin/request.js';
import type { IngestedRepo } from '../ingest/receive-repo-stream.js';

/**
 * What a dispatcher needs of an ingested tarball: its verified copy (held by the caller until
 * the answer), its sha256 and size. Plain data, so that it crosses to a coordinator process.
 */
export type RepoRef = Pick<IngestedRepo, 'tgzPath' | 'checksum' | 'size'>;

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
