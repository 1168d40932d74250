import type { RedisClient } from './redis-connection.js';

/**
 * Callers waiting for one request, counted in Redis so that every proxy sees them: the last
 * one to leave cancels the job, and a worker does not start a job nobody waits for. The
 * count expires on its own (`ttlMs`, extended by each join) in case a proxy dies holding it.
 */
const JOIN = `local n = redis.call('INCR', KEYS[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return n`;

const LEAVE = `local n = redis.call('DECR', KEYS[1])
if n <= 0 then redis.call('DEL', KEYS[1]) end
return n`;

/** Count one more waiter; returns the new count. */
export async function joinWaiters(redis: RedisClient, key: string, ttlMs: number): Promise<number> {
  return Number(await redis.eval(JOIN, 1, key, String(Math.max(1, Math.ceil(ttlMs)))));
}

/** Count one waiter less; returns how many still wait. */
export async function leaveWaiters(redis: RedisClient, key: string): Promise<number> {
  return Number(await redis.eval(LEAVE, 1, key));
}

/** How many wait now (0 when the key is gone). */
export async function countWaiters(redis: RedisClient, key: string): Promise<number> {
  return Number((await redis.get(key)) ?? 0);
}
