import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { scrape } from '../helpers/metrics.js';
import { freePort } from '../helpers/redis-server.js';
import { tarballOf } from '../helpers/repo.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { endsOf, generateCall, names, release, sleep, startMarkerBed, startsOf, until, type MarkerBed } from './distributed-helpers.js';

const QUEUE = 'qrec';
const markers = pluginWritableTempDir('cmp-rec-markers-');
after(() => fs.rmSync(markers, { recursive: true, force: true }));

/** The worker's `job` log lines. */
const jobLines = (stderr: string) =>
  stderr
    .split('\n')
    .filter(l => l.startsWith('{'))
    .map(l => JSON.parse(l) as Record<string, unknown>)
    .filter(l => l.msg === 'job');

describe("a run whose end BullMQ cannot record (the job's lock gone as it completes)", () => {
  let bed: MarkerBed;
  let workerPort: number;

  before(async () => {
    workerPort = await freePort();
    bed = await startMarkerBed(QUEUE, {
      workers: 1,
      // Commands of ours wait out the stall below; the lock (2 s in the tests) does not.
      env: { MARKERS: markers, CMP_OFFLOAD_CONCURRENCY: '1', CMP_OFFLOAD_REDIS_TIMEOUT: '20s' },
      workerEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${workerPort}` },
    });
  });
  after(() => bed.stop());

  test('Redis stalled past the lock as the run ends: the job line, the metric and the outcome say unrecorded, not completed; the job runs again and the caller gets its answer', async () => {
    const tgz = await tarballOf({ 'f.txt': 'recording' });
    const call = bed.client.generate(generateCall(tgz, { TAG: 'stalled', WAIT: 'go-stalled' }, { appName: 'rec', timeoutMs: 60_000 }));
    await until(() => startsOf(markers, 'stalled').length === 1, 15_000, 'the run to start');
    // The run ends while Redis hangs: the worker's result write waits for it, then the move to
    // completed finds the lock (renewed at most 1 s before the stall, for 2 s) expired.
    bed.d.redis.signal('SIGSTOP');
    try {
      release(markers, 'go-stalled');
      await until(() => endsOf(markers, 'stalled') === 1, 10_000, 'the run to end');
      await sleep(3_500);
    } finally {
      bed.d.redis.signal('SIGCONT');
    }
    assert.deepEqual(names(await call), ['stalled']);
    const worker = bed.d.workers[0]!;
    const lines = await until(() => {
      const l = jobLines(worker.stderr());
      return l.length >= 2 ? l : undefined;
    }, 15_000, 'a job line for each run');
    const [first, second] = lines;
    assert.equal(first!.outcome, 'unrecorded', JSON.stringify(first));
    assert.equal(first!.ran, 'completed');
    // BullMQ's refusal of the completion (its lock, or its place in the active list, gone).
    assert.match(String(first!.reason), /^(Missing lock for job \S+|Job \S+ is not in the active state)\. moveToFinished$/);
    // The run again found the first run's answer in the cache, and that end was recorded.
    assert.equal(second!.outcome, 'cached', JSON.stringify(second));
    assert.equal(second!.jobId, first!.jobId);
    assert.equal(startsOf(markers, 'stalled').length, 1, 'the plugin ran once');
    const m = await scrape(workerPort);
    assert.equal(m.get('cmp_offload_jobs_total{outcome="unrecorded"}'), 1);
    assert.equal(m.get('cmp_offload_jobs_total{outcome="cached"}'), 1);
    assert.equal(m.get('cmp_offload_jobs_total{outcome="completed"}') ?? 0, 0, 'the unrecorded run is not counted as completed');
  });
});
