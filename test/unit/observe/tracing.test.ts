import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compileOptions } from '../../../cmp/config/options.js';
import { commandName, formatTraceparent, parseTraceContext, parseTraceparent, parseTracestate } from '../../../cmp/observe/tracing.js';
import { REPO_ROOT, SOURCE_ROOTS } from '../../helpers/paths.js';

const BASE = { ARGOCD_PLUGINSOCKFILEPATH: '/tmp' };

test('tracing is off unless an OTLP endpoint is set (standard or Argo), and off with OTEL_SDK_DISABLED=true', () => {
  assert.equal(compileOptions(BASE).otlp, undefined);
  assert.equal(compileOptions({ ...BASE, ARGOCD_CMP_SERVER_OTLP_ADDRESS: '', ARGOCD_CMP_SERVER_OTLP_INSECURE: 'false', OTEL_EXPORTER_OTLP_ENDPOINT: ' ' }).otlp, undefined);
  assert.equal(compileOptions({ ...BASE, OTEL_TRACES_SAMPLER: 'bogus', OTEL_EXPORTER_OTLP_PROTOCOL: 'bogus' }).otlp, undefined, 'not checked while off');
  assert.ok(compileOptions({ ...BASE, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' }).otlp);
  assert.equal(compileOptions({ ...BASE, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }).otlp, undefined);
  assert.equal(compileOptions({ ...BASE, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' }).otlp, undefined);
  assert.ok(compileOptions({ ...BASE, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'otlp' }).otlp);
  assert.throws(() => compileOptions({ ...BASE, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'console' }), /OTEL_TRACES_EXPORTER: expected one of otlp, none/);
});

test('OTEL_BSP_*: the batch span processor\'s bounds, whole numbers, a batch no larger than the queue', () => {
  const batch = (e: Record<string, string>) => compileOptions({ ...BASE, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', ...e }).otlp!.batch;
  assert.deepEqual(batch({ OTEL_BSP_SCHEDULE_DELAY: '250', OTEL_BSP_EXPORT_TIMEOUT: '5000', OTEL_BSP_MAX_QUEUE_SIZE: '100', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '100' }), {
    scheduledDelayMillis: 250,
    exportTimeoutMillis: 5000,
    maxQueueSize: 100,
    maxExportBatchSize: 100,
  });
  assert.throws(() => batch({ OTEL_BSP_MAX_QUEUE_SIZE: '10' }), /OTEL_BSP_MAX_EXPORT_BATCH_SIZE: expected at most OTEL_BSP_MAX_QUEUE_SIZE \(10\)/);
  assert.throws(() => batch({ OTEL_BSP_EXPORT_TIMEOUT: '1s' }), /OTEL_BSP_EXPORT_TIMEOUT: expected an integer >= 1/);
  assert.throws(() => batch({ OTEL_BSP_MAX_QUEUE_SIZE: '0' }), /OTEL_BSP_MAX_QUEUE_SIZE/);
});

test("Argo CD's OTLP settings: gRPC to the address, insecure (default true), headers k=v, attrs k:v, with Argo's leniency", () => {
  assert.deepEqual(compileOptions({ ...BASE, ARGOCD_CMP_SERVER_OTLP_ADDRESS: 'otel-collector:4317' }).otlp, {
    protocol: 'grpc',
    endpoint: 'otel-collector:4317',
    url: 'http://otel-collector:4317',
    headers: {},
    attrs: {},
    sampler: 'parentbased_always_on',
    ratio: 1,
    batch: { scheduledDelayMillis: 1000, exportTimeoutMillis: 30_000, maxQueueSize: 2048, maxExportBatchSize: 512 },
  });
  const o = compileOptions({
    ...BASE,
    ARGOCD_CMP_SERVER_OTLP_ADDRESS: 'otel:4317',
    ARGOCD_CMP_SERVER_OTLP_INSECURE: 'false',
    ARGOCD_CMP_SERVER_OTLP_HEADERS: 'authorization=Bearer x=y, x-tenant=a',
    ARGOCD_CMP_SERVER_OTLP_ATTRS: 'k8s.cluster.name:prod,team:a:b,broken',
  }).otlp!;
  assert.equal(o.url, 'https://otel:4317');
  assert.deepEqual(o.headers, { authorization: 'Bearer x=y', 'x-tenant': 'a' });
  assert.deepEqual(o.attrs, { 'k8s.cluster.name': 'prod', team: 'a:b' });
  // Argo parses these with Go's ParseBool and ParseStringToStringFromEnv: invalid means the default.
  const lenient = compileOptions({ ...BASE, ARGOCD_CMP_SERVER_OTLP_ADDRESS: 'o:4317', ARGOCD_CMP_SERVER_OTLP_INSECURE: 'nope', ARGOCD_CMP_SERVER_OTLP_HEADERS: 'a=1,b' }).otlp!;
  assert.equal(lenient.url, 'http://o:4317');
  assert.deepEqual(lenient.headers, {});
  // With a standard protocol chosen, Argo's address is the collector's HTTP host:port.
  assert.equal(compileOptions({ ...BASE, ARGOCD_CMP_SERVER_OTLP_ADDRESS: 'o:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }).otlp!.url, 'http://o:4318/v1/traces');
});

test('the standard variables win over Argo\'s: endpoint, headers, insecure; protocol and sampler are checked', () => {
  const argo = { ...BASE, ARGOCD_CMP_SERVER_OTLP_ADDRESS: 'argo:4317', ARGOCD_CMP_SERVER_OTLP_HEADERS: 'a=argo' };
  const std = compileOptions({ ...argo, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://std:4318', OTEL_EXPORTER_OTLP_HEADERS: 'a=std' }).otlp!;
  // The exporter reads the standard variables itself: nothing of Argo's is passed to it.
  assert.deepEqual([std.protocol, std.endpoint, std.url, std.headers], ['http/protobuf', 'http://std:4318', undefined, undefined]);
  assert.equal(compileOptions({ ...argo, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://t:4317', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://g' }).otlp!.endpoint, 'https://t:4317');
  assert.equal(compileOptions({ ...argo, OTEL_EXPORTER_OTLP_INSECURE: 'false' }).otlp!.url, 'argo:4317', 'no scheme: the exporter follows OTEL_EXPORTER_OTLP_INSECURE');
  assert.equal(compileOptions({ ...argo, OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'b=1' }).otlp!.headers, undefined);
  const proto = (e: Record<string, string>) => compileOptions({ ...argo, ...e }).otlp!.protocol;
  assert.equal(proto({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }), 'http/json');
  assert.equal(proto({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' }), 'grpc');
  assert.throws(() => proto({ OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http' }), /OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: expected one of grpc, http\/protobuf, http\/json/);
  const sampler = (e: Record<string, string>) => {
    const o = compileOptions({ ...argo, ...e }).otlp!;
    return [o.sampler, o.ratio];
  };
  assert.deepEqual(sampler({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.25' }), ['traceidratio', 0.25]);
  assert.deepEqual(sampler({ OTEL_TRACES_SAMPLER: 'always_on', OTEL_TRACES_SAMPLER_ARG: 'ignored' }), ['always_on', 1]);
  assert.throws(() => sampler({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '2' }), /OTEL_TRACES_SAMPLER_ARG/);
  assert.throws(() => sampler({ OTEL_TRACES_SAMPLER: 'ratio' }), /OTEL_TRACES_SAMPLER/);
});

test('W3C traceparent: version 00 exactly, later versions by their first fields, invalid ids refused', () => {
  const t = '0af7651916cd43dd8448eb211c80319c';
  const s = 'b7ad6b7169203331';
  assert.deepEqual(parseTraceparent(`00-${t}-${s}-01`), { traceId: t, spanId: s, sampled: true });
  assert.deepEqual(parseTraceparent(`00-${t.toUpperCase()}-${s}-00`), { traceId: t, spanId: s, sampled: false });
  assert.deepEqual(parseTraceparent(`01-${t}-${s}-03-future`), { traceId: t, spanId: s, sampled: true });
  for (const bad of [undefined, '', `00-${t}-${s}-01-extra`, `ff-${t}-${s}-01`, `00-${'0'.repeat(32)}-${s}-01`, `00-${t}-${'0'.repeat(16)}-01`, `00-${t}-${s}`, `00-${t}x-${s}-01`]) {
    assert.equal(parseTraceparent(bad), undefined, String(bad));
  }
  assert.equal(formatTraceparent({ traceId: t, spanId: s, sampled: true }), `00-${t}-${s}-01`);
});

test("a command's span name is its argv[0] without directory, never an argument", () => {
  assert.equal(commandName('/usr/local/bin/helmfile'), 'helmfile');
  assert.equal(commandName('sh'), 'sh');
  assert.equal(commandName(undefined), '');
});

test('zero cost when off: the SDK is only ever loaded by a dynamic import behind the setting, and only otel-sdk.ts imports it', () => {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const e of fs.readdirSync(path.join(REPO_ROOT, dir), { withFileTypes: true })) {
      const rel = path.join(dir, e.name);
      if (e.isDirectory()) walk(rel);
      else if (rel.endsWith('.ts')) files.push(rel);
    }
  };
  for (const d of SOURCE_ROOTS) walk(d);
  let dynamic = 0;
  for (const f of files) {
    const text = fs.readFileSync(path.join(REPO_ROOT, f), 'utf8');
    if (f !== path.join('cmp', 'observe', 'otel-sdk.ts')) assert.doesNotMatch(text, /^import (?!type ).*'@opentelemetry\//m, `${f} imports the SDK`);
    for (const line of text.split('\n')) {
      if (!line.includes('otel-sdk.js')) continue;
      assert.match(line, /if \(options\.otlp\) await \(await import\('[./]+cmp\/observe\/otel-sdk\.js'\)\)/, `${f}: ${line.trim()}`);
      dynamic++;
    }
  }
  assert.equal(dynamic, 3, 'the proxy, its ingest processes and the worker load it dynamically');
});

test("argocd-cmp-server's --otlp-* flags: they win over the env, lists repeat, --otlp-insecure is a Go bool flag", async () => {
  const { startProcess } = await import('../../../cmp/process-start.js');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'otlp-flags-'));
  fs.writeFileSync(path.join(dir, 'plugin.yaml'), 'apiVersion: argoproj.io/v1alpha1\nkind: ConfigManagementPlugin\nmetadata:\n  name: p\nspec:\n  generate:\n    command: [sh]\n');
  const saved = { ...process.env };
  try {
    process.env.ARGOCD_PLUGINSOCKFILEPATH = dir;
    process.env.ARGOCD_CMP_SERVER_OTLP_ADDRESS = 'from-env:4317';
    process.env.ARGOCD_CMP_SERVER_LOGLEVEL = 'error';
    const otlp = async (...flags: string[]) => (await startProcess(['--config-dir-path', dir, ...flags], 'proxy', () => {})).engine.options.otlp;
    assert.equal((await otlp())!.endpoint, 'from-env:4317');
    const o = (await otlp('--otlp-address', 'c:4317', '--otlp-insecure=false', '--otlp-headers', 'a=1', '--otlp-headers', 'b=2', '--otlp-attrs', 'x:1,y:2'))!;
    assert.deepEqual([o.endpoint, o.url, o.headers, o.attrs], ['c:4317', 'https://c:4317', { a: '1', b: '2' }, { x: '1', y: '2' }]);
    process.env.ARGOCD_CMP_SERVER_OTLP_INSECURE = 'false';
    assert.equal((await otlp('--otlp-insecure'))!.url, 'http://from-env:4317');
    assert.equal(await otlp('--otlp-address='), undefined, 'an empty flag turns it off, as in Argo');
  } finally {
    process.env = saved;
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("request spans on the SDK: off without a tracer; the sampler follows the caller's context; stages become children of the request span", async () => {
  const { RequestTrace, timeStage, withTrace } = await import('../../../cmp/observe/request-trace.js');
  const { endRequestSpan, traceRequest } = await import('../../../cmp/observe/request-spans.js');
  const { setTracer } = await import('../../../cmp/observe/tracing.js');
  const { requestTracer, samplerOf } = await import('../../../cmp/observe/otel-sdk.js');
  const { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } = await import('@opentelemetry/sdk-trace');
  const t = '0af7651916cd43dd8448eb211c80319c';
  const caller = (sampled: boolean) => ({ traceId: t, spanId: 'b7ad6b7169203331', sampled });
  const off = new RequestTrace();
  assert.equal(traceRequest(off, 'req', 'server', 0, undefined), false, 'no tracer: nothing is traced');
  assert.equal(off.span, undefined);
  assert.equal(off.stageSpans, undefined);
  const memory = new InMemorySpanExporter();
  const provider = (sampler: 'parentbased_always_on' | 'always_on' | 'traceidratio', ratio = 1) =>
    new TracerProvider({ sampler: samplerOf({ sampler, ratio }), spanProcessors: [new SimpleSpanProcessor({ exporter: memory })] });
  try {
    setTracer(requestTracer(provider('parentbased_always_on').getTracer('t'), async () => {}));
    // An unsampled caller: nothing recorded, but its context (and decision) is kept for a job to carry.
    const unsampled = new RequestTrace();
    assert.equal(traceRequest(unsampled, 'req', 'server', 0, caller(false)), false);
    assert.deepEqual([unsampled.span?.traceId, unsampled.span?.sampled, unsampled.stageSpans], [t, false, undefined]);
    const trace = new RequestTrace();
    const startMs = Date.now() - 5;
    assert.equal(traceRequest(trace, 'req', 'server', startMs, caller(true)), true);
    await withTrace(trace, () => timeStage('exec', () => 1, { 'cmp.command': 'sh' }));
    await withTrace(trace, () => timeStage('split', () => Promise.reject(new Error('x'))).catch(() => {}));
    endRequestSpan(trace, { 'cmp.plugin': 'p' }, false);
    const got = memory.getFinishedSpans();
    const parentOf = (s: (typeof got)[number]) => s.parentSpanContext?.spanId;
    assert.deepEqual(got.map(s => [s.name, s.spanContext().traceId, parentOf(s) === 'b7ad6b7169203331' ? 'caller' : parentOf(s) === trace.span!.spanId ? 'request' : '?', s.status.code, s.kind]).sort(), [
      ['exec', t, 'request', 0, 0],
      ['req', t, 'caller', 0, 1],
      ['split', t, 'request', 2, 0],
    ]);
    const req = got.find(s => s.name === 'req')!;
    assert.deepEqual(req.attributes, { 'cmp.plugin': 'p' });
    assert.equal(req.startTime[0] * 1000 + req.startTime[1] / 1e6, startMs, 'the span starts when the request did');
    assert.deepEqual(got.find(s => s.name === 'exec')!.attributes, { 'cmp.command': 'sh' });
    assert.equal(trace.stageSpans, undefined, 'ended once');

    // Not parent-based: a sampler of its own decides, whatever the caller said.
    memory.reset();
    setTracer(requestTracer(provider('always_on').getTracer('t'), async () => {}));
    assert.equal(traceRequest(new RequestTrace(), 'req', 'server', 0, caller(false)), true);
    setTracer(requestTracer(provider('traceidratio', 0).getTracer('t'), async () => {}));
    assert.equal(traceRequest(new RequestTrace(), 'req', 'server', 0, caller(true)), false, 'ratio 0 records nothing');
  } finally {
    setTracer(undefined);
  }
});

test('a collector that is down costs no request: the export fails, one warning, and shutdown is bounded', async () => {
  const { startTracing } = await import('../../../cmp/observe/otel-sdk.js');
  const { activeTracer, setTracer } = await import('../../../cmp/observe/tracing.js');
  const warnings: string[] = [];
  const log = { warn: (o: unknown, m?: string) => void warnings.push(m ?? String(o)), info: () => {} } as unknown as import('../../../cmp/log.js').Logger;
  const saved = process.env.OTEL_EXPORTER_OTLP_TIMEOUT;
  process.env.OTEL_EXPORTER_OTLP_TIMEOUT = '1000';
  try {
    const o = compileOptions({ ...BASE, ARGOCD_CMP_SERVER_OTLP_ADDRESS: '127.0.0.1:1' }).otlp!;
    const tracer = await startTracing(o, 'svc', log);
    assert.equal(activeTracer(), tracer);
    tracer.start('x', 'server', Date.now(), undefined).end({}, false, Date.now(), []);
    const t0 = Date.now();
    await tracer.shutdown();
    assert.ok(Date.now() - t0 < 6000, `shutdown took ${Date.now() - t0} ms`);
    assert.equal(warnings.length, 1, JSON.stringify(warnings));
    assert.match(warnings[0]!, /^tracing: /);
  } finally {
    setTracer(undefined);
    if (saved === undefined) delete process.env.OTEL_EXPORTER_OTLP_TIMEOUT;
    else process.env.OTEL_EXPORTER_OTLP_TIMEOUT = saved;
  }
});

test('W3C tracestate: members of several headers joined, trimmed; an invalid one, a repeated key or too many drop it whole', () => {
  assert.equal(parseTracestate([]), undefined);
  assert.equal(parseTracestate(['']), undefined);
  assert.equal(parseTracestate(['congo=t61rcWkgMzE, rojo=00f067aa0ba902b7', ' ,tenant@vendor=x y ']), 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7,tenant@vendor=x y');
  for (const bad of ['Upper=1', 'k=', 'k=v,k=w', 'k=a,b', 'k=v=w', 'k=trailing\u00e9', '1k=v']) assert.equal(parseTracestate([bad]), undefined, bad);
  const many = Array.from({ length: 33 }, (_, i) => `k${i}=v`).join(',');
  assert.equal(parseTracestate([many]), undefined, '33 members');
  assert.equal(parseTracestate([`k=${'v'.repeat(257)}`]), undefined, 'a value over 256 characters');
  assert.ok(parseTracestate([`k=${'v'.repeat(256)}`]));
  assert.equal(parseTracestate([Array.from({ length: 5 }, (_, i) => `k${i}=${'v'.repeat(120)}`).join(',')]), undefined, 'over 512 characters');
  // Only with a valid traceparent.
  const tp = `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`;
  assert.deepEqual(parseTraceContext(tp, ['a=1']), { traceId: '1'.repeat(32), spanId: '2'.repeat(16), sampled: true, traceState: 'a=1' });
  assert.deepEqual(parseTraceContext(tp, ['A=1']), { traceId: '1'.repeat(32), spanId: '2'.repeat(16), sampled: true });
  assert.equal(parseTraceContext('nonsense', ['a=1']), undefined);
});
