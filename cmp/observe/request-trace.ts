import { AsyncLocalStorage } from 'node:async_hooks';
import type { CacheResult, KillReason } from './outcomes.js';
import type { Stage } from './stages.js';
import { nowMs, type SpanContext, type StageSpan } from './tracing.js';

export type { StageSpan };

/**
 * Where the events of requests are counted: the process's Prometheus metrics, which metrics.ts
 * installs here when it is loaded (proxy and worker, which export them). The runner exports
 * none (its stage timings travel to its worker) and never loads prom-client: there they go
 * nowhere.
 */
export interface TraceMetrics {
  stage(stage: Stage, ms: number): void;
  cache(result: CacheResult): void;
  execFailure(timedOut: boolean, kill: KillReason | undefined): void;
}
let counted: TraceMetrics | undefined;

/** Called by metrics.ts once its metrics exist. */
export function countTraceEventsIn(m: TraceMetrics): void {
  counted = m;
}

/** A part of a request's trace measured in another process (see RequestTrace.part). */
export interface TracePart {
  stagesMs: Partial<Record<Stage, number>>;
  cache?: CacheResult;
  spans?: StageSpan[];
}

/**
 * What one request (proxy) or job (worker) did, collected while it runs and logged as one line
 * at its end. In the worker and the runner it travels in AsyncLocalStorage, so the code that does
 * the work only calls `timeStage`/`noteCache`. The proxy passes it in the request's context
 * instead: once any AsyncLocalStorage is entered, Node 20 runs async-hook bookkeeping for every
 * promise and tick of the process, and grpc-js makes some for every 1 KiB message received
 * (about 13 % of the proxy's CPU for a known tarball, measured). Nothing from the request env
 * goes in here except the Application name: env values may be secrets.
 */
export class RequestTrace {
  readonly started = Date.now();
  readonly stagesMs: Partial<Record<Stage, number>> = {};
  cache: CacheResult | undefined;
  bytes = 0;
  app = '';
  /** A job not run because nobody waited for it any more (worker). */
  skipped = false;
  /**
   * Tracing: the span this request's stages are children of, and the stages as spans, collected
   * only when the request is traced (undefined otherwise: nothing is recorded).
   */
  span: SpanContext | undefined;
  stageSpans: StageSpan[] | undefined;

  /** Add a stage duration (stages may repeat, e.g. init + generate are both `exec`). */
  addStage(stage: Stage, ms: number): void {
    this.stagesMs[stage] = round((this.stagesMs[stage] ?? 0) + ms);
    counted?.stage(stage, ms);
  }

  /**
   * What this trace measured in another process (a coordinator's part of the request): stages,
   * cache outcome and stage spans, counted in that process's metrics already.
   */
  part(): TracePart {
    return { stagesMs: { ...this.stagesMs }, ...(this.cache ? { cache: this.cache } : {}), ...(this.stageSpans ? { spans: this.stageSpans } : {}) };
  }

  /** Add another process's part of this request (not counted again here). */
  adopt(part: TracePart): void {
    for (const [stage, ms] of Object.entries(part.stagesMs) as [Stage, number][]) this.stagesMs[stage] = round((this.stagesMs[stage] ?? 0) + ms);
    this.cache ??= part.cache;
    if (this.stageSpans && part.spans) this.stageSpans.push(...part.spans);
  }

  /** Stage durations in milliseconds, for the log line. */
  durations(): Record<string, number> {
    return { ...this.stagesMs, total: round(Date.now() - this.started) };
  }
}

const storage = new AsyncLocalStorage<RequestTrace>();

/** Run `fn` with `trace` as the current request's trace (worker and runner; the proxy passes it in its Ctx). */
export function withTrace<T>(trace: RequestTrace, fn: () => T): T {
  return storage.run(trace, fn);
}

/** Where a trace may come from besides AsyncLocalStorage: a request context of the proxy (its Ctx). */
type TraceSource = { readonly trace?: RequestTrace };

/** The trace of the request this code runs for, if any: the one `ctx` carries, else the async context's. */
export function currentTrace(ctx?: TraceSource): RequestTrace | undefined {
  return ctx?.trace ?? storage.getStore();
}

/** Time `fn` as `stage` of the current request (the histogram is fed even without a trace). */
export async function timeStage<T>(stage: Stage, fn: () => Promise<T> | T, attributes?: Record<string, string>, ctx?: TraceSource): Promise<T> {
  return measured(fn, (ms, failed) => {
    const trace = currentTrace(ctx);
    if (!trace) return counted?.stage(stage, ms);
    trace.addStage(stage, ms);
    if (trace.stageSpans) {
      const endMs = nowMs();
      trace.stageSpans.push({ name: stage, startMs: endMs - ms, endMs, ...(attributes ? { attributes } : {}), ...(failed ? { error: true } : {}) });
    }
  });
}

/** Trace `fn` as a span of the current request, without a metric (a no-op when the request is not traced). */
export async function traceStep<T>(name: 'blob_fetch', fn: () => Promise<T>): Promise<T> {
  const spans = currentTrace()?.stageSpans;
  if (!spans) return fn();
  return measured(fn, (ms, failed) => {
    const endMs = nowMs();
    spans.push({ name, startMs: endMs - ms, endMs, ...(failed ? { error: true } : {}) });
  });
}

/** Run `fn`, then `end` with its duration and whether it threw (the stage and span bookkeeping above). */
async function measured<T>(fn: () => Promise<T> | T, end: (ms: number, failed: boolean) => void): Promise<T> {
  const t0 = performance.now();
  let failed = true;
  try {
    const r = await fn();
    failed = false;
    return r;
  } finally {
    end(performance.now() - t0, failed);
  }
}

/** Record how the current request met the output cache (first result wins: a hit after a coalesce stays coalesced). */
export function noteCache(result: CacheResult, ctx?: TraceSource): void {
  const trace = currentTrace(ctx);
  if (trace) {
    if (trace.cache !== undefined) return;
    trace.cache = result;
  }
  counted?.cache(result);
}

/** Record a plugin command's timeout and kill, read from its error text (the texts are Argo's: docs/argo-contract.md#error-texts). */
export function noteExecFailure(message: string, aborted: boolean, outputLimit: boolean): void {
  const kill: KillReason | undefined = message.includes(' failed fatal timeout after ')
    ? 'fatal_timeout'
    : outputLimit
      ? 'output_limit'
      : aborted
        ? 'canceled'
        : undefined;
  counted?.execFailure(message.includes(' failed timeout after ') || kill === 'fatal_timeout', kill);
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}
