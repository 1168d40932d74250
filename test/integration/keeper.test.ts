import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import type { AppPathsRecord } from '../../cmp/cache/app-paths.js';
import { GENERATE_PATHS_ANNOTATION } from '../../cmp/cache/generate-paths.js';
import { RedisAppPaths } from '../../cmp/queue/app-paths-store.js';
import { KeySpace } from '../../cmp/queue/keys.js';
import { publishPathsNotice } from '../../cmp/queue/paths-notice.js';
import { sign } from '../../cmp/queue/signing.js';
import { startDistributed, TEST_SIGNING_KEY, type Distributed } from '../helpers/distributed.js';
import { startFakeKubeApi, type FakeKubeApi } from '../helpers/fake-kube-api.js';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { startKeeper, type KeeperProcess } from '../helpers/keeper-process.js';
import { scrape } from '../helpers/metrics.js';
import { checkout, KUSTOMIZE_LIKE, monorepoFiles, revisionEnv } from '../helpers/monorepo.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { freePort } from '../helpers/redis-server.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { PREFIX, sleep, until } from './distributed-helpers.js';

/**
 * The keeper end to end: the real proxy and worker in distributed traced mode answer
 * generations of a monorepo; `cmp-offload keeper` processes hear the proxy's signed notices
 * and apply the annotation through a local server speaking the Kubernetes GET and
 * server-side apply of applications.argoproj.io (no cluster runs here).
 */
const PLUGIN = 'keeper-kz';
const REPO = 'https://git.example/monorepo.git';
const TOKEN = 'keeper-test-token';
const GRACE_MS = 3000;
const source = (app: string, plugin = PLUGIN) => ({ repoURL: REPO, path: `apps/${app}`, plugin: { name: plugin } });

const work = pluginWritableTempDir('cmp-keeper-');
let d: Distributed;
let client: CmpTestClient;
let redis: Redis;
let main: FakeKubeApi;
let dryApi: FakeKubeApi;
let resyncApi: FakeKubeApi;
let keeper: KeeperProcess;
let dryKeeper: KeeperProcess;
let resyncKeeper: KeeperProcess;
let metricsPort: number;

