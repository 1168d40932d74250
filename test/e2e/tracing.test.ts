import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { chunksOf, openCmpClient, repoMetadata } from '../helpers/grpc-client.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { tarballOf } from '../helpers/repo.js';
import { eventually, MODES, startCmp } from './harness.js';

/**
 * OpenTelemetry tracing (issue 13 item 5) against a real OTLP/gRPC receiver: a grpc-js server
 * implementing opentelemetry.proto.collector.trace.v1.TraceService/Export that decodes the
 * request bytes itself, with the field numbers of opentelemetry-proto (independently of the
 * exporter's schema). One GenerateManifest with the repo-server's `traceparent` must give one
 * connected trace under the caller's span, with the expected spans, in both modes; no span
 * carries an env value or a command argument.
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

interface Span {
  service: string;
  resource: Record<string, string | number | boolean>;
  traceId: string;
  spanId: string;
  parent: string;
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

/** A real OTLP/gRPC receiver: collects the spans and the metadata of every Export call. */
async function startReceiver() {
  const spans: Span[] = [];
  const headers: string[] = [];
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
        headers.push(String(call.metadata.get('x-otlp-test')[0] ?? ''));
        spans.push(...decodeExport(call.request));
        cb(null, Buffer.alloc(0)); // ExportTraceServiceResponse with no partial_success
      },
    },
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { port, spans, headers, stop: () => new Promise<void>(r => server.tryShutdown(() => r())) };
}

const SECRET = `s3cr3t-${randomBytes(6).toString('hex')}`;
const PLUGIN = pluginYaml(
  'traced',
  `init:
  command: [sh, -c]
  args: ["true # init-arg-${SECRET}"]
generate:
  command: [sh, -c]
  args: ['printf "{\\"kind\\":\\"ConfigMap\\",\\"apiVersion\\":\\"v1\\",\\"metadata\\":{\\"name\\":\\"x\\"}}"']`,
);

for (const mode of MODES) {
  describe(`OpenTelemetry tracing (${mode})`, () => {
    let receiver: Awaited<ReturnType<typeof startReceiver>>;
    before(async () => {
      receiver = await startReceiver();
    });
    after(() => receiver.stop());

    test('one GenerateManifest with a traceparent yields one connected trace under the caller, with the expected spans', async () => {
      const server = await startCmp(mode, {
        pluginYaml: PLUGIN,
        socketName: 'traced.sock',
        env: {
          ARGOCD_CMP_SERVER_OTLP_ADDRESS: `127.0.0.1:${receiver.port}`,
          ARGOCD_CMP_SERVER_OTLP_HEADERS: 'x-otlp-test=hdr-ok',
          ARGOCD_CMP_SERVER_OTLP_ATTRS: 'k8s.cluster.name:test-cluster',
        },
      });
      const client = openCmpClient(server.socketPath);
      try {
        const traceId = randomBytes(16).toString('hex');
        const callerSpan = randomBytes(8).toString('hex');
        const tgz = await tarballOf({ 'f.txt': 'traced' });
        const env = [{ name: 'ARGOCD_ENV_TOKEN', value: SECRET }];
        const out = await client.generate({
          metadata: repoMetadata(tgz, { env }),
          chunks: chunksOf(tgz, 1024),
          headers: { traceparent: `00-${traceId}-${callerSpan}-01` },
        });
        assert.ok('value' in out, JSON.stringify(out));

        const expected = ['ingest', 'lookup', 'queue_wait', 'extract', 'exec', 'split', 'respond', ...(mode === 'distributed' ? ['upload', 'remote', 'blob_fetch'] : [])];
        const names = () => new Set(receiver.spans.map(s => s.name));
        const jobDone = () => mode === 'standalone' || receiver.spans.some(s => s.kind === 5);
        await eventually(() => expected.every(n => names().has(n)) && names().has('plugin.ConfigManagementPluginService/GenerateManifest') && jobDone(), 15_000, `spans ${expected} (have ${[...names()]})`);

        const spans = receiver.spans;
        // One trace: the caller's.
        assert.deepEqual([...new Set(spans.map(s => s.traceId))], [traceId]);
        // Its root here is the proxy's server span, child of the caller's span.
        const roots = spans.filter(s => s.parent === callerSpan);
        assert.equal(roots.length, 1, `one span under the caller's: ${JSON.stringify(roots.map(s => s.name))}`);
        const root = roots[0]!;
        assert.equal(root.name, 'plugin.ConfigManagementPluginService/GenerateManifest');
        assert.equal(root.kind, 2);
        assert.equal(root.service, 'argocd-cmp-server');
        assert.equal(root.resource['k8s.cluster.name'], 'test-cluster');
        assert.equal(root.attrs['cmp.plugin'], 'traced');
        assert.equal(root.status, 0);
        // Connected: every other span's parent is a span of this trace; ids unique.
        const ids = new Set(spans.map(s => s.spanId));
        assert.equal(ids.size, spans.length, 'span ids are unique');
        for (const s of spans) if (s !== root) assert.ok(ids.has(s.parent), `${s.name} has a parent in the trace`);
        for (const s of spans) assert.ok(s.end >= s.start && s.start > 0n, `${s.name} has times`);

        const proxySide = ['ingest', 'lookup', 'respond', ...(mode === 'distributed' ? ['upload', 'remote'] : [])];
        for (const n of proxySide) assert.equal(spans.find(s => s.name === n)!.parent, root.spanId, `${n} is a child of the request span`);
        // Where the plugin ran: the proxy (standalone) or the worker's job span, a child of the request span.
        let runParent = root;
        if (mode === 'distributed') {
          const jobs = spans.filter(s => s.kind === 5);
          assert.equal(jobs.length, 1);
          runParent = jobs[0]!;
          assert.equal(runParent.parent, root.spanId, 'the job continues the request span carried in the signed job');
          assert.equal(runParent.service, 'cmp-offload-worker');
          assert.equal(spans.find(s => s.name === 'blob_fetch')!.parent, runParent.spanId);
        }
        for (const n of ['queue_wait', 'extract', 'split']) assert.equal(spans.find(s => s.name === n)!.parent, runParent.spanId, `${n} under ${runParent.name}`);
        const execs = spans.filter(s => s.name === 'exec');
        assert.deepEqual(execs.map(s => [s.attrs['cmp.step'], s.attrs['cmp.command']]).sort(), [['generate', 'sh'], ['init', 'sh']]);
        for (const e of execs) assert.equal(e.parent, runParent.spanId);

        // Never an env value or a command argument.
        const text = JSON.stringify(spans, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v));
        assert.ok(!text.includes(SECRET), 'no secret in any span');
        assert.ok(!text.includes('printf'), 'no command argument in any span');
        // ARGOCD_CMP_SERVER_OTLP_HEADERS reach the collector.
        assert.ok(receiver.headers.length > 0 && receiver.headers.every(h => h === 'hdr-ok'), JSON.stringify(receiver.headers));
      } finally {
        client.close();
        await server.stop();
      }
    });
  });
}
