import { randomBytes } from 'node:crypto';

/**
 * OpenTelemetry tracing, the light half: W3C trace context parsing and the span records a
 * request collects. Always loaded, and costs nothing when tracing is off: no exporter, no
 * gRPC client and no protobuf schema are loaded then (otlp-exporter.ts is imported only by a
 * process whose ARGOCD_CMP_SERVER_OTLP_ADDRESS is set).
 *
 * Span names are our stage names plus the RPC; attributes hold the plugin, the RPC, the
 * Application name and, on `exec` spans, the command's name (argv[0] without its directory)
 * — never an argument or an env value, which may be secrets.
 */

/** A W3C trace context: 16-byte trace id, 8-byte parent span id (hex), sampled flag. */
export interface SpanContext {
  traceId: string;
  spanId: string;
  sampled: boolean;
}

/** One finished span, as the exporter sends it. Times in ms since the epoch (fractions allowed). */
export interface SpanRecord {
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  name: string;
  /** OTLP span kind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  startMs: number;
  endMs: number;
  attributes: Record<string, string | number | boolean>;
  /** gRPC-style outcome: true marks the span's status ERROR. */
  error?: boolean;
}

/** Where finished spans go: the OTLP exporter, once started. */
export interface SpanSink {
  export(spans: SpanRecord[]): void;
  shutdown(): Promise<void>;
}

let sink: SpanSink | undefined;

/** Whether this process exports spans (ARGOCD_CMP_SERVER_OTLP_ADDRESS set and the exporter started). */
export function tracingEnabled(): boolean {
  return sink !== undefined;
}

/** Install (or, with undefined, remove) the exporter. */
export function setSpanSink(s: SpanSink | undefined): void {
  sink = s;
}

/** Hand finished spans to the exporter (nothing when tracing is off). */
export function exportSpans(spans: SpanRecord[]): void {
  if (sink && spans.length > 0) sink.export(spans);
}

/** Flush and stop the exporter, if any (at process shutdown). */
export async function shutdownTracing(): Promise<void> {
  const s = sink;
  sink = undefined;
  await s?.shutdown();
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/**
 * Parse a `traceparent` header (W3C Trace Context level 1): version 00 exactly, later versions
 * by their first four fields; all-zero ids and version ff are invalid. Undefined when invalid.
 */
export function parseTraceparent(value: unknown): SpanContext | undefined {
  if (typeof value !== 'string') return undefined;
  const m = TRACEPARENT.exec(value.trim().toLowerCase());
  if (!m) return undefined;
  const [, version, traceId, spanId, flags, rest] = m;
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  if (/^0+$/.test(traceId!) || /^0+$/.test(spanId!)) return undefined;
  return { traceId: traceId!, spanId: spanId!, sampled: (parseInt(flags!, 16) & 1) === 1 };
}

export function formatTraceparent(c: SpanContext): string {
  return `00-${c.traceId}-${c.spanId}-${c.sampled ? '01' : '00'}`;
}

export function newTraceId(): string {
  return randomBytes(16).toString('hex');
}

export function newSpanId(): string {
  return randomBytes(8).toString('hex');
}

/** The time now in ms since the epoch, with sub-ms precision. */
export function nowMs(): number {
  return performance.timeOrigin + performance.now();
}

/** A command's name for a span: argv[0] without its directory; never its arguments. */
export function commandName(argv0: string | undefined): string {
  const name = (argv0 ?? '').split('/').pop() ?? '';
  return name.slice(0, 128);
}
