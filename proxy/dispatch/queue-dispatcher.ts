import { createRedisBackend, Queue, QueueEvents, type BackendFactory } from 'bullmq';
import type { TracedRequest } from '../../cmp/cache/traced-key.js';
import type { RedisOptions } from '../../cmp/config/options.js';
import type { Ctx } from '../../cmp/context.js';
import { ourError, wrap } from '../../cmp/errors.js';
import { logFailed, type Logger } from '../../cmp/log.js';
import type { Engine } from '../../cmp/plugin/execute.js';
import { RPC_TEXT, type PluginRequest, type PluginResult } from '../../cmp/plugin/request.js';
import { RedisAppPaths } from '../../cmp/queue/app-paths-store.js';
import { appNameOf, KeySpace } from '../../cmp/queue/keys.js';
import { connectRedis, untilReady, withTimeout, type RedisClient } from '../../cmp/queue/redis-connection.js';
import { RedisResultCache } from '../../cmp/queue/redis-result-cache.js';
import { answerWithCache, type CacheSite } from './cache-policy.js';
import type { Dispatcher, RepoRef } from './dispatcher.js';
import { GitCredsResponder } from './git-creds-responder.js';
import { JobSubmission } from './job-submission.js';
import { JobWaiter } from './job-waiter.js';
import { guard } from './redis-step.js';

/** The events stream is read by every proxy; completions carry only a key name, so this is plenty. */
const EVENTS_MAX_LEN = 2_000;

export interface QueueDispatcherDeps {
  engine: Engine;
  /** Plugin name = queue name: the socket file name without `.sock`. */
  pluginName: string;
  specDigest: string;
  log: Logger;
}

/**
 * Distributed mode (docs/architecture.md#distributed): the connections to Redis, the result-cache policy over
 * the Redis cache (cache-policy.ts), and on a miss a job for a worker (job-submission.ts).
 * Identical requests coalesce through BullMQ deduplication on the cache key, from this proxy or
 * any other; the last caller to leave cancels the job, wherever it is.
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
  private readonly jobs: JobSubmission;
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
    const { engine, pluginName, specDigest, log } = deps;
    const { redis, keys, signingKey, waiter, gitCreds } = this;
    this.jobs = new JobSubmission({ engine, ro, redis, keys, signingKey, pluginName, specDigest, log, queue: () => this.getQueue(), waiter, gitCreds });
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
        // Its error reaches whoever awaits this.queue; the next call makes a new queue.
        if (this.queue === ready) this.queue = undefined;
        void queue.close().catch(logFailed(this.deps.log, 'closing a queue that never got ready'));
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
    return withTimeout(ready, ms, () => new Error('timeout')).catch(() => false); // not ready is the answer
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
        const result = await this.jobs.run(req, repo, key, ctx, store);
        // The worker stored the whole-tree entry and left its read record beside it.
        await cached?.keep({ result, unstored: undefined, wholeTreeStored: true, reads: () => store.workerReads(cached.key) });
        return result;
      } finally {
        this.inflight--;
      }
    });
  }

  async close(): Promise<void> {
    this.waiter.close();
    // BullMQ's close waits for its connections to be ready, which they never are while Redis is
    // unreachable (a proxy stopped then would never exit): after the Redis timeout, end them here.
    const closing = Promise.allSettled([this.events.close(), this.queue?.then(q => q.close())]);
    await withTimeout(closing, this.ro.timeoutMs, () => new Error('timeout')).catch(() => {}); // timed out: ended below
    this.gitCreds?.close();
    // A connection already ended (the events one, by BullMQ's close) is left as it is: ioredis's
    // disconnect() of an ended connection waits for a 'close' its socket has already emitted,
    // and its 2 s timer for that (disconnectTimeout) kept the stopped proxy alive.
    for (const c of [this.redis, this.eventsConnection]) if (c.status !== 'end') c.disconnect();
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
