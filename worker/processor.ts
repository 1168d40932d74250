import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { Status } from '../cmp/grpc-status.js';
import { DelayedError, UnrecoverableError, WaitingError, type Job } from 'bullmq';
import type { RedisClient } from '../cmp/queue/redis-connection.js';
import type { Ctx } from '../cmp/context.js';
import { canceled, CmpError, codeOf, deadlineExceeded, messageOf, ourError } from '../cmp/errors.js';
import type { Logger } from '../cmp/log.js';
import type { Engine, ReadSink } from '../cmp/plugin/execute.js';
import type { PluginResult } from '../cmp/plugin/request.js';
import { writeReads } from '../cmp/queue/traced-store.js';
import { metrics, resultBytes } from '../cmp/observe/metrics.js';
import { currentTrace, RequestTrace, traceStep, withTrace } from '../cmp/observe/request-trace.js';
import { endRequestSpan, traceRequest } from '../cmp/observe/request-spans.js';
import { nowMs, parseTraceContext, tracingEnabled } from '../cmp/observe/tracing.js';
import { BlobCorruptError, BlobMissingError, fetchBlob } from '../cmp/queue/blob-store.js';
import {
  answerBinding, encodeFailure, INLINE_RESULT_BYTES, InvalidJobError, REJECTED, requestDigest, requestOf, sealResult, verifyJob, type JobFailure, type JobRequest, type JobReturn, type VerifiedJob,
} from '../cmp/queue/job-contract.js';
import { appNameOf, type KeySpace } from '../cmp/queue/keys.js';
import { EncodedResult, encodeResult, readResult } from '../cmp/queue/result-store.js';
import { countWaiters } from '../cmp/queue/waiters.js';
import { relayedGitCreds } from './git-creds-source.js';
import { InfraError, RunnerBusy, RunnerUnreachable, type Execute } from './execute.js';
import type { RecordedRuns } from './recorded-runs.js';
import { skewDelay, SkewHandBack } from './skew.js';

/** Reasons given to `worker.cancelJob`: a caller's context error, or this worker going away. */
export type AbortReason = 'deadline' | 'canceled' | 'shutdown';

export interface ProcessorDeps {
  engine: Engine;
  execute: Execute;
  /** Command connection for blobs, results and waiter counts. */
  redis: RedisClient;
  keys: KeySpace;
  /** This worker's queue: the plugin name. */
  queue: string;
  specDigest: string;
  signingKey: Buffer;
  log: Logger;
  /**
   * CMP_OFFLOAD_JOB_ATTEMPTS of this worker: runs of a job that may end in an infrastructure
   * failure (its worker lost mid-run, or a failure recorded by a live worker). The job's own
   * `attempts` (the proxy's setting) applies when smaller.
   */
  jobAttempts: number;
  /**
   * With a runner: `down()` says the runner is known not to accept connections (jobs go back to
   * the queue at once); `unreachable()` reports that it did not (the worker stops fetching until
   * it does again).
   */
  runner?: { down(): boolean; unreachable(): void };
  /**
   * Where a run's outcome waits for BullMQ to record the job's end (the worker's RecordingWorker):
   * a run whose end could not be recorded is reported as `unrecorded`. Without it, the outcome
   * is reported as the processor ends.
   */
  runs?: RecordedRuns;
}

/** A job's infrastructure failures so far: runs lost with their worker (stalls) and failures recorded by a live worker. */
export function endedRuns(job: Pick<Job, 'attemptsMade' | 'stalledCounter'>): { lost: number; failed: number; total: number } {
  const lost = job.stalledCounter ?? 0;
  const failed = job.attemptsMade ?? 0;
  return { lost, failed, total: lost + failed };
}

/** How `jobGaveUp` describes the runs a job lost. */
function lostRunsText(lost: number, failed: number): string {
  const parts = [];
  if (lost > 0) parts.push(`${lost} lost with their worker (killed, out of memory, node lost)`);
  if (failed > 0) parts.push(`${failed} failed (see the workers' logs)`);
  return parts.join(', ');
}

/**
 * The BullMQ processor: verify the job, refuse version skew, skip jobs nobody waits for, fetch
 * the blob, run the same executor as standalone mode, store the result, return its key.
 *
 * Failure policy: whatever the plugin or the request caused (including a rejected job) fails
 * at once with an UnrecoverableError carrying the signed text and code for the caller.
 * Infrastructure trouble (Redis errors, this worker shutting down) throws a plain Error, so
 * BullMQ retries the job, on this worker or another.
 */
