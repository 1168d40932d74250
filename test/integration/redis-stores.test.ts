import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { Queue } from 'bullmq';
import { compileOptions, type RedisOptions } from '../../cmp/config/options.js';
import { parsePluginConfig } from '../../cmp/config/plugin-config.js';
import { canceled } from '../../cmp/errors.js';
import { createLogger } from '../../cmp/log.js';
import { QueueDispatcher } from '../../proxy/dispatch/queue-dispatcher.js';
import { BlobMissingError, fetchBlob, storeBlob } from '../../cmp/queue/blob-store.js';
import { cacheStats, purgeCache } from '../../cmp/queue/cache-admin.js';
import { KeySpace } from '../../cmp/queue/keys.js';
import { connectRedis } from '../../cmp/queue/redis-connection.js';
import { readResult, writeResult } from '../../cmp/queue/result-store.js';
import { countWaiters, joinWaiters, leaveWaiters } from '../../cmp/queue/waiters.js';
import { startRedis, type RedisServer } from '../helpers/redis-server.js';

let server: RedisServer;
let redis: Redis;
let ro: RedisOptions;
const keys = new KeySpace('{cmp-test}');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-stores-'));
const KEY = Buffer.from('0123456789abcdef0123456789abcdef');

before(async () => {
  server = await startRedis();
  ro = compileOptions({ CMP_OFFLOAD_REDIS_URL: server.url, CMP_OFFLOAD_SIGNING_KEY: KEY.toString() }).redis!;
  redis = connectRedis(ro, 'command') as Redis;
  await new Promise(resolve => redis.once('ready', resolve));
});

