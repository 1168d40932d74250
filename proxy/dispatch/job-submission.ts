import fs from 'node:fs/promises';
import { status as Status } from '@grpc/grpc-js';
import type { JobsOptions, Queue } from 'bullmq';
import type { ResultCache } from '../../cmp/cache/result-cache.js';
import type { RedisOptions } from '../../cmp/config/options.js';
import type { Ctx } from '../../cmp/context.js';
import { CmpError, ourError, wrap } from '../../cmp/errors.js';
import { logFailed, type Logger } from '../../cmp/log.js';
import { metrics } from '../../cmp/observe/metrics.js';
import { currentTrace, noteCache, timeStage } from '../../cmp/observe/request-trace.js';
import { formatTraceparent } from '../../cmp/observe/tracing.js';
import type { Engine } from '../../cmp/plugin/execute.js';
import { RPC_TEXT, type PluginRequest, type PluginResult, type RpcKind } from '../../cmp/plugin/request.js';
import { gitCredsOf } from '../../cmp/askpass/git-creds-env.js';
import { storeBlob } from '../../cmp/queue/blob-store.js';
import { publishCancel } from '../../cmp/queue/cancel.js';
import { decodeFailure, INLINE_TARBALL_BYTES, newResultId, requestDigest, signJob } from '../../cmp/queue/job-contract.js';
import { appNameOf, type KeySpace } from '../../cmp/queue/keys.js';
import { withTimeout, type RedisClient } from '../../cmp/queue/redis-connection.js';
import { joinWaiters, leaveWaiters } from '../../cmp/queue/waiters.js';
import type { RepoRef } from './dispatcher.js';
import type { GitCredsResponder } from './git-creds-responder.js';
import { settle, type Answer, type Attempt } from './job-settlement.js';
import type { JobWaiter } from './job-waiter.js';
import { guard, raceAbort } from './redis-step.js';

/** Redis's default proto-max-bulk-len: the largest string, hence the largest blob, it stores. */
const REDIS_MAX_STRING_BYTES = 512 * 1024 * 1024;
/** A job's JSON is references and metadata (and at most a small tarball); anything near this is a bug or an attack. */
const JOB_SIZE_LIMIT = 1024 * 1024;
/** Without a caller deadline, the waiter count is kept this long at most (a dead proxy's count expires). */
const NO_DEADLINE_WAIT_MS = 3600_000;

export interface JobSubmissionDeps {
  engine: Engine;
  ro: RedisOptions;
  redis: RedisClient;
  keys: KeySpace;
  signingKey: Buffer;
  pluginName: string;
  specDigest: string;
  log: Logger;
  /** The BullMQ Queue, once ready. */
  queue(): Promise<Queue>;
  waiter: JobWaiter;
  /** provideGitCreds: answers the git credentials lookups of this proxy's jobs. */
  gitCreds: GitCredsResponder | undefined;
}

/**
 * Distributed mode's run of a request: store the tarball once per content, enqueue a signed job
 * of references, wait for its end within the caller's deadline, and relay the result or the
 * worker's error. A job whose blob, result or self vanished (or was removed, cancelled or refused
 * under it) is submitted anew, up to CMP_OFFLOAD_RESUBMITS times. Identical requests coalesce
 * through BullMQ deduplication on the cache key; the last caller to leave cancels the job.
 */
export class JobSubmission {
  private readonly uploads = new Map<string, Promise<boolean>>();

  constructor(private readonly d: JobSubmissionDeps) {}

  /** The answer to `req`; `cache` (its app's) is looked at again before a re-submission. */
  async run(req: PluginRequest, repo: RepoRef, key: string | undefined, ctx: Ctx, cache: ResultCache): Promise<PluginResult> {
    const { ro } = this.d;
    for (let submission = 1; ; submission++) {
      const outcome = await this.submit(req, repo, key, ctx, submission, cache);
      if (!('retry' in outcome)) return outcome.result;
      // Within the caller's deadline and CMP_OFFLOAD_RESUBMITS: what it needs is still here (the signed request, the spool).
      if (ctx.signal.aborted || submission > ro.resubmits) throw outcome.error;
      metrics.resubmissions.inc({ cause: outcome.cause });
      this.d.log.warn(
        { plugin: this.d.pluginName, app: appNameOf(req.env), jobId: outcome.jobId, cause: outcome.cause, reason: outcome.retry, resubmission: submission, limit: ro.resubmits },
        `submitting the request anew: ${outcome.retry}`,
      );
    }
  }

