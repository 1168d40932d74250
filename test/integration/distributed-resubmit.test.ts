/**
 * No request lost to Redis faults (issue 14): the proxy keeps the signed request and its tarball
 * spool until the answer arrives, and when Redis loses the job or the blob — FLUSHALL, a restart
 * without persistence, a key gone, a corrupt blob — it uploads and submits anew, within the
 * caller's deadline and CMP_OFFLOAD_RESUBMITS (default 3), logging why.
 *
 * Real redis-server, proxy, workers and runners. No worker runs at first: each test does to Redis
 * what a failover, an operator or a broken disk would while the job waits (or runs), then lets a
 * worker answer. Every wait is for an event (a log line, a queue state, a marker file), with wide
 * time limits; none is a sleep.
 */
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Job, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { KeySpace } from '../../cmp/queue/keys.js';
import { INLINE_TARBALL_BYTES, type JobData } from '../../cmp/queue/job-contract.js';
import { countWaiters } from '../../cmp/queue/waiters.js';
import type { Distributed } from '../helpers/distributed.js';
import { openCmpClient, type CmpTestClient } from '../helpers/grpc-client.js';
import type { ProxyProcess } from '../helpers/proxy-process.js';
import { scrape } from '../helpers/metrics.js';
import { assertOurError } from '../helpers/our-errors.js';
import { freePort } from '../helpers/redis-server.js';
import { tarballOf } from '../helpers/repo.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { generateCall, PREFIX, startMarkerBed, startsOf, until, type MarkerBed } from './distributed-helpers.js';

const QUEUE = 'qresub';
const keys = new KeySpace(PREFIX);
const markers = pluginWritableTempDir('cmp-markers-');
/** The callers' deadline: every test's call is answered well within it. */
const DEADLINE_MS = 90_000;
/** The text of the proxy's re-submission log line (the start of its msg). */
const RESUBMIT_MSG = 'submitting the request anew: ';

interface Resubmission {
  jobId: string;
  cause: string;
  reason: string;
  resubmission: number;
  limit: number;
}

