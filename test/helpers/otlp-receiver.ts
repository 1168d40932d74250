import http from 'node:http';
import * as grpc from '@grpc/grpc-js';

/**
 * A local OTLP trace receiver for the tests: OTLP/gRPC (a grpc-js server implementing
 * opentelemetry.proto.collector.trace.v1.TraceService/Export) and OTLP/HTTP (POST /v1/traces,
 * `application/x-protobuf` or `application/json`), each on a free port. It decodes what it
 * receives itself, from the field numbers and JSON names of opentelemetry-proto, independently
 * of the exporter's code, and keeps the spans and the `x-otlp-test` header of every export.
 */

// --- protobuf wire decoding (varint, fixed64, length-delimited, fixed32) ---
type Field = { n: number; wire: number; v: bigint | Buffer };
function fields(buf: Buffer): Field[] {
  const out: Field[] = [];
  let i = 0;
  const varint = (): bigint => {
    let r = 0n;
    let shift = 0n;
    for (;;) {
      const b = buf[i++]!;
      r |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return r;
      shift += 7n;
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const n = key >> 3;
    const wire = key & 7;
    if (wire === 0) out.push({ n, wire, v: varint() });
    else if (wire === 1) (out.push({ n, wire, v: buf.readBigUInt64LE(i) }), (i += 8));
    else if (wire === 5) (out.push({ n, wire, v: BigInt(buf.readUInt32LE(i)) }), (i += 4));
    else if (wire === 2) {
      const len = Number(varint());
      out.push({ n, wire, v: buf.subarray(i, i + len) });
      i += len;
    } else throw new Error(`wire type ${wire}`);
  }
  return out;
}
const all = (f: Field[], n: number) => f.filter(x => x.n === n).map(x => x.v);
const one = (f: Field[], n: number) => all(f, n)[0];
const str = (v: unknown) => (v === undefined ? '' : (v as Buffer).toString('utf8'));

/** common.v1.KeyValue list → record (string 1, bool 2, int 3, double 4 of AnyValue). */
function kvs(list: unknown[]): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const raw of list) {
    const kv = fields(raw as Buffer);
    const any = fields((one(kv, 2) as Buffer | undefined) ?? Buffer.alloc(0));
    const f = any[0];
    out[str(one(kv, 1))] =
      f === undefined ? '' : f.n === 1 ? str(f.v) : f.n === 2 ? f.v === 1n : f.n === 3 ? Number(f.v) : (f.v as Buffer).readDoubleLE(0);
  }
  return out;
}

export interface Span {
  service: string;
  resource: Record<string, string | number | boolean>;
  traceId: string;
  spanId: string;
  parent: string;
  /** W3C tracestate ('' when none). */
  traceState: string;
  name: string;
  kind: number;
  start: bigint;
  end: bigint;
  attrs: Record<string, string | number | boolean>;
  status: number;
}

/** ExportTraceServiceRequest (resource_spans 1) → ResourceSpans (resource 1, scope_spans 2) → ScopeSpans (spans 2) → Span. */
function decodeExport(buf: Buffer): Span[] {
  const spans: Span[] = [];
  for (const rs of all(fields(buf), 1)) {
    const rsf = fields(rs as Buffer);
    const resource = kvs(all(fields((one(rsf, 1) as Buffer) ?? Buffer.alloc(0)), 1));
    for (const ss of all(rsf, 2)) {
      for (const sp of all(fields(ss as Buffer), 2)) {
        const f = fields(sp as Buffer);
        const status = fields((one(f, 15) as Buffer | undefined) ?? Buffer.alloc(0));
        spans.push({
          service: String(resource['service.name']),
          resource,
          traceId: (one(f, 1) as Buffer).toString('hex'),
          spanId: (one(f, 2) as Buffer).toString('hex'),
          parent: ((one(f, 4) as Buffer | undefined) ?? Buffer.alloc(0)).toString('hex'),
          traceState: str(one(f, 3)),
          name: str(one(f, 5)),
          kind: Number(one(f, 6) ?? 0n),
          start: one(f, 7) as bigint,
          end: one(f, 8) as bigint,
          attrs: kvs(all(f, 9)),
          status: Number(one(status, 3) ?? 0n),
        });
      }
    }
  }
  return spans;
}

/** OTLP/JSON (ids in hex, 64-bit integers as strings or numbers) → spans. */
function decodeJson(body: unknown): Span[] {
  type AnyValue = { stringValue?: string; boolValue?: boolean; intValue?: string | number; doubleValue?: number };
  const kv = (list: { key: string; value?: AnyValue }[] | undefined) => {
    const out: Record<string, string | number | boolean> = {};
    for (const { key, value: v = {} } of list ?? []) out[key] = v.stringValue ?? v.boolValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.doubleValue ?? ''));
    return out;
  };
  const spans: Span[] = [];
  for (const rs of (body as { resourceSpans?: any[] }).resourceSpans ?? []) {
    const resource = kv(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const sp of ss.spans ?? []) {
        spans.push({
          service: String(resource['service.name']),
          resource,
          traceId: sp.traceId,
          spanId: sp.spanId,
          parent: sp.parentSpanId ?? '',
          traceState: sp.traceState ?? '',
          name: sp.name,
          kind: sp.kind ?? 0,
          start: BigInt(sp.startTimeUnixNano),
          end: BigInt(sp.endTimeUnixNano),
          attrs: kv(sp.attributes),
          status: sp.status?.code ?? 0,
        });
      }
    }
  }
  return spans;
}

export type OtlpProtocol = 'grpc' | 'http/protobuf' | 'http/json';

export interface OtlpReceiver {
  grpcPort: number;
  httpPort: number;
  spans: Span[];
  /** Every export: its protocol and its `x-otlp-test` header ('' when absent). */
  exports: { protocol: OtlpProtocol; header: string }[];
  stop(): Promise<void>;
}

/** Start a receiver on free ports of 127.0.0.1. */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: Span[] = [];
  const exports: OtlpReceiver['exports'] = [];
  const server = new grpc.Server();
  const raw = (b: Buffer) => b;
  server.addService(
    {
      Export: {
        path: '/opentelemetry.proto.collector.trace.v1.TraceService/Export',
        requestStream: false,
        responseStream: false,
        requestSerialize: raw,
        requestDeserialize: raw,
        responseSerialize: raw,
        responseDeserialize: raw,
      },
    },
    {
      Export: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        exports.push({ protocol: 'grpc', header: String(call.metadata.get('x-otlp-test')[0] ?? '') });
        spans.push(...decodeExport(call.request));
        cb(null, Buffer.alloc(0)); // ExportTraceServiceResponse with no partial_success
      },
    },
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  const web = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const json = String(req.headers['content-type']).startsWith('application/json');
      if (req.method !== 'POST' || req.url !== '/v1/traces') return void res.writeHead(404).end();
      exports.push({ protocol: json ? 'http/json' : 'http/protobuf', header: String(req.headers['x-otlp-test'] ?? '') });
      const body = Buffer.concat(chunks);
      spans.push(...(json ? decodeJson(JSON.parse(body.toString('utf8'))) : decodeExport(body)));
      res.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf' }).end(json ? '{}' : Buffer.alloc(0));
    });
  });
  await new Promise<void>(resolve => web.listen(0, '127.0.0.1', resolve));
  const httpPort = (web.address() as { port: number }).port;
  return {
    grpcPort: port,
    httpPort,
    spans,
    exports,
    stop: async () => {
      await new Promise<void>(r => server.tryShutdown(() => r()));
      await new Promise<void>(r => web.close(() => r()));
    },
  };
}

