import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { OtlpOptions } from '../config/options.js';
import type { Logger } from '../log.js';
import { setSpanSink, type SpanRecord, type SpanSink } from './tracing.js';

/**
 * A minimal OTLP/gRPC trace exporter on the gRPC stack we already ship (@grpc/grpc-js and
 * @grpc/proto-loader): batches finished spans and sends them to
 * `opentelemetry.proto.collector.trace.v1.TraceService/Export`. Loaded (dynamic import) only
 * when ARGOCD_CMP_SERVER_OTLP_ADDRESS is set. We do not need the OpenTelemetry SDK: our spans
 * are stage timings we already measure, with W3C context we parse ourselves (tracing.ts), and
 * the SDK's exporter alone brings a second protobuf runtime and a dozen packages.
 *
 * The schema below is the subset of opentelemetry-proto (collector/trace/v1, trace/v1,
 * common/v1, resource/v1) that we send, with its field numbers; the message names are flattened
 * into the service's package, which the wire format does not see.
 */
export const OTLP_TRACE_SCHEMA = {
  nested: {
    opentelemetry: { nested: { proto: { nested: { collector: { nested: { trace: { nested: { v1: { nested: {
      TraceService: {
        methods: { Export: { requestType: 'ExportTraceServiceRequest', responseType: 'ExportTraceServiceResponse' } },
      },
      ExportTraceServiceRequest: { fields: { resource_spans: { rule: 'repeated', type: 'ResourceSpans', id: 1 } } },
      ExportTraceServiceResponse: { fields: { partial_success: { type: 'ExportTracePartialSuccess', id: 1 } } },
      ExportTracePartialSuccess: { fields: { rejected_spans: { type: 'int64', id: 1 }, error_message: { type: 'string', id: 2 } } },
      ResourceSpans: {
        fields: {
          resource: { type: 'Resource', id: 1 },
          scope_spans: { rule: 'repeated', type: 'ScopeSpans', id: 2 },
          schema_url: { type: 'string', id: 3 },
        },
      },
      Resource: { fields: { attributes: { rule: 'repeated', type: 'KeyValue', id: 1 }, dropped_attributes_count: { type: 'uint32', id: 2 } } },
      ScopeSpans: {
        fields: {
          scope: { type: 'InstrumentationScope', id: 1 },
          spans: { rule: 'repeated', type: 'Span', id: 2 },
          schema_url: { type: 'string', id: 3 },
        },
      },
      InstrumentationScope: { fields: { name: { type: 'string', id: 1 }, version: { type: 'string', id: 2 } } },
      Span: {
        fields: {
          trace_id: { type: 'bytes', id: 1 },
          span_id: { type: 'bytes', id: 2 },
          trace_state: { type: 'string', id: 3 },
          parent_span_id: { type: 'bytes', id: 4 },
          name: { type: 'string', id: 5 },
          kind: { type: 'int32', id: 6 },
          start_time_unix_nano: { type: 'fixed64', id: 7 },
          end_time_unix_nano: { type: 'fixed64', id: 8 },
          attributes: { rule: 'repeated', type: 'KeyValue', id: 9 },
          status: { type: 'Status', id: 15 },
          flags: { type: 'fixed32', id: 16 },
        },
      },
      Status: { fields: { message: { type: 'string', id: 2 }, code: { type: 'int32', id: 3 } } },
      KeyValue: { fields: { key: { type: 'string', id: 1 }, value: { type: 'AnyValue', id: 2 } } },
      AnyValue: {
        oneofs: { value: { oneof: ['string_value', 'bool_value', 'int_value', 'double_value'] } },
        fields: {
          string_value: { type: 'string', id: 1 },
          bool_value: { type: 'bool', id: 2 },
          int_value: { type: 'int64', id: 3 },
          double_value: { type: 'double', id: 4 },
        },
      },
    } } } } } } } } } },
  },
};

/** The loaded TraceService package (the exporter's client, and a test's receiver). */
export function traceServicePackage(): grpc.GrpcObject {
  const def = protoLoader.fromJSON(OTLP_TRACE_SCHEMA as Parameters<typeof protoLoader.fromJSON>[0], { keepCase: true, longs: String, enums: Number, defaults: false, oneofs: true });
  const root = grpc.loadPackageDefinition(def) as unknown as { opentelemetry: { proto: { collector: { trace: { v1: grpc.GrpcObject } } } } };
  return root.opentelemetry.proto.collector.trace.v1;
}

export interface ExporterSettings {
  /** BatchSpanProcessor's defaults, but a shorter delay: spans of a slow request are seconds apart anyway. */
  delayMs?: number;
  maxBatch?: number;
  maxQueue?: number;
  timeoutMs?: number;
}

