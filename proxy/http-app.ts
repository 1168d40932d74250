import fs from 'node:fs';
import type { FastifyInstance } from 'fastify';
import type { RedisClient } from '../cmp/queue/redis-connection.js';
import { metrics } from '../cmp/observe/metrics.js';
import { buildOpsApp, type ReadinessCheck } from '../cmp/observe/ops-http.js';
import { refreshRedisGauges } from '../cmp/observe/redis-memory.js';
import type { MemoryCache } from '../cmp/cache/memory-cache.js';

export interface ProxyHttpDeps {
  /** The plugin socket; ready only while we listen on it and the file is there. */
  socketPath: string;
  listening(): boolean;
  /** Distributed mode: the proxy's Redis command connection, queue prefix and name. */
  redis?: { connection: RedisClient; prefix: string; queue: string };
  /** Standalone mode: the in-memory output cache, for its size gauges. */
  cache?: MemoryCache;
}

/**
 * The proxy's HTTP app: /healthz, /readyz (the socket listens; Redis is connected in distributed
 * mode) and /metrics (with the queue depth of the plugin's queue and Redis' memory read at scrape time).
 */
export function buildProxyHttpApp(deps: ProxyHttpDeps): FastifyInstance {
  const checks: ReadinessCheck[] = [{ name: 'socket', ok: () => deps.listening() && isSocket(deps.socketPath) }];
  const redis = deps.redis;
  if (redis) checks.push({ name: 'redis', ok: () => redis.connection.status === 'ready' });
  return buildOpsApp({
    checks,
    async beforeScrape() {
      if (deps.cache) {
        const { bytes, entries } = deps.cache.stats();
        metrics.cacheBytes.set(bytes);
        metrics.cacheEntries.set(entries);
      }
      if (redis) {
        metrics.redisConnected.set(redis.connection.status === 'ready' ? 1 : 0);
        await refreshRedisGauges(redis.connection, redis.prefix, redis.queue);
      }
    },
  });
}

function isSocket(p: string): boolean {
  try {
    return fs.statSync(p).isSocket();
  } catch {
    return false;
  }
}
