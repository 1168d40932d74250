/**
 * Redis is a trust boundary (docs/security.md#trust-boundary): whoever can write Redis — without the signing
 * key — must not be able to make one app receive another app's manifests, replay a job, read
 * request env values, or cancel jobs. Each test is an attack that worked before jobs were bound
 * to their id and caller (it fails on the code before that change).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { publishCancel } from '../../cmp/queue/cancel.js';
import { KeySpace } from '../../cmp/queue/keys.js';
import { newResultId, type JobData } from '../../cmp/queue/job-contract.js';
import { joinWaiters } from '../../cmp/queue/waiters.js';
import { TEST_SIGNING_KEY, type Distributed } from '../helpers/distributed.js';
import type { CmpTestClient } from '../helpers/grpc-client.js';
import { tarballOf } from '../helpers/repo.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { endsOf, generateCall, PREFIX, startMarkerBed, startsOf, until, type MarkerBed } from '../integration/distributed-helpers.js';

const QUEUE = 'bound';
const keys = new KeySpace(PREFIX);
const markers = pluginWritableTempDir('cmp-markers-');

type Outcome = Awaited<ReturnType<CmpTestClient['generate']>>;

/** The ConfigMap names of a GenerateManifest answer (the marker plugin names its ConfigMap after TAG). */
function names(o: Outcome): string[] {
  assert.ok('value' in o, JSON.stringify(o));
  return o.value.manifests.map(m => (JSON.parse(m) as { metadata: { name: string } }).metadata.name);
}

/** Every value Redis holds, as text: strings, hashes, lists, sets, sorted sets and streams. */
async function dumpRedis(redis: Redis): Promise<string> {
  let out = '';
  for (const key of await redis.keys('*')) {
    const type = await redis.type(key);
    if (type === 'string') out += (await redis.getBuffer(key))?.toString('latin1') ?? '';
    else if (type === 'hash') out += JSON.stringify(await redis.hgetall(key));
    else if (type === 'list') out += JSON.stringify(await redis.lrange(key, '0', '-1'));
    else if (type === 'set') out += JSON.stringify(await redis.smembers(key));
    else if (type === 'zset') out += JSON.stringify(await redis.zrange(key, '0', '-1'));
    else if (type === 'stream') out += JSON.stringify(await redis.xrange(key, '-', '+'));
    out += `\n${key}\n`;
  }
  return out;
}