describe('no request lost to Redis faults: the proxy submits anew', () => {
  let bed: MarkerBed;
  let d: Distributed;
  let client: CmpTestClient;
  let redis: Redis;
  let queue: Queue;
  let proxyPort: number;
  /** The proxy's cmp_offload_resubmissions_total of one cause. */
  const resubmittedTotal = async (cause: string) => (await scrape(proxyPort)).get(`cmp_offload_resubmissions_total{cause="${cause}"}`) ?? 0;

  before(async () => {
    proxyPort = await freePort();
    ({ d, client, redis, queue } = bed = await startMarkerBed(QUEUE, {
      workers: 0,
      env: { MARKERS: markers },
      // Calls in flight wait this long for Redis to come back: room for a restart on a loaded machine.
      proxyEnv: { CMP_OFFLOAD_REDIS_TIMEOUT: '10s', CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${proxyPort}` },
    }));
  });

  after(async () => {
    await bed.stop();
    fs.rmSync(markers, { recursive: true, force: true });
  });

  /** The proxy's re-submission log records so far, for the jobs of one tag's requests (by app name). */
  const resubmissions = (app: string, proxy: ProxyProcess = d.proxy): Resubmission[] =>
    proxy
      .stderr()
      .split('\n')
      .filter(l => l.includes(`"msg":"${RESUBMIT_MSG}`))
      .map(l => JSON.parse(l) as Resubmission & { app: string; msg: string })
      .filter(r => r.app === app)
      .map(r => {
        assert.equal(r.msg, RESUBMIT_MSG + r.reason, 'the log line says why');
        return { jobId: r.jobId, cause: r.cause, reason: r.reason, resubmission: r.resubmission, limit: r.limit };
      });

  /**
   * The `n`th re-submission logged for `app`'s requests; fails at once, with what the caller got,
   * if the call ends before it.
   */
  const resubmitted = async (app: string, call: Promise<unknown>, n = 1, proxy: ProxyProcess = d.proxy): Promise<Resubmission> => {
    let ended: unknown;
    void call.then(o => (ended = o));
    return until(() => {
      if (ended) throw new Error(`the call ended before re-submission ${n}: ${JSON.stringify(ended)}`);
      return resubmissions(app, proxy)[n - 1];
    }, 30_000, `re-submission ${n} of ${app}`);
  };

  /**
   * How many adds BullMQ's deduplication on `dedupId` joined into an existing job, from the
   * queue's events stream (which a FLUSHALL empties). A caller counts itself among the waiters
   * before it adds its job, so this, not the waiter count, says that its add has happened.
   */
  const joinedByDedup = async (dedupId: string): Promise<number> => {
    const entries = await redis.xrange(`${PREFIX}:${QUEUE}:events`, '-', '+');
    return entries.filter(([, f]) => {
      const fields = new Map<string, string>();
      for (let i = 0; i + 1 < f.length; i += 2) fields.set(f[i]!, f[i + 1]!);
      return fields.get('event') === 'deduplicated' && fields.get('deduplicationId') === dedupId;
    }).length;
  };

  /** Both callers of `waitId` wait for one job: counted as waiters, and the second one's add joined the first's job. */
  const bothJoined = async (waitId: string, what: string) => {
    await until(async () => (await countWaiters(redis, keys.waiters(QUEUE, waitId))) === 2, 30_000, `both callers to wait for ${what}`);
    await until(async () => (await joinedByDedup(waitId)) === 1, 30_000, `the second caller's add to join ${what}`);
  };

  /**
   * A call with its own tarball and app name; `env` adds plugin env (TAG is the tag). The
   * tarball is too large to go inside the job (INLINE_TARBALL_BYTES): these faults are a blob's.
   */
  const generate = async (tag: string, env: Record<string, string> = {}) => {
    const tgz = await tarballOf({ 'f.txt': tag, 'pad.txt': randomBytes(2 * INLINE_TARBALL_BYTES).toString('base64') });
    assert.ok(tgz.length > INLINE_TARBALL_BYTES);
    return { tgz, call: client.generate(generateCall(tgz, { TAG: tag, ...env }, { appName: tag, timeoutMs: DEADLINE_MS })) };
  };

  /** The one job waiting in the queue, other than `except`. */
  const waitingJob = async (except: string[] = []): Promise<Job> => {
    const job = await until(async () => (await queue.getWaiting()).find(j => !except.includes(j.id!)), 30_000, 'a job to be queued');
    return job;
  };

  /** Run one worker for `body`, then stop it. */
  const withWorker = async <T>(body: () => Promise<T>): Promise<T> => {
    const w = await d.addWorker();
    try {
      return await body();
    } finally {
      d.workers.splice(d.workers.indexOf(w), 1);
      await w.stop();
    }
  };

  /** The manifests a run of the marker plugin returns for `tag`. */
  const assertAnswered = (outcome: { value: unknown } | { code: number; details: string }, tag: string) => {
    assert.ok('value' in outcome, `expected manifests, got ${JSON.stringify(outcome)}`);
    const { manifests } = outcome.value as { manifests: string[] };
    assert.deepEqual(manifests.map(m => JSON.parse(m).metadata.name), [tag]);
  };

  test('(a) FLUSHALL while the job waits in the queue: re-uploaded and re-enqueued, the caller gets its manifests', async () => {
    const { call } = await generate('flushed-queued');
    const first = await waitingJob();
    await redis.flushall();
    const r = await resubmitted('flushed-queued', call);
    assert.equal(r.jobId, first.id);
    assert.match(r.reason, /^the job vanished from Redis/);
    assert.equal(r.resubmission, 1);
    const second = await waitingJob();
    assert.notEqual(second.id, first.id);
    assert.equal(await redis.exists(keys.blob((second.data as JobData).blob)), 1, 'the blob was uploaded again');
    const outcome = await withWorker(() => call);
    assertAnswered(outcome, 'flushed-queued');
    assert.equal(startsOf(markers, 'flushed-queued').length, 1);
  });

  for (const fault of ['FLUSHALL', 'restart empty'] as const) {
    test(`(b) ${fault} while the job runs: submitted anew, the caller gets its manifests`, async () => {
      const tag = fault === 'FLUSHALL' ? 'flushed-running' : 'restarted-running';
      const release = path.join(markers, `release-${tag}`);
      const { call } = await generate(tag, { WAIT: `release-${tag}` });
      await withWorker(async () => {
        await until(() => startsOf(markers, tag).length === 1, 30_000, 'the run to start');
        const [first] = await queue.getActive();
        assert.ok(first, 'the job is active');
        if (fault === 'FLUSHALL') await redis.flushall();
        else {
          await d.redis.pause();
          await d.redis.restart();
        }
        const r = await resubmitted(tag, call);
        assert.equal(r.jobId, first.id);
        assert.match(r.reason, /^the job vanished from Redis/);
        fs.writeFileSync(release, '');
        const outcome = await call;
        assertAnswered(outcome, tag);
      });
      // Once or twice: the lost job's run may have answered the new one from the cache.
      const runs = startsOf(markers, tag).length;
      assert.ok(runs === 1 || runs === 2, `${runs} runs`);
      assert.equal(resubmissions(tag).length, 1);
    });
  }

  test('(c) the blob deleted before a worker fetched it: uploaded again, the caller gets its manifests', async () => {
    const { call } = await generate('blob-gone');
    const first = await waitingJob();
    const { blob } = first.data as JobData;
    assert.equal(await redis.del(keys.blob(blob)), 1, 'the blob was in Redis');
    const outcome = await withWorker(async () => {
      const r = await resubmitted('blob-gone', call);
      assert.equal(r.jobId, first.id);
      assert.match(r.reason, new RegExp(`^cmp-offload: the tarball ${blob} was gone from Redis when a worker fetched it`));
      assert.equal(r.cause, 'blob_lost');
      return call;
    });
    assertAnswered(outcome, 'blob-gone');
    assert.equal(startsOf(markers, 'blob-gone').length, 1, 'the plugin ran once, for the second job');
  });

  test('(d) two coalesced callers both follow the new job after theirs vanished', async () => {
    const tgz = await tarballOf({ 'f.txt': 'coalesced' });
    const request = () => client.generate(generateCall(tgz, { TAG: 'coalesced' }, { appName: 'coalesced', timeoutMs: DEADLINE_MS }));
    const calls = [request(), request()];
    const first = await waitingJob();
    const { waitId } = first.data as JobData;
    await bothJoined(waitId, 'one job');
    assert.equal(await queue.getWaitingCount(), 1, 'one job for both');
    await redis.flushall();
    await resubmitted('coalesced', Promise.race(calls), 2);
    const second = await waitingJob([first.id!]);
    await bothJoined(waitId, 'the new job');
    assert.equal(await queue.getWaitingCount(), 1, 'one new job for both');
    assert.notEqual(second.id, first.id);
    const outcomes = await withWorker(() => Promise.all(calls));
    for (const o of outcomes) assertAnswered(o, 'coalesced');
    assert.equal(startsOf(markers, 'coalesced').length, 1, 'one run for both');
  });

  test('(d) coalesced callers on two proxies both follow the new job after theirs vanished', async () => {
    const other = await d.addProxy({ CMP_OFFLOAD_HTTP_ADDR: 'off' });
    const otherClient = openCmpClient(other.socketPath);
    try {
      const tgz = await tarballOf({ 'f.txt': 'coalesced-2' });
      const call = generateCall(tgz, { TAG: 'coalesced-2' }, { appName: 'coalesced-2', timeoutMs: DEADLINE_MS });
      const calls = [client.generate(call), otherClient.generate(call)];
      const first = await waitingJob();
      const { waitId } = first.data as JobData;
      await bothJoined(waitId, 'one job');
      await redis.flushall();
      await resubmitted('coalesced-2', Promise.race(calls), 1, d.proxy);
      await resubmitted('coalesced-2', Promise.race(calls), 1, other);
      const second = await waitingJob([first.id!]);
      await bothJoined(waitId, 'the new job');
      assert.equal(await queue.getWaitingCount(), 1, 'one new job for both proxies');
      assert.notEqual(second.id, first.id);
      const outcomes = await withWorker(() => Promise.all(calls));
      for (const o of outcomes) assertAnswered(o, 'coalesced-2');
      assert.equal(startsOf(markers, 'coalesced-2').length, 1, 'one run for both');
    } finally {
      otherClient.close();
      await other.stop();
    }
  });

  test('(e) a job that vanishes every time: jobLost after CMP_OFFLOAD_RESUBMITS re-submissions, within the deadline', async () => {
    const vanishedBefore = await resubmittedTotal('job_vanished');
    const started = Date.now();
    const { call } = await generate('always-lost');
    let done = false;
    const outcomeP = call.then(o => ((done = true), o));
    const lost: string[] = [];
    while (!done) {
      const job = await until(async () => done || (await queue.getWaiting()).find(j => !lost.includes(j.id!)), 60_000, 'the next job');
      if (job === true) break;
      lost.push(job.id!);
      await redis.flushall();
    }
    const outcome = await outcomeP;
    // The first submission and 3 more (the default), each lost.
    assert.equal(lost.length, 4, `lost ${lost.join(', ')}`);
    assertOurError('jobLost', outcome, [lost.at(-1)!, QUEUE, 4]);
    assert.ok(Date.now() - started < DEADLINE_MS, `answered after ${Date.now() - started} ms`);
    assert.deepEqual(
      resubmissions('always-lost').map(r => [r.jobId, r.cause, r.resubmission, r.limit]),
      lost.slice(0, 3).map((id, i) => [id, 'job_vanished', i + 1, 3]),
    );
    assert.equal((await resubmittedTotal('job_vanished')) - vanishedBefore, 3, 'cmp_offload_resubmissions_total{cause="job_vanished"}');
  });

  test('(f) a corrupt blob is removed by the worker and healed by the re-upload', async () => {
    const { tgz, call } = await generate('blob-corrupt');
    const first = await waitingJob();
    const { blob } = first.data as JobData;
    const stored = (await redis.getBuffer(keys.blob(blob)))!;
    stored[stored.length - 1]! ^= 0xff; // one flipped byte, same size
    await redis.set(keys.blob(blob), stored, 'KEEPTTL');
    const outcome = await withWorker(async () => {
      const r = await resubmitted('blob-corrupt', call);
      assert.equal(r.jobId, first.id);
      assert.equal(r.reason, `cmp-offload: the tarball blob ${blob} does not match its checksum`);
      assert.equal(r.cause, 'blob_lost');
      return call;
    });
    assertAnswered(outcome, 'blob-corrupt');
    const healed = (await redis.getBuffer(keys.blob(blob)))!;
    assert.equal(createHash('sha256').update(healed).digest('hex'), blob, 'the blob holds its content again');
    assert.ok(healed.equals(tgz));
    assert.equal(startsOf(markers, 'blob-corrupt').length, 1);
  });

  test('(g) the result gone from Redis before the proxy read it: submitted anew, the plugin runs again', async () => {
    // Too large to come back inside the job's return value: stored under its result key.
    const { call } = await generate('result-gone', { BIG: 'pad.txt' });
    const first = await waitingJob();
    // The proxy sleeps through the run (as a proxy starved of CPU would); meanwhile Redis loses the result.
    d.proxy.proc.kill('SIGSTOP');
    try {
      await withWorker(async () => {
        await until(async () => (await queue.getJob(first.id!))?.finishedOn, 30_000, 'the job to complete');
        const { key } = (await queue.getJob(first.id!))!.returnvalue as { key: string };
        assert.equal(await redis.del(key), 1, 'the result was there');
      });
    } finally {
      d.proxy.proc.kill('SIGCONT');
    }
    const r = await resubmitted('result-gone', call);
    assert.equal(r.jobId, first.id);
    assert.equal(r.cause, 'result_missing');
    assert.equal(r.reason, 'its result is gone from Redis');
    const outcome = await withWorker(() => call);
    assert.ok('value' in outcome, JSON.stringify(outcome));
    assert.deepEqual(outcome.value.manifests.map(m => JSON.parse(m).metadata.name), ['result-gone', 'big']);
    assert.equal(startsOf(markers, 'result-gone').length, 2, 'the lost result was made again');
  });

  test('(h) a small tarball goes inside the job: no blob in Redis, the worker runs it from the job', async () => {
    const tgz = await tarballOf({ 'f.txt': 'inline' });
    assert.ok(tgz.length <= INLINE_TARBALL_BYTES);
    const call = client.generate(generateCall(tgz, { TAG: 'inline' }, { appName: 'inline', timeoutMs: DEADLINE_MS }));
    const first = await waitingJob();
    const data = first.data as JobData;
    assert.equal(Buffer.from(data.tgz!, 'base64').toString('hex'), tgz.toString('hex'));
    assert.equal(await redis.exists(keys.blob(data.blob)), 0, 'nothing uploaded');
    assertAnswered(await withWorker(() => call), 'inline');
    assert.equal(startsOf(markers, 'inline').length, 1);
  });

  test('(i) a tampered inline tarball is refused, nothing runs; the proxy submits anew with the blob uploaded', async () => {
    const tgz = await tarballOf({ 'f.txt': 'inline-tampered' });
    const call = client.generate(generateCall(tgz, { TAG: 'inline-tampered' }, { appName: 'inline-tampered', timeoutMs: DEADLINE_MS }));
    const first = await waitingJob();
    const data = first.data as JobData;
    // Same size, one bit flipped: only the checksum tells.
    const other = Buffer.from(tgz);
    other.writeUInt8(other.readUInt8(other.length - 1) ^ 1, other.length - 1);
    await first.updateData({ ...data, tgz: other.toString('base64') });
    const outcome = await withWorker(async () => {
      const r = await resubmitted('inline-tampered', call);
      assert.equal(r.cause, 'job_refused');
      assert.match(r.reason, /job field tgz does not match its checksum/);
      return call;
    });
    assertAnswered(outcome, 'inline-tampered');
    assert.equal(startsOf(markers, 'inline-tampered').length, 1, 'only the re-submission ran');
    assert.equal(await redis.exists(keys.blob(data.blob)), 1, 'the re-submission uploaded the blob');
  });
});
