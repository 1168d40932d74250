import type { RedisClient } from '../queue/redis-connection.js';
import { metrics } from './metrics.js';

/**
 * The BullMQ keys whose sizes are the queue depth by state, as KEDA's redis scaler reads them
 * (`<prefix>:<queue>:<state>`; `wait` and `active` are lists, `prioritized` and `delayed` zsets).
 * The kustomize ScaledObject names the same keys; a test checks them against a real BullMQ queue.
 */
export const QUEUE_STATES = { wait: 'list', prioritized: 'zset', active: 'list', delayed: 'zset' } as const;
export type QueueState = keyof typeof QUEUE_STATES;

/** `<prefix>:<queue>:<state>`: BullMQ's own key for a state. */
export function bullmqKey(prefix: string, queue: string, state: QueueState): string {
  return `${prefix}:${queue}:${state}`;
}

/** The number of jobs per state, in one round trip. */
export async function queueDepth(redis: RedisClient, prefix: string, queue: string): Promise<Record<QueueState, number>> {
  const pipeline = redis.pipeline();
  const states = Object.keys(QUEUE_STATES) as QueueState[];
  for (const state of states) {
    const key = bullmqKey(prefix, queue, state);
    if (QUEUE_STATES[state] === 'list') pipeline.llen(key);
    else pipeline.zcard(key);
  }
  const replies = (await pipeline.exec()) ?? [];
  const depth = {} as Record<QueueState, number>;
  states.forEach((state, i) => {
    const [err, n] = replies[i] ?? [new Error('no reply'), 0];
    if (err) throw err;
    depth[state] = Number(n);
  });
  return depth;
}

/**
 * Refresh the `cmp_offload_queue_jobs` gauge from Redis (called at scrape time). A Redis that
 * does not answer leaves the last values and reports through `cmp_offload_redis_connected`.
 */
export async function refreshQueueGauge(redis: RedisClient, prefix: string, queue: string): Promise<void> {
  if (redis.status !== 'ready') return;
  try {
    const depth = await queueDepth(redis, prefix, queue);
    for (const [state, n] of Object.entries(depth)) metrics.queueJobs.set({ queue, state }, n);
  } catch {
    // Scrapes must not fail because Redis is away; readiness says so.
  }
}
