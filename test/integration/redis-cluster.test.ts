import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { compileOptions } from '../../cmp/config/options.js';
import { prefixSlot } from '../../cmp/observe/redis-memory.js';
import { storeBlob } from '../../cmp/queue/blob-store.js';
import { parseCancel, publishCancel } from '../../cmp/queue/cancel.js';
import { KeySpace } from '../../cmp/queue/keys.js';
import { connectRedis, untilReady, type RedisClient } from '../../cmp/queue/redis-connection.js';
import { startDistributed, TEST_SIGNING_KEY, type Distributed } from '../helpers/distributed.js';
import { scrape } from '../helpers/metrics.js';
import { freePort } from '../helpers/redis-server.js';
import { redisCli, startRedisCluster, type RedisTopology } from '../helpers/redis-topology.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { tarballOf } from '../helpers/repo.js';
import { markerPlugin, untilHttpListening } from './distributed-helpers.js';
import { topologyFlow } from './topology-flow.js';

const PREFIX = '{cmp-offload}';
const QUEUE = 'qcluster';
const markers = pluginWritableTempDir('cmp-markers-');

/** Every key of one cluster node (SCAN on that node only). */
async function keysOn(port: number): Promise<string[]> {
  return (await redisCli(port, '--scan')).split('\n').filter(Boolean);
}

const ready = async (port: number) => (await fetch(`http://127.0.0.1:${port}/readyz`)).status;
const redisConnected = async (port: number) =>
  Number(/^cmp_offload_redis_connected (\d+)$/m.exec(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text())?.[1]);