  /**
   * A submission: the first one, or a later one after the previous vanished. A later one first
   * looks in the cache, where the run of the lost job may have left its answer.
   */
  private async submit(req: PluginRequest, repo: RepoRef, key: string | undefined, ctx: Ctx, submission: number, cache: ResultCache): Promise<Attempt> {
    if (submission > 1 && key !== undefined) {
      const hit = await guard(this.d.ro, req.kind, ctx, cache.read(key));
      if (hit) return { result: hit };
    }
    return this.attempt(req, repo, key, ctx, submission);
  }

  /** One upload, enqueue and wait; `{retry}` when what it needs vanished or was taken from under it. */
  private async attempt(req: PluginRequest, repo: RepoRef, key: string | undefined, ctx: Ctx, submission: number): Promise<Attempt> {
    const { kind } = req;
    const { ro, pluginName } = this.d;
    const step = <T>(p: Promise<T>) => guard(ro, kind, ctx, p);
    const tgz = await this.uploadStage(repo, submission, ctx, step);
    const queue = await step(this.d.queue());
    // The result id is also the job id: a worker refuses signed data found under another job.
    const resultId = newResultId();
    // provideGitCreds: the job's lookups are answered here, with this caller's nonce and files,
    // which live only as long as its call. So its runs are its own: no other caller's job is
    // joined (their nonce dies with their call), none joins it (the cache still answers them).
    const creds = this.d.gitCreds && kind === 'generate' ? gitCredsOf(req.env, this.d.engine.options.askpassSocket) : undefined;
    const waitId = creds ? resultId : (key ?? resultId);
    const waitersKey = this.d.keys.waiters(pluginName, waitId);
    const waitMs = (ctx.deadline === undefined ? NO_DEADLINE_WAIT_MS : Math.max(0, ctx.deadline - Date.now())) + 60_000;
    let joining: Promise<number> | undefined;
    let joined = false;
    let left: Promise<number> | undefined;
    // Once: a later call gets the first one's count. Redis away: taken as nobody else waiting,
    // so this caller stops the job; the key expires.
    const leave = (): Promise<number> => (left ??= leaveWaiters(this.d.redis, waitersKey, resultId).catch(() => 0));
    let unregister: (() => void) | undefined;
    let ended = false;
    try {
      // Counted before the add: a worker never starts a job nobody is known to wait for. This
      // submission's id is the waiter's: a join or leave that reaches Redis twice counts once.
      // The queue's depth goes out with the join, in the same round trip; a full queue leaves.
      joining = joinWaiters(this.d.redis, waitersKey, resultId, waitMs).then(n => ((joined = true), n));
      const [depth, waiters] = await Promise.all([step(queue.count()), step(joining)]);
      if (depth >= ro.maxQueueDepth) throw ourError('queueFull', pluginName, depth, ro.maxQueueDepth);
      if (key !== undefined) noteCache(waiters > 1 ? 'coalesced' : 'miss', ctx);
      const job = this.signedJob(req, repo, key, ctx, { resultId, waitId, gitCreds: creds !== undefined, tgz });
      if (creds) unregister = this.d.gitCreds!.register(resultId, creds, job.expiresAt);
      // With deduplication (cached requests) `add` may return the identical job of another caller.
      const added = await step(queue.add(kind, job.data, { ...this.jobOptions(creds ? undefined : key), jobId: resultId }));
      const jobId = added.id!;
      const answer: Answer = key !== undefined ? { jobId, binding: key, key } : { jobId, binding: resultId, resultId, digest: requestDigest(job.request) };
      const waiting = this.d.waiter.wait(jobId);
      const end = await timeStage('remote', () => raceAbort(waiting.done, ctx.signal), undefined, ctx);
      if (end === 'aborted') {
        waiting.stop();
        return await this.abandon(queue, answer, kind, ctx, leave);
      }
      // The job has ended: this caller stops waiting now; nothing waits for the reply.
      ended = true;
      void leave();
      return await settle(this.d, answer, end, submission);
    } finally {
      unregister?.();
      // A join still under way (its step gave up on a slow Redis) leaves once it lands, without
      // holding this caller: a waiter left behind would keep its job from being cancelled.
      if (!ended && joined) await leave();
      else if (!ended) void joining?.then(leave, () => 0);
    }
  }

  /**
   * The request's `upload` stage. A small tarball goes inside the job (returned here): no blob to
   * upload, none for the worker to fetch. Only in a first submission: a later one (its blob was
   * found lost: a worker that predates inline tarballs looked for one) uploads it.
   */
  private async uploadStage(repo: RepoRef, submission: number, ctx: Ctx, step: <T>(p: Promise<T>) => Promise<T>): Promise<Buffer | undefined> {
    // Redis refuses strings over proto-max-bulk-len (512 MB by default): say so rather than fail obscurely.
    if (repo.size > REDIS_MAX_STRING_BYTES) throw ourError('blobTooLarge', repo.size, REDIS_MAX_STRING_BYTES);
    const inline = repo.size <= INLINE_TARBALL_BYTES && submission === 1;
    return timeStage('upload', async () => {
      if (inline) return Buffer.from(repo.bytes ?? (await fs.readFile(await repo.file())));
      await step(this.upload(repo));
      return undefined;
    }, undefined, ctx);
  }

