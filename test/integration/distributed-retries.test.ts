/**
 * No request lost to repeated worker kills, and no poison job running forever (docs/reliability.md#failure-behaviour, "Failure
 * behaviour"; CMP_OFFLOAD_JOB_ATTEMPTS), through real processes: redis-server, a proxy, workers
 * with their runners. A worker is killed by the test the moment a run of the watched request
 * starts on it (the marker plugin's `starts` file names the work dir, hence the worker); runs
 * are held by the plugin's WAIT file, so a run on a killed worker can only have ended with it.
 *
 * - a job whose worker is killed twice in a row still gets its third run and the caller its manifests;
 * - a poison job (every worker that starts it dies) is given up after CMP_OFFLOAD_JOB_ATTEMPTS
 *   runs: the caller gets `jobGaveUp` promptly, not at its deadline, and no further run starts;
 * - a worker whose runner is dead hands jobs back without using their attempts and stops
 *   fetching; a healthy worker serves them; once the runner is back the worker fetches again.
 */
import fs from 'node:fs';
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { UnrecoverableError, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { ANY, assertOurError } from '../helpers/our-errors.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import type { WorkerProcess } from '../helpers/worker-process.js';
import {
  addWorkers,
  generateCall,
  names,
  oneRunAtATimeEnv,
  PREFIX,
  release as releaseIn,
  retireWorkers,
  sleep,
  startsOf,
  until,
  useMarkerBed,
  workDirOf as workDir,
  type Outcome,
} from './distributed-helpers.js';

const QUEUE = 'qretry';
const markers = pluginWritableTempDir('cmp-markers-');

const release = (name: string) => releaseIn(markers, name);

describe('retries across worker kills (CMP_OFFLOAD_JOB_ATTEMPTS, default 3)', () => {
  // Every call its own job (no cache, no coalescing); one run at a time per worker.
  const suite = useMarkerBed(QUEUE, { workers: 0, env: oneRunAtATimeEnv(markers) });
  after(() => fs.rmSync(markers, { recursive: true, force: true }));

  /**
   * The worker on which run number `n` (1-based) of `tag` started, once it has; fails at once
   * with the caller's answer if `call` ends first.
   */
  const holderOfRun = async (workers: WorkerProcess[], tag: string, n: number, call?: Promise<Outcome>): Promise<WorkerProcess> => {
    let ended: Outcome | undefined;
    void call?.then(o => (ended = o));
    await until(() => startsOf(markers, tag).length >= n || ended, 60_000, `run ${n} of ${tag} to start`);
    assert.ok(startsOf(markers, tag).length >= n, `the call ended before run ${n} of ${tag} started: ${JSON.stringify(ended)}`);
    const dir = startsOf(markers, tag)[n - 1];
    const holder = workers.find(w => workDir(w) === dir);
    assert.ok(holder, `run ${n} of ${tag} happened on one of the workers (${dir})`);
    return holder;
  };
  /** The job a jobGaveUp text names. */
  const jobOf = async (details: string): Promise<Job> => {
    const id = /job ([0-9a-f]{64}) of plugin/.exec(details)?.[1];
    assert.ok(id, details);
    const job = await suite.bed.queue.getJob(id);
    assert.ok(job, `job ${id} is still recorded`);
    return job;
  };

  test('a job whose worker is killed twice in a row (two workers in turn) runs a third time on the healthy one: the caller gets its manifests', async () => {
    const { client, d, tgz } = suite;
    const workers = await addWorkers(d, 3);
    try {
      const call = client.generate(generateCall(tgz, { TAG: 'twice', WAIT: 'go-twice' }, { timeoutMs: 150_000 }));
      const first = await holderOfRun(workers, 'twice', 1, call);
      await first.kill();
      const second = await holderOfRun(workers, 'twice', 2, call);
      assert.notEqual(second, first, 'the second run is on another worker');
      await second.kill();
      const third = await holderOfRun(workers, 'twice', 3, call);
      assert.ok(third !== first && third !== second, 'the third run is on the worker that was not killed');
      release('go-twice');
      assert.deepEqual(names(await call), ['twice']);
      assert.equal(startsOf(markers, 'twice').length, 3, 'three runs in all');
    } finally {
      release('go-twice');
      await retireWorkers(d, workers);
    }
  });

  test('a poison job (every worker that starts it dies) is given up after 3 runs: jobGaveUp reaches the caller within seconds of the last kill, and no fourth run starts', async () => {
    // Two workers at all times: each one killed is replaced, as a Deployment would.
    const { client, d, tgz } = suite;
    const workers = await addWorkers(d, 2);
    const deadlineMs = 150_000;
    try {
      const started = Date.now();
      const call = client.generate(generateCall(tgz, { TAG: 'poison', WAIT: 'go-poison' }, { timeoutMs: deadlineMs }));
      let lastKill = 0;
      for (let run = 1; run <= 3; run++) {
        const holder = await holderOfRun(workers, 'poison', run, call);
        workers.splice(workers.indexOf(holder), 1, await d.addWorker());
        d.workers.splice(d.workers.indexOf(holder), 1);
        await holder.kill();
        lastKill = Date.now();
      }
      // Either the answer comes, or a fourth run starts (which must not happen).
      let answered = false;
      const fourth = (async () => {
        while (!answered) {
          if (startsOf(markers, 'poison').length >= 4) return 'fourth run' as const;
          await sleep(25);
        }
        return 'answered' as const;
      })();
      const outcome = await Promise.race([call, fourth]);
      answered = true;
      assert.notEqual(outcome, 'fourth run', 'a fourth run started');
      const answeredAfter = Date.now() - lastKill;
      assertOurError('jobGaveUp', outcome as Outcome, [ANY, QUEUE, 3, '3 lost with their worker (killed, out of memory, node lost)']);
      // Lock 2 s + stalled check every 1 s in the tests: seconds, far from the 150 s deadline.
      assert.ok(answeredAfter < 30_000, `answered ${answeredAfter} ms after the last kill (${Date.now() - started} ms after the call)`);
      const job = await jobOf((outcome as { details: string }).details);
      assert.equal(await job.isFailed(), true, 'the job is failed for good: nothing runs it again');
      assert.equal(startsOf(markers, 'poison').length, 3, 'three runs, no fourth');
    } finally {
      release('go-poison');
      await retireWorkers(d, workers);
    }
  });

  test('a worker whose runner is dead hands jobs back without using their attempts and stops fetching; the healthy worker serves them; the runner back, the worker fetches again', async () => {
    const { bed, client, d, tgz } = suite;
    const workers = await addWorkers(d, 2);
    const [a, b] = workers as [WorkerProcess, WorkerProcess];
    const earlier = new Set((await bed.queue.getJobs(['completed', 'failed'])).map(j => j.id));
    try {
      await a.runner!.kill();
      // B busy with a held run (wherever it was fetched first, only B can run it): a second call
      // can then only be fetched by A, which finds its runner dead.
      const held = client.generate(generateCall(tgz, { TAG: 'held', WAIT: 'go-held' }, { timeoutMs: 120_000 }));
      await until(() => startsOf(markers, 'held').length === 1, 30_000, 'the held run to start');
      const more = Array.from({ length: 6 }, (_, i) => client.generate(generateCall(tgz, { TAG: `dead-${i}` }, { timeoutMs: 120_000 })));
      await until(() => a.stderr().includes('fetching no jobs until it does'), 30_000, 'worker A to stop fetching');
      release('go-held');
      assert.deepEqual(names(await held), ['held']);
      const outcomes = await Promise.all(more);
      outcomes.forEach((o, i) => assert.deepEqual(names(o), [`dead-${i}`]));
      for (const tag of ['held', ...outcomes.map((_, i) => `dead-${i}`)]) {
        assert.deepEqual(startsOf(markers, tag), [workDir(b)], `${tag} ran once, on worker B`);
      }
      const ours = (await bed.queue.getJobs(['completed', 'failed'])).filter(j => !earlier.has(j.id));
      assert.equal(ours.length, 7, "the calls' jobs, all completed");
      for (const j of ours) assert.equal(await j.isCompleted(), true, `job ${j.id} completed`);
      // BullMQ counts the completing run too: 1 = no failure was recorded before it.
      for (const j of ours) assert.equal(j.attemptsMade, 1, `job ${j.id}: only its completing run counted (A's unreachable runner used no attempt)`);
      // Paused, A fetched no more: at most the job that found the runner dead and one fetch
      // already under way (CMP_OFFLOAD_CONCURRENCY=1), not a loop over the waiting jobs.
      const handedBack = a.stderr().split('\n').filter(l => l.includes('"msg":"job handed back to the queue, not run here"')).length;
      assert.ok(handedBack >= 1 && handedBack <= 3, `worker A handed back ${handedBack} jobs`);

      // The runner restarted: A fetches again (B gone, only A can serve the next call).
      await a.restartRunner();
      await until(() => a.stderr().includes('the runner accepts connections again'), 30_000, 'worker A to fetch again');
      await retireWorkers(d, [b]);
      assert.deepEqual(names(await client.generate(generateCall(tgz, { TAG: 'back' }, { timeoutMs: 60_000 }))), ['back']);
      assert.deepEqual(startsOf(markers, 'back'), [workDir(a)]);
    } finally {
      release('go-held');
      await retireWorkers(d, workers);
    }
  });

  test("a job failed with a reason no worker of ours signed (BullMQ's own, a foreign consumer's): the caller gets jobFailed relaying it", async () => {
    const { client, d, tgz } = suite;
    // No worker of ours runs: the foreign consumer fails the job as BullMQ fails one itself.
    const connection = new Redis(d.env.CMP_OFFLOAD_REDIS_URL!, { maxRetriesPerRequest: null });
    const foreign = new Worker(QUEUE, async () => {
      throw new UnrecoverableError('job stalled more than allowable limit');
    }, { connection, prefix: PREFIX });
    try {
      const outcome = await client.generate(generateCall(tgz, { TAG: 'foreign' }, { timeoutMs: 60_000 }));
      assertOurError('jobFailed', outcome, [ANY, QUEUE, 'job stalled more than allowable limit']);
      assert.equal(startsOf(markers, 'foreign').length, 0);
    } finally {
      await foreign.close();
      connection.disconnect();
    }
  });
});
