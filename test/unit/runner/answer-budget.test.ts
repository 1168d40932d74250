import { test } from 'node:test';
import assert from 'node:assert/strict';
import { answerBudget, cancelGraceMs } from '../../../worker/runner-client.js';

test("the wait for a runner's answer: init and generate under their timeouts, then the cancel grace; or the job's deadline plus that grace", () => {
  const defaults = { execTimeoutMs: 90_000, fatalTimeoutMs: 10_000 };
  assert.equal(cancelGraceMs(defaults), 15_000);
  assert.equal(answerBudget(defaults, undefined)?.ms, 215_000);
  assert.equal(answerBudget(defaults, 1_000_000 + 300_000, 1_000_000)?.ms, 215_000);
  assert.deepEqual(answerBudget(defaults, 1_000_000 + 60_000, 1_000_000), { ms: 75_000, why: "the job's deadline, then the runner has ARGOCD_EXEC_FATAL_TIMEOUT + 5s" });
  assert.equal(answerBudget(defaults, 1_000_000 - 5_000, 1_000_000)?.ms, 15_000);
  // ARGOCD_EXEC_TIMEOUT=0 disables the commands' bound; a negative fatal timeout counts as none.
  assert.equal(answerBudget({ execTimeoutMs: 0, fatalTimeoutMs: 10_000 }, undefined), undefined);
  assert.equal(answerBudget({ execTimeoutMs: 0, fatalTimeoutMs: 10_000 }, 1_060_000, 1_000_000)?.ms, 75_000);
  assert.equal(answerBudget({ execTimeoutMs: 1_000, fatalTimeoutMs: -1 }, undefined)?.ms, 7_000);
});
