import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compileOptions, OptionsError } from '../../../cmp/config/options.js';
import { endedRuns } from '../../../worker/processor.js';

const URL = 'redis://127.0.0.1:6390';

test('CMP_OFFLOAD_JOB_ATTEMPTS: default 3, any integer >= 1, anything else stops the process naming the variable', () => {
  assert.equal(compileOptions({ CMP_OFFLOAD_REDIS_URL: URL }).redis!.jobAttempts, 3);
  assert.equal(compileOptions({ CMP_OFFLOAD_REDIS_URL: URL, CMP_OFFLOAD_JOB_ATTEMPTS: '1' }).redis!.jobAttempts, 1);
  assert.equal(compileOptions({ CMP_OFFLOAD_REDIS_URL: URL, CMP_OFFLOAD_JOB_ATTEMPTS: '7' }).redis!.jobAttempts, 7);
  for (const bad of ['0', '-1', '2.5', 'three', ' 3']) {
    assert.throws(
      () => compileOptions({ CMP_OFFLOAD_REDIS_URL: URL, CMP_OFFLOAD_JOB_ATTEMPTS: bad }),
      err => err instanceof OptionsError && err.message === `invalid value ${JSON.stringify(bad)} for CMP_OFFLOAD_JOB_ATTEMPTS: expected an integer >= 1`,
      bad,
    );
  }
});

test('the runs a job has ended in infrastructure failures: those lost with their worker (stalls) and those a live worker recorded', () => {
  assert.deepEqual(endedRuns({ attemptsMade: 0, stalledCounter: 0 }), { lost: 0, failed: 0, total: 0 });
  assert.deepEqual(endedRuns({ attemptsMade: 1, stalledCounter: 2 }), { lost: 2, failed: 1, total: 3 });
});
