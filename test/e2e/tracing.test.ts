import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { chunksOf, openCmpClient, repoMetadata } from '../helpers/grpc-client.js';
import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp-receiver.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { tarballOf } from '../helpers/repo.js';
import { eventually, MODES, startCmp } from './harness.js';

/**
 * OpenTelemetry tracing (issue 13 item 5, issue 33 item 5) against a local OTLP receiver
 * (test/helpers/otlp-receiver.ts: gRPC and HTTP, decoding what it gets independently of the
 * exporter). One GenerateManifest with the repo-server's `traceparent` must give one connected
 * trace under the caller's span, with the expected spans, in both modes (the job carries the
 * request span to the worker); no span carries an env value or a command argument. The standard
 * OTEL_* variables win over Argo's, over each protocol; the sampler decides, following the
 * caller's decision by default, across the job too.
 */

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
    let receiver: OtlpReceiver;
    before(async () => {
      receiver = await startOtlpReceiver();
    });
    after(() => receiver.stop());

    test('one GenerateManifest with a traceparent yields one connected trace under the caller, with the expected spans', async () => {
      const server = await startCmp(mode, {
        pluginYaml: PLUGIN,
        socketName: 'traced.sock',
        env: {
          ARGOCD_CMP_SERVER_OTLP_ADDRESS: `127.0.0.1:${receiver.grpcPort}`,
          ARGOCD_CMP_SERVER_OTLP_HEADERS: 'x-otlp-test=hdr-ok',
          ARGOCD_CMP_SERVER_OTLP_ATTRS: 'k8s.cluster.name:test-cluster',
        },
      });
      const client = openCmpClient(server.socketPath);
      let stopped = false;
      const traceId = randomBytes(16).toString('hex');
      try {
        const callerSpan = randomBytes(8).toString('hex');
        const tgz = await tarballOf({ 'f.txt': 'traced' });
        const env = [{ name: 'ARGOCD_ENV_TOKEN', value: SECRET }];
        // First a caller that did not sample: by default nothing of it is recorded, by the proxy
        // nor by the worker that runs its job (checked below, once every process has flushed).
        // Another env: not the cache entry of the sampled request, which must run.
        const other = await tarballOf({ 'f.txt': 'not sampled' });
        const unsampled = await client.generate({
          metadata: repoMetadata(other, { env: [...env, { name: 'ARGOCD_ENV_SAMPLED', value: 'no' }] }),
          chunks: chunksOf(other, 1024),
          headers: { traceparent: `00-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-00` },
        });
        assert.ok('value' in unsampled, JSON.stringify(unsampled));
        const out = await client.generate({
          metadata: repoMetadata(tgz, { env }),
          chunks: chunksOf(tgz, 1024),
          headers: { traceparent: `00-${traceId}-${callerSpan}-01`, tracestate: 'vendor=abc,t@sys=1' },
        });
        assert.ok('value' in out, JSON.stringify(out));

        const expected = ['ingest', 'lookup', 'queue_wait', 'extract', 'exec', 'split', 'respond', ...(mode === 'distributed' ? ['upload', 'remote'] : [])];
        // (No blob_fetch: a tarball this small travels inside the job.)
        const names = () => new Set(receiver.spans.map(s => s.name));
        const jobDone = () => mode === 'standalone' || receiver.spans.some(s => s.kind === 5);
        await eventually(() => expected.every(n => names().has(n)) && names().has('plugin.ConfigManagementPluginService/GenerateManifest') && jobDone(), 15_000, `spans ${expected} (have ${[...names()]})`);

        const spans = receiver.spans;
        // One trace: the caller's, with its tracestate on every span (through the job too).
        assert.deepEqual([...new Set(spans.map(s => s.traceId))], [traceId]);
        assert.deepEqual([...new Set(spans.map(s => s.traceState))], ['vendor=abc,t@sys=1']);
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
          assert.equal(spans.find(s => s.name === 'blob_fetch'), undefined, 'a blob was fetched for a tarball the job carried');
        }
        for (const n of ['queue_wait', 'extract', 'split']) assert.equal(spans.find(s => s.name === n)!.parent, runParent.spanId, `${n} under ${runParent.name}`);
        const execs = spans.filter(s => s.name === 'exec');
        assert.deepEqual(execs.map(s => [s.attrs['cmp.step'], s.attrs['cmp.command']]).sort(), [['generate', 'sh'], ['init', 'sh']]);
        for (const e of execs) assert.equal(e.parent, runParent.spanId);

        // Never an env value or a command argument.
        const text = JSON.stringify(spans, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v));
        assert.ok(!text.includes(SECRET), 'no secret in any span');
        assert.ok(!text.includes('printf'), 'no command argument in any span');
        // ARGOCD_CMP_SERVER_OTLP_HEADERS reach the collector, over gRPC (Argo's address).
        assert.ok(receiver.exports.length > 0 && receiver.exports.every(e => e.header === 'hdr-ok' && e.protocol === 'grpc'), JSON.stringify(receiver.exports));
        client.close();
        stopped = true;
        await server.stop();
        // Every process flushed at its shutdown: still the one trace (the unsampled caller's job started none).
        assert.deepEqual([...new Set(receiver.spans.map(s => s.traceId))], [traceId]);
      } finally {
        if (!stopped) {
          client.close();
          await server.stop();
        }
      }
    });
  });
}

