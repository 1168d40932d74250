import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Ctx } from '../../cmp/context.js';
import { wrap } from '../../cmp/errors.js';
import { executeRequest, type Engine, type ReadSink } from '../../cmp/plugin/execute.js';
import { RPC_TEXT, type PluginRequest, type PluginResult } from '../../cmp/plugin/request.js';
import { MemoryCache } from '../../cmp/cache/memory-cache.js';
import { MemoryShapeStore } from '../../cmp/cache/shape-store.js';
import { entryForRun, tracedEntryKey, type TracedRequest } from '../../cmp/cache/traced-key.js';
import { metrics, resultBytes } from '../../cmp/observe/metrics.js';
import { noteCache, timeStage } from '../../cmp/observe/request-trace.js';
import type { IngestedRepo } from '../ingest/receive-repo-stream.js';
import { Coalescer } from './coalescer.js';
import type { Dispatcher } from './dispatcher.js';
import { Semaphore } from './semaphore.js';

/**
 * Standalone mode: the executor runs in this process with bounded concurrency, identical
 * requests in flight run once, and results live in a bounded in-memory LRU. With the traced
 * cache, results are also stored under the inputs their run read, and the shapes of those
 * reads are remembered per request family (a quarter of the cache budget).
 */
export class LocalDispatcher implements Dispatcher {
  readonly cache: MemoryCache;
  readonly slots: Semaphore;
  private readonly shapes: MemoryShapeStore;
  private readonly coalescer = new Coalescer<PluginResult>();

  constructor(private readonly engine: Engine) {
    const { cache, concurrency } = engine.options;
    this.cache = new MemoryCache(cache.maxBytes, cache.ttlMs);
    this.shapes = new MemoryShapeStore(Math.ceil(cache.maxBytes / 4), cache.ttlMs);
    this.slots = new Semaphore(concurrency);
  }

  async dispatch(req: PluginRequest, repo: IngestedRepo, key: string | undefined, ctx: Ctx, traced?: TracedRequest): Promise<PluginResult> {
    if (key === undefined) {
      noteCache('bypass', ctx);
      return this.execute(req, repo.tgzPath, ctx);
    }
    const hit = await timeStage('lookup', () => this.cache.get(key) ?? (traced ? this.tracedLookup(traced) : undefined), undefined, ctx);
    if (traced && hit) metrics.tracedCache.inc({ result: 'hit' });
    if (hit) {
      noteCache('hit', ctx);
      return hit;
    }
    const joinedBefore = this.coalescer.coalesced;
    // The shared run may outlive the caller that started it, so it takes its own link to the
    // tarball rather than borrowing the caller's request dir.
    const run = this.coalescer.run(key, ctx, async runCtx => {
      const own = path.join(this.engine.options.workRoot, `${randomUUID()}.tgz`);
      await fs.link(repo.tgzPath, own);
      try {
        const sink: ReadSink | undefined = traced ? {} : undefined;
        const result = await this.execute(req, own, runCtx, sink);
        this.cache.set(key, result);
        const entry = traced ? entryForRun(traced, sink!.reads, result) : undefined;
        if (entry) {
          this.cache.set(entry.key, result);
          this.shapes.add(traced!.baseKey, entry.shape);
        }
        metrics.cacheStoredBytes.inc(resultBytes(result));
        return result;
      } finally {
        await fs.rm(own, { force: true });
      }
    });
    noteCache(this.coalescer.coalesced > joinedBefore ? 'coalesced' : 'miss', ctx);
    return run;
  }

  /** A result whose run read exactly what this request's tree holds at the same paths. */
  private tracedLookup(t: TracedRequest): PluginResult | undefined {
    for (const shape of this.shapes.get(t.baseKey)) {
      const hit = this.cache.get(tracedEntryKey(t, shape));
      if (hit) return hit;
    }
    return undefined;
  }

  private async execute(req: PluginRequest, tgzPath: string, ctx: Ctx, sink?: ReadSink): Promise<PluginResult> {
    let release: () => void;
    try {
      release = await timeStage('queue_wait', () => this.slots.acquire(ctx.signal), undefined, ctx);
    } catch (err) {
      throw wrap(RPC_TEXT[req.kind].command, err);
    }
    metrics.concurrencyInUse.inc();
    try {
      return await executeRequest(this.engine, req, tgzPath, ctx, sink);
    } finally {
      metrics.concurrencyInUse.dec();
      release();
    }
  }

  async close(): Promise<void> {
    this.cache.clear();
    this.shapes.clear();
  }
}
