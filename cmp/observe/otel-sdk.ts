import { Metadata } from '@grpc/grpc-js';
import { createTraceState, diag, DiagLogLevel, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type DiagLogger, type Tracer } from '@opentelemetry/api';
import { setGlobalErrorHandler } from '@opentelemetry/core';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler, AlwaysOnSampler, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, TracerProvider, type Sampler, type SpanExporter,
} from '@opentelemetry/sdk-trace';
import type { OtlpOptions } from '../config/options.js';
import type { Logger } from '../log.js';
import { setTracer, type RequestSpanKind, type RequestTracer, type SpanContext, type StageSpan } from './tracing.js';

/**
 * Tracing with the OpenTelemetry SDK: a TracerProvider with a BatchSpanProcessor and the OTLP
 * exporter of the configured protocol. Loaded (dynamic import) only by a process whose tracing
 * is on (options.otlp): with tracing off none of the SDK is loaded, and the request path only
 * tests `tracingEnabled()`.
 *
 * No automatic instrumentation and no context manager: the spans are our request and job spans,
 * started with an explicit parent (the caller's `traceparent`, or the request span carried in a
 * job), and their stages, measured as timings (request-trace.ts) and made child spans when the
 * request ends.
 */

/** How long a shutdown waits for the last spans to be exported. */
const SHUTDOWN_FLUSH_MS = 5000;

const KIND: Record<RequestSpanKind, SpanKind> = { server: SpanKind.SERVER, consumer: SpanKind.CONSUMER };

export function samplerOf(o: Pick<OtlpOptions, 'sampler' | 'ratio'>): Sampler {
  const root = o.sampler.endsWith('always_off') ? new AlwaysOffSampler() : o.sampler.endsWith('traceidratio') ? new TraceIdRatioBasedSampler(o.ratio) : new AlwaysOnSampler();
  return o.sampler.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root;
}

/** The exporter of the protocol; only its package is loaded. Argo's settings fill in what no standard variable sets. */
async function exporterOf(o: OtlpOptions): Promise<SpanExporter> {
  const common = { ...(o.url !== undefined ? { url: o.url } : {}) };
  if (o.protocol === 'grpc') {
    const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-grpc');
    let metadata: Metadata | undefined;
    if (o.headers) {
      metadata = new Metadata();
      for (const [k, v] of Object.entries(o.headers)) metadata.set(k.toLowerCase(), v);
    }
    return new OTLPTraceExporter({ ...common, ...(metadata ? { metadata } : {}) });
  }
  const headers = o.headers ? { headers: o.headers } : {};
  if (o.protocol === 'http/protobuf') {
    const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-proto');
    return new OTLPTraceExporter({ ...common, ...headers });
  }
  const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-http');
  return new OTLPTraceExporter({ ...common, ...headers });
}

/** The SDK's complaints (a collector that is down, …) as warnings, at most one a minute: they must not flood the log. */
function sdkLogger(log: Logger | undefined): (msg: string) => void {
  let last = 0;
  return msg => {
    if (Date.now() - last < 60_000) return;
    last = Date.now();
    log?.warn(`tracing: ${msg}`);
  };
}

/**
 * Start exporting this process's spans (once, at start, when tracing is configured).
 * `serviceName` is the role's default `service.name`; OTEL_SERVICE_NAME and
 * OTEL_RESOURCE_ATTRIBUTES win over it and over Argo's attributes. `quiet`: no log line
 * (the proxy's ingest processes, whose coordinator says it).
 */
export async function startTracing(o: OtlpOptions, serviceName: string, log: Logger | undefined, quiet = false): Promise<RequestTracer> {
  const warn = sdkLogger(log);
  const text = (args: unknown[]) => args.map(a => (a instanceof Error ? a.message : typeof a === 'string' ? a : JSON.stringify(a))).join(' ');
  const logger: DiagLogger = { error: (...a) => warn(text(a)), warn: (...a) => warn(text(a)), info: () => {}, debug: () => {}, verbose: () => {} };
  diag.setLogger(logger, { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true });
  setGlobalErrorHandler(err => warn(`exporting spans to ${o.endpoint} failed: ${err instanceof Error ? err.message : String(err)}`));

  const resource = defaultResource()
    .merge(resourceFromAttributes({ 'service.name': serviceName, ...o.attrs }))
    .merge(detectResources({ detectors: [envDetector] }));
  const provider = new TracerProvider({
    resource,
    sampler: samplerOf(o),
    spanProcessors: [new BatchSpanProcessor({ exporter: await exporterOf(o), ...o.batch })],
  });
  const started = requestTracer(provider.getTracer('cmp-offload'), async () => {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>(resolve => {
      timer = setTimeout(() => {
        log?.warn({ endpoint: o.endpoint }, `tracing: the last spans were not exported within ${SHUTDOWN_FLUSH_MS} ms; stopping without them`);
        resolve();
      }, SHUTDOWN_FLUSH_MS).unref();
    });
    await Promise.race([provider.shutdown().catch((err: unknown) => warn(`shutting down: ${String(err)}`)), late]);
    clearTimeout(timer);
  });
  setTracer(started);
  if (!quiet) log?.info({ endpoint: o.endpoint, protocol: o.protocol, sampler: o.sampler, ...(o.sampler.endsWith('traceidratio') ? { ratio: o.ratio } : {}) }, 'tracing: exporting spans over OTLP');
  return started;
}

/** Our request and job spans on an SDK tracer (exported for the tests, with an in-memory exporter). */
export function requestTracer(tracer: Tracer, shutdown: () => Promise<void>): RequestTracer {
  return {
    start(name, kind, startMs, parent) {
      const ctx = parent
        ? trace.setSpanContext(ROOT_CONTEXT, {
            traceId: parent.traceId,
            spanId: parent.spanId,
            traceFlags: parent.sampled ? TraceFlags.SAMPLED : TraceFlags.NONE,
            isRemote: true,
            ...(parent.traceState !== undefined ? { traceState: createTraceState(parent.traceState) } : {}),
          })
        : ROOT_CONTEXT;
      const span = tracer.startSpan(name, { kind: KIND[kind], startTime: startMs }, ctx);
      const sc = span.spanContext();
      const traceState = sc.traceState?.serialize();
      const context: SpanContext = {
        traceId: sc.traceId,
        spanId: sc.spanId,
        sampled: (sc.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED,
        ...(traceState ? { traceState } : {}),
      };
      return {
        context,
        recording: span.isRecording(),
        end(attributes, error, endMs, stages: StageSpan[]) {
          const parentCtx = trace.setSpan(ROOT_CONTEXT, span);
          for (const s of stages) {
            const child = tracer.startSpan(s.name, { kind: SpanKind.INTERNAL, startTime: s.startMs, ...(s.attributes ? { attributes: s.attributes } : {}) }, parentCtx);
            if (s.error) child.setStatus({ code: SpanStatusCode.ERROR });
            child.end(Math.max(s.startMs, s.endMs));
          }
          span.setAttributes(attributes);
          if (error) span.setStatus({ code: SpanStatusCode.ERROR });
          span.end(Math.max(startMs, endMs));
        },
      };
    },
    shutdown,
  };
}
