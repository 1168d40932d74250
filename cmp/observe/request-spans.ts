import type { RequestTrace, StageSpan } from './request-trace.js';
import { exportSpans, newSpanId, newTraceId, nowMs, tracingEnabled, type SpanContext, type SpanRecord } from './tracing.js';

/**
 * Make `trace` a traced request when tracing is on: its span continues `parent` (the caller's
 * `traceparent`, or the proxy's request span carried in a job) or starts a new trace, and its
 * stages are collected as child spans. A parent that is not sampled is respected (nothing is
 * recorded), as Argo CD's parent-based sampler does. Returns whether the request is traced.
 */
export function traceRequest(trace: RequestTrace, parent: SpanContext | undefined): boolean {
  if (!tracingEnabled() || (parent && !parent.sampled)) return false;
  trace.span = { traceId: parent?.traceId ?? newTraceId(), spanId: newSpanId(), sampled: true };
  parentOf.set(trace, parent?.spanId);
  trace.stageSpans = [];
  return true;
}

const parentOf = new WeakMap<RequestTrace, string | undefined>();

/**
 * End a traced request: export its own span (`name`, from `startMs` to now) and its stages as
 * its children. `extra` are spans measured elsewhere (the runner's stages) under the same parent.
 */
export function endRequestSpan(
  trace: RequestTrace,
  name: string,
  kind: number,
  attributes: Record<string, string | number | boolean>,
  error: boolean,
  startMs: number,
): void {
  const span = trace.span;
  if (!span || !trace.stageSpans) return;
  const records: SpanRecord[] = [
    { traceId: span.traceId, spanId: span.spanId, parentSpanId: parentOf.get(trace), name, kind, startMs, endMs: nowMs(), attributes, error },
  ];
  for (const s of trace.stageSpans) records.push(stageRecord(span, s));
  trace.stageSpans = undefined;
  exportSpans(records);
}

function stageRecord(parent: SpanContext, s: StageSpan): SpanRecord {
  return {
    traceId: parent.traceId,
    spanId: newSpanId(),
    parentSpanId: parent.spanId,
    name: s.name,
    kind: 1,
    startMs: s.startMs,
    endMs: s.endMs,
    attributes: s.attributes ?? {},
    error: s.error === true,
  };
}
