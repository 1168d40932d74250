import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { status as Status } from '@grpc/grpc-js';
import { contextWithDeadline } from '../../../cmp/context.js';
import { groupAlive, settled, terminateAll, trackedGroups } from '../../../cmp/exec/process-groups.js';
import { eventually, exists, rejection, run, sleep, tmpDir } from './helpers.js';

// Timing assertions are deliberately wide: CI is a noisy 2-core box.

test('a background child holding stdout keeps the call open until it exits', async () => {
  const started = Date.now();
  const out = await run(['sh', '-c', 'sleep 1 & echo done']);
  assert.equal(out.toString(), 'done');
  assert.ok(Date.now() - started >= 900, `returned after ${Date.now() - started} ms`);
});

test('the deadline kills a running command: CmdError with the signal, code UNKNOWN', async () => {
  let pgid = 0;
  const ctx = contextWithDeadline(Date.now() + 600);
  const started = Date.now();
  const err = await rejection(run(['sh', '-c', 'sleep 30'], { ctx, onSpawn: (pid) => (pgid = pid) }));
  const took = Date.now() - started;
  assert.match(err.message, /^`sh -c "sleep 30"` failed signal: (killed|terminated)$/);
  assert.equal(err.code, Status.UNKNOWN);
  assert.ok(took >= 400 && took < 3_000, `took ${took} ms`);
  assert.ok(await eventually(() => !groupAlive(pgid), 3_000), 'group still alive');
  ctx.dispose();
});

test('a deadline after the main process exited only ends the wait for its pipes: the exit status stands', async () => {
  const ctx = contextWithDeadline(Date.now() + 600);
  const started = Date.now();
  const out = await run(['sh', '-c', 'echo out; sleep 30 &'], { ctx });
  assert.equal(out.toString(), 'out');
  assert.ok(Date.now() - started < 3_000, `took ${Date.now() - started} ms`);
  ctx.dispose();
});

test('children get SIGTERM at the deadline and may still clean up', async () => {
  const dir = tmpDir();
  const marker = path.join(dir, 'cleaned');
  const ctx = contextWithDeadline(Date.now() + 600);
  // The subshell is in the command's group: SIGTERM reaches it even though sh itself is SIGKILLed.
  const script = `(trap 'echo cleaned > ${marker}; exit 0' TERM; sleep 30 & wait) & wait`;
  await rejection(run(['sh', '-c', script], { ctx }));
  assert.ok(await eventually(() => fs.existsSync(marker), 3_000), 'the child never ran its TERM trap');
  ctx.dispose();
});

test('the exec timeout sends SIGTERM and reports Argo util/exec wording', async () => {
  const started = Date.now();
  const err = await rejection(run(['sh', '-c', 'sleep 5'], { execTimeoutMs: 500, fatalTimeoutMs: 5_000 }));
  assert.equal(err.message, '`sh -c "sleep 5"` failed timeout after 500ms');
  assert.equal(err.code, Status.UNKNOWN);
  assert.ok(Date.now() - started < 3_000, `took ${Date.now() - started} ms`);
});

test('a command that exits 0 on SIGTERM after the exec timeout still fails with the timeout', async () => {
  const err = await rejection(
    run(['sh', '-c', "trap 'exit 0' TERM; sleep 5 & wait"], { execTimeoutMs: 1_000, fatalTimeoutMs: 5_000 }),
  );
  assert.equal(err.message, '`sh -c "trap \'exit 0\' TERM; sleep 5 & wait"` failed timeout after 1s');
});

test('a command ignoring SIGTERM is SIGKILLed after the fatal timeout, and none of its children survive', async () => {
  const dir = tmpDir();
  const marker = path.join(dir, 'survivor');
  let pgid = 0;
  // Everything ignores TERM (inherited SIG_IGN); a grandchild would write the marker after 2.5 s.
  const script = `trap '' TERM; (sleep 2.5; echo alive > ${marker}) & sleep 30`;
  const started = Date.now();
  const err = await rejection(
    run(['sh', '-c', script], { execTimeoutMs: 300, fatalTimeoutMs: 700, onSpawn: (pid) => (pgid = pid) }),
  );
  const took = Date.now() - started;
  assert.equal(err.message, `\`sh -c "${script}"\` failed fatal timeout after 1s`);
  assert.equal(err.code, Status.UNKNOWN);
  assert.ok(took >= 900 && took < 4_000, `took ${took} ms`);
  // kill(-pgid, 0) fails once the init has reaped the zombies (seen: up to ~2 s here).
  assert.ok(await eventually(() => !exists(-pgid), 4_000), 'process group still exists');
  const wait = 4_500 - (Date.now() - started);
  if (wait > 0) await sleep(wait);
  assert.equal(fs.existsSync(marker), false, 'a grandchild survived the kill');
});

test('a daemon left by a successful command is terminated after the command returns', async () => {
  let pgid = 0;
  const out = await run(['sh', '-c', 'sleep 30 </dev/null >/dev/null 2>&1 & echo $!'], { onSpawn: (pid) => (pgid = pid) });
  const daemon = Number(out.toString());
  assert.ok(daemon > 0);
  assert.ok(await eventually(() => !groupAlive(pgid), 2_000), 'the daemon was not terminated');
  await settled();
  assert.ok(!trackedGroups().includes(pgid));
});

test('a daemon ignoring SIGTERM is SIGKILLed 5 s after the command returns', async () => {
  let pgid = 0;
  const script = "trap '' TERM; sleep 30 </dev/null >/dev/null 2>&1 & echo $!";
  const returned = await run(['sh', '-c', script], { onSpawn: (pid) => (pgid = pid) });
  const t0 = Date.now();
  assert.ok(Number(returned.toString()) > 0);
  await sleep(1_000);
  assert.ok(groupAlive(pgid), 'the daemon should still get its grace period');
  await settled();
  const took = Date.now() - t0;
  assert.ok(took >= 4_000 && took < 8_000, `reaped after ${took} ms`);
  assert.ok(await eventually(() => !groupAlive(pgid), 1_000));
});

test('terminateAll stops running commands that ignore SIGTERM', async () => {
  let pgid = 0;
  // The marker is written after the trap is installed: SIGTERM from then on is ignored.
  const trapped = path.join(tmpDir(), 'trapped');
  const script = `trap '' TERM; touch ${trapped}; sleep 30 & wait`;
  const running = rejection(run(['sh', '-c', script], { onSpawn: (pid) => (pgid = pid) }));
  assert.ok(await eventually(() => pgid !== 0 && fs.existsSync(trapped), 10_000), 'sh installed its trap');
  const started = Date.now();
  await terminateAll(300);
  const err = await running;
  assert.equal(err.message, `\`sh -c "${script}"\` failed signal: killed`);
  assert.ok(Date.now() - started < 3_000);
  assert.ok(!groupAlive(pgid));
  assert.deepEqual(trackedGroups(), []);
});
