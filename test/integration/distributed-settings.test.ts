/**
 * Settings of distributed mode through the real env of real processes (redis-server, proxy,
 * workers with their runners), each shown by the behaviour it promises (docs/reliability.md#failure-behaviour, "Failure
 * behaviour"): CMP_OFFLOAD_REDIS_TIMEOUT against a Redis that hangs, CMP_OFFLOAD_JOB_ATTEMPTS
 * and the infrastructure retry (runs lost with the runner or the whole worker), CMP_OFFLOAD_SHUTDOWN_GRACE expiring on a worker's SIGTERM.
 *
 * Runs are held by the marker plugin's WAIT file rather than by sleeps: a run started on a
 * worker that goes away can only have ended by being killed.
 */
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { openCmpClient } from '../helpers/grpc-client.js';
import { ANY, assertOurError } from '../helpers/our-errors.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import type { WorkerProcess } from '../helpers/worker-process.js';
import {
  addWorkers,
  endsOf,
  generateCall,
  groupAlive,
  names,
  oneRunAtATimeEnv,
  pidsOf,
  release as releaseIn,
  retireWorkers,
  startsOf,
  until,
  useMarkerBed,
  workDirOf,
  type Outcome,
} from './distributed-helpers.js';

const QUEUE = 'qset';
const markers = pluginWritableTempDir('cmp-markers-');
/** Not the default (2s): a call that fails after this long was bounded by the setting, not the default. */
const REDIS_TIMEOUT_MS = 4_000;

/** Let runs waiting on WAIT=`name` go on. */
const release = (name: string) => releaseIn(markers, name);