before(async () => {
  d = await startDistributed({ pluginYaml: pluginYaml(PLUGIN, KUSTOMIZE_LIKE), socketName: `${PLUGIN}.sock`, workers: 1, env: { CMP_OFFLOAD_CACHE: 'traced' } });
  client = openCmpClient(d.proxy.socketPath);
  redis = new Redis(d.env.CMP_OFFLOAD_REDIS_URL!);
  const tokenFile = path.join(work, 'token');
  fs.writeFileSync(tokenFile, `${TOKEN}\n`);
  [main, dryApi, resyncApi] = await Promise.all([startFakeKubeApi(TOKEN), startFakeKubeApi(TOKEN), startFakeKubeApi(TOKEN)]);
  metricsPort = await freePort();
  const env = (api: FakeKubeApi, extra: Record<string, string>) => ({
    CMP_OFFLOAD_REDIS_URL: d.env.CMP_OFFLOAD_REDIS_URL!,
    CMP_OFFLOAD_SIGNING_KEY: TEST_SIGNING_KEY,
    CMP_OFFLOAD_KEEPER_API_URL: api.url,
    CMP_OFFLOAD_KEEPER_API_TOKEN_FILE: tokenFile,
    CMP_OFFLOAD_KEEPER_GRACE: `${GRACE_MS}ms`,
    CMP_OFFLOAD_KEEPER_RESYNC: '1h',
    CMP_OFFLOAD_KEEPER_API_QPS: '50',
    CMP_OFFLOAD_HTTP_ADDR: 'off',
    ...extra,
  });
  [keeper, dryKeeper, resyncKeeper] = await Promise.all([
    startKeeper(env(main, { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${metricsPort}` })),
    startKeeper(env(dryApi, {}), ['--dry-run']),
    startKeeper(env(resyncApi, { CMP_OFFLOAD_KEEPER_RESYNC: '1s' })),
  ]);
});

after(async () => {
  client?.close();
  redis?.disconnect();
  await Promise.allSettled([keeper, dryKeeper, resyncKeeper].map(k => k?.stop()));
  await Promise.allSettled([main, dryApi, resyncApi].map(a => a?.close()));
  await d?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

let serial = 0;
async function generate(tgz: Buffer, app: string, commit: number): Promise<number> {
  const out = await client.generate({
    metadata: repoMetadata(tgz, {
      appName: app,
      appRelPath: `apps/${app}`,
      env: [
        { name: 'ARGOCD_APP_NAME', value: app },
        { name: 'ARGOCD_APP_SOURCE_REPO_URL', value: REPO },
        { name: 'ARGOCD_APP_SOURCE_PATH', value: `apps/${app}` },
        { name: 'COUNTER', value: path.join(work, 'counter') },
        ...revisionEnv(commit),
      ],
    }),
    chunks: chunksOf(tgz, 64 * 1024),
  });
  assert.ok('value' in out, JSON.stringify(out));
  return Date.now();
}

/** a05's derived value (its directory and the base it reads, each also as git quotes it, opened), and without the base. */
const A05 = '/"apps/a05;/"base;/apps/a05;/base';
const A05_NARROWED = '/"apps/a05;/apps/a05';
const files = monorepoFiles(5);
const requestsFor = (api: FakeKubeApi, name: string, method?: string) => api.requests.filter(r => r.name === name && (method === undefined || r.method === method));

test('a traced run that sets the value: the Application is patched within a second, by a server-side apply of only the annotation', async () => {
  main.addApp('argocd', 'a05', source('a05'));
  dryApi.addApp('argocd', 'a05', source('a05'));
  const tgz = await checkout(path.join(work, `repo-${++serial}`), files);
  const answered = await generate(tgz, 'a05', 1);
  await until(() => main.patches('a05').length > 0, 10_000, 'the PATCH of a05');
  const [patch] = main.patches('a05');
  assert.ok(patch!.at - answered < 1000, `patched ${patch!.at - answered} ms after the answer`);
  assert.equal(main.annotation('argocd', 'a05'), A05);
  assert.equal(patch!.contentType, 'application/apply-patch+yaml');
  assert.equal(patch!.query.get('fieldManager'), 'cmp-offload');
  assert.equal(patch!.query.get('force'), 'true');
  assert.equal(patch!.authorization, `Bearer ${TOKEN}`);
  assert.deepEqual(patch!.body, {
    apiVersion: 'argoproj.io/v1alpha1',
    kind: 'Application',
    metadata: { name: 'a05', namespace: 'argocd', annotations: { [GENERATE_PATHS_ANNOTATION]: A05 } },
  });
  // GET first (is it ours?), then the PATCH.
  assert.deepEqual(requestsFor(main, 'a05').map(r => r.method), ['GET', 'PATCH']);
  // The line follows the API's answer.
  const line = await until(() => keeper.logged('patched manifest-generate-paths').find(r => r.app === 'a05'), 5000, 'the patch line');
  assert.deepEqual([line.old, line.new], [null, A05]);
  assert.match(String(line.reason), /derived/);

  // A cache hit that derives the stored value rewrites no record and sends no notice: no new call.
  const store = new RedisAppPaths(redis, Buffer.from(TEST_SIGNING_KEY), new KeySpace(PREFIX));
  const before = (await store.get('a05')).map(r => r.at);
  await generate(tgz, 'a05', 2);
  await sleep(500);
  assert.equal(requestsFor(main, 'a05').length, 2);
  assert.deepEqual((await store.get('a05')).map(r => r.at), before, 'the record was rewritten');
});

test('a dropped path is kept through the grace period, then removed', async () => {
  const narrower = { ...files };
  delete narrower['apps/a05/base.ref'];
  const answered = await generate(await checkout(path.join(work, `repo-${++serial}`), narrower), 'a05', 3);
  // The keeper looked (GET) and left the union, i.e. the old value, in place.
  await until(() => requestsFor(main, 'a05', 'GET').length >= 2, 5000, 'the keeper looking at a05 again');
  await sleep(500);
  assert.equal(main.annotation('argocd', 'a05'), A05);
  assert.equal(main.patches('a05').length, 1);
  await until(() => main.annotation('argocd', 'a05') === A05_NARROWED, GRACE_MS + 5000, 'the narrowed value');
  const narrowed = main.patches('a05')[1]!;
  assert.ok(narrowed.at - answered >= GRACE_MS - 200, `narrowed ${narrowed.at - answered} ms after the answer, grace ${GRACE_MS} ms`);
  const line = await until(() => keeper.logged('patched manifest-generate-paths').filter(r => r.app === 'a05')[1], 5000, 'the second patch line');
  assert.deepEqual([line.old, line.new], [A05, A05_NARROWED]);
  assert.match(String(line.reason), /grace period over/);
});

test('an Application whose source names another plugin is never patched', async () => {
  main.addApp('argocd', 'a01', source('a01', 'someone-else'));
  await generate(await checkout(path.join(work, `repo-${++serial}`), files), 'a01', 4);
  await until(() => keeper.logged('leaving the app alone').some(r => r.app === 'a01'), 5000, 'the keeper leaving a01 alone');
  const line = keeper.logged('leaving the app alone').find(r => r.app === 'a01')!;
  assert.match(String(line.reason), /names plugin "someone-else"/);
  await sleep(300);
  assert.deepEqual(requestsFor(main, 'a01').map(r => r.method), ['GET']);
  assert.equal(main.annotation('argocd', 'a01'), undefined);
});

test('dry run: logs what it would patch and patches nothing', async () => {
  await until(() => dryKeeper.logged('would patch').some(r => r.app === 'a05'), 5000, 'the dry-run line');
  const line = dryKeeper.logged('would patch').find(r => r.app === 'a05')!;
  assert.deepEqual([line.old, line.new], [null, A05]);
  assert.ok(requestsFor(dryApi, 'a05', 'GET').length > 0);
  assert.deepEqual(dryApi.requests.filter(r => r.method === 'PATCH'), []);
  assert.equal(dryApi.annotation('argocd', 'a05'), undefined);
});

const keys = new KeySpace(PREFIX);
const recordOf = (app: string): AppPathsRecord => ({ app, plugin: PLUGIN, repoUrl: REPO, sourcePath: `apps/${app}`, value: `/apps/${app}`, at: Date.now(), until: Date.now() + 600_000 });

test('a forged notice (unsigned, or signed with another key) is ignored; a signed one is obeyed', async () => {
  main.addApp('argocd', 'forged', source('forged'));
  // A valid record written without a notice: only a notice (or a resync) makes the keeper look.
  await new RedisAppPaths(redis, Buffer.from(TEST_SIGNING_KEY), keys).put(recordOf('forged'));
  const at = Date.now();
  const badSig = sign(Buffer.from('another key, another key, 012345'), 'cmp-offload/paths-notice/v1', ['forged', String(at)]).toString('hex');
  await redis.publish(keys.pathsChannel(), JSON.stringify({ app: 'forged', at, sig: badSig }));
  await redis.publish(keys.pathsChannel(), JSON.stringify({ app: 'forged', at }));
  await until(async () => ((await scrape(metricsPort)).get('cmp_offload_keeper_notices_total{verdict="refused"}') ?? 0) >= 2, 5000, 'two refused notices');
  await sleep(300);
  assert.deepEqual(requestsFor(main, 'forged'), [], 'a forged notice made the keeper call the API');
  await publishPathsNotice(redis, keys, Buffer.from(TEST_SIGNING_KEY), 'forged');
  await until(() => main.annotation('argocd', 'forged') === '/apps/forged', 5000, 'the patch after the signed notice');
});

test('the periodic resync repairs a missed notice', async () => {
  resyncApi.addApp('argocd', 'missed', source('missed'));
  await new RedisAppPaths(redis, Buffer.from(TEST_SIGNING_KEY), keys).put(recordOf('missed'));
  await until(() => resyncApi.annotation('argocd', 'missed') === '/apps/missed', 5000, 'the resync patching "missed"');
  // The keeper without a short resync never heard of it.
  assert.deepEqual(requestsFor(main, 'missed'), []);
});
