import type { RedisClient } from './redis-connection.js';
import type { KeySpace } from './keys.js';
import { sign, verify } from './signing.js';

/** Why a caller stopped waiting; the worker aborts the run with the matching context error. */
export type CancelReason = 'deadline' | 'canceled';

export interface CancelMessage {
  queue: string;
  jobId: string;
  reason: CancelReason;
}

const DOMAIN = 'cmp-offload/cancel/v1';
/** A cancel request older (or newer, clock skew) than this is refused: a captured one cannot be replayed later. */
export const CANCEL_MAX_AGE_MS = 60_000;

function parts(m: CancelMessage, at: number): string[] {
  return [m.queue, m.jobId, m.reason, String(at)];
}

/**
 * Ask whichever worker holds a job to stop it (BullMQ's cancelJob only works in the process
 * holding the job, so the request goes to all workers by pub/sub). Signed and dated: anyone
 * who can publish on Redis could otherwise kill any job. A job that is not running yet is not
 * affected: the proxy removes it from the queue, and a worker that picks it up anyway finds
 * nobody waiting and does not run it.
 */
export async function publishCancel(redis: RedisClient, keys: KeySpace, signingKey: Buffer, msg: CancelMessage, now = Date.now()): Promise<void> {
  const sig = sign(signingKey, DOMAIN, parts(msg, now)).toString('hex');
  await redis.publish(keys.cancelChannel(), JSON.stringify({ ...msg, at: now, sig }));
}

/** Parse and verify a message of the cancel channel; undefined when it is not a fresh one of ours. */
export function parseCancel(signingKey: Buffer, raw: string, now = Date.now()): CancelMessage | undefined {
  try {
    const m = JSON.parse(raw) as Partial<CancelMessage & { at: number; sig: string }>;
    if (typeof m.queue !== 'string' || typeof m.jobId !== 'string') return undefined;
    if (m.reason !== 'deadline' && m.reason !== 'canceled') return undefined;
    if (typeof m.at !== 'number' || !Number.isSafeInteger(m.at) || Math.abs(now - m.at) > CANCEL_MAX_AGE_MS) return undefined;
    if (typeof m.sig !== 'string' || !/^[0-9a-f]{64}$/.test(m.sig)) return undefined;
    const msg: CancelMessage = { queue: m.queue, jobId: m.jobId, reason: m.reason };
    return verify(signingKey, DOMAIN, parts(msg, m.at), Buffer.from(m.sig, 'hex')) ? msg : undefined;
  } catch {
    return undefined; // malformed: dropped like any unsigned cancel
  }
}
