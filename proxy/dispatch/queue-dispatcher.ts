import { status as Status } from '@grpc/grpc-js';
import { createRedisBackend, Queue, QueueEvents, type BackendFactory, type JobsOptions } from 'bullmq';
import type { RedisOptions } from '../../cmp/config/options.js';
import type { Ctx } from '../../cmp/context.js';
import { CmpError, wrap, ourError } from '../../cmp/errors.js';
import type { Logger } from '../../cmp/log.js';
import { currentTrace, noteCache, timeStage } from '../../cmp/observe/request-trace.js';
import { formatTraceparent } from '../../cmp/observe/tracing.js';
import { metrics } from '../../cmp/observe/metrics.js';
import type { Engine } from '../../cmp/plugin/execute.js';
import { RPC_TEXT, type PluginRequest, type PluginResult, type RpcKind } from '../../cmp/plugin/request.js';
import { gitCredsOf } from '../../cmp/askpass/git-creds-env.js';
import { storeBlob } from '../../cmp/queue/blob-store.js';
import { publishCancel } from '../../cmp/queue/cancel.js';
import { decodeFailure, newResultId, REJECTED, requestDigest, signJob } from '../../cmp/queue/job-contract.js';
import { appNameOf, escapeKeyPart, KeySpace } from '../../cmp/queue/keys.js';
import { connectRedis, redisUnavailable, untilReady, withTimeout, type RedisClient } from '../../cmp/queue/redis-connection.js';
import { readResult } from '../../cmp/queue/result-store.js';
import { RedisResultCache } from '../../cmp/queue/redis-result-cache.js';
import type { ResultCache } from '../../cmp/cache/result-cache.js';
import { RedisAppPaths } from '../../cmp/queue/app-paths-store.js';
import type { TracedRequest } from '../../cmp/cache/traced-key.js';
import { joinWaiters, leaveWaiters } from '../../cmp/queue/waiters.js';
import { answerWithCache, type CacheSite } from './cache-policy.js';
import type { Dispatcher, RepoRef } from './dispatcher.js';
import { GitCredsResponder } from './git-creds-responder.js';
import { JobWaiter, type JobEnd } from './job-waiter.js';
import { guard, raceAbort } from './redis-step.js';

/** Redis's default proto-max-bulk-len: the largest string, hence the largest blob, it stores. */
const REDIS_MAX_STRING_BYTES = 512 * 1024 * 1024;

/** A job's JSON is references and metadata; anything near this is a bug or an attack. */
const JOB_SIZE_LIMIT = 1024 * 1024;
/** The events stream is read by every proxy; completions carry only a key name, so this is plenty. */
const EVENTS_MAX_LEN = 2_000;
/** Without a caller deadline, the waiter count is kept this long at most (a dead proxy's count expires). */
const NO_DEADLINE_WAIT_MS = 3600_000;

export interface QueueDispatcherDeps {
  engine: Engine;
  /** Plugin name = queue name: the socket file name without `.sock`. */
  pluginName: string;
  specDigest: string;
  log: Logger;
}

/**
 * One submission's outcome: the result, or a reason to submit the request anew (its job, blob
 * or result vanished from Redis; its job was removed, cancelled or refused under it) with the
 * error the caller gets when it may not be submitted again.
 */
type Attempt = { result: PluginResult } | { retry: string; cause: ResubmitCause; jobId: string; error: CmpError };

/** Why a request is submitted anew (the label of cmp_offload_resubmissions_total). */
type ResubmitCause = 'job_vanished' | 'blob_lost' | 'result_missing' | 'job_removed' | 'job_canceled' | 'job_refused';

/**
 * What the job we wait for answers and where: a cached request's answer is its cache entry
 * (possibly from another caller's identical job); an uncached one's is the result key of the
 * id we chose, signed with our request's digest.
 */
type Answer = { jobId: string; binding: string } & ({ key: string } | { resultId: string; digest: string });

/**
 * Distributed mode (architecture §3, §5): answer from the Redis cache, otherwise store the
 * tarball once per content, enqueue a signed job of references, wait for its end on the shared
 * QueueEvents within the caller's deadline, and relay the result or the worker's error with its
 * text and code. Identical requests coalesce through BullMQ deduplication on the cache key, from
 * this proxy or any other; the last caller to leave cancels the job, wherever it is.
 */
