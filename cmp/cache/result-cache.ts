import type { PluginResult } from '../plugin/request.js';
import type { Shape } from './read-set.js';

/**
 * Where the result cache of one request lives, as the cache policy (proxy/dispatch/cache-policy.ts)
 * sees it: the proxy's memory in standalone mode (memory-result-cache.ts), Redis in distributed
 * mode (cmp/queue/redis-result-cache.ts). Keys are output cache keys, whole-tree or traced.
 */
export interface ResultCache {
  /** The result under `key`, or undefined (a Redis entry that does not verify is a miss). */
  read(key: string): Promise<PluginResult | undefined>;
  /** Whether a result is under `key` (counts as a use, as a read does, where the store has uses). */
  has(key: string): Promise<boolean>;
  write(key: string, result: PluginResult): Promise<void>;
  /** The shapes recorded for a traced request family, most recent first. */
  shapes(baseKey: string): Promise<Shape[]>;
  addShape(baseKey: string, shape: Shape): Promise<void>;
}
