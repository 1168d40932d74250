import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { groupAlive, killAll, reapGroup, track, trackedGroups, untrack } from '../../../cmp/exec/process-groups.js';
import { eventually } from './helpers.js';

/** A detached `sh -c script` (its own group) and a promise of its exit signal. */
function startGroup(script: string) {
  const child = spawn('sh', ['-c', script], { detached: true, stdio: 'ignore' });
  const exit = new Promise<NodeJS.Signals | null>((r) => child.once('exit', (_code, signal) => r(signal)));
  return { pgid: child.pid!, exit };
}

test('groupAlive is true for a running group and false for one that never existed', async () => {
  const { pgid, exit } = startGroup('sleep 30');
  assert.equal(groupAlive(pgid), true);
  process.kill(-pgid, 'SIGKILL');
  await exit;
  assert.ok(await eventually(() => !groupAlive(pgid), 2_000));
  assert.equal(groupAlive(2 ** 22 + 12345), false);
});

test('reapGroup ends as soon as a group honouring SIGTERM is gone, and untracks it', async () => {
  const { pgid, exit } = startGroup('sleep 30 & wait');
  const started = Date.now();
  await reapGroup(pgid, 5_000);
  assert.equal(await exit, 'SIGTERM');
  assert.ok(Date.now() - started < 2_000, `took ${Date.now() - started} ms`);
  assert.ok(!trackedGroups().includes(pgid));
});

test('reapGroup escalates to SIGKILL after the grace period', async () => {
  // The marker is written after the trap is installed: SIGTERM from then on is ignored.
  const trapped = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-pg-')), 'trapped');
  const { pgid, exit } = startGroup(`trap '' TERM; touch ${trapped}; sleep 30 & wait`);
  assert.ok(await eventually(() => fs.existsSync(trapped), 10_000), 'sh installed its trap');
  fs.rmSync(path.dirname(trapped), { recursive: true, force: true });
  const started = Date.now();
  await reapGroup(pgid, 500);
  assert.equal(await exit, 'SIGKILL');
  assert.ok(Date.now() - started >= 450);
  assert.ok(await eventually(() => !groupAlive(pgid), 2_000));
});

test('killAll signals every tracked group and nothing else', async () => {
  const a = startGroup('sleep 30');
  const b = startGroup('sleep 30');
  const other = startGroup('sleep 30');
  track(a.pgid);
  track(b.pgid);
  killAll('SIGKILL');
  assert.deepEqual(await Promise.all([a.exit, b.exit]), ['SIGKILL', 'SIGKILL']);
  assert.equal(groupAlive(other.pgid), true);
  untrack(a.pgid);
  untrack(b.pgid);
  process.kill(-other.pgid, 'SIGKILL');
  await other.exit;
});