export function createProcessor(deps: ProcessorDeps) {
  const steps = new JobSteps(deps);
  // Three declared parameters: BullMQ passes the AbortSignal only to processors that take it.
  return async function process(job: Job, token: string | undefined, signal: AbortSignal | undefined): Promise<JobReturn> {
    const trace = new RequestTrace();
    metrics.concurrencyInUse.inc();
    let outcome = 'failed';
    try {
      const { cached, ...ret } = await withTrace(trace, () => steps.process(job, token, signal));
      outcome = cached ? 'cached' : 'completed';
      return ret;
    } catch (err) {
      outcome = outcomeOfError(err, trace);
      throw err;
    } finally {
      metrics.concurrencyInUse.dec();
      reportJob(deps, job, trace, outcome);
    }
  };
}

/** A plain Error is retried by BullMQ (infrastructure trouble); an UnrecoverableError is final. */
function outcomeOfError(err: unknown, trace: RequestTrace): string {
  return err instanceof UnrecoverableError ? (trace.skipped ? 'skipped' : 'failed') : err instanceof WaitingError ? 'requeued' : err instanceof SkewHandBack ? 'skew' : 'retried';
}

/** The job's metric, span and `job` log line: once BullMQ has recorded its end, where `deps.runs` waits for it. */
function reportJob(deps: ProcessorDeps, job: Job, trace: RequestTrace, outcome: string): void {
  const attempt = job.attemptsMade + 1;
  const report = (final: string, unrecorded?: string) => {
    metrics.jobs.inc({ outcome: final });
    if (trace.stageSpans) {
      const attributes = { 'cmp.plugin': deps.queue, 'cmp.app': trace.app, 'cmp.rpc': job.name, 'cmp.outcome': final, 'cmp.attempt': attempt };
      endRequestSpan(trace, attributes, final !== 'completed' && final !== 'cached');
    }
    const why = unrecorded === undefined ? {} : { ran: outcome, reason: unrecorded };
    deps.log.info({ jobId: job.id, plugin: deps.queue, app: trace.app, rpc: job.name, outcome: final, ...why, attempt, lostWithWorker: job.stalledCounter ?? 0, ms: trace.durations() }, 'job');
  };
  // A requeued or handed-back job was moved by the processor itself: BullMQ records nothing more.
  if (deps.runs && outcome !== 'requeued' && outcome !== 'skew') {
    const expected = outcome === 'completed' || outcome === 'cached' ? 'completed' : 'failed';
    deps.runs.expect(job, r => {
      if (r.as === expected) report(outcome);
      else report('unrecorded', r.as === 'nothing' ? r.reason : `BullMQ recorded the job as ${r.as}`);
    });
  } else report(outcome);
}

const failureOf = (err: CmpError): JobFailure => ({ code: err.code, message: err.message, canceled: false });

/** Where a job's answer goes: the cache entry of its cache key, or the result key its proxy chose. */
interface ResultPlace {
  key: string;
  /** What the answer is signed for: the cache key, or the digest of the request the job describes. */
  binding: string;
}

/** The steps of one job, from its checks to its stored result. */
class JobSteps {
  private readonly deps: ProcessorDeps;
  private readonly ttlMs: number;
  private readonly resultTtlMs: number;

  constructor(deps: ProcessorDeps) {
    this.deps = deps;
    this.ttlMs = deps.engine.options.cache.ttlMs;
    this.resultTtlMs = deps.engine.options.redis!.resultTtlMs;
  }