  /** The signed job of this submission, enqueued now; `request` is what its digest covers. */
  private signedJob(req: PluginRequest, repo: RepoRef, key: string | undefined, ctx: Ctx, ids: { resultId: string; waitId: string; gitCreds: boolean; tgz: Buffer | undefined }) {
    const { resultId, waitId, gitCreds, tgz } = ids;
    const enqueuedAt = Date.now();
    const request = {
      kind: req.kind,
      plugin: this.d.pluginName,
      specDigest: this.d.specDigest,
      appRelPath: req.appRelPath,
      env: req.env,
      blob: repo.checksum,
      size: repo.size,
    };
    const expiresAt = ctx.deadline ?? enqueuedAt + NO_DEADLINE_WAIT_MS;
    const data = signJob(this.d.signingKey, {
      ...request,
      cacheKey: key ?? null,
      resultId,
      waitId,
      deadline: ctx.deadline ?? null,
      enqueuedAt,
      expiresAt,
      ...traceparentOfRequest(ctx),
      ...(gitCreds ? { gitCreds: true as const } : {}),
      ...(tgz ? { tgz: tgz.toString('base64') } : {}),
      resultForm: 'manifests',
      resultInline: true,
    });
    return { request, data, expiresAt };
  }

  private jobOptions(key: string | undefined): JobsOptions {
    const ageSeconds = Math.ceil(this.d.ro.resultTtlMs / 1000);
    return {
      ...(key !== undefined ? { deduplication: { id: key } } : {}),
      attempts: this.d.ro.jobAttempts,
      backoff: { type: 'fixed', delay: 250 },
      removeOnComplete: { age: ageSeconds, count: 1_000 },
      removeOnFail: { age: ageSeconds, count: 5_000 },
      sizeLimit: JOB_SIZE_LIMIT,
    };
  }

  /**
   * The caller gave up. If others still wait, only this caller leaves (with its context error,
   * as the in-process coalescer does). The last one stops the job wherever it is: removed if
   * queued, its process group killed if running. It then still gets the run's own error when
   * that comes quickly, exactly as a lone standalone request would.
   */
  private async abandon(queue: Queue, answer: Answer, kind: RpcKind, ctx: Ctx, leave: () => Promise<number>): Promise<Attempt> {
    const { jobId } = answer;
    const reason = ctx.signal.reason as CmpError;
    if ((await leave()) > 0) throw reason;
    const waiting = this.d.waiter.wait(jobId);
    const cancelReason = reason.code === Status.DEADLINE_EXCEEDED ? 'deadline' : 'canceled';
    await publishCancel(this.d.redis, this.d.keys, this.d.signingKey, { queue: this.d.pluginName, jobId, reason: cancelReason }).catch(logFailed(this.d.log, 'abandoned job: cancel', 'debug', { jobId }));
    await queue.remove(jobId).catch(logFailed(this.d.log, 'abandoned job: remove', 'debug', { jobId }));
    const bound = this.d.engine.options.execFatalTimeoutMs + 2_000;
    // No end within the bound: the caller's own error below says enough.
    const end = await withTimeout(waiting.done, bound, () => new Error('timeout')).catch(() => undefined);
    waiting.stop();
    if (end?.state === 'failed') {
      const failure = decodeFailure(this.d.signingKey, jobId, answer.binding, end.reason);
      if (failure) throw new CmpError(failure.message, failure.code);
    }
    throw wrap(RPC_TEXT[kind].command, reason);
  }

  /** Upload the tarball unless its blob exists; concurrent requests of this proxy share one upload. */
  private upload(repo: RepoRef): Promise<boolean> {
    let pending = this.uploads.get(repo.checksum);
    if (!pending) {
      pending = (repo.bytes ? Promise.resolve(repo.bytes) : repo.file()).then(tgz => storeBlob(this.d.redis, this.d.keys, repo.checksum, tgz, this.d.ro.blobTtlMs));
      this.uploads.set(repo.checksum, pending);
      const forget = () => this.uploads.delete(repo.checksum);
      pending.then(forget, forget);
    }
    return pending;
  }
}

/** The traced request's span as the job's parent (tracing on and the request sampled), else nothing. */
function traceparentOfRequest(ctx: Ctx): { traceparent?: string; tracestate?: string } {
  const span = currentTrace(ctx)?.span;
  if (!span) return {};
  return { traceparent: formatTraceparent(span), ...(span.traceState !== undefined ? { tracestate: span.traceState } : {}) };
}
