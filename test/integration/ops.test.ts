import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { queueDepth } from '../../cmp/observe/queue-depth.js';
import { startDistributed, TEST_SIGNING_KEY, type Distributed } from '../helpers/distributed.js';
import { openCmpClient, type CmpTestClient } from '../helpers/grpc-client.js';
import { startProxy, type ProxyProcess } from '../helpers/proxy-process.js';
import { scrape } from '../helpers/metrics.js';
import { freePort, startRedis } from '../helpers/redis-server.js';
import { tarballOf } from '../helpers/repo.js';
import { generateCall, markerPlugin, until, untilHttpListening } from './distributed-helpers.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { BIN } from '../helpers/paths.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';

const SECRET = 'do-not-log-this-value-7f3a';

/**
 * A plugin whose MODE (request env) makes it time out (`slow`), ignore SIGTERM (`stubborn`), or
 * run for 2 s after creating the file MARK (`busy`).
 */
const OPS_PLUGIN = pluginYaml('ops', `generate:
  command: [sh, -c]
  args:
    - |
      case "$ARGOCD_ENV_MODE" in
        slow) sleep 5 ;;
        stubborn) trap '' TERM; sleep 5 ;;
        busy) touch "$ARGOCD_ENV_MARK"; sleep 2 ;;
      esac
      printf 'kind: ConfigMap\\nmetadata:\\n  name: %s\\n' "$ARGOCD_ENV_TAG"`);

const get = (port: number, p: string, headers: Record<string, string> = {}) =>
  fetch(`http://127.0.0.1:${port}${p}`, { headers, redirect: 'manual' });

/** The JSON log lines a process wrote with the given msg. */
const logLines = (stderr: string, msg: string) =>
  stderr
    .split('\n')
    .filter(l => l.startsWith('{'))
    .map(l => JSON.parse(l) as Record<string, any>)
    .filter(l => l.msg === msg);

/** A request line's keys: logrus's, ours, then those of Argo's gRPC logging interceptor (no deadline sent). */
const REQUEST_KEYS = [
  'level', 'time', 'msg', 'name', 'service',
  'plugin', 'app', 'rpc', 'cache', 'outcome', 'bytes', 'ms',
  'protocol', 'grpc.component', 'grpc.service', 'grpc.method', 'grpc.method_type', 'peer.address', 'grpc.start_time', 'grpc.code', 'grpc.time_ms',
];

/** Argo's field values as go-grpc-middleware v2 writes them for a GenerateManifest call on the unix socket. */
function assertArgoFields(l: Record<string, any>, code: string, level: string): void {
  assert.equal(l.level, level);
  assert.equal(l.protocol, 'grpc');
  assert.equal(l['grpc.component'], 'server');
  assert.equal(l['grpc.service'], 'plugin.ConfigManagementPluginService');
  assert.equal(l['grpc.method'], 'GenerateManifest');
  assert.equal(l['grpc.method_type'], 'client_stream');
  assert.equal(l['peer.address'], '@');
  assert.equal(l['grpc.code'], code);
  const rfc3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)$/;
  assert.match(l['grpc.start_time'], rfc3339);
  if ('grpc.request.deadline' in l) assert.match(l['grpc.request.deadline'], rfc3339);
  assert.equal(typeof l['grpc.time_ms'], 'string', 'a string, as fmt.Sprintf("%v", …) makes it');
  assert.match(l['grpc.time_ms'], /^\d+(\.\d{1,3})?$/);
  assert.ok(Number(l['grpc.time_ms']) >= l.ms.ingest, `${l['grpc.time_ms']} ms covers the ingest (${l.ms.ingest} ms)`);
}