export class QueueDispatcher implements Dispatcher {
  private readonly ro: RedisOptions;
  private readonly signingKey: Buffer;
  private readonly keys: KeySpace;
  private readonly redis: RedisClient;
  /** QueueEvents' own: its blocking reads of the events stream use it, not a duplicate. */
  private readonly eventsConnection: RedisClient;
  private queue: Promise<Queue> | undefined;
  private readonly events: QueueEvents;
  private readonly waiter: JobWaiter;
  private readonly uploads = new Map<string, Promise<boolean>>();
  /** Requests this proxy has queued or running now (CMP_OFFLOAD_MAX_INFLIGHT). */
  private inflight = 0;
  /** The manifest-generate-paths of the apps answered with the traced cache. */
  readonly paths: RedisAppPaths;
  /** provideGitCreds: answers the git credentials lookups of this proxy's jobs. */
  private readonly gitCreds: GitCredsResponder | undefined;

  constructor(private readonly deps: QueueDispatcherDeps) {
    const ro = deps.engine.options.redis;
    if (!ro?.signingKey) throw new Error('distributed mode needs CMP_OFFLOAD_REDIS_URL and CMP_OFFLOAD_SIGNING_KEY');
    this.ro = ro;
    this.signingKey = ro.signingKey;
    this.keys = new KeySpace(ro.prefix);
    const onError = (err: Error) => deps.log.debug({ err: err.message }, 'redis connection error');
    this.redis = connectRedis(ro, 'command', onError);
    this.eventsConnection = connectRedis(ro, 'blocking', onError);
    this.paths = new RedisAppPaths(this.redis, this.signingKey, this.keys);
    this.gitCreds = deps.engine.config.spec.provideGitCreds
      ? new GitCredsResponder({ ro, redis: this.redis, keys: this.keys, signingKey: this.signingKey, log: deps.log })
      : undefined;
    this.events = new QueueEvents(deps.pluginName, { connection: this.eventsConnection, prefix: ro.prefix }, onGivenConnection);
    this.events.on('error', onError);
    this.waiter = new JobWaiter({
      getJob: async jobId => (await this.getQueue()).getJob(jobId),
      jobKey: async jobId => (await this.getQueue()).toKey(jobId),
      eventsKey: async () => (await this.getQueue()).keys.events!,
      // MAXLEN is approximate (~): Redis may keep up to one node more than asked.
      eventsMaxLen: 2 * EVENTS_MAX_LEN,
      events: this.events,
      redis: this.redis,
      // A Redis restart or failover within the Redis timeout is waited out, then the jobs are looked at.
      graceMs: ro.timeoutMs,
    });
  }

  /**
   * The BullMQ Queue on the command connection. A failed initialisation (Redis away for longer
   * than the command timeout) is dropped, so the next request tries again.
   */
  private getQueue(): Promise<Queue> {
    if (!this.queue) {
      const queue = new Queue(this.deps.pluginName, {
        connection: this.redis,
        prefix: this.ro.prefix,
        streams: { events: { maxLen: EVENTS_MAX_LEN } },
      });
      queue.on('error', err => this.deps.log.debug({ err: err.message }, 'queue error'));
      const ready = queue.waitUntilReady().then(() => queue);
      this.queue = ready;
      ready.catch(() => {
        if (this.queue === ready) this.queue = undefined;
        void queue.close().catch(() => {});
      });
    }
    return this.queue;
  }

  /**
   * Wait up to `ms` for Redis and the events reader, so that the first requests after start do
   * not fail while the connections are still being made. False when Redis is not there (yet):
   * the proxy serves anyway and answers UNAVAILABLE until it is.
   */
  async waitReady(ms: number): Promise<boolean> {
    const redisReady = untilReady(this.redis);
    const ready = Promise.all([redisReady, this.events.waitUntilReady()]).then(() => true);
    return withTimeout(ready, ms, () => new Error('timeout')).catch(() => false);
  }

  /** The command connection: readiness and the queue-depth gauge read it. */
  get commandConnection(): RedisClient {
    return this.redis;
  }

