import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Ctx } from '../../cmp/context.js';
import { CmpError, wrap } from '../../cmp/errors.js';
import { executeRequest, type Engine, type ReadSink } from '../../cmp/plugin/execute.js';
import { RPC_TEXT, type PluginRequest, type PluginResult } from '../../cmp/plugin/request.js';
import { gitCredsOf } from '../../cmp/askpass/git-creds-env.js';
import { MemoryCache } from '../../cmp/cache/memory-cache.js';
import { fallbackReason, MemoryAppPaths, noteAppPaths, WHOLE_TREE_REASON } from '../../cmp/cache/app-paths.js';
import type { Shape } from '../../cmp/cache/read-set.js';
import { MemoryShapeStore } from '../../cmp/cache/shape-store.js';
import { entryForRun, tracedEntryKey, type TracedRequest } from '../../cmp/cache/traced-key.js';
import { metrics, resultBytes } from '../../cmp/observe/metrics.js';
import { noteCache, timeStage } from '../../cmp/observe/request-trace.js';
import type { Logger } from '../../cmp/log.js';
import { Coalescer } from './coalescer.js';
import type { Dispatcher, RepoRef } from './dispatcher.js';
import { RunWatch, type Unstored } from './run-watch.js';
import { Semaphore } from './semaphore.js';

/**
 * Standalone mode: the executor runs in this process with bounded concurrency, identical
 * requests in flight run once, and results live in a bounded in-memory LRU. With the traced
 * cache, results are also stored under the inputs their run read, and the shapes of those
 * reads are remembered per request family (a quarter of the cache budget). A run that another
 * run could have tampered with is answered but not stored (run-watch.ts).
 */
export class LocalDispatcher implements Dispatcher {
  readonly cache: MemoryCache;
  readonly slots: Semaphore;
  /** The manifest-generate-paths of the apps answered with the traced cache. */
  readonly paths: MemoryAppPaths;
  private readonly shapes: MemoryShapeStore;
  private readonly coalescer = new Coalescer<PluginResult>();
  private readonly watch: RunWatch;

  constructor(
    private readonly engine: Engine,
    private readonly log?: Logger,
  ) {
    this.watch = new RunWatch(log);
    const { cache, concurrency } = engine.options;
    this.cache = new MemoryCache(cache.maxBytes, cache.ttlMs);
    this.shapes = new MemoryShapeStore(Math.ceil(cache.maxBytes / 4), cache.ttlMs);
    this.paths = new MemoryAppPaths(cache.ttlMs);
    this.slots = new Semaphore(concurrency);
  }

  async dispatch(req: PluginRequest, repo: RepoRef, key: string | undefined, ctx: Ctx, traced?: TracedRequest): Promise<PluginResult> {
    if (key === undefined) {
      noteCache('bypass', ctx);
      return (await this.execute(req, repo, repo.tgzPath, ctx)).result;
    }
    const hit = await timeStage('lookup', () => this.lookup(key, traced), undefined, ctx);
    if (traced && hit) metrics.tracedCache.inc({ result: 'hit' });
    if (hit) {
      noteCache('hit', ctx);
      return hit;
    }
    // provideGitCreds: the run asks the repo-server's askpass with this caller's nonce, which
    // ends with its call, so nobody else's call joins it (the cache still answers them).
    if (this.engine.config.spec.provideGitCreds && gitCredsOf(req.env)) {
      noteCache('miss', ctx);
      return this.runAndStore(req, repo, key, ctx, traced);
    }
    const joinedBefore = this.coalescer.coalesced;
    const run = this.coalescer.run(key, ctx, runCtx => this.runAndStore(req, repo, key, runCtx, traced));
    noteCache(this.coalescer.coalesced > joinedBefore ? 'coalesced' : 'miss', ctx);
    return run;
  }

  /**
   * Run a request and store its result under its cache key (and its traced entry). A shared run
   * may outlive the caller that started it, so it takes its own link to the tarball rather than
   * borrowing the caller's request dir.
   */
  private async runAndStore(req: PluginRequest, repo: RepoRef, key: string, ctx: Ctx, traced: TracedRequest | undefined): Promise<PluginResult> {
    const own = path.join(this.engine.options.workRoot, `${randomUUID()}.tgz`);
    await fs.link(repo.tgzPath, own);
    try {
      const sink: ReadSink | undefined = traced ? {} : undefined;
      const { result, unstored } = await this.execute(req, repo, own, ctx, sink);
      if (unstored) {
        metrics.cacheUnstored.inc({ reason: unstored });
        this.log?.info({ app: ctx.trace?.app, rpc: req.kind, reason: unstored }, UNSTORED_TEXT[unstored]);
        // Its read record may be tampered with too: no manifest-generate-paths from it.
        if (traced) this.noteApp(traced, { reason: UNSTORED_TEXT[unstored] });
        return result;
      }
      this.cache.set(key, result);
      const entry = traced ? entryForRun(traced, sink!.reads, result) : undefined;
      if (entry) {
        this.cache.set(entry.key, result);
        this.shapes.add(traced!.baseKey, entry.shape);
      }
      if (traced) this.noteApp(traced, entry ?? { reason: fallbackReason(sink!.reads) });
      metrics.cacheStoredBytes.inc(resultBytes(result));
      return result;
    } finally {
      await fs.rm(own, { force: true });
    }
  }

  /**
   * The whole-tree entry, else a traced one. Either way a traced request's app learns which
   * recorded shape this tree has: its manifest-generate-paths follow the latest generation.
   */
  private lookup(key: string, t: TracedRequest | undefined): PluginResult | undefined {
    const whole = this.cache.get(key);
    if (!t) return whole;
    const traced = this.tracedLookup(t);
    if (whole) {
      this.noteApp(t, traced ?? { reason: WHOLE_TREE_REASON });
      return whole;
    }
    if (traced) this.noteApp(t, traced);
    return traced?.result;
  }

  /** A result whose run read exactly what this request's tree holds at the same paths. */
  private tracedLookup(t: TracedRequest): { result: PluginResult; shape: Shape } | undefined {
    for (const shape of this.shapes.get(t.baseKey)) {
      const result = this.cache.get(tracedEntryKey(t, shape));
      if (result) return { result, shape };
    }
    return undefined;
  }

  private noteApp(t: TracedRequest, outcome: { shape: Shape } | { reason: string }): void {
    void noteAppPaths(this.paths, t.origin, outcome, this.engine.options.cache.ttlMs);
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
        await fs.rm(repo.tgzPath, { force: true });
      }
      throw err;
    } finally {
      run.finish();
      metrics.concurrencyInUse.dec();
      release();
    }
  }

  async close(): Promise<void> {
    this.cache.clear();
    this.shapes.clear();
  }
}

const UNSTORED_TEXT: Record<Unstored, string> = {
  overlap: 'answered, not stored: another plugin run was in progress during this one and could have changed its work dir (same uid)',
  stray: 'answered, not stored: a plugin process may have escaped its cmp-reap and could have changed this run',
};