after(async () => {
  redis.disconnect();
  await server.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

function tarball(bytes: number): { file: string; sha: string } {
  const data = randomBytes(bytes);
  const file = path.join(dir, `${randomBytes(4).toString('hex')}.tgz`);
  fs.writeFileSync(file, data);
  return { file, sha: createHash('sha256').update(data).digest('hex') };
}

test('a blob larger than one chunk is stored in pieces and fetched back byte for byte', async () => {
  const { file, sha } = tarball(3 * 1024 * 1024 + 17);
  assert.equal(await storeBlob(redis, keys, sha, file, 60_000), true);
  const out = path.join(dir, 'fetched.tgz');
  await fetchBlob(redis, keys, sha, fs.statSync(file).size, out);
  assert.ok(fs.readFileSync(out).equals(fs.readFileSync(file)));
  assert.equal((await redis.keys('{cmp-test}:blob-upload:*')).length, 0, 'upload keys are renamed away');
});

test('a tarball in memory is stored with one SET carrying its TTL, fetched back byte for byte, and not sent again', async () => {
  const data = randomBytes(100_000);
  const sha = createHash('sha256').update(data).digest('hex');
  const [sets, appends, renames] = [await calls('set'), await calls('append'), await calls('rename')];
  assert.equal(await storeBlob(redis, keys, sha, data.subarray(0), 30_000), true);
  assert.deepEqual([await calls('set'), await calls('append'), await calls('rename')], [sets + 1, appends, renames], 'not one SET');
  const ttl = await redis.pttl(keys.blob(sha));
  assert.ok(ttl > 0 && ttl <= 30_000, `ttl ${ttl}`);
  const out = path.join(dir, 'from-memory.tgz');
  await fetchBlob(redis, keys, sha, data.length, out);
  assert.ok(fs.readFileSync(out).equals(data));
  assert.equal(await storeBlob(redis, keys, sha, data, 30_000), false, 'an existing blob was uploaded again');
  assert.equal(await calls('set'), sets + 1);
});

/** How many times Redis has run `command` since it started (INFO commandstats). */
async function calls(command: string): Promise<number> {
  const m = new RegExp(`^cmdstat_${command}:calls=(\\d+)`, 'm').exec(await redis.info('commandstats'));
  return m ? Number(m[1]) : 0;
}

test('the same content uploaded by N at once ends as one whole blob with a TTL; an existing blob is not sent again', async () => {
  const { file, sha } = tarball(200_000);
  await Promise.all(Array.from({ length: 5 }, () => storeBlob(redis, keys, sha, file, 30_000)));
  assert.deepEqual(await redis.keys(`{cmp-test}:blob*${sha}*`), [`{cmp-test}:blob:${sha}`], 'one blob, no upload key left');
  const ttl = await redis.pttl(keys.blob(sha));
  assert.ok(ttl > 0 && ttl <= 30_000, `ttl ${ttl}`);
  await fetchBlob(redis, keys, sha, 200_000, path.join(dir, 'whole.tgz'));
  const [sets, renames] = [await calls('set'), await calls('rename')];
  assert.equal(await storeBlob(redis, keys, sha, file, 30_000), false, 'an existing blob is not uploaded again');
  assert.deepEqual([await calls('set'), await calls('rename')], [sets, renames], 'nothing was written');
});

/** A proxy's QueueDispatcher for a `cat` plugin on the Redis at `url`, with `env` settings on top. */
function dispatcherOn(url: string, pluginName: string, env: Record<string, string> = {}) {
  const engine = {
    config: parsePluginConfig(`apiVersion: argoproj.io/v1alpha1\nkind: ConfigManagementPlugin\nmetadata:\n  name: ${pluginName}\nspec:\n  generate:\n    command: [cat]\n`),
    options: compileOptions({ CMP_OFFLOAD_REDIS_URL: url, CMP_OFFLOAD_SIGNING_KEY: KEY.toString(), ARGOCD_EXEC_FATAL_TIMEOUT: '1s', ...env }),
    baseEnv: {},
  };
  const dispatcher = new QueueDispatcher({ engine, pluginName, specDigest: 'x', log: createLogger({ ARGOCD_CMP_SERVER_LOGLEVEL: 'fatal' }, 'test') });
  return { engine, dispatcher };
}

test('N concurrent requests of one proxy with the same tarball upload it once', async () => {
  const pluginName = 'dedup';
  const { engine, dispatcher } = dispatcherOn(server.url, pluginName);
  const prefix = engine.options.redis!.prefix;
  const connection = new Redis(server.url, { maxRetriesPerRequest: null });
  const queue = new Queue(pluginName, { connection, prefix });
  try {
    assert.ok(await dispatcher.waitReady(10_000));
    // 3 MiB + 17 bytes: one SET and three APPENDs per upload; each request has its own spool file.
    const data = randomBytes(3 * 1024 * 1024 + 17);
    const sha = createHash('sha256').update(data).digest('hex');
    const before = { append: await calls('append'), rename: await calls('rename') };
    const ac = new AbortController();
    const requests = Array.from({ length: 5 }, (_, i) => {
      const tgzPath = path.join(dir, `spool-${i}.tgz`);
      fs.writeFileSync(tgzPath, data);
      const repo = { checksum: sha, size: data.length, file: () => Promise.resolve(tgzPath) };
      return dispatcher.dispatch({ kind: 'generate', appRelPath: '.', env: [{ name: 'ARGOCD_APP_NAME', value: `app${i}` }] }, repo, undefined, { signal: ac.signal, deadline: undefined });
    });
    // No worker runs here: once all five jobs wait, the callers give up and the jobs are removed.
    for (let end = Date.now() + 20_000; (await queue.getWaitingCount()) < 5; ) {
      assert.ok(Date.now() < end, 'five jobs were not enqueued');
      await new Promise(r => setTimeout(r, 25));
    }
    ac.abort(canceled());
    for (const r of await Promise.allSettled(requests)) {
      assert.equal(r.status, 'rejected');
      assert.equal((r as PromiseRejectedResult).reason.message, 'error generating manifests: context canceled');
    }
    assert.equal(await redis.strlen(new KeySpace(prefix).blob(sha)), data.length);
    assert.deepEqual(
      { append: (await calls('append')) - before.append, rename: (await calls('rename')) - before.rename },
      { append: 3, rename: 1 },
      'one upload for the five requests',
    );
  } finally {
    await dispatcher.close();
    await queue.close();
    connection.disconnect();
  }
});

test("a QueueDispatcher reads events on the connection it made for them, and its close ends every connection it opened", async () => {
  const own = await startRedis();
  const probe = new Redis(own.url);
  const clients = async () => Number(/^connected_clients:(\d+)/m.exec(await probe.info('clients'))![1]);
  try {
    const alone = await clients();
    const timers = () => process.getActiveResourcesInfo().filter(r => r === 'Timeout').length;
    const timersBefore = timers();
    const dispatcher = dispatcherOn(own.url, 'conns').dispatcher;
    assert.ok(await dispatcher.waitReady(10_000));
    // Its command connection and the events connection, no copy of it.
    assert.equal((await clients()) - alone, 2, 'connections of the dispatcher');
    await dispatcher.close();
    const closedAt = Date.now();
    for (let end = Date.now() + 5_000; (await clients()) !== alone; await new Promise(r => setTimeout(r, 25))) {
      assert.ok(Date.now() < end, `${(await clients()) - alone} connections left after close`);
    }
    // Nor a timer that holds the process once they are gone, so that a stopped proxy exits at
    // once: ioredis's disconnect() of the connection BullMQ's close had ended left its 2 s
    // disconnectTimeout pending (seen here when the connections end within 1.5 s of the close).
    while (timers() !== timersBefore && Date.now() - closedAt < 1_500) await new Promise(r => setTimeout(r, 25));
    assert.equal(timers(), timersBefore, 'timers left after close');
  } finally {
    probe.disconnect();
    await own.stop();
  }
});

test('a blob expires after its TTL and then fetching it fails as missing', async () => {
  const { file, sha } = tarball(1000);
  await storeBlob(redis, keys, sha, file, 200);
  await new Promise(r => setTimeout(r, 400));
  await assert.rejects(fetchBlob(redis, keys, sha, 1000, path.join(dir, 'gone.tgz')), BlobMissingError);
});

test('a blob whose bytes were replaced in Redis is refused', async () => {
  const { file, sha } = tarball(1000);
  await storeBlob(redis, keys, sha, file, 60_000);
  await redis.setrange(keys.blob(sha), 10, 'tampered');
  await assert.rejects(fetchBlob(redis, keys, sha, 1000, path.join(dir, 'bad.tgz')), /does not match its checksum/);
});

test('waiter counts go up and down, vanish at zero, and expire', async () => {
  const k = keys.waiters('p', 'a'.repeat(64));
  assert.equal(await joinWaiters(redis, k, 'w1', 60_000), 1);
  assert.equal(await joinWaiters(redis, k, 'w2', 60_000), 2);
  assert.equal(await leaveWaiters(redis, k, 'w1'), 1);
  assert.equal(await countWaiters(redis, k), 1);
  assert.equal(await leaveWaiters(redis, k, 'w2'), 0);
  assert.equal(await redis.exists(k), 0);
  await joinWaiters(redis, k, 'w3', 100);
  await new Promise(r => setTimeout(r, 250));
  assert.equal(await countWaiters(redis, k), 0);
});

test('a join or a leave that reaches Redis twice counts once; each waiter expires on its own, and the key with the last', async () => {
  const k = keys.waiters('p', 'b'.repeat(64));
  assert.equal(await joinWaiters(redis, k, 'w1', 60_000), 1);
  assert.equal(await joinWaiters(redis, k, 'w1', 60_000), 1, 'a repeated join');
  assert.equal(await joinWaiters(redis, k, 'w2', 60_000), 2);
  assert.equal(await leaveWaiters(redis, k, 'w1'), 1);
  assert.equal(await leaveWaiters(redis, k, 'w1'), 1, 'a repeated leave does not count the other waiter out');
  assert.equal(await countWaiters(redis, k), 1);
  // A repeated join with a shorter wait keeps the longer one.
  assert.equal(await joinWaiters(redis, k, 'w2', 100), 1);
  await new Promise(r => setTimeout(r, 250));
  assert.equal(await countWaiters(redis, k), 1, 'w2 still waits');
  // The key lives as long as its latest waiter (and no longer): a waiter of a dead proxy drops out alone.
  assert.equal(await joinWaiters(redis, k, 'short', 300), 2);
  const ttl = await redis.pttl(k);
  assert.ok(ttl > 59_000 && ttl <= 60_000, `ttl ${ttl}`);
  await new Promise(r => setTimeout(r, 450));
  assert.equal(await countWaiters(redis, k), 1, 'the expired waiter no longer counts');
  assert.equal(await leaveWaiters(redis, k, 'w2'), 0, 'nor keeps the key alive');
  assert.equal(await redis.exists(k), 0);
  await joinWaiters(redis, k, 'w4', 200);
  const short = await redis.pttl(k);
  assert.ok(short > 0 && short <= 200, `ttl ${short}`);
  await new Promise(r => setTimeout(r, 300));
  assert.equal(await redis.exists(k), 0, 'the key expired with its last waiter');
});

test('cache stats count entries per plugin, and purge selects by app, by plugin, or all', async () => {
  const result = { kind: 'generate' as const, manifests: ['{"a":1}'] };
  const write = (plugin: string, app: string, n: number) => {
    const cacheKey = n.toString(16).padStart(64, '0');
    return writeResult(redis, KEY, keys.cacheEntry(plugin, app, cacheKey), cacheKey, result, 60_000);
  };
  await write('p1', 'app-a', 1);
  await write('p1', 'app-b', 2);
  await write('p2', 'app-a', 3);
  await write('p2', 'app:c', 4);
  const stats = await cacheStats(redis, keys);
  assert.equal(stats.entries, 4);
  assert.deepEqual(stats.byPlugin, { p1: 2, p2: 2 });
  assert.ok(stats.blobs >= 1);
  assert.equal(await purgeCache(redis, keys, { app: 'app-a' }), 2);
  assert.equal(await purgeCache(redis, keys, { plugin: 'p1' }), 1);
  const other = new KeySpace('{other-install}');
  await writeResult(redis, KEY, other.cacheEntry('p1', 'x', 'f'.repeat(64)), 'f'.repeat(64), result, 60_000);
  assert.equal(await purgeCache(redis, keys, {}), 1, 'only this prefix is purged');
  assert.equal((await cacheStats(redis, other)).entries, 1);
  const r = await readResult(redis, KEY, other.cacheEntry('p1', 'x', 'f'.repeat(64)), 'f'.repeat(64));
  assert.deepEqual(r, { found: result });
});