type KeyValue = { key: string; value: Record<string, unknown> };

function keyValues(attrs: Record<string, string | number | boolean>): KeyValue[] {
  return Object.entries(attrs).map(([key, v]) => ({
    key,
    value:
      typeof v === 'string'
        ? { string_value: v }
        : typeof v === 'boolean'
          ? { bool_value: v }
          : Number.isInteger(v)
            ? { int_value: String(v) }
            : { double_value: v },
  }));
}

function nanos(ms: number): string {
  return (BigInt(Math.floor(ms)) * 1_000_000n + BigInt(Math.round((ms % 1) * 1e6))).toString();
}

export class OtlpExporter implements SpanSink {
  private queue: SpanRecord[] = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly inflight = new Set<Promise<void>>();
  private readonly client: grpc.Client & { Export: (...a: unknown[]) => grpc.ClientUnaryCall };
  private readonly resource: { attributes: KeyValue[] };
  private dropped = 0;
  private lastWarn = 0;
  private readonly delayMs: number;
  private readonly maxBatch: number;
  private readonly maxQueue: number;
  private readonly timeoutMs: number;

  constructor(
    private readonly opts: OtlpOptions,
    serviceName: string,
    private readonly log: Logger | undefined,
    s: ExporterSettings = {},
  ) {
    this.delayMs = s.delayMs ?? 1000;
    this.maxBatch = s.maxBatch ?? 512;
    this.maxQueue = s.maxQueue ?? 2048;
    this.timeoutMs = s.timeoutMs ?? 10_000;
    const Service = traceServicePackage().TraceService as grpc.ServiceClientConstructor;
    const creds = opts.insecure ? grpc.credentials.createInsecure() : grpc.credentials.createSsl();
    this.client = new Service(opts.address, creds) as unknown as OtlpExporter['client'];
    this.resource = { attributes: keyValues({ 'service.name': serviceName, ...opts.attrs }) };
  }

  export(spans: SpanRecord[]): void {
    for (const s of spans) {
      if (this.queue.length >= this.maxQueue) this.dropped++;
      else this.queue.push(s);
    }
    if (this.queue.length >= this.maxBatch) this.flushBatch();
    else this.timer ??= setTimeout(() => this.flushBatch(), this.delayMs).unref();
  }

  private flushBatch(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      const p = this.send(batch).finally(() => this.inflight.delete(p));
      this.inflight.add(p);
    }
  }

  private send(batch: SpanRecord[]): Promise<void> {
    const request = {
      resource_spans: [
        {
          resource: this.resource,
          scope_spans: [{ scope: { name: 'cmp-offload' }, spans: batch.map(toOtlp) }],
        },
      ],
    };
    const md = new grpc.Metadata();
    for (const [k, v] of Object.entries(this.opts.headers)) md.set(k.toLowerCase(), v);
    return new Promise(resolve => {
      this.client.Export(request, md, { deadline: Date.now() + this.timeoutMs }, (err: grpc.ServiceError | null) => {
        if (err) this.warn(`exporting ${batch.length} spans to ${this.opts.address} failed: ${err.message}`);
        resolve();
      });
    });
  }

  /** At most one warning a minute: a collector that is down must not flood the log. */
  private warn(msg: string): void {
    if (Date.now() - this.lastWarn < 60_000) return;
    this.lastWarn = Date.now();
    this.log?.warn({ dropped: this.dropped }, `tracing: ${msg}`);
  }

  async shutdown(): Promise<void> {
    this.flushBatch();
    await Promise.all(this.inflight);
    this.client.close();
  }
}

function toOtlp(s: SpanRecord) {
  return {
    trace_id: Buffer.from(s.traceId, 'hex'),
    span_id: Buffer.from(s.spanId, 'hex'),
    ...(s.parentSpanId ? { parent_span_id: Buffer.from(s.parentSpanId, 'hex') } : {}),
    name: s.name,
    kind: s.kind,
    start_time_unix_nano: nanos(s.startMs),
    end_time_unix_nano: nanos(Math.max(s.startMs, s.endMs)),
    attributes: keyValues(s.attributes),
    status: { code: s.error ? 2 : 0 },
    flags: 1, // W3C trace flags: sampled
  };
}

/** Start exporting this process's spans (called once at start when tracing is configured). */
export function startOtlpTracing(opts: OtlpOptions, serviceName: string, log: Logger | undefined, s?: ExporterSettings): OtlpExporter {
  const exporter = new OtlpExporter(opts, serviceName, log, s);
  setSpanSink(exporter);
  return exporter;
}