  async dispatch(req: PluginRequest, repo: RepoRef, key: string | undefined, ctx: Ctx, traced?: TracedRequest): Promise<PluginResult> {
    if (ctx.signal.aborted) throw wrap(RPC_TEXT[req.kind].command, ctx.signal.reason);
    const { redis, signingKey, keys, deps } = this;
    const { log, pluginName: plugin } = deps;
    const ttlMs = deps.engine.options.cache.ttlMs;
    // Entries are kept per app: this request's store is its app's.
    const store = new RedisResultCache({ redis, signingKey, keys, plugin, app: appNameOf(req.env), ttlMs, log });
    const site: CacheSite = { store, paths: this.paths, ttlMs, log, guard: step => guard(this.ro, req.kind, ctx, step) };
    return answerWithCache(site, { kind: req.kind, key, traced, ctx }, async cached => {
      if (this.inflight >= this.ro.maxInflight) throw ourError('tooManyInflight', this.ro.maxInflight);
      this.inflight++;
      try {
        const result = await this.run(req, repo, key, ctx, store);
        // The worker stored the whole-tree entry and left its read record beside it.
        await cached?.keep({ result, unstored: undefined, wholeTreeStored: true, reads: () => store.workerReads(cached.key) });
        return result;
      } finally {
        this.inflight--;
      }
    });
  }

