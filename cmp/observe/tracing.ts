import type { Stage } from './stages.js';

/**
 * OpenTelemetry tracing, the light half: W3C trace context parsing, and the tracer the SDK
 * (otel-sdk.ts) installs at start. Always loaded, and costs nothing when tracing is off: the SDK
 * and its exporter are imported only by a process whose tracing is configured (an OTLP endpoint
 * set), and the request path only tests `tracingEnabled()`.
 *
 * Span names are our stage names plus the RPC; attributes hold the plugin, the RPC, the
 * Application name and, on `exec` spans, the command's name (argv[0] without its directory)
 * — never an argument or an env value, which may be secrets.
 */

/** A W3C trace context: 16-byte trace id, 8-byte parent span id (hex), sampled flag, and the vendors' `tracestate`. */
export interface SpanContext {
  traceId: string;
  spanId: string;
  sampled: boolean;
  /** The W3C `tracestate` (vendor entries), passed on unchanged; absent when there is none. */
  traceState?: string;
}

/** A stage as a span (tracing): when it ran, and its attributes (a command's name, never its args). */
export interface StageSpan {
  /** A stage, or a step traced without a metric of its own (`blob_fetch`). */
  name: Stage | 'blob_fetch';
  startMs: number;
  endMs: number;
  attributes?: Record<string, string>;
  error?: boolean;
}

/** The kinds of span a request starts: the proxy's RPC (server), a worker's job (consumer). */
export type RequestSpanKind = 'server' | 'consumer';

/** A request's or a job's span, started; the sampler decided whether it records. */
export interface StartedSpan {
  /** Its context, carried on (in a job) whether sampled or not, so that the next hop follows the decision. */
  readonly context: SpanContext;
  readonly recording: boolean;
  /** End it at `endMs` (ms since the epoch), with `stages` as its children. */
  end(attributes: Record<string, string | number | boolean>, error: boolean, endMs: number, stages: StageSpan[]): void;
}

/** The SDK's tracer, once started. */
export interface RequestTracer {
  /** Start a span at `startMs` continuing `parent` (the caller's context), or starting a trace. */
  start(name: string, kind: RequestSpanKind, startMs: number, parent: SpanContext | undefined): StartedSpan;
  /** Flush the last spans (bounded in time) and stop. */
  shutdown(): Promise<void>;
}

let tracer: RequestTracer | undefined;

/** Whether this process exports spans (an OTLP endpoint is configured and the SDK started). */
export function tracingEnabled(): boolean {
  return tracer !== undefined;
}

/** The started tracer, if any. */
export function activeTracer(): RequestTracer | undefined {
  return tracer;
}

/** Install (or, with undefined, remove) the tracer. */
export function setTracer(t: RequestTracer | undefined): void {
  tracer = t;
}

/** Flush and stop the tracer, if any (at process shutdown). */
export async function shutdownTracing(): Promise<void> {
  const t = tracer;
  tracer = undefined;
  await t?.shutdown();
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

/** A list member of `tracestate`: a simple or multi-tenant key, `=`, a value of printable ASCII but `,` and `=`, no trailing space. */
const TRACESTATE_MEMBER = /^(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;
/** The W3C's bounds: at most 32 members; 512 characters is what every hop must be able to pass on. */
const TRACESTATE_MAX_MEMBERS = 32;
export const TRACESTATE_MAX_CHARS = 512;

/**
 * Parse `tracestate` headers (several combine as one list): the members, trimmed, joined by `,`;
 * undefined when there are none, or when any member is invalid, a key repeats or the bounds
 * above are exceeded (the W3C rule: an invalid tracestate is dropped whole).
 */
export function parseTracestate(values: readonly unknown[]): string | undefined {
  const members: string[] = [];
  const keys = new Set<string>();
  let chars = 0;
  for (const v of values) {
    if (typeof v !== 'string') continue;
    for (const raw of v.split(',')) {
      const m = raw.replace(/^[ \t]+|[ \t]+$/g, '');
      if (m === '') continue;
      if (!TRACESTATE_MEMBER.test(m)) return undefined;
      const key = m.slice(0, m.indexOf('='));
      if (keys.has(key)) return undefined;
      keys.add(key);
      members.push(m);
      chars += m.length + 1;
      if (members.length > TRACESTATE_MAX_MEMBERS || chars - 1 > TRACESTATE_MAX_CHARS) return undefined;
    }
  }
  return members.length > 0 ? members.join(',') : undefined;
}

/** The caller's trace context: `traceparent`, with `tracestate` only when the former is valid. */
export function parseTraceContext(traceparent: unknown, tracestate: readonly unknown[]): SpanContext | undefined {
  const parent = parseTraceparent(traceparent);
  const state = parent && parseTracestate(tracestate);
  return parent && state !== undefined ? { ...parent, traceState: state } : parent;
}

export function formatTraceparent(c: SpanContext): string {
  return `00-${c.traceId}-${c.spanId}-${c.sampled ? '01' : '00'}`;
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