  /** Check the job (runner, signature, queue, runs lost so far), then run it. */
  async process(job: Job, token: string | undefined, signal: AbortSignal | undefined): Promise<JobReturn & { cached?: boolean }> {
    const { deps } = this;
    const jobId = job.id!;
    // A worker whose runner is down may still get a job (a fetch already under way when it paused).
    if (deps.runner?.down()) return this.backToQueue(job, token, 'the runner does not accept connections');
    const data = this.verify(job);
    const binding = answerBinding(data);
    if (data.plugin !== deps.queue) {
      throw this.fail(jobId, binding, failureOf(ourError('wrongQueue', data.plugin, deps.queue)));
    }
    // A job that lost its earlier runs (a worker killed under it each time: out of memory?)
    // stops here, before anything runs again, with a signed answer its callers get at once.
    const budget = Math.min(deps.jobAttempts, job.opts.attempts ?? deps.jobAttempts);
    const ended = endedRuns(job);
    if (ended.total >= budget) {
      deps.log.warn({ jobId, lostWithWorker: ended.lost, failed: ended.failed, limit: budget }, 'job given up: its runs ended in infrastructure failures (CMP_OFFLOAD_JOB_ATTEMPTS)');
      throw this.fail(jobId, binding, failureOf(ourError('jobGaveUp', jobId, data.plugin, ended.total, lostRunsText(ended.lost, ended.failed))));
    }
    // This run is the last one allowed: its infrastructure failure is final, and says why.
    const lastRun = ended.total + 1 >= budget;
    try {
      return await this.runJob(job, token, signal, data, binding);
    } catch (err) {
      if (!lastRun || err instanceof UnrecoverableError || err instanceof WaitingError || err instanceof DelayedError) throw err;
      const earlier = lostRunsText(ended.lost, ended.failed);
      throw this.fail(jobId, binding, failureOf(ourError('jobGaveUp', jobId, data.plugin, ended.total + 1, `${earlier ? `${earlier}; ` : ''}the last: ${messageOf(err)}`)));
    }
  }

  /** The job's signed fields, or its signed refusal: nothing runs for a job that does not verify. */
  private verify(job: Job): VerifiedJob {
    const jobId = job.id!;
    try {
      return verifyJob(this.deps.signingKey, job.data, jobId);
    } catch (err) {
      if (!(err instanceof InvalidJobError)) throw err;
      this.deps.log.warn({ jobId, reason: err.message }, 'rejected a job that does not verify; nothing was run');
      throw this.fail(jobId, REJECTED, failureOf(ourError('jobRejected', err.message)));
    }
  }

  /** A verified job of this queue: hand it back, skip it, answer it from the cache, or run it and store its result. */
  private async runJob(job: Job, token: string | undefined, signal: AbortSignal | undefined, data: VerifiedJob, binding: string): Promise<JobReturn & { cached?: boolean }> {
    const jobId = job.id!;
    const trace = currentTrace();
    if (trace) traceJob(trace, job, data);
    if (data.specDigest !== this.deps.specDigest) return this.otherSpec(job, token, data, binding);

    const abort = new JobAbort(signal);
    const place = this.placeOf(data);
    // A caller that missed the cache just before an identical job finished enqueues anew: answer
    // it from the cache. Not for a proxy of an earlier version (no resultForm): the entry may be
    // in the form it cannot read, and the run rewrites it in its own. Read in the same round trip
    // as the waiter count.
    const entry = data.cacheKey !== null && data.resultForm === 'manifests' ? readResult(this.deps.redis, this.deps.signingKey, place.key, place.binding) : undefined;
    entry?.catch(() => {}); // read below only when the job is waited for
    await this.skipUnwaited(jobId, binding, data, abort, trace);
    if (entry && 'found' in (await entry)) return { key: place.key, cached: true };

    // A small tarball came inside the job (verified against its checksum): nothing to fetch.
    const tgzPath = data.tarball ? undefined : path.join(this.deps.engine.options.workRoot, `${randomUUID()}.tgz`);
    try {
      if (tgzPath) await this.fetchTarball(jobId, binding, data, tgzPath);
      // Traced cache: record what the run reads; the proxy turns it into a traced entry.
      const sink: ReadSink | undefined = this.deps.engine.options.cache.traced && data.kind === 'generate' && data.cacheKey !== null ? {} : undefined;
      const result = await this.run(job, token, data, binding, tgzPath ?? data.tarball!, abort, sink);
      return await this.store(jobId, data, place, result, sink);
    } finally {
      abort.dispose();
      if (tgzPath) await fs.rm(tgzPath, { force: true });
    }
  }

  /** Not started when its callers are gone (cancelled while queued, or a stale retry). */
  private async skipUnwaited(jobId: string, binding: string, data: VerifiedJob, abort: JobAbort, trace: RequestTrace | undefined): Promise<void> {
    const waiters = await countWaiters(this.deps.redis, this.deps.keys.waiters(this.deps.queue, data.waitId));
    if (waiters > 0 && !abort.signal.aborted) return;
    if (abort.shutdown) throw new Error('cmp-offload: worker shutting down');
    this.deps.log.info({ jobId }, 'nobody waits for this job any more; not running it');
    if (trace) trace.skipped = true;
    throw this.fail(jobId, binding, { code: Status.CANCELLED, message: 'context canceled', canceled: true });
  }

