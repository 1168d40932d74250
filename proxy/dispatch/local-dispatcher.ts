import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Ctx } from '../../cmp/context.js';
import { CmpError, wrap } from '../../cmp/errors.js';
import { executeRequest, type Engine, type ReadSink } from '../../cmp/plugin/execute.js';
import { RPC_TEXT, type PluginRequest, type PluginResult } from '../../cmp/plugin/request.js';
import { gitCredsOf } from '../../cmp/askpass/git-creds-env.js';
import { MemoryAppPaths } from '../../cmp/cache/app-paths.js';
import type { MemoryCache } from '../../cmp/cache/memory-cache.js';
import { MemoryResultCache } from '../../cmp/cache/memory-result-cache.js';
import type { TracedRequest } from '../../cmp/cache/traced-key.js';
import { metrics } from '../../cmp/observe/metrics.js';
import { noteCache, timeStage } from '../../cmp/observe/request-trace.js';
import type { Logger } from '../../cmp/log.js';
import { answerWithCache, type CacheSite, type Ran } from './cache-policy.js';
import { Coalescer } from './coalescer.js';
import type { Dispatcher, RepoRef } from './dispatcher.js';
import { RunWatch, type Unstored } from './run-watch.js';
import { Semaphore } from './semaphore.js';

/**
 * Standalone mode: the executor runs in this process with bounded concurrency, identical
 * requests in flight run once, and results live in memory (cache-policy.ts says what is looked
 * up and stored). A run that another run could have tampered with is answered but not stored
 * (run-watch.ts).
 */
export class LocalDispatcher implements Dispatcher {
  /** The manifest-generate-paths of the apps answered with the traced cache. */
  readonly paths: MemoryAppPaths;
  private readonly store: MemoryResultCache;
  private readonly site: CacheSite;
  private readonly slots: Semaphore;
  private readonly coalescer = new Coalescer<PluginResult>();
  private readonly watch: RunWatch;

  constructor(
    private readonly engine: Engine,
    log?: Logger,
  ) {
    this.watch = new RunWatch(log);
    const { cache, concurrency } = engine.options;
    this.store = new MemoryResultCache(cache.maxBytes, cache.ttlMs);
    this.paths = new MemoryAppPaths(cache.ttlMs);
    // Memory steps neither fail nor wait: nothing to guard.
    this.site = { store: this.store, paths: this.paths, ttlMs: cache.ttlMs, log, guard: step => step };
    this.slots = new Semaphore(concurrency);
  }

  /** The output cache (the ops server's cache view reads it). */
  get cache(): MemoryCache {
    return this.store.results;
  }

  dispatch(req: PluginRequest, repo: RepoRef, key: string | undefined, ctx: Ctx, traced?: TracedRequest): Promise<PluginResult> {
    return answerWithCache(this.site, { kind: req.kind, key, traced, ctx }, async cached => {
      if (!cached) return (await this.execute(req, repo, await repo.file(), ctx)).result;
      const start = (runCtx: Ctx) => this.runAndKeep(req, repo, runCtx, traced !== undefined, cached.keep);
      // provideGitCreds: the run asks the repo-server's askpass with this caller's nonce, which
      // ends with its call, so nobody else's call joins it (the cache still answers them).
      if (this.engine.config.spec.provideGitCreds && gitCredsOf(req.env)) {
        noteCache('miss', ctx);
        return start(ctx);
      }
      const joinedBefore = this.coalescer.coalesced;
      const run = this.coalescer.run(cached.key, ctx, start);
      noteCache(this.coalescer.coalesced > joinedBefore ? 'coalesced' : 'miss', ctx);
      return run;
    });
  }

  /**
   * Run a request and hand its result to the cache policy (`keep`). A shared run may outlive the
   * caller that started it, so it takes its own link to the tarball rather than borrowing the
   * caller's request dir.
   */
  private async runAndKeep(req: PluginRequest, repo: RepoRef, ctx: Ctx, traced: boolean, keep: (ran: Ran) => Promise<void>): Promise<PluginResult> {
    const own = path.join(this.engine.options.workRoot, `${randomUUID()}.tgz`);
    await fs.link(await repo.file(), own);
    try {
      const sink: ReadSink | undefined = traced ? {} : undefined;
      const { result, unstored } = await this.execute(req, repo, own, ctx, sink);
      await keep({ result, unstored, wholeTreeStored: false, reads: async () => sink?.reads });
      return result;
    } finally {
      await fs.rm(own, { force: true });
    }
  }

  /**
   * Run under the concurrency limit. The tarball may be a shared copy that an earlier request's
   * plugin command (same uid) could reach, so the extraction verifies it against its checksum;
   * a changed copy is removed, which makes the spool store receive the tarball anew next time.
   */
  private async execute(
    req: PluginRequest,
    repo: RepoRef,
    tgzPath: string,
    ctx: Ctx,
    sink?: ReadSink,
  ): Promise<{ result: PluginResult; unstored: Unstored | undefined }> {
    let release: () => void;
    try {
      release = await timeStage('queue_wait', () => this.slots.acquire(ctx.signal), undefined, ctx);
    } catch (err) {
      throw wrap(RPC_TEXT[req.kind].command, err);
    }
    metrics.concurrencyInUse.inc();
    const run = this.watch.begin(ctx);
    try {
      const result = await executeRequest(this.engine, req, tgzPath, run.ctx, sink, repo.checksum);
      return { result, unstored: run.finish() };
    } catch (err) {
      if (err instanceof CmpError && err.kind === 'spoolChanged') {
        await fs.rm(await repo.file(), { force: true });
      }
      throw err;
    } finally {
      run.finish();
      // The slot stays taken until the run's last process is gone: a run still has processes
      // that could tamper with the next one (run-watch.ts), so with CMP_OFFLOAD_CONCURRENCY=1
      // no two runs overlap and every answer can be stored.
      void run.ended.then(() => {
        metrics.concurrencyInUse.dec();
        release();
      });
    }
  }

  async close(): Promise<void> {
    this.store.clear();
  }
}
