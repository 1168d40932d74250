import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Distributed } from '../helpers/distributed.js';
import { openCmpClient, type CmpTestClient } from '../helpers/grpc-client.js';
import { startProxy } from '../helpers/proxy-process.js';
import { BIN } from '../helpers/paths.js';
import { tarballOf } from '../helpers/repo.js';
import { assertServerAnswer, wireGenerate } from '../helpers/raw-grpc.js';
import { endsOf, failureOf, generateCall, markerPlugin, PREFIX, sleep, startMarkerBed, startsOf, until, type MarkerBed } from './distributed-helpers.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { assertOurError } from '../helpers/our-errors.js';
import { INLINE_TARBALL_BYTES } from '../../cmp/queue/job-contract.js';

const QUEUE = 'qtest';
const markers = pluginWritableTempDir('cmp-markers-');

describe('distributed mode', () => {
  let bed: MarkerBed;
  let d: Distributed;
  let client: CmpTestClient;
  let redis: Redis;
  let queue: Queue;
  let tgz: Buffer;

  before(async () => {
    ({ d, client, redis, queue } = bed = await startMarkerBed(QUEUE, {
      workers: 2,
      env: { MARKERS: markers, CMP_OFFLOAD_CONCURRENCY: '1', CMP_OFFLOAD_BLOB_TTL: '3s', CMP_OFFLOAD_RESULT_TTL: '2s' },
    }));
    tgz = await tarballOf({ 'f.txt': 'x' });
  });

  after(async () => {
    await bed.stop();
    fs.rmSync(markers, { recursive: true, force: true });
  });

  test('a request runs on a worker and answers exactly as a standalone proxy does', async () => {
    const standalone = await startProxy({ pluginYaml: markerPlugin(QUEUE), socketName: `${QUEUE}.sock`, env: { MARKERS: markers } });
    const local = openCmpClient(standalone.socketPath);
    try {
      const viaQueue = await client.generate(generateCall(tgz, { TAG: 'same' }));
      const inProcess = await local.generate(generateCall(tgz, { TAG: 'same' }));
      assert.deepEqual(viaQueue, { value: { manifests: ['{"data":{"true":1.5},"kind":"ConfigMap","metadata":{"name":"same"}}'], sourceType: '' } });
      assert.deepEqual(viaQueue, inProcess);
      const workerDirs = d.workers.map(w => path.join(w.base, 'work'));
      assert.ok(workerDirs.includes(startsOf(markers, 'same')[0]!), 'the first run happened on a worker');
    } finally {
      local.close();
      await standalone.stop();
    }
  });

  test('plugin errors reach the caller with the text and code of standalone mode, and are not retried', async () => {
    const standalone = await startProxy({ pluginYaml: markerPlugin(QUEUE), socketName: `${QUEUE}.sock`, env: { MARKERS: markers } });
    const local = openCmpClient(standalone.socketPath);
    try {
      const viaQueue = await client.generate(generateCall(tgz, { TAG: 'fails', FAIL: 'badly' }));
      const inProcess = await local.generate(generateCall(tgz, { TAG: 'fails', FAIL: 'badly' }));
      assert.ok('code' in viaQueue && viaQueue.code === Status.UNKNOWN, JSON.stringify(viaQueue));
      assert.match(viaQueue.details, /^error generating manifests: .*it broke: badly/s);
      assert.deepEqual(viaQueue, inProcess);
      assert.equal(startsOf(markers, 'fails').length, 2, 'one run per mode: no retry of a plugin failure');
    } finally {
      local.close();
      await standalone.stop();
    }
  });

  test('the same request from two proxies at once runs once, and a repeat is a cache hit', async () => {
    const second = await d.addProxy();
    const other = openCmpClient(second.socketPath);
    try {
      const [a, b] = await Promise.all([
        client.generate(generateCall(tgz, { TAG: 'twice', SLEEP: '1' })),
        other.generate(generateCall(tgz, { TAG: 'twice', SLEEP: '1' })),
      ]);
      assert.ok('value' in a, JSON.stringify(a));
      assert.deepEqual(a, b);
      assert.equal(startsOf(markers, 'twice').length, 1);
      assert.deepEqual(await other.generate(generateCall(tgz, { TAG: 'twice', SLEEP: '1' })), a);
      assert.equal(startsOf(markers, 'twice').length, 1);
    } finally {
      other.close();
    }
  });

  test('a mis-signed cache entry is ignored and replaced by a fresh run', async () => {
    const first = await client.generate(generateCall(tgz, { TAG: 'forged' }));
    const keys = await redis.keys(`${PREFIX}:out:${QUEUE}:app:*`);
    assert.ok(keys.length > 0);
    for (const k of keys) {
      const v = (await redis.getBuffer(k))!;
      v[v.length - 3]! ^= 0xff;
      await redis.set(k, v, 'KEEPTTL');
    }
    assert.deepEqual(await client.generate(generateCall(tgz, { TAG: 'forged' })), first);
    assert.equal(startsOf(markers, 'forged').length, 2);
  });

  test('N apps sent with the same tarball store one blob; blobs, results and job records expire', async () => {
    // Above INLINE_TARBALL_BYTES: a smaller one goes inside its jobs, with no blob.
    const shared = await tarballOf({ 'g.txt': 'shared content', 'pad.txt': randomBytes(2 * INLINE_TARBALL_BYTES).toString('base64') });
    const before = new Set(await redis.keys(`${PREFIX}:blob:*`));
    // Job ids are the proxy's result ids (64 hex).
    const jobKeys = async () => (await redis.keys(`${PREFIX}:${QUEUE}:*`)).filter(k => /:[0-9a-f]{64}$/.test(k));
    const oldJobs = new Set(await jobKeys());
    const outcomes = await Promise.all(
      ['a1', 'a2', 'a3', 'a4'].map(app => client.generate(generateCall(shared, { TAG: `blob-${app}` }, { appName: app }))),
    );
    for (const o of outcomes) assert.ok('value' in o, JSON.stringify(o));
    const added = (await redis.keys(`${PREFIX}:blob:*`)).filter(k => !before.has(k));
    assert.equal(added.length, 1);
    const ttl = await redis.pttl(added[0]!);
    assert.ok(ttl > 0 && ttl <= 3_000, `blob ttl ${ttl}`);
    const jobIds = (await jobKeys()).filter(k => !oldJobs.has(k));
    assert.equal(jobIds.length, 4);
    await sleep(3_500);
    assert.equal(await redis.exists(added[0]!), 0, 'the blob expired');
    // Job records are removed by age when later jobs finish (BullMQ removes lazily).
    await client.generate(generateCall(shared, { TAG: 'later' }, { appName: 'later' }));
    await until(async () => (await redis.exists(...jobIds)) === 0, 5_000, 'old job records to be removed');
  });

  test('jobs added by hand without a valid signature are rejected and nothing runs', async () => {
    const data = {
      v: 2, kind: 'generate', plugin: QUEUE, specDigest: 'x', appRelPath: '.', envNames: ['ARGOCD_ENV_TAG', 'LD_PRELOAD'],
      envSealed: Buffer.from(JSON.stringify([['ARGOCD_ENV_TAG', 'evil'], ['LD_PRELOAD', '/tmp/evil.so']])).toString('base64'),
      blob: 'a'.repeat(64), size: 1, cacheKey: null, resultId: 'd'.repeat(64), waitId: 'b'.repeat(64), deadline: null,
      enqueuedAt: Date.now(), expiresAt: Date.now() + 60_000,
    };
    const unsigned = await queue.add('generate', data);
    const forged = await queue.add('generate', { ...data, sig: 'c'.repeat(64) });
    for (const [job, reason] of [[unsigned, 'job is not signed'], [forged, 'job signature does not verify']] as const) {
      await until(async () => (await queue.getJobState(job.id!)) === 'failed', 10_000, `job ${job.id} to fail`);
      const failed = (await queue.getJob(job.id!))!;
      // Nobody waits for a job added by hand: the worker's signed failure is what a caller would get.
      const failure = failureOf(failed.failedReason);
      assert.ok(failure, failed.failedReason);
      assertOurError('jobRejected', { code: failure.code, details: failure.message }, [reason]);
      assert.equal(failed.attemptsMade, 1, 'not retried');
    }
    assert.equal(startsOf(markers, 'evil').length, 0);
  });

  test('a deadline during a run kills the plugin on the worker, and the job is not run again', async () => {
    const timeoutMs = 2_500;
    const failedBefore = new Set((await queue.getFailed()).map(j => j.id));
    // Over the wire: every status seen is one the server sent (the client keeps no deadline).
    const res = await wireGenerate(d.proxy.socketPath, generateCall(tgz, { TAG: 'killed', SLEEP: '8' }, { timeoutMs }));
    assert.equal(startsOf(markers, 'killed').length, 1, 'the run started before the deadline');
    const job = await until(async () => (await queue.getFailed()).find(j => !failedBefore.has(j.id)), 10_000, 'the job to fail');
    const failure = failureOf(job.failedReason);
    assert.ok(failure, job.failedReason);
    assert.equal(failure.code, Status.UNKNOWN);
    assert.match(failure.message, /^error generating manifests: `sh -c ".*"` failed signal: (killed|terminated)$/s);
    // The proxy relays that text when the kill and the relay fit in the last 100 ms before the
    // deadline; otherwise grpc-js on the server answers at the deadline.
    assertServerAnswer(res, { code: Status.UNKNOWN, text: failure.message }, timeoutMs);
    assert.equal(endsOf(markers, 'killed'), 0, 'the plugin process was killed before writing its marker');
    assert.equal(await queue.getJobState(job.id!), 'failed', 'the job is not waiting for another attempt');
    assert.equal(job.attemptsMade, 1);
    assert.equal(startsOf(markers, 'killed').length, 1, 'the job was not run again');
    await until(() => fs.readdirSync(d.proxy.workRoot).length === 0, 15_000, 'the proxy to finish the request');
  });

  test('a request cancelled while queued is removed and never runs', async () => {
    const busy = [1, 2].map(i => client.generate(generateCall(tgz, { TAG: `busy-${i}`, SLEEP: '6' })));
    await until(() => startsOf(markers, 'busy-1').length + startsOf(markers, 'busy-2').length === 2, 5_000, 'both workers busy');
    const timeoutMs = 1_000;
    const queued = wireGenerate(d.proxy.socketPath, generateCall(tgz, { TAG: 'queued' }, { timeoutMs }));
    await until(async () => (await queue.getWaitingCount()) === 1, 5_000, 'the job to wait');
    const res = await queued;
    assertServerAnswer(res, { code: Status.DEADLINE_EXCEEDED, text: 'error generating manifests: context deadline exceeded' }, timeoutMs);
    // Gone from the queue while both workers are still busy: removed, not taken by a worker.
    await until(async () => (await queue.getWaitingCount()) === 0, 4_000, 'the queued job to be removed');
    assert.equal(endsOf(markers, 'busy-1') + endsOf(markers, 'busy-2'), 0, 'a worker was free to take the job');
    await until(() => fs.readdirSync(d.proxy.workRoot).length === 0, 15_000, 'the proxy to finish the request');
    for (const o of await Promise.all(busy)) assert.ok('value' in o, JSON.stringify(o));
    assert.equal(startsOf(markers, 'queued').length, 0);
  });

  test('per-proxy in-flight and queue depth limits answer RESOURCE_EXHAUSTED naming the limit', async () => {
    const [inflightLimited, depthLimited] = await Promise.all([
      d.addProxy({ CMP_OFFLOAD_MAX_INFLIGHT: '1' }),
      d.addProxy({ CMP_OFFLOAD_MAX_QUEUE_DEPTH: '1' }),
    ]);
    const one = openCmpClient(inflightLimited.socketPath);
    const shallow = openCmpClient(depthLimited.socketPath);
    try {
      const slow = one.generate(generateCall(tgz, { TAG: 'limit-1', SLEEP: '2' }));
      await until(() => startsOf(markers, 'limit-1').length === 1, 5_000, 'the first request to run');
      assertOurError('tooManyInflight', await one.generate(generateCall(tgz, { TAG: 'limit-2' })), [1]);
      const other = client.generate(generateCall(tgz, { TAG: 'limit-3', SLEEP: '2' }));
      await until(() => startsOf(markers, 'limit-3').length === 1, 5_000, 'the second worker to be busy');
      const waiting = client.generate(generateCall(tgz, { TAG: 'limit-4' }));
      await until(async () => (await redis.llen(`${PREFIX}:${QUEUE}:wait`)) === 1, 5_000, 'a waiting job');
      assertOurError('queueFull', await shallow.generate(generateCall(tgz, { TAG: 'limit-5' })), ['qtest', 1, 1]);
      for (const o of await Promise.all([slow, other, waiting])) assert.ok('value' in o, JSON.stringify(o));
      assert.equal(startsOf(markers, 'limit-2').length + startsOf(markers, 'limit-5').length, 0);
    } finally {
      one.close();
      shallow.close();
    }
  });

  test('cache stats and purge work by app, by plugin and for all', async () => {
    const run = promisify(execFile);
    const env = { ...process.env, ...d.env };
    await client.generate(generateCall(tgz, { TAG: 'purge' }, { appName: 'purge-me' }));
    const stats = await run(process.execPath, [BIN, 'cache', 'stats'], { env });
    assert.match(stats.stdout, /^cache entries: [1-9]\d* \(\d+ bytes\)\n {2}plugin qtest: \d+\n/);
    // One run's entries: its whole-tree entry and, with the default traced cache, its traced one.
    const entries = (await redis.keys(`${PREFIX}:out:*:purge-me:*`)).length;
    assert.equal(entries, 2);
    const byApp = await run(process.execPath, [BIN, 'cache', 'purge', '--app', 'purge-me'], { env });
    assert.equal(byApp.stdout, `purged ${entries} cache entries\n`);
    assert.deepEqual(await redis.keys(`${PREFIX}:out:*:purge-me:*`), []);
    await client.generate(generateCall(tgz, { TAG: 'purge' }, { appName: 'purge-me' }));
    assert.equal(startsOf(markers, 'purge').length, 2, 'a purged entry is computed again');
    const all = await run(process.execPath, [BIN, 'cache', 'purge', '--all'], { env });
    assert.match(all.stdout, /^purged [1-9]\d* cache entries\n$/);
    assert.deepEqual(await redis.keys(`${PREFIX}:out:*`), []);
    await assert.rejects(run(process.execPath, [BIN, 'cache', 'purge'], { env }), /usage: cmp-offload cache/);
  });
});