  private placeOf(data: VerifiedJob): ResultPlace {
    const key = data.cacheKey !== null ? this.deps.keys.cacheEntry(data.plugin, appNameOf(data.env), data.cacheKey) : this.deps.keys.result(this.deps.queue, data.resultId);
    return { key, binding: data.cacheKey ?? requestDigest(data) };
  }

  private async fetchTarball(jobId: string, binding: string, data: VerifiedJob, tgzPath: string): Promise<void> {
    try {
      await traceStep('blob_fetch', () => fetchBlob(this.deps.redis, this.deps.keys, data.blob, data.size, tgzPath));
    } catch (err) {
      if (err instanceof BlobMissingError || err instanceof BlobCorruptError) throw this.blobLost(jobId, binding, err);
      if (err instanceof CmpError) throw this.fail(jobId, binding, failureOf(err));
      throw new Error(`cmp-offload: fetching the tarball failed: ${messageOf(err)}`);
    }
  }

  /**
   * Run the request on its tarball. A failure becomes the plugin's signed answer, an
   * infrastructure error (retried), or a hand-back to the queue when the run never started.
   */
  private async run(job: Job, token: string | undefined, data: VerifiedJob, binding: string, tgz: string | Buffer, abort: JobAbort, sink: ReadSink | undefined): Promise<PluginResult | EncodedResult> {
    const jobId = job.id!;
    // The job's deadline: its callers are gone after it (the runner client bounds its wait by it).
    const ctx: Ctx = { signal: abort.signal, deadline: data.expiresAt };
    try {
      const req = requestOf(data);
      // provideGitCreds: the run's askpass and credential files come from the job's proxy.
      if (data.gitCreds && data.kind === 'generate') {
        const { redis, keys, signingKey } = this.deps;
        const creds = await relayedGitCreds({ redis, keys, signingKey }, jobId, data.env, data.expiresAt, abort.signal).catch((err: unknown) => {
          if (err instanceof CmpError || abort.signal.aborted) throw err;
          throw new InfraError(`cmp-offload: the git credentials lookup failed: ${messageOf(err)}`);
        });
        if (creds) req.gitCreds = creds;
      }
      return await this.deps.execute(req, tgz, ctx, sink);
    } catch (err) {
      if (abort.shutdown) throw new Error('cmp-offload: worker shutting down');
      if (err instanceof RunnerBusy) return await this.backToQueue(job, token, err.message);
      if (err instanceof RunnerUnreachable) {
        this.deps.runner?.unreachable();
        return await this.backToQueue(job, token, err.message);
      }
      if (err instanceof InfraError) throw err;
      throw this.fail(jobId, binding, { code: codeOf(err), message: messageOf(err), canceled: abort.signal.aborted });
    }
  }

  /**
   * The run's read record (traced cache) and its result: stored under its key, and for a job
   * that asked for it returned too when small (JobRequest.resultInline). An uncached result
   * returned so is not stored: only its own proxy reads it.
   */
  private async store(jobId: string, data: VerifiedJob, place: ResultPlace, result: PluginResult | EncodedResult, sink: ReadSink | undefined): Promise<JobReturn> {
    const { redis, keys, signingKey } = this.deps;
    if (sink) {
      const readsKey = keys.tracedReads(data.plugin, appNameOf(data.env), data.cacheKey!);
      await writeReads(redis, signingKey, readsKey, sink.reads ?? { complete: false, reason: 'not recorded' }, this.resultTtlMs);
    }
    const stored = await encodeResult(signingKey, place.key, place.binding, result, data.resultForm ?? 'json');
    const inline = data.resultInline === true && stored.length <= INLINE_RESULT_BYTES;
    if (data.cacheKey !== null || !inline) await redis.set(place.key, stored, 'PX', data.cacheKey !== null ? this.ttlMs : this.resultTtlMs);
    if (data.cacheKey !== null) metrics.cacheStoredBytes.inc(result instanceof EncodedResult ? 0 : resultBytes(result));
    return inline ? { key: place.key, sealed: sealResult(signingKey, jobId, stored) } : { key: place.key };
  }