describe('operations: standalone proxy', () => {
  let proxy: ProxyProcess;
  let client: CmpTestClient;
  let port: number;
  let tgz: Buffer;

  before(async () => {
    port = await freePort();
    proxy = await startProxy({
      pluginYaml: OPS_PLUGIN,
      socketName: 'ops.sock',
      env: {
        CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}`,
        ARGOCD_CMP_SERVER_LOGLEVEL: 'info',
        CMP_OFFLOAD_CONCURRENCY: '3',
        ARGOCD_EXEC_TIMEOUT: '1s',
        ARGOCD_EXEC_FATAL_TIMEOUT: '1s',
      },
    });
    await untilHttpListening(proxy, 'the HTTP server');
    client = openCmpClient(proxy.socketPath);
    tgz = await tarballOf({ 'app.yaml': 'x: 1\n' });
  });

  after(async () => {
    client.close();
    await proxy.stop();
  });

  test('/healthz and /readyz answer 200 while the socket listens; unknown paths 404', async () => {
    assert.equal((await get(port, '/healthz')).status, 200);
    const ready = await get(port, '/readyz');
    assert.equal(ready.status, 200);
    assert.equal(await ready.text(), 'ok\n');
    assert.equal((await get(port, '/nope')).status, 404);
  });

  test('after requests, /metrics has requests, stages, bytes and cache series with plausible values', async () => {
    const call = (timeoutMs?: number) => generateCall(tgz, { TAG: 'm', TOKEN: SECRET }, { appName: 'guestbook', timeoutMs });
    assert.ok('value' in (await client.generate(call())));
    // The second with a deadline, as the repo-server sends one: its line has grpc.request.deadline.
    assert.ok('value' in (await client.generate(call(60_000))));
    const m = await scrape(port);
    assert.equal(m.get('cmp_offload_requests_total{rpc="generate",outcome="OK"}'), 2);
    assert.equal(m.get('cmp_offload_request_duration_seconds_count{rpc="generate"}'), 2);
    assert.equal(m.get('cmp_offload_ingested_bytes_total'), 2 * tgz.length);
    assert.equal(m.get('cmp_offload_cache_lookups_total{result="miss"}'), 1);
    assert.equal(m.get('cmp_offload_cache_lookups_total{result="hit"}'), 1);
    // One run stored under two keys: the whole-tree entry and, with the default traced cache, the traced one.
    assert.ok(m.get('cmp_offload_cache_bytes')! > 0 && m.get('cmp_offload_cache_entries') === 2, `${m.get('cmp_offload_cache_entries')} entries`);
    assert.ok(m.get('cmp_offload_cache_stored_bytes_total')! > 0);
    for (const stage of ['ingest', 'lookup', 'respond']) assert.equal(m.get(`cmp_offload_stage_duration_seconds_count{stage="${stage}"}`), 2, stage);
    for (const stage of ['extract', 'exec', 'split']) assert.equal(m.get(`cmp_offload_stage_duration_seconds_count{stage="${stage}"}`), 1, stage);
    const execSeconds = m.get('cmp_offload_stage_duration_seconds_sum{stage="exec"}')!;
    assert.ok(execSeconds > 0 && execSeconds < 5, `exec took ${execSeconds}s`);
    assert.equal(m.get('cmp_offload_concurrency_limit'), 3);
    assert.equal(m.get('cmp_offload_concurrency_in_use'), 0);
    assert.equal(m.get('cmp_offload_inflight_requests'), 0);
    assert.equal(m.get('cmp_offload_info{role="proxy",plugin="ops",mode="standalone"}'), 1);
    assert.ok(m.get('process_resident_memory_bytes')! > 0, 'prom-client\'s process metrics, unprefixed');
    assert.ok(m.get('nodejs_eventloop_lag_seconds') !== undefined, 'prom-client\'s runtime metrics, unprefixed');
    assert.equal([...m.keys()].filter(k => /^cmp_offload_(process|nodejs)_/.test(k)).length, 0);
  });

  test('each request logs one JSON line with plugin, app, rpc, cache, outcome and stage durations, and no env value', async () => {
    await until(() => logLines(proxy.stderr(), 'request').length >= 2, 5_000, 'request log lines');
    const [first, second] = logLines(proxy.stderr(), 'request');
    for (const l of [first!, second!]) {
      assert.equal(l.plugin, 'ops');
      assert.equal(l.app, 'guestbook');
      assert.equal(l.rpc, 'generate');
      assert.equal(l.outcome, 'OK');
      assert.equal(l.bytes, tgz.length);
      assert.ok(l.ms.total >= l.ms.ingest && typeof l.ms.respond === 'number');
    }
    assert.deepEqual([first!.cache, second!.cache], ['miss', 'hit']);
    assert.ok(typeof first!.ms.exec === 'number' && second!.ms.exec === undefined, 'the hit ran nothing');
    assert.ok(!proxy.stderr().includes(SECRET), 'an env value reached the log');
    // Argo's gRPC interceptor fields, next to ours, exactly these keys.
    assert.deepEqual(Object.keys(first!).sort(), [...REQUEST_KEYS].sort());
    assert.deepEqual(Object.keys(second!).sort(), [...REQUEST_KEYS, 'grpc.request.deadline'].sort());
    for (const l of [first!, second!]) assertArgoFields(l, 'OK', 'info');
    const deadlineIn = Date.parse(second!['grpc.request.deadline']) - Date.parse(second!['grpc.start_time']);
    assert.ok(deadlineIn >= 59_000 && deadlineIn <= 61_000, `deadline ${deadlineIn} ms after the start`);
  });

  test('exec timeouts and fatal kills are counted, and failed requests by their code', async () => {
    const slow = await client.generate(generateCall(tgz, { TAG: 's', MODE: 'slow' }));
    assert.ok('code' in slow && /failed timeout after 1s/.test(slow.details), JSON.stringify(slow));
    const stubborn = await client.generate(generateCall(tgz, { TAG: 'k', MODE: 'stubborn' }));
    assert.ok('code' in stubborn && /failed fatal timeout after 2s/.test(stubborn.details), JSON.stringify(stubborn));
    const m = await scrape(port);
    assert.equal(m.get('cmp_offload_exec_timeouts_total'), 2);
    assert.equal(m.get('cmp_offload_exec_kills_total{reason="fatal_timeout"}'), 1);
    assert.equal(m.get('cmp_offload_requests_total{rpc="generate",outcome="UNKNOWN"}'), 2);
    const failed = logLines(proxy.stderr(), 'request').filter(l => l.outcome === 'UNKNOWN');
    assert.equal(failed.length, 2);
    for (const l of failed) {
      assert.deepEqual(Object.keys(l).sort(), [...REQUEST_KEYS].sort(), 'no grpc.error: error texts may hold secrets');
      assertArgoFields(l, 'Unknown', 'error');
    }
  });

  test('/readyz turns 503 naming the socket as soon as shutdown begins; the in-flight request still gets its manifests', async () => {
    const other = await freePort();
    const marks = pluginWritableTempDir('cmp-ops-busy-');
    const p = await startProxy({
      pluginYaml: OPS_PLUGIN,
      socketName: 'ops.sock',
      env: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${other}`, ARGOCD_CMP_SERVER_LOGLEVEL: 'info', CMP_OFFLOAD_SHUTDOWN_GRACE: '20s' },
    });
    const c = openCmpClient(p.socketPath);
    try {
      await untilHttpListening(p, 'the HTTP server');
      const mark = `${marks}/running`;
      const running = c.generate(generateCall(tgz, { TAG: 'busy', MODE: 'busy', MARK: mark }));
      await until(() => fs.existsSync(mark), 10_000, 'the request\'s command to run');
      p.proc.kill('SIGTERM');
      let notReady: Response | undefined;
      await until(async () => {
        const res = await get(other, '/readyz').catch(() => undefined);
        if (res?.status === 503) notReady = res;
        return notReady !== undefined;
      }, 3_000, '/readyz 503');
      assert.equal(await notReady!.text(), 'not ready: socket\n');
      assert.deepEqual(await running, { value: { manifests: ['{"kind":"ConfigMap","metadata":{"name":"busy"}}'], sourceType: '' } });
      const exit = p.proc.exitCode ?? (await new Promise(resolve => p.proc.once('exit', resolve)));
      assert.equal(exit, 0, 'the proxy exited cleanly once the request was done');
    } finally {
      c.close();
      await p.stop();
      fs.rmSync(marks, { recursive: true, force: true });
    }
  });
});