  /** The answer to `req`; `cache` (its app's) is looked at again before a re-submission. */
  private async run(req: PluginRequest, repo: RepoRef, key: string | undefined, ctx: Ctx, cache: ResultCache): Promise<PluginResult> {
    for (let submission = 1; ; submission++) {
      const outcome = await this.submit(req, repo, key, ctx, submission, cache);
      if (!('retry' in outcome)) return outcome.result;
      // Within the caller's deadline and CMP_OFFLOAD_RESUBMITS: what it needs is still here (the signed request, the spool).
      if (ctx.signal.aborted || submission > this.ro.resubmits) throw outcome.error;
      metrics.resubmissions.inc({ cause: outcome.cause });
      this.deps.log.warn(
        { plugin: this.deps.pluginName, app: appNameOf(req.env), jobId: outcome.jobId, cause: outcome.cause, reason: outcome.retry, resubmission: submission, limit: this.ro.resubmits },
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
      const hit = await guard(this.ro, req.kind, ctx, cache.read(key));
      if (hit) return { result: hit };
    }
    return this.attempt(req, repo, key, ctx, submission);
  }

  /** One upload, enqueue and wait; `{retry}` when what it needs vanished or was taken from under it. */
  private async attempt(req: PluginRequest, repo: RepoRef, key: string | undefined, ctx: Ctx, submission: number): Promise<Attempt> {
    const { kind } = req;
    // Redis refuses strings over proto-max-bulk-len (512 MB by default): say so rather than fail obscurely.
    if (repo.size > REDIS_MAX_STRING_BYTES) throw ourError('blobTooLarge', repo.size, REDIS_MAX_STRING_BYTES);
    await timeStage('upload', () => guard(this.ro, kind, ctx, this.upload(repo)), undefined, ctx);
    const queue = await guard(this.ro, kind, ctx, this.getQueue());
    const depth = await guard(this.ro, kind, ctx, queue.count());
    if (depth >= this.ro.maxQueueDepth) {
      throw ourError('queueFull', this.deps.pluginName, depth, this.ro.maxQueueDepth);
    }
    // The result id is also the job id: a worker refuses signed data found under another job.
    const resultId = newResultId();
    // provideGitCreds: the job's lookups are answered here, with this caller's nonce and files,
    // which live only as long as its call. So its runs are its own: no other caller's job is
    // joined (their nonce dies with their call), none joins it (the cache still answers them).
    const creds = this.gitCreds && kind === 'generate' ? gitCredsOf(req.env, this.deps.engine.options.askpassSocket) : undefined;
    const waitId = creds ? resultId : (key ?? resultId);
    const waitersKey = this.keys.waiters(this.deps.pluginName, waitId);
    const waitMs = (ctx.deadline === undefined ? NO_DEADLINE_WAIT_MS : Math.max(0, ctx.deadline - Date.now())) + 60_000;
    // Counted before the add: a worker never starts a job nobody is known to wait for. This
    // submission's id is the waiter's: a join or leave that reaches Redis twice counts once.
    const waiters = await guard(this.ro, kind, ctx, joinWaiters(this.redis, waitersKey, resultId, waitMs));
    if (key !== undefined) noteCache(waiters > 1 ? 'coalesced' : 'miss', ctx);
    let joined = true;
    const leave = async (): Promise<number> => {
      if (!joined) return 0;
      joined = false;
      return leaveWaiters(this.redis, waitersKey, resultId).catch(() => 0);
    };
    let unregister: (() => void) | undefined;
    try {
      const enqueuedAt = Date.now();
      const request = {
        kind,
        plugin: this.deps.pluginName,
        specDigest: this.deps.specDigest,
        appRelPath: req.appRelPath,
        env: req.env,
        blob: repo.checksum,
        size: repo.size,
      };
      const expiresAt = ctx.deadline ?? enqueuedAt + NO_DEADLINE_WAIT_MS;
      const data = signJob(this.signingKey, {
        ...request,
        cacheKey: key ?? null,
        resultId,
        waitId,
        deadline: ctx.deadline ?? null,
        enqueuedAt,
        expiresAt,
        ...traceparentOfRequest(ctx),
        ...(creds ? { gitCreds: true as const } : {}),
      });
      if (creds) unregister = this.gitCreds!.register(resultId, creds, expiresAt);
      // With deduplication (cached requests) `add` may return the identical job of another caller.
      const job = await guard(this.ro, kind, ctx, queue.add(kind, data, { ...this.jobOptions(creds ? undefined : key), jobId: resultId }));
      const jobId = job.id!;
      const answer: Answer = key !== undefined ? { jobId, binding: key, key } : { jobId, binding: resultId, resultId, digest: requestDigest(request) };
      const waiting = this.waiter.wait(jobId);
      const end = await timeStage('remote', () => raceAbort(waiting.done, ctx.signal), undefined, ctx);
      if (end === 'aborted') {
        waiting.stop();
        return await this.abandon(queue, answer, kind, ctx, leave);
      }
      return await this.settle(answer, end, submission);
    } finally {
      unregister?.();
      await leave();
    }
  }

  private jobOptions(key: string | undefined): JobsOptions {
    const ageSeconds = Math.ceil(this.ro.resultTtlMs / 1000);
    return {
      ...(key !== undefined ? { deduplication: { id: key } } : {}),
      attempts: this.ro.jobAttempts,
      backoff: { type: 'fixed', delay: 250 },
      removeOnComplete: { age: ageSeconds, count: 1_000 },
      removeOnFail: { age: ageSeconds, count: 5_000 },
      sizeLimit: JOB_SIZE_LIMIT,
    };
  }

  /** Turn a job's end into the caller's answer, or into a reason to submit anew. */
  private async settle(answer: Answer, end: JobEnd, submission: number): Promise<Attempt> {
    const { jobId } = answer;
    switch (end.state) {
      case 'completed': {
        const result = await this.fetchResult(answer, end.returnvalue);
        if (result !== 'missing') return { result };
        return { retry: 'its result is gone from Redis', cause: 'result_missing', jobId, error: ourError('resultMissing', jobId) };
      }
      case 'failed': {
        const failure = decodeFailure(this.signingKey, jobId, answer.binding, end.reason);
        if (!failure) {
          // The worker refused the job's data (swapped, expired, tampered with in Redis): ours is intact, submit it anew.
          const refusal = decodeFailure(this.signingKey, jobId, REJECTED, end.reason);
          if (refusal) {
            const error = new CmpError(refusal.message, refusal.code);
            return { retry: `the worker refused the job's data: ${refusal.message}`, cause: 'job_refused', jobId, error };
          }
          throw ourError('jobFailed', jobId, this.deps.pluginName, end.reason);
        }
        const error = new CmpError(failure.message, failure.code);
        // The tarball's blob vanished from Redis or was corrupt (the worker removed it): upload it again.
        if (failure.resubmit) return { retry: failure.message, cause: 'blob_lost', jobId, error };
        // Cancelled by the callers that were there before us: ours still wants an answer.
        if (failure.canceled) return { retry: 'the job was cancelled by the callers before us', cause: 'job_canceled', jobId, error };
        throw error;
      }
      case 'removed':
        return { retry: 'the job was removed from the queue', cause: 'job_removed', jobId, error: ourError('jobRemoved', jobId, this.deps.pluginName) };
      case 'vanished':
        return {
          retry: 'the job vanished from Redis (flushed, restarted empty, failed over or evicted)',
          cause: 'job_vanished',
          jobId,
          error: ourError('jobLost', jobId, this.deps.pluginName, submission),
        };
      case 'redis-down':
        throw redisUnavailable(this.ro, new Error(`connection lost while waiting for job ${jobId}`));
    }
  }

  /**
   * Read the answer where we expect it, signed for our request: the cache entry of our cache
   * key, or the result key of the id we chose, signed with our request's digest.
   */
  private async fetchResult(answer: Answer, returnvalue: unknown): Promise<PluginResult | 'missing'> {
    const { jobId } = answer;
    const stored = storedKeyOf(returnvalue);
    const expected =
      'resultId' in answer
        ? stored === this.keys.result(this.deps.pluginName, answer.resultId)
        : stored !== undefined &&
          stored.startsWith(`${this.ro.prefix}:out:${escapeKeyPart(this.deps.pluginName)}:`) &&
          stored.endsWith(`:${answer.key}`);
    if (!expected || stored === undefined) {
      throw ourError('badResultLocation', jobId);
    }
    let r;
    try {
      r = await readResult(this.redis, this.signingKey, stored, 'resultId' in answer ? answer.digest : answer.key);
    } catch (err) {
      throw redisUnavailable(this.ro, err);
    }
    if ('found' in r) return r.found;
    if ('missing' in r) return 'missing';
    throw new CmpError(
      `cmp-offload: the result of job ${jobId} does not verify (do proxy and workers share CMP_OFFLOAD_SIGNING_KEY?)`,
      Status.INTERNAL,
    );
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
    const waiting = this.waiter.wait(jobId);
    const cancelReason = reason.code === Status.DEADLINE_EXCEEDED ? 'deadline' : 'canceled';
    await publishCancel(this.redis, this.keys, this.signingKey, { queue: this.deps.pluginName, jobId, reason: cancelReason }).catch(() => {});
    await queue.remove(jobId).catch(() => 0);
    const bound = this.deps.engine.options.execFatalTimeoutMs + 2_000;
    const end = await withTimeout(waiting.done, bound, () => new Error('timeout')).catch(() => undefined);
    waiting.stop();
    if (end?.state === 'failed') {
      const failure = decodeFailure(this.signingKey, jobId, answer.binding, end.reason);
      if (failure) throw new CmpError(failure.message, failure.code);
    }
    throw wrap(RPC_TEXT[kind].command, reason);
  }

  /** Upload the tarball unless its blob exists; concurrent requests of this proxy share one upload. */
  private upload(repo: RepoRef): Promise<boolean> {
    let pending = this.uploads.get(repo.checksum);
    if (!pending) {
      pending = storeBlob(this.redis, this.keys, repo.checksum, repo.tgzPath, this.ro.blobTtlMs);
      this.uploads.set(repo.checksum, pending);
      const forget = () => this.uploads.delete(repo.checksum);
      pending.then(forget, forget);
    }
    return pending;
  }

  async close(): Promise<void> {
    this.waiter.close();
    // BullMQ's close waits for its connections to be ready, which they never are while Redis is
    // unreachable (a proxy stopped then would never exit): after the Redis timeout, end them here.
    const closing = Promise.allSettled([this.events.close(), this.queue?.then(q => q.close())]);
    await withTimeout(closing, this.ro.timeoutMs, () => new Error('timeout')).catch(() => {});
    this.gitCreds?.close();
    this.redis.disconnect();
    this.eventsConnection.disconnect();
  }
}

/**
 * BullMQ's Redis backend on the connection it is given, as is. By default a QueueEvents reads on
 * a duplicate of it, which only its own close() ends, and that close first waits for Redis (a
 * proxy stopped while Redis is away would keep the duplicate reconnecting). Declared not
 * blocking, the backend takes a passed connection as the caller's: no duplicate, not closed by
 * BullMQ (its close still interrupts the blocking read). The connection must be a `blocking`
 * one of ours, dedicated to this QueueEvents, and its owner ends it.
 */
const onGivenConnection: BackendFactory<ReturnType<typeof createRedisBackend>> = (name, opts, flags) =>
  createRedisBackend(name, opts, { ...flags, blocking: false });

/** The key a worker says it stored the result under (BullMQ may hand the return value over as JSON text). */
function storedKeyOf(returnvalue: unknown): string | undefined {
  let v = returnvalue;
  if (typeof v === 'string') {
    try {
      v = JSON.parse(v);
    } catch {
      return undefined;
    }
  }
  const key = (v as { key?: unknown } | null)?.key;
  return typeof key === 'string' ? key : undefined;
}

/** The traced request's span as the job's parent (tracing on and the request sampled), else nothing. */
function traceparentOfRequest(ctx: Ctx): { traceparent?: string } {
  const span = currentTrace(ctx)?.span;
  return span ? { traceparent: formatTraceparent(span) } : {};
}
