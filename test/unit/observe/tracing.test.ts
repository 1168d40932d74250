import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compileOptions } from '../../../cmp/config/options.js';
import { commandName, formatTraceparent, parseTraceparent } from '../../../cmp/observe/tracing.js';
import { REPO_ROOT } from '../../helpers/paths.js';

const BASE = { ARGOCD_PLUGINSOCKFILEPATH: '/tmp' };

test('tracing is off unless ARGOCD_CMP_SERVER_OTLP_ADDRESS is set', () => {
  assert.equal(compileOptions(BASE).otlp, undefined);
  assert.equal(compileOptions({ ...BASE, ARGOCD_CMP_SERVER_OTLP_ADDRESS: '', ARGOCD_CMP_SERVER_OTLP_INSECURE: 'false' }).otlp, undefined);
});

test("Argo CD's OTLP settings: address, insecure (default true), headers k=v, attrs k:v, with Argo's leniency", () => {
  assert.deepEqual(compileOptions({ ...BASE, ARGOCD_CMP_SERVER_OTLP_ADDRESS: 'otel-collector:4317' }).otlp, {
    address: 'otel-collector:4317',
    insecure: true,
    headers: {},
    attrs: {},
  });
  const o = compileOptions({
    ...BASE,
    ARGOCD_CMP_SERVER_OTLP_ADDRESS: 'otel:4317',
    ARGOCD_CMP_SERVER_OTLP_INSECURE: 'false',
    ARGOCD_CMP_SERVER_OTLP_HEADERS: 'authorization=Bearer x=y, x-tenant=a',
    ARGOCD_CMP_SERVER_OTLP_ATTRS: 'k8s.cluster.name:prod,team:a:b,broken',
  }).otlp!;
  assert.equal(o.insecure, false);
  assert.deepEqual(o.headers, { authorization: 'Bearer x=y', 'x-tenant': 'a' });
  assert.deepEqual(o.attrs, { 'k8s.cluster.name': 'prod', team: 'a:b' });
  // Argo parses these with Go's ParseBool and ParseStringToStringFromEnv: invalid means the default.
  const lenient = compileOptions({ ...BASE, ARGOCD_CMP_SERVER_OTLP_ADDRESS: 'o:4317', ARGOCD_CMP_SERVER_OTLP_INSECURE: 'nope', ARGOCD_CMP_SERVER_OTLP_HEADERS: 'a=1,b' }).otlp!;
  assert.equal(lenient.insecure, true);
  assert.deepEqual(lenient.headers, {});
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

test('zero cost when off: the exporter (gRPC client, OTLP schema) is only ever loaded by a dynamic import behind the setting', () => {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const e of fs.readdirSync(path.join(REPO_ROOT, dir), { withFileTypes: true })) {
      const rel = path.join(dir, e.name);
      if (e.isDirectory()) walk(rel);
      else if (rel.endsWith('.ts')) files.push(rel);
    }
  };
  for (const d of ['bin', 'cmp', 'proxy', 'worker']) walk(d);
  let dynamic = 0;
  for (const f of files) {
    for (const line of fs.readFileSync(path.join(REPO_ROOT, f), 'utf8').split('\n')) {
      if (!line.includes('otlp-exporter.js')) continue;
      assert.match(line, /if \(options\.otlp\)|await import\('[./]+cmp\/observe\/otlp-exporter\.js'\)/, `${f}: ${line.trim()}`);
      assert.doesNotMatch(line, /^\s*import .* from/, `${f} imports the exporter statically`);
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
    assert.equal((await otlp())!.address, 'from-env:4317');
    const o = (await otlp('--otlp-address', 'c:4317', '--otlp-insecure=false', '--otlp-headers', 'a=1', '--otlp-headers', 'b=2', '--otlp-attrs', 'x:1,y:2'))!;
    assert.deepEqual(o, { address: 'c:4317', insecure: false, headers: { a: '1', b: '2' }, attrs: { x: '1', y: '2' } });
    process.env.ARGOCD_CMP_SERVER_OTLP_INSECURE = 'false';
    assert.equal((await otlp('--otlp-insecure'))!.insecure, true);
    assert.equal(await otlp('--otlp-address='), undefined, 'an empty flag turns it off, as in Argo');
  } finally {
    process.env = saved;
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("request spans: off without an exporter; a caller's unsampled context is respected; stages become children of the request span", async () => {
  const { RequestTrace, timeStage, withTrace } = await import('../../../cmp/observe/request-trace.js');
  const { endRequestSpan, traceRequest } = await import('../../../cmp/observe/request-spans.js');
  const { setSpanSink } = await import('../../../cmp/observe/tracing.js');
  const t = '0af7651916cd43dd8448eb211c80319c';
  const off = new RequestTrace();
  assert.equal(traceRequest(off, undefined), false, 'no exporter: nothing is traced');
  assert.equal(off.stageSpans, undefined);
  const got: import('../../../cmp/observe/tracing.js').SpanRecord[] = [];
  setSpanSink({ export: s => void got.push(...s), shutdown: async () => {} });
  try {
    assert.equal(traceRequest(new RequestTrace(), { traceId: t, spanId: 'b7ad6b7169203331', sampled: false }), false);
    const trace = new RequestTrace();
    assert.equal(traceRequest(trace, { traceId: t, spanId: 'b7ad6b7169203331', sampled: true }), true);
    await withTrace(trace, () => timeStage('exec', () => 1, { 'cmp.command': 'sh' }));
    await withTrace(trace, () => timeStage('split', () => Promise.reject(new Error('x'))).catch(() => {}));
    endRequestSpan(trace, 'req', 2, {}, false, 0);
    assert.deepEqual(got.map(s => [s.name, s.traceId, s.parentSpanId === 'b7ad6b7169203331' ? 'caller' : s.parentSpanId === trace.span!.spanId ? 'request' : '?', s.error === true]), [
      ['req', t, 'caller', false],
      ['exec', t, 'request', false],
      ['split', t, 'request', true],
    ]);
    assert.deepEqual(got[1]!.attributes, { 'cmp.command': 'sh' });
  } finally {
    setSpanSink(undefined);
  }
});

test('a collector that is down costs no request: the exporter gives up on its batch and shuts down', async () => {
  const { OtlpExporter } = await import('../../../cmp/observe/otlp-exporter.js');
  const warnings: string[] = [];
  const log = { warn: (_o: unknown, m: string) => void warnings.push(m) } as unknown as import('../../../cmp/log.js').Logger;
  const e = new OtlpExporter({ address: '127.0.0.1:1', insecure: true, headers: {}, attrs: {} }, 'svc', log, { delayMs: 10, timeoutMs: 2000 });
  e.export([{ traceId: '1'.repeat(32), spanId: '2'.repeat(16), parentSpanId: undefined, name: 'x', kind: 1, startMs: 1, endMs: 2, attributes: {} }]);
  const t0 = Date.now();
  await e.shutdown();
  assert.ok(Date.now() - t0 < 3000);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, /^tracing: exporting 1 spans to 127\.0\.0\.1:1 failed/);
});
