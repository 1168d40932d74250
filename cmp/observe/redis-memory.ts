import { Cluster, type Redis } from 'ioredis';
import { hashTag } from '../config/options.js';
import type { RedisClient } from '../queue/redis-connection.js';
import { metrics } from './metrics.js';
import { refreshQueueGauge } from './queue-depth.js';

/** `used_memory` and `maxmemory` of a Redis `INFO memory` answer, in bytes (maxmemory 0: no limit). */
export interface RedisMemory {
  used: number;
  max: number;
}

/** Read `used_memory` and `maxmemory` from the text of `INFO memory`; undefined if either is missing. */
export function parseInfoMemory(info: string): RedisMemory | undefined {
  const field = (name: string) => {
    const m = new RegExp(`^${name}:(\\d+)\\r?$`, 'm').exec(info);
    return m ? Number(m[1]) : undefined;
  };
  const used = field('used_memory');
  const max = field('maxmemory');
  return used === undefined || max === undefined ? undefined : { used, max };
}

/** CRC16-XMODEM, the checksum Redis Cluster maps keys to slots with. */
function crc16(data: Buffer): number {
  let crc = 0;
  for (const byte of data) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/** The Cluster slot of every key under `prefix` (Redis's rule: its hash tag, if any, decides). */
export function prefixSlot(prefix: string): number {
  return crc16(Buffer.from(hashTag(prefix) ?? prefix)) % 16384;
}

/**
 * The connection to the Redis that holds our keys: the client itself (standalone, or the master a
 * Sentinel group named), or on a Cluster the master of the prefix's slot as the client's slot
 * map knows it; undefined while that is unknown (slots not loaded yet, a failover in progress).
 */
export function nodeOfOurKeys(redis: RedisClient, prefix: string): Redis | undefined {
  if (!(redis instanceof Cluster)) return redis;
  const master = redis.slots[prefixSlot(prefix)]?.[0];
  return redis.nodes('master').find(n => `${n.options.host}:${n.options.port}` === master);
}

/**
 * Refresh the Redis memory gauges from `INFO memory` of the node our keys live on (called at
 * scrape time, as the queue depth). Like the queue depth, a Redis that does not answer keeps the
 * last values (a scrape never fails or logs for it; `cmp_offload_redis_connected` says so), and a
 * process that never read them exports 0, which the alert ignores as "no limit".
 */
export async function refreshRedisMemoryGauges(redis: RedisClient, prefix: string): Promise<void> {
  const node = nodeOfOurKeys(redis, prefix);
  if (!node || node.status !== 'ready') return;
  try {
    const memory = parseInfoMemory(await node.info('memory'));
    if (!memory) return;
    metrics.redisUsedMemory.set(memory.used);
    metrics.redisMaxmemory.set(memory.max);
  } catch {
    // Bounded by the command timeout of the connection; readiness reports the outage.
  }
}

/** Every gauge read from Redis at scrape time (queue depth, memory), in parallel. */
export async function refreshRedisGauges(redis: RedisClient, prefix: string, queue: string): Promise<void> {
  await Promise.all([refreshQueueGauge(redis, prefix, queue), refreshRedisMemoryGauges(redis, prefix)]);
}