describe('distributed settings through the real env', () => {
  // No worker yet: each test starts the workers it needs, with the settings it tests.
  const suite = useMarkerBed(QUEUE, {
    workers: 0,
    env: oneRunAtATimeEnv(markers),
    proxyEnv: { CMP_OFFLOAD_REDIS_TIMEOUT: `${REDIS_TIMEOUT_MS}ms`, CMP_OFFLOAD_JOB_ATTEMPTS: '2' },
  });
  after(() => fs.rmSync(markers, { recursive: true, force: true }));

  /** The exit code of `w` within `ms`, or 'still running'. */
  const exitWithin = (w: WorkerProcess, ms: number) =>
    Promise.race([w.exited, new Promise<'still running'>(r => setTimeout(() => r('still running'), ms).unref())]);
  /** The worker whose runner started the first run of `tag`, and the other one. */
  const holderOf = (workers: WorkerProcess[], tag: string): [WorkerProcess, WorkerProcess] => {
    const dir = startsOf(markers, tag)[0];
    const holder = workers.find(w => workDirOf(w) === dir);
    assert.ok(holder, `the run of ${tag} happened on one of the workers (${dir})`);
    return [holder, workers.find(w => w !== holder)!];
  };

  test('CMP_OFFLOAD_REDIS_TIMEOUT: with Redis hung (SIGSTOP), a call fails UNAVAILABLE naming Redis after the timeout, long before its deadline; calls work again after SIGCONT', async () => {
    const { client, d, tgz } = suite;
    const workers = await addWorkers(d, 1, {});
    try {
      assert.deepEqual(names(await client.generate(generateCall(tgz, { TAG: 'before-hang' }, { timeoutMs: 30_000 }))), ['before-hang']);
      const deadlineMs = 40_000;
      let outcome: Outcome;
      let elapsed: number;
      // The connections stay open and nothing is answered: only the proxy's command timeout ends the wait.
      d.redis.signal('SIGSTOP');
      try {
        const started = Date.now();
        outcome = await client.generate(generateCall(tgz, { TAG: 'during-hang' }, { timeoutMs: deadlineMs }));
        elapsed = Date.now() - started;
      } finally {
        d.redis.signal('SIGCONT');
      }
      assertOurError('redisUnreachable', outcome, [d.redis.url, ANY]);
      assert.ok('code' in outcome);
      assert.match(outcome.details, /: Command timed out$/, 'the cause is the command timeout, not a closed connection');
      // Not before the setting's 4 s (the default would be 2 s), and well before the caller's 40 s deadline.
      assert.ok(elapsed >= REDIS_TIMEOUT_MS - 50, `answered after ${elapsed} ms, before CMP_OFFLOAD_REDIS_TIMEOUT (${REDIS_TIMEOUT_MS} ms)`);
      assert.ok(elapsed < REDIS_TIMEOUT_MS + 12_000, `answered after ${elapsed} ms (timeout ${REDIS_TIMEOUT_MS} ms, deadline ${deadlineMs} ms)`);
      assert.equal(startsOf(markers, 'during-hang').length, 0, 'nothing ran');
      // The connections recover by themselves once Redis answers again.
      const back = await until(
        async () => {
          const o = await client.generate(generateCall(tgz, { TAG: 'after-hang' }, { timeoutMs: 10_000 }));
          return 'value' in o ? o : undefined;
        },
        30_000,
        'calls to work again after SIGCONT',
      );
      assert.deepEqual(names(back), ['after-hang']);
    } finally {
      await retireWorkers(d, workers);
    }
  });

  test('CMP_OFFLOAD_JOB_ATTEMPTS=2: a run lost with its runner (SIGKILL) is retried on the other worker; the caller gets its manifests, the plugin ran twice', async () => {
    const { client, d, tgz } = suite;
    // A long grace: the shutting-down worker lets the run go on, so it is the runner's death that fails it.
    const workers = await addWorkers(d, 2, { CMP_OFFLOAD_SHUTDOWN_GRACE: '60s' });
    try {
      const call = client.generate(generateCall(tgz, { TAG: 'retried', WAIT: 'go-retried' }, { timeoutMs: 60_000 }));
      await until(() => startsOf(markers, 'retried').length === 1, 15_000, 'the run to start');
      const [a, b] = holderOf(workers, 'retried');
      // A fetches no more jobs (so the retry can only go to B), then its runner dies mid-run.
      a.proc.kill('SIGTERM');
      await until(() => a.stderr().includes('shutting down: no new jobs'), 10_000, 'worker A to stop fetching');
      await a.runner!.kill();
      await until(() => startsOf(markers, 'retried').length === 2, 15_000, 'the retry to start');
      assert.equal(startsOf(markers, 'retried')[1], path.join(b.base, 'work'), 'the retry ran on worker B');
      release('go-retried');
      assert.deepEqual(names(await call), ['retried']);
      assert.equal(startsOf(markers, 'retried').length, 2, 'the plugin ran twice');
      assert.equal(endsOf(markers, 'retried'), 1, 'only the retry finished');
      assert.match(a.stderr(), /runner request failed/, 'worker A saw its runner fail');
      assert.equal(await exitWithin(a, 15_000), 0, `worker A's exit: ${a.stderr()}`);
    } finally {
      release('go-retried');
      await retireWorkers(d, workers);
    }
  });

  test('CMP_OFFLOAD_JOB_ATTEMPTS=1: the same loss is not retried; the caller gets jobGaveUp naming the runner failure', async () => {
    const { d, tgz } = suite;
    const proxy = await d.addProxy({ CMP_OFFLOAD_JOB_ATTEMPTS: '1' });
    const once = openCmpClient(proxy.socketPath);
    const workers = await addWorkers(d, 2, { CMP_OFFLOAD_SHUTDOWN_GRACE: '60s' });
    try {
      // A deadline well within the test's time: a retry would wait for WAIT until then.
      const call = once.generate(generateCall(tgz, { TAG: 'not-retried', WAIT: 'go-not-retried' }, { timeoutMs: 30_000 }));
      await until(() => startsOf(markers, 'not-retried').length === 1, 15_000, 'the run to start');
      const [a] = holderOf(workers, 'not-retried');
      a.proc.kill('SIGTERM');
      await until(() => a.stderr().includes('shutting down: no new jobs'), 10_000, 'worker A to stop fetching');
      await a.runner!.kill();
      const outcome = await call;
      assertOurError('jobGaveUp', outcome, [ANY, QUEUE, 1, ANY]);
      assert.ok('code' in outcome);
      assert.match(outcome.details, /\): the last: cmp-offload: runner at [^ ]+: /, 'the reason is the runner failure');
      assert.equal(startsOf(markers, 'not-retried').length, 1, 'the plugin ran once: no retry');
    } finally {
      release('go-not-retried');
      once.close();
      await retireWorkers(d, workers);
    }
  });

  test('CMP_OFFLOAD_JOB_ATTEMPTS=1 bounds stall recovery too: a whole worker SIGKILLed mid-run is that one run; the job is given up, not run on another', async () => {
    const { d, tgz } = suite;
    // A dead worker records no failure: its job is handed on by the stalled-job check (lock 2 s,
    // check every 1 s in the tests), and the next worker to fetch it counts the lost run.
    const proxy = await d.addProxy({ CMP_OFFLOAD_JOB_ATTEMPTS: '1' });
    const once = openCmpClient(proxy.socketPath);
    const workers = await addWorkers(d, 2, {});
    try {
      const call = once.generate(generateCall(tgz, { TAG: 'stalled', WAIT: 'go-stalled' }, { timeoutMs: 60_000 }));
      await until(() => startsOf(markers, 'stalled').length === 1, 15_000, 'the run to start');
      const [a, b] = holderOf(workers, 'stalled');
      await a.kill();
      const outcome = await call;
      assertOurError('jobGaveUp', outcome, [ANY, QUEUE, 1, '1 lost with their worker (killed, out of memory, node lost)']);
      assert.equal(startsOf(markers, 'stalled').length, 1, 'no second run');
      assert.match(b.stderr(), /job given up/, 'worker B gave it up');
    } finally {
      release('go-stalled');
      once.close();
      await retireWorkers(d, workers);
    }
  });

  test('CMP_OFFLOAD_SHUTDOWN_GRACE expiring on SIGTERM: the run is killed on worker A, retried on worker B, and A exits soon after the grace', async () => {
    const { client, d, tgz } = suite;
    const graceMs = 1_500;
    const workers = await addWorkers(d, 2, { CMP_OFFLOAD_SHUTDOWN_GRACE: `${graceMs}ms` });
    try {
      const call = client.generate(generateCall(tgz, { TAG: 'grace', WAIT: 'go-grace' }, { timeoutMs: 60_000 }));
      await until(() => startsOf(markers, 'grace').length === 1 && pidsOf(markers, 'grace').length === 1, 15_000, 'the run to start');
      const [a, b] = holderOf(workers, 'grace');
      const [pgid] = pidsOf(markers, 'grace');
      assert.ok(groupAlive(pgid!), 'the run is going on');
      const sigterm = Date.now();
      a.proc.kill('SIGTERM');
      // The run waits for WAIT, which is not there: its group can only end by being killed.
      await until(() => !groupAlive(pgid!), graceMs + 10_000, "the run's process group on worker A to be killed");
      const killedAfter = Date.now() - sigterm;
      assert.ok(killedAfter >= graceMs - 50, `killed ${killedAfter} ms after SIGTERM, within the grace of ${graceMs} ms`);
      assert.equal(endsOf(markers, 'grace'), 0);
      assert.equal(await exitWithin(a, graceMs + 10_000), 0, `worker A's exit (SIGTERM ${Date.now() - sigterm} ms ago): ${a.stderr()}`);
      assert.match(a.stderr(), /grace period over: cancelling running jobs/);
      await until(() => startsOf(markers, 'grace').length === 2, 15_000, 'the retry to start');
      assert.equal(startsOf(markers, 'grace')[1], path.join(b.base, 'work'), 'the retry ran on worker B');
      release('go-grace');
      assert.deepEqual(names(await call), ['grace']);
      assert.equal(endsOf(markers, 'grace'), 1, "B's run answered");
      assert.equal(startsOf(markers, 'grace').length, 2);
    } finally {
      release('go-grace');
      await retireWorkers(d, workers);
    }
  });
});
