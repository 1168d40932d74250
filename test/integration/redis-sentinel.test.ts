import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startDistributed, type Distributed } from '../helpers/distributed.js';
import { scrape } from '../helpers/metrics.js';
import { freePort } from '../helpers/redis-server.js';
import { redisCli, startRedisSentinel, type SentinelTopology } from '../helpers/redis-topology.js';
import { openCmpClient } from '../helpers/grpc-client.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { tarballOf } from '../helpers/repo.js';
import { generateCall, markerPlugin, startsOf, until, untilHttpListening } from './distributed-helpers.js';
import { manifestsOf, topologyFlow } from './topology-flow.js';

const QUEUE = 'qsentinel';
const markers = pluginWritableTempDir('cmp-markers-');
const DATA_PASSWORD = 'data-p@ss/word';
const SENTINEL_PASSWORD = 'sentinel-pass-0123';

/** maxmemory given to the data nodes (master, replica): CONFIG SET is per node, never replicated. */
const MAXMEMORY = [300 * 1024 * 1024, 400 * 1024 * 1024];
const maxmemoryOf = async (port: number) => (await scrape(port)).get('cmp_offload_redis_maxmemory_bytes');

const ready = async (port: number) => (await fetch(`http://127.0.0.1:${port}/readyz`)).status;
const redisConnected = async (port: number) =>
  Number(/^cmp_offload_redis_connected (\d+)$/m.exec(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text())?.[1]);

describe('Redis Sentinel (1 master, 1 replica, 3 sentinels, all with AUTH, started by the test)', () => {
  let topo: SentinelTopology;
  let d: Distributed;
  let proxyPort: number;
  let workerPort: number;
  let tgz: Buffer;

  before(async () => {
    topo = await startRedisSentinel(3, { password: DATA_PASSWORD, sentinelPassword: SENTINEL_PASSWORD });
    [proxyPort, workerPort] = [await freePort(), await freePort()];
    try {
      d = await startDistributed({
        redisUrl: topo.url,
        pluginYaml: markerPlugin(QUEUE),
        socketName: `${QUEUE}.sock`,
        workers: 1,
        env: { MARKERS: markers, CMP_OFFLOAD_CONCURRENCY: '2', ARGOCD_CMP_SERVER_LOGLEVEL: 'info', CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD: SENTINEL_PASSWORD },
        proxyEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${proxyPort}` },
        workerEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${workerPort}` },
      });
    } catch (err) {
      await topo.stop();
      throw err;
    }
    // Over the 16 KiB a job carries inline: the tarball travels as a blob, whose key is checked too.
    tgz = await tarballOf({ 'f.txt': 'sentinel', 'pad.txt': randomBytes(32 * 1024).toString('base64') });
  });

  after(async () => {
    await d?.stop();
    await topo?.stop();
    fs.rmSync(markers, { recursive: true, force: true });
  });

  test('the URL carries the data password, the sentinels get theirs from CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD; the log shows neither', () => {
    assert.match(topo.url, /^redis\+sentinel:\/\/:data-p%40ss%2Fword@127\.0\.0\.1:\d+,127\.0\.0\.1:\d+,127\.0\.0\.1:\d+\/cmpmaster$/);
    for (const text of [d.proxy.stderr(), d.workers[0]!.stderr()]) {
      assert.doesNotMatch(text, /p@ss|p%40ss|sentinel-pass/);
    }
    assert.match(d.workers[0]!.stderr(), /"redis":"redis\+sentinel:\/\/127\.0\.0\.1:\d+,127\.0\.0\.1:\d+,127\.0\.0\.1:\d+\/cmpmaster"/);
  });

  test('proxy and worker report Redis ready on /readyz and in cmp_offload_redis_connected', async () => {
    await untilHttpListening(d.proxy, 'the proxy HTTP server');
    await untilHttpListening(d.workers[0]!, 'the worker HTTP server');
    for (const port of [proxyPort, workerPort]) {
      assert.equal(await ready(port), 200, `readyz on ${port}`);
      assert.equal(await redisConnected(port), 1, `metric on ${port}`);
    }
  });

  test("the Redis memory gauges read the master's INFO memory, not the replica's", async () => {
    for (const [i, port] of topo.dataPorts.entries()) await redisCli(port, '-a', DATA_PASSWORD, '--no-auth-warning', 'config', 'set', 'maxmemory', String(MAXMEMORY[i]));
    for (const port of [proxyPort, workerPort]) {
      assert.equal(await maxmemoryOf(port), MAXMEMORY[0], `maxmemory on ${port}`);
      assert.ok((await scrape(port)).get('cmp_offload_redis_used_memory_bytes')! > 100_000, `used_memory on ${port}`);
    }
  });

  test('generate, cache hit, cache purge through the CLI and a cancel, end to end', async () => {
    await topologyFlow(d, markers, tgz, 'sentinel');
  });

  test('after SENTINEL FAILOVER the replica is master and calls work again (cache, runs, purge, readiness)', async t => {
    const client = openCmpClient(d.proxy.socketPath);
    try {
      const oldMaster = await topo.masterPort();
      const newMaster = await topo.failover();
      assert.notEqual(newMaster, oldMaster);
      const started = Date.now();
      // The first calls may fail while the connections move over (re-submission is later work);
      // within a bounded time every call succeeds again.
      const firstOk = await until(
        async () => {
          const r = await client.generate(generateCall(tgz, { TAG: 'after-failover' }, { appName: 'after-failover-app', timeoutMs: 5_000 }));
          return 'value' in r ? r : undefined;
        },
        60_000,
        'a call to succeed after the failover',
      );
      assert.deepEqual(firstOk, { value: { manifests: manifestsOf('after-failover'), sourceType: '' } });
      const recoveredMs = Date.now() - started;
      t.diagnostic(`first successful call ${recoveredMs} ms after the sentinels agreed on the new master`);
      // The new master holds what the run wrote (a cache hit), and the whole flow works on it.
      const runs = startsOf(markers, 'after-failover').length;
      assert.deepEqual(await client.generate(generateCall(tgz, { TAG: 'after-failover' }, { appName: 'after-failover-app' })), firstOk);
      assert.equal(startsOf(markers, 'after-failover').length, runs, 'a cache hit on the new master');
      await topologyFlow(d, markers, tgz, 'failover');
      await until(async () => (await ready(proxyPort)) === 200 && (await ready(workerPort)) === 200, 30_000, 'both ready again');
      assert.equal(await redisConnected(proxyPort), 1);
      assert.equal(await redisConnected(workerPort), 1);
      // The memory gauges follow the master to the former replica.
      for (const port of [proxyPort, workerPort]) assert.equal(await maxmemoryOf(port), MAXMEMORY[1], `maxmemory on ${port} after the failover`);
    } finally {
      client.close();
    }
  });
});
