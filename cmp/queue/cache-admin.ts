import { Cluster } from 'ioredis';
import type { RedisClient } from './redis-connection.js';
import type { KeySpace } from './keys.js';

export interface CacheStats {
  entries: number;
  bytes: number;
  /** Entries per plugin (escaped key part as stored). */
  byPlugin: Record<string, number>;
  blobs: number;
  blobBytes: number;
}

const SCAN_COUNT = 1000;

/**
 * Visit every key matching `pattern`, a batch at a time (SCAN: never blocks Redis like KEYS).
 * SCAN has no key, so on a Cluster it would go to any one node: there it runs on every master
 * (the prefix's hash tag puts all our keys on the master of its slot; the others answer nothing,
 * and a slot being migrated is still covered). Each batch comes from one node and one slot, so
 * the multi-key commands `visit` sends through the cluster client stay in one slot.
 */
export async function scanBatches(redis: RedisClient, pattern: string, visit: (keys: string[]) => Promise<void>): Promise<void> {
  const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis];
  if (nodes.length === 0) throw new Error('no Redis Cluster master is known (the cluster is not ready)');
  const seen = new Set<string>();
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT);
      cursor = next;
      // SCAN may return a key twice; during a slot migration two masters may both hold it briefly.
      const fresh = keys.filter(k => !seen.has(k));
      for (const k of fresh) seen.add(k);
      if (fresh.length > 0) await visit(fresh);
    } while (cursor !== '0');
  }
}

async function sizes(redis: RedisClient, keys: string[]): Promise<number> {
  const pipe = redis.pipeline();
  for (const k of keys) pipe.strlen(k);
  const replies = (await pipe.exec()) ?? [];
  return replies.reduce((n, [, v]) => n + (typeof v === 'number' ? v : 0), 0);
}

/** Count the output cache entries and tarball blobs of this installation (its prefix only). */
export async function cacheStats(redis: RedisClient, keys: KeySpace): Promise<CacheStats> {
  const stats: CacheStats = { entries: 0, bytes: 0, byPlugin: {}, blobs: 0, blobBytes: 0 };
  const entryPrefix = `${keys.prefix}:out:`;
  await scanBatches(redis, keys.cachePattern(), async batch => {
    stats.entries += batch.length;
    stats.bytes += await sizes(redis, batch);
    for (const k of batch) {
      const plugin = k.slice(entryPrefix.length).split(':')[0] ?? '';
      stats.byPlugin[plugin] = (stats.byPlugin[plugin] ?? 0) + 1;
    }
  });
  await scanBatches(redis, keys.blobPattern(), async batch => {
    stats.blobs += batch.length;
    stats.blobBytes += await sizes(redis, batch);
  });
  return stats;
}

/** Delete the cache entries of one app, one plugin, both, or all (no filter); returns how many. */
export async function purgeCache(redis: RedisClient, keys: KeySpace, filter: { app?: string; plugin?: string }): Promise<number> {
  let removed = 0;
  await scanBatches(redis, keys.cachePattern(filter), async batch => {
    removed += await redis.unlink(...batch);
  });
  return removed;
}
