import { fallbackReason, noteAppPaths, WHOLE_TREE_REASON, type AppPathsStore } from '../../cmp/cache/app-paths.js';
import type { Shape } from '../../cmp/cache/read-set.js';
import type { ResultCache } from '../../cmp/cache/result-cache.js';
import { entryForRun, tracedEntryKey, type TracedRequest } from '../../cmp/cache/traced-key.js';
import type { Ctx } from '../../cmp/context.js';
import type { Logger } from '../../cmp/log.js';
import { metrics, resultBytes } from '../../cmp/observe/metrics.js';
import { noteCache, timeStage } from '../../cmp/observe/request-trace.js';
import type { PluginResult, RpcKind } from '../../cmp/plugin/request.js';
import type { RecordedReads } from '../../cmp/trace/read-recorder.js';
import { UNSTORED_TEXT, type Unstored } from './run-watch.js';

/**
 * The result-cache policy of both modes, written once: lookup → traced lookup → run → store →
 * note the app's manifest-generate-paths. A mode brings its store (memory or Redis) and its run
 * (in this process, or a job for a worker); coalescing identical requests is the run's.
 */

/** A verified request the cache may answer: `key` undefined when the cache is bypassed. */
export interface CacheableRequest {
  kind: RpcKind;
  key: string | undefined;
  /** Set when the input-traced cache may answer it (see Dispatcher). */
  traced: TracedRequest | undefined;
  ctx: Ctx;
}

/** Where one request's results are kept. */
export interface CacheSite {
  store: ResultCache;
  /** The apps' manifest-generate-paths. */
  paths: AppPathsStore;
  ttlMs: number;
  log: Logger | undefined;
  /** A store step run for the caller (distributed: it ends with the caller's context, and Redis errors name Redis). */
  guard<T>(step: Promise<T>): Promise<T>;
}

/** A finished run of a cached request. */
export interface Ran {
  result: PluginResult;
  /** Why its answer must not be stored (run-watch.ts), or undefined. */
  unstored: Unstored | undefined;
  /** The worker stored the whole-tree entry (distributed); otherwise it is this process's to store. */
  wholeTreeStored: boolean;
  /** What the run read (traced requests): its traced entry and the app's paths come from it. */
  reads(): Promise<RecordedReads | undefined>;
}

/**
 * A mode's run. `cached` is undefined when the cache is bypassed; otherwise the run notes 'miss'
 * or 'coalesced' and calls `keep` once per run it shares (standalone) or per caller that got the
 * worker's answer (distributed: each turns the worker's read record into a traced entry).
 */
export type Run = (cached: { key: string; keep: (ran: Ran) => Promise<void> } | undefined) => Promise<PluginResult>;

export async function answerWithCache(site: CacheSite, req: CacheableRequest, run: Run): Promise<PluginResult> {
  const { key, traced, ctx } = req;
  if (key === undefined) {
    noteCache('bypass', ctx);
    return run(undefined);
  }
  const hit = await timeStage('lookup', () => site.guard(lookup(site, key, traced)), undefined, ctx);
  if (traced && hit) metrics.tracedCache.inc({ result: 'hit' });
  if (hit) {
    noteCache('hit', ctx);
    return hit;
  }
  return run({ key, keep: ran => keep(site, req, key, ran) });
}

/**
 * The whole-tree entry, else a traced one. Either way the app learns which recorded shape this
 * tree has (for a whole-tree hit in the background: the answer does not wait for it).
 */
async function lookup(site: CacheSite, key: string, t: TracedRequest | undefined): Promise<PluginResult | undefined> {
  if (!t) return site.store.read(key);
  // The whole-tree lookup goes out first: on a hit it is all the answer waits for. One read of
  // the family's shapes serves either path; it goes out right behind it (in Redis, its send
  // overlaps the lookup's round trip) so that a traced lookup has it at once.
  const reading = site.store.read(key);
  const shapes = site.store.shapes(t.baseKey);
  shapes.catch(() => {}); // Unread when the whole-tree lookup fails: that error is the one reported.
  const whole = await reading;
  if (whole) {
    afterAnswer(() =>
      void currentShape(site, t, shapes).then(
        shape => noteApp(site, t, shape ? { shape } : { reason: WHOLE_TREE_REASON }),
        err => site.log?.debug({ err: (err as Error).message }, 'manifest-generate-paths not recorded'),
      ),
    );
    return whole;
  }
  const found = await tracedLookup(site, t, shapes);
  if (found) afterAnswer(() => void noteApp(site, t, found));
  return found?.result;
}