describe('Redis Cluster (3 masters, started by the test)', () => {
  let cluster: RedisTopology;
  let d: Distributed;
  let proxyPort: number;
  let workerPort: number;
  let tgz: Buffer;

  before(async () => {
    cluster = await startRedisCluster(3);
    [proxyPort, workerPort] = [await freePort(), await freePort()];
    try {
      d = await startDistributed({
        redisUrl: cluster.url,
        pluginYaml: markerPlugin(QUEUE),
        socketName: `${QUEUE}.sock`,
        workers: 1,
        env: { MARKERS: markers, CMP_OFFLOAD_CONCURRENCY: '2', ARGOCD_CMP_SERVER_LOGLEVEL: 'info' },
        proxyEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${proxyPort}` },
        workerEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${workerPort}` },
      });
    } catch (err) {
      await cluster.stop();
      throw err;
    }
    // Over the 16 KiB a job carries inline: the tarball travels as a blob, whose key is checked too.
    tgz = await tarballOf({ 'f.txt': 'cluster', 'pad.txt': randomBytes(32 * 1024).toString('base64') });
  });

  after(async () => {
    await d?.stop();
    await cluster?.stop();
    fs.rmSync(markers, { recursive: true, force: true });
  });

  test('proxy and worker report Redis ready on /readyz and in cmp_offload_redis_connected', async () => {
    await untilHttpListening(d.proxy, 'the proxy HTTP server');
    await untilHttpListening(d.workers[0]!, 'the worker HTTP server');
    for (const port of [proxyPort, workerPort]) {
      assert.equal(await ready(port), 200, `readyz on ${port}`);
      assert.equal(await redisConnected(port), 1, `metric on ${port}`);
      // The queue depth is read at scrape time in one pipeline over the queue's keys (one slot).
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      for (const state of ['wait', 'prioritized', 'active', 'delayed']) {
        assert.match(text, new RegExp(`^cmp_offload_queue_jobs\\{queue="${QUEUE}",state="${state}"\\} 0$`, 'm'), `${state} on ${port}`);
      }
    }
  });

  test('generate, cache hit, cache purge through the CLI and a cancel, end to end', async () => {
    await topologyFlow(d, markers, tgz, 'cluster');
  });

  test('every key of ours and of BullMQ lives in the one slot of the prefix hash tag, on one master', async () => {
    const slot = await redisCli(cluster.dataPorts[0]!, 'cluster', 'keyslot', PREFIX);
    const perNode = await Promise.all(cluster.dataPorts.map(keysOn));
    const holders = perNode.filter(keys => keys.length > 0);
    assert.equal(holders.length, 1, `keys on ${holders.length} masters: ${JSON.stringify(perNode)}`);
    const keys = holders[0]!;
    for (const key of keys) {
      assert.ok(key.startsWith(`${PREFIX}:`), `a key without our prefix: ${key}`);
      assert.equal(await redisCli(cluster.dataPorts[0]!, 'cluster', 'keyslot', key), slot, key);
    }
    // BullMQ's (queue meta, events stream, job hashes, deduplication…) and ours (cache entries, blobs).
    for (const expected of [`${PREFIX}:${QUEUE}:meta`, `${PREFIX}:${QUEUE}:events`, `${PREFIX}:${QUEUE}:id`]) assert.ok(keys.includes(expected), expected);
    assert.ok(keys.some(k => k.startsWith(`${PREFIX}:out:${QUEUE}:`)), 'a cache entry');
    assert.ok(keys.some(k => k.startsWith(`${PREFIX}:blob:`)), 'a blob');
    assert.ok(keys.some(k => /^\{cmp-offload\}:qcluster:[^:]+$/.test(k) && !/:(meta|events|id|stalled-check|marker|wait|active|completed|failed)$/.test(k)), 'a job hash');
  });

  test("the Redis memory gauges read the master of the prefix's slot (each master given its own maxmemory)", async () => {
    const slot = Number(await redisCli(cluster.dataPorts[0]!, 'cluster', 'keyslot', PREFIX));
    assert.equal(prefixSlot(PREFIX), slot, 'our slot of the prefix is the one CLUSTER KEYSLOT names');
    const maxmemory = (i: number) => (i + 1) * 100 * 1024 * 1024;
    let owner: number | undefined;
    try {
      for (const [i, port] of cluster.dataPorts.entries()) {
        await redisCli(port, 'config', 'set', 'maxmemory', String(maxmemory(i)));
        // The node's own line of CLUSTER NODES ends with its slot ranges (`0-5460`, or one slot).
        const myself = (await redisCli(port, 'cluster', 'nodes')).split('\n').find(l => l.includes('myself'))!;
        const ranges = myself.trim().split(' ').slice(8).map(r => r.split('-').map(Number));
        if (ranges.some(([from, to = from]) => slot >= from! && slot <= to!)) owner = i;
      }
      assert.notEqual(owner, undefined, 'no master owns the slot');
      for (const port of [proxyPort, workerPort]) {
        const m = await scrape(port);
        assert.equal(m.get('cmp_offload_redis_maxmemory_bytes'), maxmemory(owner!), `maxmemory on ${port}`);
        assert.ok(m.get('cmp_offload_redis_used_memory_bytes')! > 100_000, `used_memory on ${port}`);
      }
    } finally {
      for (const port of cluster.dataPorts) await redisCli(port, 'config', 'set', 'maxmemory', '0');
    }
  });

  test('a signed cancel published through one node reaches a worker-style subscriber on the cluster', async () => {
    const ro = compileOptions({ CMP_OFFLOAD_REDIS_URL: cluster.url, CMP_OFFLOAD_SIGNING_KEY: TEST_SIGNING_KEY }).redis!;
    const command = connectRedis(ro, 'command');
    const subscriber = connectRedis(ro, 'blocking');
    try {
      const keys = new KeySpace(ro.prefix);
      const got = new Promise<string>(resolve => subscriber.on('message', (_channel: string, raw: string) => resolve(raw)));
      await subscriber.subscribe(keys.cancelChannel());
      await untilReady(command);
      await publishCancel(command, keys, ro.signingKey!, { queue: QUEUE, jobId: 'j1', reason: 'canceled' });
      const raw = await Promise.race([got, new Promise<string>((_, reject) => setTimeout(() => reject(new Error('no cancel message within 10 s')), 10_000))]);
      assert.deepEqual(parseCancel(ro.signingKey!, raw), { queue: QUEUE, jobId: 'j1', reason: 'canceled' });
    } finally {
      command.disconnect();
      subscriber.disconnect();
    }
  });

  test('without the hash tag the same code fails on a Cluster with CROSSSLOT (why the prefix must keep one)', async () => {
    const ro = compileOptions({ CMP_OFFLOAD_REDIS_URL: cluster.url, CMP_OFFLOAD_SIGNING_KEY: TEST_SIGNING_KEY }).redis!;
    const command = connectRedis(ro, 'command');
    const blocking = connectRedis(ro, 'blocking');
    let queue: Queue | undefined;
    try {
      await Promise.all([untilReady(command), untilReady(blocking)]);
      // Our blob upload: a key per upload, RENAMEd into place.
      const spool = `${markers}/spool.tgz`;
      fs.writeFileSync(spool, tgz);
      await assert.rejects(storeBlob(command, new KeySpace('cmp-offload'), 'f'.repeat(64), spool, 60_000), /CROSSSLOT/);
      // The same with the tag works (and is cleaned up by its TTL).
      assert.equal(await storeBlob(command, new KeySpace('{cmp-slot-test}'), 'f'.repeat(64), spool, 60_000), true);
      // BullMQ's multi-key scripts.
      queue = new Queue('qnotag', { connection: blocking as RedisClient, prefix: 'cmp-offload' });
      queue.on('error', () => {});
      await assert.rejects(queue.add('generate', { x: 1 }), /CROSSSLOT/);
    } finally {
      await queue?.close().catch(() => {});
      command.disconnect();
      blocking.disconnect();
    }
  });
});
