import type { Ctx } from '../../cmp/context.js';
import type { PluginRequest, PluginResult } from '../../cmp/plugin/request.js';
import type { IngestedRepo } from '../ingest/receive-repo-stream.js';

/**
 * Where a verified request goes after ingest: run in-process (standalone mode) or through the
 * queue to a worker (distributed mode). `key` is the output cache key, or undefined when the
 * request cannot be cached or coalesced (cache off, tree not indexable).
 */
export interface Dispatcher {
  dispatch(req: PluginRequest, repo: IngestedRepo, key: string | undefined, ctx: Ctx): Promise<PluginResult>;
  close(): Promise<void>;
}
