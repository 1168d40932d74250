import { status as Status } from '@grpc/grpc-js';
import type { RedisOptions } from '../../cmp/config/options.js';
import { CmpError, ourError } from '../../cmp/errors.js';
import type { PluginResult } from '../../cmp/plugin/request.js';
import { decodeFailure, openResult, REJECTED } from '../../cmp/queue/job-contract.js';
import { escapeKeyPart, type KeySpace } from '../../cmp/queue/keys.js';
import { redisUnavailable, type RedisClient } from '../../cmp/queue/redis-connection.js';
import { decodeResult, readResult, type ReadOutcome } from '../../cmp/queue/result-store.js';
import type { JobEnd } from './job-waiter.js';

/**
 * One submission's outcome: the result, or a reason to submit the request anew (its job, blob
 * or result vanished from Redis; its job was removed, cancelled or refused under it) with the
 * error the caller gets when it may not be submitted again.
 */
export type Attempt = { result: PluginResult } | { retry: string; cause: ResubmitCause; jobId: string; error: CmpError };

/** Why a request is submitted anew (the label of cmp_offload_resubmissions_total). */
export type ResubmitCause = 'job_vanished' | 'blob_lost' | 'result_missing' | 'job_removed' | 'job_canceled' | 'job_refused';

/**
 * What the job we wait for answers and where: a cached request's answer is its cache entry
 * (possibly from another caller's identical job); an uncached one's is the result key of the
 * id we chose, signed with our request's digest.
 */
export type Answer = { jobId: string; binding: string } & ({ key: string } | { resultId: string; digest: string });

export interface SettlementDeps {
  ro: RedisOptions;
  redis: RedisClient;
  keys: KeySpace;
  signingKey: Buffer;
  pluginName: string;
}

/** Turn a job's end into the caller's answer, or into a reason to submit anew. */
export async function settle(d: SettlementDeps, answer: Answer, end: JobEnd, submission: number): Promise<Attempt> {
  const { jobId } = answer;
  switch (end.state) {
    case 'completed': {
      const result = await fetchResult(d, answer, end.returnvalue);
      if (result !== 'missing') return { result };
      return { retry: 'its result is gone from Redis', cause: 'result_missing', jobId, error: ourError('resultMissing', jobId) };
    }
    case 'failed': {
      const failure = decodeFailure(d.signingKey, jobId, answer.binding, end.reason);
      if (!failure) {
        // The worker refused the job's data (swapped, expired, tampered with in Redis): ours is intact, submit it anew.
        const refusal = decodeFailure(d.signingKey, jobId, REJECTED, end.reason);
        if (refusal) {
          const error = new CmpError(refusal.message, refusal.code);
          return { retry: `the worker refused the job's data: ${refusal.message}`, cause: 'job_refused', jobId, error };
        }
        throw ourError('jobFailed', jobId, d.pluginName, end.reason);
      }
      const error = new CmpError(failure.message, failure.code);
      // The tarball's blob vanished from Redis or was corrupt (the worker removed it): upload it again.
      if (failure.resubmit) return { retry: failure.message, cause: 'blob_lost', jobId, error };
      // Cancelled by the callers that were there before us: ours still wants an answer.
      if (failure.canceled) return { retry: 'the job was cancelled by the callers before us', cause: 'job_canceled', jobId, error };
      throw error;
    }
    case 'removed':
      return { retry: 'the job was removed from the queue', cause: 'job_removed', jobId, error: ourError('jobRemoved', jobId, d.pluginName) };
    case 'vanished':
      return {
        retry: 'the job vanished from Redis (flushed, restarted empty, failed over or evicted)',
        cause: 'job_vanished',
        jobId,
        error: ourError('jobLost', jobId, d.pluginName, submission),
      };
    case 'redis-down':
      throw redisUnavailable(d.ro, new Error(`connection lost while waiting for job ${jobId}`));
  }
}

/**
 * Read the answer where we expect it, signed for our request: the cache entry of our cache
 * key, or the result key of the id we chose, signed with our request's digest. A small result
 * comes inside the return value, sealed for the job, signed as it is (or would be) under that key.
 */
async function fetchResult(d: SettlementDeps, answer: Answer, returnvalue: unknown): Promise<PluginResult | 'missing'> {
  const { jobId } = answer;
  const { key: stored, sealed } = jobReturnOf(returnvalue);
  const expected =
    'resultId' in answer
      ? stored === d.keys.result(d.pluginName, answer.resultId)
      : stored !== undefined && stored.startsWith(`${d.ro.prefix}:out:${escapeKeyPart(d.pluginName)}:`) && stored.endsWith(`:${answer.key}`);
  if (!expected || stored === undefined) {
    throw ourError('badResultLocation', jobId);
  }
  const binding = 'resultId' in answer ? answer.digest : answer.key;
  let r: ReadOutcome;
  if (sealed !== undefined) {
    const bytes = openResult(d.signingKey, jobId, sealed);
    const found = bytes && (await decodeResult(d.signingKey, stored, binding, bytes));
    r = found ? { found } : { invalid: true };
  } else {
    try {
      r = await readResult(d.redis, d.signingKey, stored, binding);
    } catch (err) {
      throw redisUnavailable(d.ro, err);
    }
  }
  if ('found' in r) return r.found;
  if ('missing' in r) return 'missing';
  throw new CmpError(`cmp-offload: the result of job ${jobId} does not verify (do proxy and workers share CMP_OFFLOAD_SIGNING_KEY?)`, Status.INTERNAL);
}

/** The key a worker says it stored the result under, and the result when it came along (BullMQ may hand the return value over as JSON text). */
function jobReturnOf(returnvalue: unknown): { key?: string; sealed?: string } {
  let v = returnvalue;
  if (typeof v === 'string') {
    try {
      v = JSON.parse(v);
    } catch {
      return {}; // not JSON: no key, as for any other malformed value
    }
  }
  const { key, sealed } = (v ?? {}) as { key?: unknown; sealed?: unknown };
  return { ...(typeof key === 'string' ? { key } : {}), ...(typeof sealed === 'string' ? { sealed } : {}) };
}
