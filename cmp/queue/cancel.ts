import type { Redis } from 'ioredis';
import type { KeySpace } from './keys.js';

/** Why a caller stopped waiting; the worker aborts the run with the matching context error. */
export type CancelReason = 'deadline' | 'canceled';

export interface CancelMessage {
  queue: string;
  jobId: string;
  reason: CancelReason;
}

/**
 * Ask whichever worker holds a job to stop it (BullMQ's cancelJob only works in the process
 * holding the job, so the request goes to all workers by pub/sub). A job that is not running
 * yet is not affected: the proxy removes it from the queue, and a worker that picks it up
 * anyway finds nobody waiting and does not run it.
 */
export async function publishCancel(redis: Redis, keys: KeySpace, msg: CancelMessage): Promise<void> {
  await redis.publish(keys.cancelChannel(), JSON.stringify(msg));
}

/** Parse a message of the cancel channel; undefined when it is not one of ours. */
export function parseCancel(raw: string): CancelMessage | undefined {
  try {
    const m = JSON.parse(raw) as Partial<CancelMessage>;
    if (typeof m.queue !== 'string' || typeof m.jobId !== 'string') return undefined;
    if (m.reason !== 'deadline' && m.reason !== 'canceled') return undefined;
    return { queue: m.queue, jobId: m.jobId, reason: m.reason };
  } catch {
    return undefined;
  }
}
