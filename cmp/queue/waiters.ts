import type { RedisClient } from './redis-connection.js';

/**
 * Callers waiting for one request, kept in Redis so that every proxy sees them: the last one to
 * leave cancels the job, and a worker does not start a job nobody waits for. A sorted set of
 * waiter ids scored by when each expires (Redis's clock), so that a join or a leave sent twice
 * (a command resent after a reconnect, a retry after a timeout whose first try did land) counts
 * once, and a waiter whose proxy died holding it drops out at its expiry (`ttlMs`, extended by
 * each join of the same id). The key itself expires with its last waiter.
 */

/** Redis's clock in ms, and the waiters past their expiry dropped (every script starts so). */
const PRUNED = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
`;

/** The key lives as long as its latest waiter; gone with the last one. Returns how many wait. */
const FIT_TTL = `local n = redis.call('ZCARD', KEYS[1])
if n == 0 then redis.call('DEL', KEYS[1]) return 0 end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], math.ceil(tonumber(last[2])))
return n`;

/** ARGV: waiter id, ttl ms. A repeated join never shortens the expiry (no ZADD GT: Redis 5 lacks it). */
const JOIN = `${PRUNED}local expires = now + tonumber(ARGV[2])
local current = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not current or tonumber(current) < expires then redis.call('ZADD', KEYS[1], expires, ARGV[1]) end
${FIT_TTL}`;

/** ARGV: waiter id. */
const LEAVE = `${PRUNED}redis.call('ZREM', KEYS[1], ARGV[1])
${FIT_TTL}`;

const COUNT = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')`;

/** Count `waiterId` among the waiters (once, however often it joins); returns how many wait. */
export async function joinWaiters(redis: RedisClient, key: string, waiterId: string, ttlMs: number): Promise<number> {
  return Number(await redis.eval(JOIN, 1, key, waiterId, String(Math.max(1, Math.ceil(ttlMs)))));
}

/** Take `waiterId` out (a repeated leave changes nothing); returns how many still wait. */
export async function leaveWaiters(redis: RedisClient, key: string, waiterId: string): Promise<number> {
  return Number(await redis.eval(LEAVE, 1, key, waiterId));
}

/** How many wait now (0 when the key is gone). */
export async function countWaiters(redis: RedisClient, key: string): Promise<number> {
  return Number(await redis.eval(COUNT, 1, key));
}
