import { spawnSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { appPathsRecord, originOf, sourceIdOf } from '../../cmp/cache/app-paths.js';
import { RedisAppPaths } from '../../cmp/queue/app-paths-store.js';
import { KeySpace } from '../../cmp/queue/keys.js';
import { parsePathsNotice } from '../../cmp/queue/paths-notice.js';
import { BIN } from '../helpers/paths.js';
import { startRedis, type RedisServer } from '../helpers/redis-server.js';

let server: RedisServer;
let redis: Redis;
const keys = new KeySpace('{cmp-paths}');
const KEY = Buffer.from('0123456789abcdef0123456789abcdef');

before(async () => {
  server = await startRedis();
  redis = new Redis(server.url);
});

after(async () => {
  redis.disconnect();
  await server.stop();
});

const record = (app: string, sourcePath: string, at: number, ttlMs = 60_000) =>
  appPathsRecord(
    originOf([{ name: 'ARGOCD_APP_NAME', value: app }, { name: 'ARGOCD_APP_SOURCE_PATH', value: sourcePath }], sourcePath, 'helm'),
    { shape: { touched: [`${sourcePath}/values.yaml`], listed: [], revision: false } },
    at,
    ttlMs,
  )!;

test('records are kept per app and source, signed, with the TTL on the hash', async () => {
  const store = new RedisAppPaths(redis, KEY, keys);
  const now = Date.now();
  await store.put(record('ns_web', 'apps/web', now - 10));
  await store.put(record('ns_web', 'apps/web', now));
  await store.put(record('api', 'apps/api', now));
  const web = await store.get('ns_web');
  assert.deepEqual(web.map(r => [r.value, r.at]), [['/"apps/web/values.yaml;/apps/web/values.yaml', now]]);
  const ttl = await redis.pttl(keys.appPaths('ns_web'));
  assert.ok(ttl > 50_000 && ttl <= 60_000, String(ttl));
  assert.deepEqual([...(await store.all()).keys()].sort(), ['api', 'ns_web']);
});

test('a record that does not verify, or is moved to another app or field, is ignored', async () => {
  const store = new RedisAppPaths(redis, KEY, keys);
  await store.put(record('victim', 'apps/victim', Date.now()));
  const forged = new RedisAppPaths(redis, Buffer.from('another key, another key, 012345'), keys);
  await forged.put(record('forged', 'apps/forged', Date.now()));
  assert.deepEqual(await store.get('forged'), []);
  // A valid record copied under another app's key does not count there.
  const stored = await redis.hgetallBuffer(keys.appPaths('victim'));
  const [field, value] = Object.entries(stored)[0]!;
  await redis.hset(keys.appPaths('copy'), field, value);
  assert.deepEqual(await store.get('copy'), []);
  assert.equal(sourceIdOf(record('victim', 'apps/victim', 0)), field);
  assert.ok(!(await store.all()).has('copy') && !(await store.all()).has('forged'));
});

test('an expired source stops counting while another keeps the hash alive; at most 8 sources are kept', async () => {
  const store = new RedisAppPaths(redis, KEY, keys);
  await store.put(record('multi', 'apps/old', Date.now() - 5000, 1000));
  await store.put(record('multi', 'apps/new', Date.now()));
  assert.deepEqual((await store.get('multi')).map(r => r.sourcePath), ['apps/new']);
  for (let i = 0; i < 10; i++) await store.put(record('many', `apps/s${i}`, Date.now() + i));
  assert.equal(await redis.hlen(keys.appPaths('many')), 8);
  assert.ok(!(await store.get('many')).some(r => r.sourcePath === 'apps/s0' || r.sourcePath === 'apps/s1'));
});

test('note: an unchanged outcome writes nothing and announces nothing; a changed value is written and announced, signed', async () => {
  const store = new RedisAppPaths(redis, KEY, keys);
  const sub = new Redis(server.url);
  const notices: string[] = [];
  sub.on('message', (_c: string, m: string) => notices.push(m));
  await sub.subscribe(keys.pathsChannel());
  try {
    const now = Date.now() - 1000;
    const first = record('noted', 'apps/noted', now);
    assert.equal(await store.note(first, 60_000), true);
    assert.equal(await store.note(record('noted', 'apps/noted', now + 5), 60_000), false);
    assert.deepEqual((await store.get('noted')).map(r => r.at), [now], 'the stored record is the first one');
    // A different outcome of the same source: written, announced.
    const changed = { ...record('noted', 'apps/noted', now + 10), value: '/apps/noted' };
    assert.equal(await store.note(changed, 60_000), true);
    // An old record of the same value is confirmed anew, without a notice (the value did not change).
    assert.equal(await store.note({ ...changed, at: now + 20 }, 0), true);
    assert.deepEqual((await store.get('noted')).map(r => r.at), [now + 20]);
    await until(() => notices.length >= 2, 'two notices');
    await new Promise(r => setTimeout(r, 100));
    assert.deepEqual(notices.map(n => parsePathsNotice(KEY, n)), ['noted', 'noted']);
    assert.equal(parsePathsNotice(Buffer.from('another key, another key, 012345'), notices[0]!), undefined);
  } finally {
    sub.disconnect();
  }
});

async function until(check: () => boolean, what: string): Promise<void> {
  for (const end = Date.now() + 5000; !check(); await new Promise(r => setTimeout(r, 20))) if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
}

test('cmp-offload paths --all with no records says so on stderr and exits 0; --json prints an empty list', async () => {
  const env = {
    ...process.env,
    CMP_OFFLOAD_REDIS_URL: server.url,
    CMP_OFFLOAD_QUEUE_PREFIX: '{cmp-paths-none}',
    CMP_OFFLOAD_SIGNING_KEY: 'a-signing-key-of-32-characters!!',
  };
  const text = spawnSync(process.execPath, [BIN, 'paths', '--all'], { env, encoding: 'utf8', timeout: 30_000 });
  assert.deepEqual([text.status, text.stdout, text.stderr], [
    0,
    '',
    'cmp-offload paths: no records yet (an Application has one after its first traced generate)\n',
  ]);
  const json = spawnSync(process.execPath, [BIN, 'paths', '--all', '--json'], { env, encoding: 'utf8', timeout: 30_000 });
  assert.equal(json.status, 0, json.stderr);
  assert.deepEqual(JSON.parse(json.stdout), { annotation: 'argocd.argoproj.io/manifest-generate-paths', apps: [] });
});