/** One GenerateManifest on a fresh standalone proxy with `env`, stopped (its spans flushed) before returning. */
async function oneRequest(env: Record<string, string>, traceparent: string | undefined): Promise<void> {
  const server = await startCmp('standalone', { pluginYaml: PLUGIN, socketName: 'traced.sock', env });
  const client = openCmpClient(server.socketPath);
  try {
    const tgz = await tarballOf({ 'f.txt': randomBytes(4).toString('hex') });
    const out = await client.generate({ metadata: repoMetadata(tgz), chunks: chunksOf(tgz, 1024), ...(traceparent ? { headers: { traceparent } } : {}) });
    assert.ok('value' in out, JSON.stringify(out));
  } finally {
    client.close();
    assert.equal(await server.stop(), 0);
  }
}

describe('OpenTelemetry settings (standalone proxy)', () => {
  let receiver: OtlpReceiver;
  before(async () => {
    receiver = await startOtlpReceiver();
  });
  after(() => receiver.stop());
  const ROOT = 'plugin.ConfigManagementPluginService/GenerateManifest';
  const fresh = () => {
    receiver.spans.length = 0;
    receiver.exports.length = 0;
  };
  const caller = (sampled: boolean) => {
    const traceId = randomBytes(16).toString('hex');
    const spanId = randomBytes(8).toString('hex');
    return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-${sampled ? '01' : '00'}` };
  };

  for (const protocol of ['http/protobuf', 'http/json'] as const) {
    test(`OTLP/HTTP (${protocol}): the standard endpoint, headers and service name win over Argo's settings`, async () => {
      fresh();
      const c = caller(true);
      await oneRequest(
        {
          OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${receiver.httpPort}`,
          OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
          OTEL_EXPORTER_OTLP_HEADERS: 'x-otlp-test=standard',
          OTEL_SERVICE_NAME: 'my-cmp',
          OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=test',
          ARGOCD_CMP_SERVER_OTLP_ADDRESS: `127.0.0.1:${receiver.grpcPort}`,
          ARGOCD_CMP_SERVER_OTLP_HEADERS: 'x-otlp-test=argo',
          ARGOCD_CMP_SERVER_OTLP_ATTRS: 'k8s.cluster.name:test-cluster',
        },
        c.traceparent,
      );
      assert.ok(receiver.exports.length > 0);
      assert.deepEqual([...new Set(receiver.exports.map(e => `${e.protocol} ${e.header}`))], [`${protocol} standard`]);
      const root = receiver.spans.find(s => s.name === ROOT)!;
      assert.ok(root, `spans: ${receiver.spans.map(s => s.name)}`);
      assert.deepEqual([root.traceId, root.parent, root.kind, root.service], [c.traceId, c.spanId, 2, 'my-cmp']);
      assert.equal(root.resource['deployment.environment'], 'test');
      assert.equal(root.resource['k8s.cluster.name'], 'test-cluster', "Argo's attributes still apply");
      assert.equal(root.attrs['cmp.plugin'], 'traced');
      assert.equal(root.attrs['rpc.grpc.status_code'], 0);
      for (const n of ['ingest', 'exec', 'respond']) assert.equal(receiver.spans.find(s => s.name === n)?.parent, root.spanId, n);
    });
  }

  test('gRPC by the standard variables: an http:// endpoint is plaintext; the default sampler follows an unsampled caller', async () => {
    fresh();
    const env = { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `http://127.0.0.1:${receiver.grpcPort}`, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc', OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'x-otlp-test=traces' };
    const unsampled = caller(false);
    const sampled = caller(true);
    const server = await startCmp('standalone', { pluginYaml: PLUGIN, socketName: 'traced.sock', env });
    const client = openCmpClient(server.socketPath);
    try {
      for (const c of [unsampled, sampled, undefined]) {
        const tgz = await tarballOf({ 'f.txt': randomBytes(4).toString('hex') });
        const out = await client.generate({ metadata: repoMetadata(tgz), chunks: chunksOf(tgz, 1024), ...(c ? { headers: { traceparent: c.traceparent } } : {}) });
        assert.ok('value' in out, JSON.stringify(out));
      }
    } finally {
      client.close();
      await server.stop();
    }
    const roots = receiver.spans.filter(s => s.name === ROOT);
    assert.equal(roots.length, 2, 'the sampled caller and the request without a traceparent (a new trace)');
    assert.equal(roots.filter(s => s.traceId === sampled.traceId && s.parent === sampled.spanId).length, 1);
    assert.ok(!receiver.spans.some(s => s.traceId === unsampled.traceId));
    assert.ok(roots.some(s => s.parent === '' && s.service === 'argocd-cmp-server'));
    assert.deepEqual([...new Set(receiver.exports.map(e => `${e.protocol} ${e.header}`))], ['grpc traces']);
  });

  test('OTEL_TRACES_SAMPLER: traceidratio 0 exports nothing, even for a sampled caller; parentbased_traceidratio 0 follows a sampled caller', async () => {
    fresh();
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${receiver.httpPort}`, OTEL_EXPORTER_OTLP_HEADERS: 'x-otlp-test=ratio' };
    await oneRequest({ ...endpoint, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' }, caller(true).traceparent);
    assert.equal(receiver.spans.length, 0, 'ratio 0: nothing exported');
    const c = caller(true);
    await oneRequest({ ...endpoint, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' }, c.traceparent);
    assert.ok(receiver.spans.length >= 4, `spans: ${receiver.spans.map(s => s.name)}`);
    assert.deepEqual([...new Set(receiver.spans.map(s => s.traceId))], [c.traceId]);
    await oneRequest({ ...endpoint, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' }, undefined);
    assert.deepEqual([...new Set(receiver.spans.map(s => s.traceId))], [c.traceId], 'a new trace at ratio 0 is not sampled');
  });

  test('OTEL_BSP_* reach the batch span processor; OTEL_TRACES_EXPORTER=none exports nothing', async () => {
    fresh();
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${receiver.httpPort}`, OTEL_EXPORTER_OTLP_HEADERS: 'x-otlp-test=bsp' };
    // A schedule delay of a minute: nothing leaves before shutdown (the default second would have).
    const server = await startCmp('standalone', { pluginYaml: PLUGIN, socketName: 'traced.sock', env: { ...endpoint, OTEL_BSP_SCHEDULE_DELAY: '60000' } });
    const client = openCmpClient(server.socketPath);
    try {
      const tgz = await tarballOf({ 'f.txt': randomBytes(4).toString('hex') });
      const out = await client.generate({ metadata: repoMetadata(tgz), chunks: chunksOf(tgz, 1024), headers: { traceparent: caller(true).traceparent } });
      assert.ok('value' in out, JSON.stringify(out));
      await new Promise(r => setTimeout(r, 2500));
      assert.equal(receiver.spans.length, 0, `exported before the delay: ${receiver.spans.map(s => s.name)}`);
    } finally {
      client.close();
      assert.equal(await server.stop(), 0);
    }
    assert.ok(receiver.spans.length >= 4, `flushed at shutdown: ${receiver.spans.map(s => s.name)}`);
    fresh();
    await oneRequest({ ...endpoint, OTEL_TRACES_EXPORTER: 'none' }, caller(true).traceparent);
    assert.equal(receiver.spans.length, 0);
  });
});