describe('operations: distributed mode', () => {
  let d: Distributed;
  let client: CmpTestClient;
  let proxyPort: number;
  let workerPort: number;
  const token = 'dashboard-token-0123456789';
  const markers = pluginWritableTempDir('cmp-ops-markers-');

  before(async () => {
    proxyPort = await freePort();
    workerPort = await freePort();
    d = await startDistributed({
      pluginYaml: markerPlugin('opsq'),
      socketName: 'opsq.sock',
      workers: 1,
      env: { MARKERS: markers, ARGOCD_CMP_SERVER_LOGLEVEL: 'info', CMP_OFFLOAD_CONCURRENCY: '2' },
      proxyEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${proxyPort}` },
      workerEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${workerPort}`, CMP_OFFLOAD_DASHBOARD_TOKEN: token },
    });
    await untilHttpListening(d.proxy, 'the proxy HTTP server');
    await untilHttpListening(d.workers[0]!, 'the worker HTTP server');
    client = openCmpClient(d.proxy.socketPath);
  });

  after(async () => {
    client.close();
    await d.stop();
    fs.rmSync(markers, { recursive: true, force: true });
  });

  test('a request through a worker shows on both: proxy stages, worker stages, jobs, queue depth', async () => {
    const tgz = await tarballOf({ 'f.txt': 'distributed' });
    assert.ok('value' in (await client.generate(generateCall(tgz, { TAG: 'd1' }, { appName: 'shop' }))));
    const p = await scrape(proxyPort);
    assert.equal(p.get('cmp_offload_requests_total{rpc="generate",outcome="OK"}'), 1);
    for (const stage of ['ingest', 'lookup', 'upload', 'remote', 'respond']) assert.equal(p.get(`cmp_offload_stage_duration_seconds_count{stage="${stage}"}`), 1, stage);
    assert.equal(p.get('cmp_offload_cache_lookups_total{result="miss"}'), 1);
    assert.equal(p.get('cmp_offload_redis_connected'), 1);
    for (const state of ['wait', 'prioritized', 'active', 'delayed']) assert.equal(p.get(`cmp_offload_queue_jobs{queue="opsq",state="${state}"}`), 0, state);
    const w = await scrape(workerPort);
    assert.equal(w.get('cmp_offload_jobs_total{outcome="completed"}'), 1);
    for (const stage of ['queue_wait', 'extract', 'exec', 'split']) assert.equal(w.get(`cmp_offload_stage_duration_seconds_count{stage="${stage}"}`), 1, stage);
    const wait = w.get('cmp_offload_stage_duration_seconds_sum{stage="queue_wait"}')!;
    assert.ok(wait >= 0 && wait < 5, `queue wait ${wait}s`);
    assert.equal(w.get('cmp_offload_concurrency_limit'), 2);
    assert.equal(w.get('cmp_offload_concurrency_in_use'), 0);
    assert.equal(w.get('cmp_offload_info{role="worker",plugin="opsq",mode="distributed"}'), 1);
    const job = logLines(d.workers[0]!.stderr(), 'job').at(-1)!;
    assert.equal(job.outcome, 'completed');
    assert.equal(job.app, 'shop');
    assert.ok(typeof job.ms.exec === 'number' && typeof job.ms.queue_wait === 'number');
  });

  test("proxy and worker export Redis' used_memory and maxmemory (INFO memory at scrape time); 0 means no limit", async () => {
    const redis = new Redis(d.redis.url);
    try {
      await redis.config('SET', 'maxmemory', String(256 * 1024 * 1024));
      const used = Number(/^used_memory:(\d+)\r?$/m.exec(await redis.info('memory'))![1]);
      for (const port of [proxyPort, workerPort]) {
        const m = await scrape(port);
        assert.equal(m.get('cmp_offload_redis_maxmemory_bytes'), 256 * 1024 * 1024, `maxmemory on ${port}`);
        const exported = m.get('cmp_offload_redis_used_memory_bytes')!;
        // Read a moment apart from ours: the same order of magnitude, not byte for byte.
        assert.ok(exported > 100_000 && Math.abs(exported - used) < 10 * 1024 * 1024, `used_memory ${exported} on ${port}, INFO said ${used}`);
      }
      await redis.config('SET', 'maxmemory', '0');
      for (const port of [proxyPort, workerPort]) assert.equal((await scrape(port)).get('cmp_offload_redis_maxmemory_bytes'), 0, `no limit on ${port}`);
    } finally {
      redis.disconnect();
    }
  });

  test('the queue depth gauge reads the same BullMQ keys KEDA scales on', async () => {
    const redis = new Redis(d.redis.url);
    const connection = new Redis(d.redis.url, { maxRetriesPerRequest: null });
    const queue = new Queue('depth-probe', { connection, prefix: '{cmp-offload}' });
    try {
      await queue.add('a', {});
      await queue.add('b', {});
      await queue.add('c', {}, { priority: 5 });
      await queue.add('d', {}, { delay: 60_000 });
      assert.deepEqual(await queueDepth(redis, '{cmp-offload}', 'depth-probe'), { wait: 2, prioritized: 1, active: 0, delayed: 1 });
      const counts = await queue.getJobCounts('waiting', 'prioritized', 'active', 'delayed');
      assert.deepEqual(counts, { waiting: 2, prioritized: 1, active: 0, delayed: 1 });
    } finally {
      await queue.obliterate({ force: true });
      await queue.close();
      connection.disconnect();
      redis.disconnect();
    }
  });

  test('the dashboard answers only with the token: 401 without, 200 with a bearer, a cookie after ?token=', async () => {
    assert.equal((await get(workerPort, '/queues')).status, 401);
    assert.equal((await get(workerPort, '/queues', { authorization: 'Bearer wrong-token-000000000' })).status, 401);
    const api = await get(workerPort, '/queues/api/queues', { authorization: `Bearer ${token}` });
    assert.equal(api.status, 200);
    assert.ok((await api.text()).includes('opsq'));
    const login = await get(workerPort, `/queues?token=${token}`);
    assert.equal(login.status, 303);
    assert.equal(login.headers.get('location'), '/queues');
    const cookie = login.headers.get('set-cookie')!;
    assert.match(cookie, /HttpOnly; SameSite=Strict/);
    assert.equal((await get(workerPort, '/queues', { cookie: cookie.split(';')[0]! })).status, 200);
    // The proxy has no dashboard.
    assert.equal((await get(proxyPort, '/queues')).status, 404);
  });

  test('/readyz of proxy and worker flips to 503 while Redis is down and back to 200 when it returns', async () => {
    const ready = async (port: number) => (await get(port, '/readyz')).status;
    assert.equal(await ready(proxyPort), 200);
    assert.equal(await ready(workerPort), 200);
    await d.redis.pause();
    await until(async () => (await ready(proxyPort)) === 503 && (await ready(workerPort)) === 503, 10_000, 'both not ready');
    assert.match(await (await get(proxyPort, '/readyz')).text(), /not ready: redis/);
    const down = await scrape(proxyPort);
    assert.equal(down.get('cmp_offload_redis_connected'), 0);
    // The memory gauges keep their last values while Redis does not answer (the scrape still works).
    assert.ok(down.get('cmp_offload_redis_used_memory_bytes')! > 0, 'used_memory kept');
    assert.equal((await get(workerPort, '/healthz')).status, 200, 'still alive');
    await d.redis.restart();
    await until(async () => (await ready(proxyPort)) === 200 && (await ready(workerPort)) === 200, 15_000, 'both ready again');
    const tgz = await tarballOf({ 'f.txt': 'after the outage' });
    assert.ok('value' in (await client.generate(generateCall(tgz, { TAG: 'd2' }))));
  });
});