describe('Redis writers without the signing key', () => {
  let bed: MarkerBed;
  let d: Distributed;
  let client: CmpTestClient;
  let redis: Redis;
  let queue: Queue;
  let tgz: Buffer;

  before(async () => {
    // No worker yet: each test decides when jobs may run.
    ({ d, client, redis, queue } = bed = await startMarkerBed(QUEUE, { workers: 0, env: { MARKERS: markers, CMP_OFFLOAD_CACHE: 'off' } }));
    tgz = await tarballOf({ 'f.txt': 'x' });
  });

  after(async () => {
    await bed.stop();
    fs.rmSync(markers, { recursive: true, force: true });
  });

  const waiting = (n: number) => until(async () => (await queue.getWaitingCount()) === n, 10_000, `${n} waiting jobs`);

  test('request env values never rest in Redis in clear, nor reach the logs', async () => {
    const secret = `tok-${randomBytes(12).toString('hex')}`;
    const call = client.generate(generateCall(tgz, { TAG: 'env-app', TOKEN: secret }, { appName: 'env-app', timeoutMs: 60_000 }));
    await waiting(1);
    const queued = await dumpRedis(redis);
    assert.ok(queued.includes('ARGOCD_ENV_TOKEN'), 'the names are there (the dump reads the job)');
    assert.ok(!queued.includes(secret), 'no env value in Redis while queued');
    const worker = await d.addWorker();
    try {
      assert.deepEqual(names(await call), ['env-app']);
      assert.ok(!(await dumpRedis(redis)).includes(secret), 'no env value in Redis once done (job record, events, result)');
      assert.ok(!d.proxy.stderr().includes(secret) && !worker.stderr().includes(secret), 'no env value in the logs');
    } finally {
      await worker.stop();
    }
  });

  test("signed job data copied into another app's job never gives that app the other's manifests", async () => {
    const a = client.generate(generateCall(tgz, { TAG: 'app-a' }, { appName: 'app-a', timeoutMs: 60_000 }));
    await waiting(1);
    const b = client.generate(generateCall(tgz, { TAG: 'app-b' }, { appName: 'app-b', timeoutMs: 60_000 }));
    await waiting(2);
    const [jobA, jobB] = (await queue.getWaiting()).sort((x, y) => x.timestamp - y.timestamp);
    assert.ok(jobA && jobB && jobA.id !== jobB.id);
    // The attack: copy A's signed data over B's.
    const dataA = await redis.hget(`${PREFIX}:${QUEUE}:${jobA.id}`, 'data');
    assert.ok(dataA);
    await redis.hset(`${PREFIX}:${QUEUE}:${jobB.id}`, 'data', dataA);
    const worker = await d.addWorker();
    try {
      const [ra, rb] = await Promise.all([a, b]);
      assert.deepEqual(names(ra), ['app-a']);
      assert.deepEqual(names(rb), ['app-b'], 'B gets its own manifests (its refused job is resubmitted), never A’s');
      assert.match((await queue.getJob(jobB.id!))!.failedReason, /job rejected by the worker: job data belongs to job/);
    } finally {
      await worker.stop();
    }
  });

  test("a result that came inside one app's job, replayed as another job's completion, never gives that app the other's manifests", async () => {
    const worker = await d.addWorker();
    let sealed: string;
    try {
      assert.deepEqual(names(await client.generate(generateCall(tgz, { TAG: 'app-c' }, { appName: 'app-c', timeoutMs: 60_000 }))), ['app-c']);
      const done = (await queue.getJobs(['completed'])).sort((x, y) => (y.finishedOn ?? 0) - (x.finishedOn ?? 0))[0]!;
      ({ sealed } = done.returnvalue as { sealed: string });
      assert.equal(typeof sealed, 'string', 'the small result came inside the job');
    } finally {
      await worker.stop();
    }
    const d2 = client.generate(generateCall(tgz, { TAG: 'app-d' }, { appName: 'app-d', timeoutMs: 60_000 }));
    await waiting(1);
    const [jobD] = await queue.getWaiting();
    // The attack: a completion event for D's job carrying C's result, at the key D expects.
    const returnvalue = JSON.stringify({ key: keys.result(QUEUE, jobD!.id!), sealed });
    await redis.xadd(`${PREFIX}:${QUEUE}:events`, '*', 'event', 'completed', 'jobId', jobD!.id!, 'returnvalue', returnvalue, 'prev', 'active');
    const outcome = await d2;
    assert.ok('code' in outcome, `D must not be answered with C's manifests: ${JSON.stringify(outcome)}`);
    assert.equal(outcome.details, `cmp-offload: the result of job ${jobD!.id} does not verify (do proxy and workers share CMP_OFFLOAD_SIGNING_KEY?)`);
    await queue.remove(jobD!.id!);
  });

  test('a captured job is refused when re-added under another id, and after its deadline under its own', async () => {
    const worker = await d.addWorker();
    try {
      assert.deepEqual(names(await client.generate(generateCall(tgz, { TAG: 'replayed' }, { appName: 'replayed', timeoutMs: 4_000 }))), ['replayed']);
      const done = (await queue.getJobs(['completed'])).sort((x, y) => (y.finishedOn ?? 0) - (x.finishedOn ?? 0))[0]!;
      const data = done.data as JobData;
      assert.equal(done.id, data.resultId);
      // The attacker also makes the worker believe somebody waits.
      await joinWaiters(redis, keys.waiters(QUEUE, data.waitId), 'attacker', 60_000);
      const copy = await queue.add('generate', data, { jobId: newResultId() });
      await until(async () => (await copy.getState()) === 'failed', 10_000, 'the copy to fail');
      assert.match((await queue.getJob(copy.id!))!.failedReason, /job rejected by the worker: job data belongs to job/);

      await until(() => Date.now() > data.expiresAt, 10_000, 'the job to expire');
      await done.remove();
      const replay = await queue.add('generate', data, { jobId: data.resultId });
      await until(async () => (await replay.getState()) === 'failed', 10_000, 'the replay to fail');
      assert.match((await queue.getJob(replay.id!))!.failedReason, /job rejected by the worker: job expired \d+ ms ago/);
      assert.equal(startsOf(markers, 'replayed').length, 1, 'the plugin ran once: for the caller');
    } finally {
      await worker.stop();
    }
  });

  test('unsigned, mis-signed and stale cancel messages do not stop a running job', async () => {
    const worker = await d.addWorker();
    try {
      const call = client.generate(generateCall(tgz, { TAG: 'not-cancelled', SLEEP: '2' }, { appName: 'nc', timeoutMs: 30_000 }));
      await until(() => startsOf(markers, 'not-cancelled').length === 1, 10_000, 'the run to start');
      const [active] = await queue.getActive();
      assert.ok(active?.id);
      const msg = { queue: QUEUE, jobId: active.id, reason: 'canceled' as const };
      await redis.publish(keys.cancelChannel(), JSON.stringify(msg));
      await redis.publish(keys.cancelChannel(), JSON.stringify({ ...msg, at: Date.now(), sig: 'a'.repeat(64) }));
      await publishCancel(redis, keys, Buffer.from(TEST_SIGNING_KEY), msg, Date.now() - 61_000);
      assert.deepEqual(names(await call), ['not-cancelled']);
      assert.equal(endsOf(markers, 'not-cancelled'), 1);
      // A killed run is resubmitted by the proxy (its caller still waits), so the answer above
      // looks right even when a cancel got through: the run count is what shows it.
      assert.equal(startsOf(markers, 'not-cancelled').length, 1, 'the plugin ran once: no cancel stopped it (a stopped run is run again)');
      assert.doesNotMatch(worker.stderr(), /job cancelled by its callers/);
    } finally {
      await worker.stop();
    }
  });
});
