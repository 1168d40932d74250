import type { RequestTrace } from './request-trace.js';
import { activeTracer, nowMs, type RequestSpanKind, type SpanContext, type StartedSpan } from './tracing.js';

/**
 * Make `trace` a traced request when tracing is on: its span (`name`, from `startMs`) continues
 * `parent` (the caller's `traceparent`, or the proxy's request span carried in a job) or starts
 * a new trace, and the SDK's sampler decides whether it records (by default it follows a
 * parent's decision). The span's context is kept in `trace.span` either way, so that a job
 * carries the decision to its worker; its stages are collected only when it records. Returns
 * whether the request is recorded.
 */
export function traceRequest(trace: RequestTrace, name: string, kind: RequestSpanKind, startMs: number, parent: SpanContext | undefined): boolean {
  const tracer = activeTracer();
  if (!tracer) return false;
  const span = tracer.start(name, kind, startMs, parent);
  trace.span = span.context;
  if (!span.recording) return false;
  started.set(trace, span);
  trace.stageSpans = [];
  return true;
}

const started = new WeakMap<RequestTrace, StartedSpan>();

/**
 * End a recorded request's span now, with its stages as its children (and spans measured
 * elsewhere, the runner's stages, adopted into them). Nothing when the request is not recorded.
 */
export function endRequestSpan(trace: RequestTrace, attributes: Record<string, string | number | boolean>, error: boolean): void {
  const span = started.get(trace);
  if (!span || !trace.stageSpans) return;
  started.delete(trace);
  const stages = trace.stageSpans;
  trace.stageSpans = undefined;
  span.end(attributes, error, nowMs(), stages);
}