test('a bad CMP_OFFLOAD_HTTP_ADDR stops the proxy at start with a message naming it', async () => {
  await assert.rejects(
    startProxy({ pluginYaml: OPS_PLUGIN, socketName: 'ops.sock', env: { CMP_OFFLOAD_HTTP_ADDR: 'localhost' } }),
    /invalid value "localhost" for CMP_OFFLOAD_HTTP_ADDR/,
  );
});

test('an HTTP port already taken is logged and the proxy still serves its socket', async () => {
  const redis = await startRedis(); // anything holding a port will do
  const p = await startProxy({
    pluginYaml: OPS_PLUGIN,
    socketName: 'ops.sock',
    env: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${redis.port}`, ARGOCD_CMP_SERVER_LOGLEVEL: 'info' },
  });
  const c = openCmpClient(p.socketPath);
  try {
    await until(() => p.stderr().includes('cannot listen for /healthz'), 5_000, 'the listen error');
    const tgz = await tarballOf({ 'a.txt': 'a' });
    assert.ok('value' in (await c.generate(generateCall(tgz, { TAG: 'still' }))));
  } finally {
    c.close();
    await p.stop();
    await redis.stop();
  }
});

test('the dashboard token can come from CMP_OFFLOAD_DASHBOARD_TOKEN_FILE: /queues needs the file\'s token (its trailing newline dropped)', async () => {
  const secrets = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-ops-token-'));
  const token = randomBytes(18).toString('hex');
  const file = path.join(secrets, 'token');
  fs.writeFileSync(file, `${token}\n`, { mode: 0o600 });
  const workerPort = await freePort();
  const d = await startDistributed({
    pluginYaml: markerPlugin('tokq'),
    socketName: 'tokq.sock',
    workers: 1,
    workerEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${workerPort}`, CMP_OFFLOAD_DASHBOARD_TOKEN_FILE: file },
  });
  try {
    await untilHttpListening(d.workers[0]!, 'the worker HTTP server');
    assert.equal((await get(workerPort, '/queues')).status, 401);
    assert.equal((await get(workerPort, '/queues', { authorization: `Bearer ${token.slice(0, -1)}x` })).status, 401);
    // The file's newline is not part of the token.
    assert.equal((await get(workerPort, `/queues?token=${encodeURIComponent(`${token}\n`)}`)).status, 401);
    const api = await get(workerPort, '/queues/api/queues', { authorization: `Bearer ${token}` });
    assert.equal(api.status, 200);
    assert.ok((await api.text()).includes('tokq'));
    assert.equal((await get(workerPort, '/queues', { authorization: `Bearer ${token}` })).status, 200);
  } finally {
    await d.stop();
    fs.rmSync(secrets, { recursive: true, force: true });
  }
});

