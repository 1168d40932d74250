/**
 * Our own errors of distributed mode, provoked against real processes (redis-server, proxy,
 * workers) the way they happen in production, and checked as the caller sees them: the gRPC
 * status and the whole text at the client, over the proxy's unix socket.
 *
 * No worker runs at first: each test lets the job wait in the queue, does to Redis what an
 * expiry, an operator or a broken disk would, then starts a worker.
 */
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Queue, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { KeySpace } from '../../cmp/queue/keys.js';
import { INLINE_RESULT_BYTES, INLINE_TARBALL_BYTES, openEnv, openResult, requestDigest, type JobData } from '../../cmp/queue/job-contract.js';
import { decodeResult } from '../../cmp/queue/result-store.js';
import type { Distributed } from '../helpers/distributed.js';
import { chunksOf, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { assertOurError } from '../helpers/our-errors.js';
import { tarballOf } from '../helpers/repo.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { startWorker } from '../helpers/worker-process.js';
import { failureOf, generateCall, markerPlugin, PREFIX, sleep, startMarkerBed, startsOf, until, type MarkerBed } from './distributed-helpers.js';

const QUEUE = 'qerr';
const keys = new KeySpace(PREFIX);
const markers = pluginWritableTempDir('cmp-markers-');

describe('our errors in distributed mode, as the caller sees them', () => {
  let bed: MarkerBed;
  let d: Distributed;
  let client: CmpTestClient;
  let redis: Redis;
  let queue: Queue;

  before(async () => {
    // No re-submission (CMP_OFFLOAD_RESUBMITS=0): each error reaches the caller at its first occurrence, as it
    // does after the last re-submission (distributed-resubmit.test.ts covers what re-submission mends).
    ({ d, client, redis, queue } = bed = await startMarkerBed(QUEUE, {
      workers: 0,
      env: { MARKERS: markers, CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_RESUBMITS: '0' },
    }));
  });

  after(async () => {
    await bed.stop();
    fs.rmSync(markers, { recursive: true, force: true });
  });

  /**
   * A call with its own tarball (a blob spoiled by one test must not reach the next), too large
   * to go inside the job (INLINE_TARBALL_BYTES): these errors are a blob's.
   */
  const generate = async (tag: string, env: Record<string, string> = {}) =>
    client.generate(generateCall(await tarballOf({ 'f.txt': tag, 'pad.txt': randomBytes(2 * INLINE_TARBALL_BYTES).toString('base64') }), { TAG: tag, ...env }, { timeoutMs: 30_000 }));

  /** The one job waiting in the queue (the call's). */
  const waitingJob = async (): Promise<Job> => {
    await until(async () => (await queue.getWaitingCount()) === 1, 10_000, 'the job to be queued');
    return (await queue.getWaiting())[0]!;
  };

  /** Run one worker for `body`, then stop it. */
  const withWorker = async <T>(body: () => Promise<T>, env: Record<string, string> = {}): Promise<T> => {
    const w = await d.addWorker(env);
    try {
      return await body();
    } finally {
      d.workers.splice(d.workers.indexOf(w), 1);
      await w.stop();
    }
  };

  /**
   * Let `job` complete while its proxy is stopped and has lost its events (its blocked read of the
   * queue's event stream dropped, the stream deleted), so that it learns of the end from the job
   * record, which `edit` changes first.
   */
  const completedUnseen = async (job: Job, edit: (jobKey: string) => Promise<void>): Promise<void> => {
    d.proxy.proc.kill('SIGSTOP');
    try {
      const readers = (await redis.client('LIST') as string).split('\n').filter(l => / cmd=xread( |$)/.test(l));
      assert.equal(readers.length, 1, 'the proxy reads the queue events on one connection');
      await redis.client('KILL', 'ID', /(?:^| )id=(\d+)/.exec(readers[0]!)![1]!);
      await withWorker(async () => {
        await until(async () => (await queue.getJob(job.id!))?.finishedOn, 15_000, 'the job to complete');
      });
      await edit(`${PREFIX}:${QUEUE}:${job.id}`);
      await redis.del(`${PREFIX}:${QUEUE}:events`);
    } finally {
      d.proxy.proc.kill('SIGCONT');
    }
  };

  test('blobExpired: the tarball expired from Redis before a worker fetched it', async () => {
    const call = generate('expired');
    const job = await waitingJob();
    const { blob } = job.data as JobData;
    assert.equal(await redis.del(keys.blob(blob)), 1, 'the blob was in Redis');
    const outcome = await withWorker(() => call);
    assertOurError('blobExpired', outcome, [blob]);
    assert.equal(startsOf(markers, 'expired').length, 0, 'nothing ran');
  });

  test('blobCorrupt: a blob whose bytes no longer match its checksum', async () => {
    const call = generate('corrupt');
    const job = await waitingJob();
    const { blob } = job.data as JobData;
    const stored = await redis.getBuffer(keys.blob(blob));
    assert.ok(stored && stored.length > 0);
    stored[stored.length - 1]! ^= 0xff; // one flipped byte, same size
    await redis.set(keys.blob(blob), stored, 'KEEPTTL');
    const outcome = await withWorker(() => call);
    assertOurError('blobCorrupt', outcome, [blob, 'does not match its checksum']);
    assert.equal(startsOf(markers, 'corrupt').length, 0, 'nothing ran');
    assert.equal(await redis.exists(keys.blob(blob)), 0, 'the worker removed the corrupt blob (an upload replaces it)');
  });

  test('blobCorrupt: a blob of another size than the job says', async () => {
    const call = generate('truncated');
    const job = await waitingJob();
    const { blob, size } = job.data as JobData;
    const stored = (await redis.getBuffer(keys.blob(blob)))!;
    await redis.set(keys.blob(blob), stored.subarray(0, size - 10), 'KEEPTTL');
    const outcome = await withWorker(() => call);
    assertOurError('blobCorrupt', outcome, [blob, `has ${size - 10} bytes, expected ${size}`]);
    assert.equal(startsOf(markers, 'truncated').length, 0, 'nothing ran');
    assert.equal(await redis.exists(keys.blob(blob)), 0, 'the worker removed the corrupt blob');
  });

  test('outputTooLarge: a plugin that prints more than the worker keeps (CMP_OFFLOAD_MAX_OUTPUT_BYTES)', async () => {
    const call = generate('loud');
    await waitingJob();
    // The marker plugin prints a ConfigMap of about 60 bytes.
    const outcome = await withWorker(() => call, { CMP_OFFLOAD_MAX_OUTPUT_BYTES: '40' });
    assertOurError('outputTooLarge', outcome, [40], { prefix: 'error generating manifests: ' });
    assert.equal(startsOf(markers, 'loud').length, 1, 'the plugin ran');
  });

  test('blobTooLarge: a tarball Redis cannot hold as one string is refused before anything is stored', async () => {
    // 512 MiB + 1 byte, under the default CMP_OFFLOAD_MAX_TARBALL_BYTES (2 GiB). Not gzip: the
    // proxy's index gives up on it early and leaves the error to extraction, which never comes.
    const limit = 512 * 1024 * 1024;
    const tgz = Buffer.alloc(limit + 1);
    const outcome = await client.generate({ metadata: repoMetadata(tgz), chunks: chunksOf(tgz, 1024 * 1024), timeoutMs: 120_000 });
    assertOurError('blobTooLarge', outcome, [limit + 1, limit]);
    assert.equal(await redis.exists(keys.blob(createHash('sha256').update(tgz).digest('hex'))), 0, 'no blob stored');
    assert.equal(await queue.count(), 0, 'no job queued');
  });

  test('jobRemoved: the job removed from the queue while the caller waits (no re-submission allowed)', async () => {
    const call = generate('removed');
    let done = false;
    const outcomeP = call.then(o => ((done = true), o));
    const removed: string[] = [];
    while (!done) {
      const [job] = await queue.getWaiting();
      if (job && !removed.includes(job.id!)) {
        assert.equal(await queue.remove(job.id!), 1);
        removed.push(job.id!);
      }
      await sleep(20);
    }
    const outcome = await outcomeP;
    // CMP_OFFLOAD_RESUBMITS=0: the proxy submits the job once and gives up with its id.
    assert.equal(removed.length, 1, `removed ${removed.join(', ')}`);
    assertOurError('jobRemoved', outcome, [removed.at(-1)!, QUEUE]);
  });

  test('resultMissing: the result is gone from Redis when the proxy reads it', async () => {
    // Too large to come back inside the job's return value: stored under its result key.
    const call = generate('missing', { BIG: 'pad.txt' });
    const job = await waitingJob();
    // The proxy sleeps through the run (as a proxy starved of CPU would); meanwhile the result expires.
    d.proxy.proc.kill('SIGSTOP');
    try {
      await withWorker(async () => {
        await until(async () => (await queue.getJob(job.id!))?.finishedOn, 15_000, 'the job to complete');
        const done = (await queue.getJob(job.id!))!;
        assert.equal(await done.getState(), 'completed');
        const { key } = done.returnvalue as { key: string };
        assert.equal(key, keys.result(QUEUE, (job.data as JobData).resultId));
        assert.equal(await redis.del(key), 1, 'the result was there');
      });
    } finally {
      d.proxy.proc.kill('SIGCONT');
    }
    const outcome = await call;
    assertOurError('resultMissing', outcome, [job.id!]);
    assert.equal(startsOf(markers, 'missing').length, 1, 'the run happened');
  });

  test('badResultLocation: a completed job whose returnvalue was rewritten in Redis', async () => {
    const call = generate('relocated');
    const job = await waitingJob();
    await completedUnseen(job, async jobKey => {
      assert.match((await redis.hget(jobKey, 'returnvalue'))!, /"key"/);
      await redis.hset(jobKey, 'returnvalue', JSON.stringify({ key: `${PREFIX}:res:${QUEUE}:somebody-elses` }));
    });
    const outcome = await call;
    assertOurError('badResultLocation', outcome, [job.id!]);
  });

  test('a small result comes back inside the job, sealed for it: no result key, nothing of it readable in the job record', async () => {
    const call = generate('inline');
    const job = await waitingJob();
    const outcome = await withWorker(() => call);
    assert.ok('value' in outcome, JSON.stringify(outcome));
    assert.deepEqual(outcome.value.manifests.map(m => JSON.parse(m).metadata.name), ['inline']);
    const done = (await queue.getJob(job.id!))!;
    const { key, sealed } = done.returnvalue as { key: string; sealed?: string };
    assert.equal(key, keys.result(QUEUE, (job.data as JobData).resultId));
    assert.equal(await redis.exists(key), 0, 'an uncached result that came inside the job is not stored');
    assert.equal(typeof sealed, 'string');
    // Sealed for this job: it opens with this job id only, into the result signed as it would be under its key.
    const signingKey = Buffer.from(d.env.CMP_OFFLOAD_SIGNING_KEY!, 'utf8');
    assert.equal(openResult(signingKey, 'f'.repeat(64), sealed!), undefined);
    const stored = openResult(signingKey, job.id!, sealed!)!;
    assert.ok(stored.length <= INLINE_RESULT_BYTES);
    const data = job.data as JobData;
    const digest = requestDigest({ ...data, env: openEnv(signingKey, data.resultId, data.envSealed) });
    const result = await decodeResult(signingKey, key, digest, stored);
    assert.ok(result?.kind === 'generate');
    assert.equal(JSON.parse(result.manifests[0]!).metadata.name, 'inline');
    assert.doesNotMatch(await redis.hget(`${PREFIX}:${QUEUE}:${job.id}`, 'returnvalue') ?? '', /ConfigMap|inline/);
  });

  test('a job without the inline hint (a proxy of an earlier version) gets its result under its key, which this proxy reads too', async () => {
    const call = generate('keyed');
    const job = await waitingJob();
    const jobKey = `${PREFIX}:${QUEUE}:${job.id}`;
    const { resultInline, ...data } = JSON.parse((await redis.hget(jobKey, 'data'))!) as JobData;
    assert.equal(resultInline, true, 'this proxy asks for it');
    await redis.hset(jobKey, 'data', JSON.stringify(data));
    const outcome = await withWorker(() => call);
    assert.ok('value' in outcome, JSON.stringify(outcome));
    assert.deepEqual(outcome.value.manifests.map(m => JSON.parse(m).metadata.name), ['keyed']);
    const returned = (await queue.getJob(job.id!))!.returnvalue as { key: string; sealed?: string };
    assert.deepEqual(returned, { key: keys.result(QUEUE, data.resultId) });
    assert.equal(await redis.exists(returned.key), 1);
  });

  test('a result inside the job that was tampered with in Redis is refused, as a stored one is', async () => {
    const call = generate('tampered');
    const job = await waitingJob();
    await completedUnseen(job, async jobKey => {
      const returned = JSON.parse((await redis.hget(jobKey, 'returnvalue'))!) as { key: string; sealed: string };
      const bytes = Buffer.from(returned.sealed, 'base64');
      bytes[bytes.length - 20]! ^= 1;
      await redis.hset(jobKey, 'returnvalue', JSON.stringify({ ...returned, sealed: bytes.toString('base64') }));
    });
    const outcome = await call;
    assert.ok('code' in outcome, JSON.stringify(outcome));
    assert.equal(outcome.code, 13);
    assert.equal(outcome.details, `cmp-offload: the result of job ${job.id} does not verify (do proxy and workers share CMP_OFFLOAD_SIGNING_KEY?)`);
  });

  test("wrongQueue: a job of this plugin placed in another plugin's queue is refused by that plugin's worker", async () => {
    // A worker of plugin "other" on the same Redis; the job is copied, signature and id intact, into its queue.
    const otherQueue = new Queue('other', { connection: queue.opts.connection, prefix: PREFIX });
    const call = generate('moved');
    const job = await waitingJob();
    const other = await startWorker({ pluginYaml: markerPlugin('other'), env: d.env });
    try {
      const copy = await otherQueue.add(job.name, job.data, { jobId: job.id! });
      await until(async () => (await copy.getState()) === 'failed', 10_000, 'the copy to fail');
      const failure = failureOf((await otherQueue.getJob(copy.id!))!.failedReason);
      assert.ok(failure, 'a signed failure');
      // The caller waits on its own queue and never sees this job; the worker's answer is what it would get.
      assertOurError('wrongQueue', { code: failure.code, details: failure.message }, [QUEUE, 'other']);
      assert.equal(startsOf(markers, 'moved').length, 0, 'nothing ran');
    } finally {
      await other.stop();
      await otherQueue.close();
    }
    // The original is untouched: a worker of this plugin answers it.
    const outcome = await withWorker(() => call);
    assert.ok('value' in outcome, JSON.stringify(outcome));
  });
});