/**
 * Work a hit leaves for after its answer (the app's manifest-generate-paths), started a timer's
 * turn later (>= 1 ms): grpc-js sends an answer's message, then its trailers a loop turn or two
 * after, and the caller has its answer only with the trailers. Started at once, the reads after
 * a distributed whole-tree hit (EXISTS, then HGET: each a socket write, a reply and a record to
 * open) would go out between the two and delay the end of the call.
 */
function afterAnswer(work: () => void): void {
  setTimeout(work, 0);
}

/** A result whose run read exactly what this request's tree holds at the same paths (`shapes`: the family's). */
async function tracedLookup(site: CacheSite, t: TracedRequest, shapes: Promise<Shape[]>): Promise<{ result: PluginResult; shape: Shape } | undefined> {
  for (const shape of await shapes) {
    const result = await site.store.read(tracedEntryKey(t, shape));
    if (result) return { result, shape };
  }
  return undefined;
}

/** The most recent shape of the family (`shapes`) with a traced entry for this tree. */
async function currentShape(site: CacheSite, t: TracedRequest, shapes: Promise<Shape[]>): Promise<Shape | undefined> {
  for (const shape of await shapes) {
    if (await site.store.has(tracedEntryKey(t, shape))) return shape;
  }
  return undefined;
}

/** Store a finished run: its whole-tree entry (unless the worker did), then its traced entry. */
async function keep(site: CacheSite, req: CacheableRequest, key: string, ran: Ran): Promise<void> {
  if (ran.unstored) return leaveUnstored(site, req, ran.unstored);
  if (!ran.wholeTreeStored) await site.store.write(key, ran.result);
  if (req.traced) {
    await rememberTraced(site, req.traced, ran).catch(err => site.log?.debug({ err: (err as Error).message }, 'traced cache entry not stored'));
  }
  // A worker counts the bytes of the entries it stores.
  if (!ran.wholeTreeStored) metrics.cacheStoredBytes.inc(resultBytes(ran.result));
}

/** An answer another run could have tampered with (run-watch.ts): answered, not stored. */
async function leaveUnstored(site: CacheSite, req: CacheableRequest, why: Unstored): Promise<void> {
  metrics.cacheUnstored.inc({ reason: why });
  site.log?.info({ app: req.ctx.trace?.app, rpc: req.kind, reason: why }, UNSTORED_TEXT[why]);
  // Its read record may be tampered with too: no manifest-generate-paths from it.
  if (req.traced) await noteApp(site, req.traced, { reason: UNSTORED_TEXT[why] });
}

/**
 * The run's read record, with this request's tree index, becomes a traced entry and a shape for
 * the family; no usable record → the app's reason. The app is noted before the writes, so a
 * failed write still leaves its paths noted.
 */
async function rememberTraced(site: CacheSite, t: TracedRequest, ran: Ran): Promise<void> {
  const reads = await ran.reads();
  const entry = entryForRun(t, reads, ran.result);
  await noteApp(site, t, entry ?? { reason: fallbackReason(reads) });
  if (!entry) return;
  await site.store.write(entry.key, ran.result);
  await site.store.addShape(t.baseKey, entry.shape);
}

/** Record the app's manifest-generate-paths; a failure is logged and the answer goes on. */
function noteApp(site: CacheSite, t: TracedRequest, outcome: { shape: Shape } | { reason: string }): Promise<void> {
  return noteAppPaths(site.paths, t.origin, outcome, site.ttlMs).catch(err =>
    site.log?.debug({ err: (err as Error).message }, 'manifest-generate-paths not recorded'),
  );
}