  /**
   * Hand a job back to the queue without using an attempt (its run never started): another
   * worker, or this one once it fetches again, takes it. BullMQ's documented manual move.
   */
  private async backToQueue(job: Job, token: string | undefined, why: string): Promise<never> {
    this.deps.log.info({ jobId: job.id, why }, 'job handed back to the queue, not run here');
    await job.moveToWait(token);
    throw new WaitingError();
  }

  /**
   * A job of another plugin spec: handed back (delayed) for a worker of its spec while the
   * bounds allow (skewDelay), else failed with versionSkew. Its hand-backs so far are its
   * starts beyond its recorded runs (BullMQ counts every move to active).
   */
  private async otherSpec(job: Job, token: string | undefined, data: JobRequest, binding: string): Promise<never> {
    const { deps } = this;
    const jobId = job.id!;
    const handBacks = Math.max(0, (job.attemptsStarted ?? 1) - 1 - endedRuns(job).total);
    const now = Date.now();
    const delay = skewDelay(handBacks, now, data.enqueuedAt, data.expiresAt);
    const fields = { jobId, proxy: data.specDigest, worker: deps.specDigest, handBacks, waitedMs: now - data.enqueuedAt };
    if (delay === undefined) {
      deps.log.warn(fields, 'plugin spec mismatch and no worker of the job\'s spec took it in time, job refused');
      throw this.fail(jobId, binding, failureOf(ourError('versionSkew', data.plugin, data.specDigest, deps.specDigest)));
    }
    deps.log.info({ ...fields, delayMs: delay }, 'job of another plugin spec handed back for a worker of its spec (a rollout under way?)');
    await job.moveToDelayed(now + delay, token);
    throw new SkewHandBack();
  }

  private fail(jobId: string, binding: string, f: JobFailure): UnrecoverableError {
    return new UnrecoverableError(encodeFailure(this.deps.signingKey, jobId, binding, f));
  }

  /**
   * The blob vanished from Redis (flushed, restarted empty, failover, eviction, expiry) or was
   * corrupt (and is removed now): an infrastructure failure, never the plugin's, that only the
   * proxy can mend with its spooled copy. Retrying here would find the same, so the job ends
   * with a signed failure that tells the proxy to upload and submit anew.
   */
  private blobLost(jobId: string, binding: string, err: CmpError): UnrecoverableError {
    this.deps.log.warn({ jobId, reason: err.message }, 'tarball blob unusable; its proxy is asked to send it again');
    return this.fail(jobId, binding, { ...failureOf(err), resubmit: true });
  }
}

/** The job's app, size and queue wait in its trace; with tracing, its span continues the proxy's request span. */
function traceJob(trace: RequestTrace, job: Job, data: VerifiedJob): void {
  trace.app = appNameOf(data.env);
  trace.bytes = data.size;
  trace.addStage('queue_wait', Math.max(0, Date.now() - data.enqueuedAt));
  // Tracing: this job continues the proxy's request span (signed into the job), from its
  // enqueue time (the job span holds its queue wait); the sampler follows the request's decision.
  if (tracingEnabled()) {
    const now = nowMs();
    const startMs = Math.min(now, data.enqueuedAt);
    if (traceRequest(trace, `cmp-offload job ${job.name}`, 'consumer', startMs, parseTraceContext(data.traceparent, data.tracestate === undefined ? [] : [data.tracestate]))) {
      trace.stageSpans!.push({ name: 'queue_wait', startMs, endMs: now });
    }
  }
}

/**
 * BullMQ's abort of a job (a caller's context error, or this worker going away) as the run's
 * context: `signal` aborts with the caller's error; `shutdown` says it was this worker's.
 */
class JobAbort {
  private readonly controller = new AbortController();
  private readonly from: AbortSignal | undefined;
  shutdown = false;

  constructor(from: AbortSignal | undefined) {
    this.from = from;
    if (from?.aborted) this.onAbort();
    else from?.addEventListener('abort', this.onAbort, { once: true });
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  dispose(): void {
    this.from?.removeEventListener('abort', this.onAbort);
  }

  private readonly onAbort = (): void => {
    const reason = this.from?.reason as AbortReason | undefined;
    this.shutdown = reason === 'shutdown';
    this.controller.abort(reason === 'deadline' ? deadlineExceeded() : canceled());
  };
}