test('a distributed proxy whose Redis is unreachable still stops on SIGTERM with exit 0', async () => {
  const p = await startProxy({
    pluginYaml: OPS_PLUGIN,
    socketName: 'ops.sock',
    env: {
      CMP_OFFLOAD_REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
      CMP_OFFLOAD_SIGNING_KEY: TEST_SIGNING_KEY,
      CMP_OFFLOAD_REDIS_TIMEOUT: '500ms',
      CMP_OFFLOAD_HTTP_ADDR: 'off',
      ARGOCD_CMP_SERVER_LOGLEVEL: 'info',
    },
  });
  // `serving` comes after the warning that Redis is away, and is logged as the SIGTERM handler is installed.
  await until(() => p.stderr().includes('Redis is not reachable yet') && p.stderr().includes('"msg":"serving"'), 10_000, 'the proxy to serve without Redis');
  // stop() SIGKILLs after 20 s, which shows as a null exit code.
  assert.equal(await p.stop(20_000), 0, p.stderr());
});

test('a SIGTERM during start-up is kept: the proxy stops without serving, exit 0', async () => {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-early-term-'));
  try {
    fs.mkdirSync(path.join(base, 'config'));
    fs.writeFileSync(path.join(base, 'config', 'plugin.yaml'), OPS_PLUGIN);
    // Redis unreachable: the proxy waits CMP_OFFLOAD_REDIS_TIMEOUT for it before it serves, so the
    // signal below lands before `serving` (before the fix, the default action killed the process).
    const proc = spawn(process.execPath, [BIN, 'proxy', '--config-dir-path', path.join(base, 'config')], {
      env: {
        ...process.env,
        ARGOCD_PLUGINSOCKFILEPATH: base,
        ARGOCD_CMP_WORKDIR: base,
        ARGOCD_CMP_SERVER_LOGLEVEL: 'info',
        CMP_OFFLOAD_REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
        CMP_OFFLOAD_SIGNING_KEY: TEST_SIGNING_KEY,
        CMP_OFFLOAD_REDIS_TIMEOUT: '1s',
        CMP_OFFLOAD_HTTP_ADDR: 'off',
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    let signalled = false;
    proc.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
      // The first line the proxy logs, right after reading plugin.yaml.
      if (!signalled && stderr.includes('No discovery configuration')) {
        assert.ok(!stderr.includes('"msg":"serving"'));
        signalled = proc.kill('SIGTERM');
      }
    });
    const timer = setTimeout(() => proc.kill('SIGKILL'), 20_000);
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>(resolve => proc.once('close', (c, s) => resolve([c, s])));
    clearTimeout(timer);
    assert.deepEqual([code, signal], [0, null], stderr);
    const msgs = stderr.split('\n').filter(Boolean).map(l => (JSON.parse(l) as { msg: string }).msg);
    // The signal is logged when it arrives; the start ends there (nothing is served after a stop).
    assert.deepEqual(msgs.filter(m => ['serving', 'shutting down', 'stopped'].includes(m)), ['shutting down', 'stopped']);
    assert.ok(!fs.existsSync(path.join(base, 'ops.sock')), 'the socket is removed');
  } finally {
    fs.rmSync(base, { recursive: true, force: true });
  }
});
