import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { contextWithDeadline } from '../../../cmp/context.js';
import { formatArgs } from '../../../cmp/go/go-quote.js';
import { settled, terminateAll, trackedGroups } from '../../../cmp/exec/process-groups.js';
import { eventually, exists, rejection, run, sleep, tmpDir } from './helpers.js';

// Processes that leave the command's process group (a double fork into a new session) must get
// what the group gets: SIGTERM at the exec timeout, on cancel and when the command ends, SIGKILL
// after the fatal timeout, 5 s after that SIGTERM, and at shutdown. Timing bounds are wide: CI is
// a noisy 2-core box.

/**
 * Shell text that double-forks a daemon into a session of its own (setsid) which writes its pid
 * to `marker` and sleeps; with `stubborn` it ignores SIGTERM. The command waits for the marker.
 */
function escape(marker: string, stubborn = false): string {
  // pid, pgrp and session of the daemon, from its own /proc entry (its comm, sh, has no space).
  const daemon = `${stubborn ? "trap '' TERM; " : ''}cut -d' ' -f1,5,6 /proc/\\$\\$/stat > ${marker}.tmp && mv ${marker}.tmp ${marker}; exec sleep 60`;
  return `(setsid sh -c "${daemon}" </dev/null >/dev/null 2>&1 &); until [ -s ${marker} ]; do sleep 0.05; done`;
}

/** The daemon's pid, once it has checked in; it really left the command's group and session. */
function daemonPid(marker: string): number {
  const [pid, pgrp, session] = fs.readFileSync(marker, 'utf8').trim().split(' ').map(Number);
  assert.ok(pid! > 0);
  assert.equal(pgrp, pid, 'the daemon leads a group of its own');
  assert.equal(session, pid, 'the daemon leads a session of its own');
  return pid!;
}

/** Gone for good: `kill(pid, 0)` fails with ESRCH (a zombie still answers, so it must have been reaped). */
function gone(pid: number): boolean {
  return !exists(pid);
}

function cleanup(pid: number | undefined): void {
  if (pid !== undefined && exists(pid)) process.kill(pid, 'SIGKILL');
}

test('(a) at the exec timeout, a process that left the group gets SIGTERM with it', async () => {
  const marker = path.join(tmpDir(), 'daemon');
  let pid: number | undefined;
  try {
    const script = `${escape(marker)}; sleep 30`;
    const running = rejection(run(['sh', '-c', script], { execTimeoutMs: 1_000, fatalTimeoutMs: 5_000 }));
    assert.ok(await eventually(() => fs.existsSync(marker), 900), 'the daemon never started');
    pid = daemonPid(marker);
    const err = await running;
    assert.equal(err.message, `\`${formatArgs(['sh', '-c', script])}\` failed timeout after 1s`);
    // The RPC-end SIGKILL would come 5 s later: within 2 s it can only be the timeout's SIGTERM.
    assert.ok(await eventually(() => gone(pid!), 2_000), `daemon ${pid} survived the exec timeout`);
  } finally {
    cleanup(pid);
  }
});

test('(a) after the fatal timeout, a process that left the group and ignores SIGTERM is SIGKILLed with it', async () => {
  const marker = path.join(tmpDir(), 'daemon');
  let pid: number | undefined;
  try {
    const script = `trap '' TERM; ${escape(marker, true)}; sleep 30`;
    const started = Date.now();
    const running = rejection(run(['sh', '-c', script], { execTimeoutMs: 1_000, fatalTimeoutMs: 500 }));
    assert.ok(await eventually(() => fs.existsSync(marker), 900), 'the daemon never started');
    pid = daemonPid(marker);
    const err = await running;
    assert.equal(err.message, `\`${formatArgs(['sh', '-c', script])}\` failed fatal timeout after 1.5s`);
    assert.ok(Date.now() - started < 4_000, `took ${Date.now() - started} ms`);
    assert.ok(await eventually(() => gone(pid!), 1_000), `daemon ${pid} survived the fatal timeout`);
  } finally {
    cleanup(pid);
  }
});

test('(b) on cancel, a process that left the group gets SIGTERM, and SIGKILL 5 s later if it ignores it', async () => {
  for (const stubborn of [false, true]) {
    const marker = path.join(tmpDir(), 'daemon');
    const ctx = contextWithDeadline(undefined);
    let pid: number | undefined;
    try {
      const running = rejection(run(['sh', '-c', `${escape(marker, stubborn)}; sleep 30`], { ctx }));
      assert.ok(await eventually(() => fs.existsSync(marker), 5_000), 'the daemon never started');
      pid = daemonPid(marker);
      const cancelled = Date.now();
      ctx.cancel();
      const err = await running;
      assert.match(err.message, /failed signal: (killed|terminated)$/);
      if (!stubborn) {
        assert.ok(await eventually(() => gone(pid!), 2_000), `daemon ${pid} survived the cancel`);
      } else {
        await sleep(1_000);
        assert.ok(exists(pid), 'a daemon ignoring SIGTERM still gets its 5 s, as the group does');
        assert.ok(await eventually(() => gone(pid!), 7_000), `daemon ${pid} survived the cancel's SIGKILL`);
        assert.ok(Date.now() - cancelled >= 4_500, `killed after ${Date.now() - cancelled} ms`);
      }
    } finally {
      cleanup(pid);
      ctx.dispose();
    }
  }
});

test('(c) a process that left the group is left behind by a successful command: the answer is not delayed, and it is gone within the 5 s cleanup window', async () => {
  for (const stubborn of [false, true]) {
    const marker = path.join(tmpDir(), 'daemon');
    let pid: number | undefined;
    try {
      const started = Date.now();
      const out = await run(['sh', '-c', `${escape(marker, stubborn)}; echo ok`]);
      const ended = Date.now();
      pid = daemonPid(marker);
      assert.equal(out.toString(), 'ok');
      assert.ok(ended - started < 2_000, `the answer waited ${ended - started} ms for the daemon`);
      if (!stubborn) {
        assert.ok(await eventually(() => gone(pid!), 2_000), `daemon ${pid} survived the end of the command`);
      } else {
        assert.ok(exists(pid), 'a daemon ignoring SIGTERM still gets its 5 s');
        assert.ok(await eventually(() => gone(pid!), 7_000), `daemon ${pid} survived the SIGKILL 5 s after the command ended`);
        assert.ok(Date.now() - ended >= 4_500, `killed after ${Date.now() - ended} ms`);
      }
      await settled();
    } finally {
      cleanup(pid);
    }
  }
});

test('(d) terminateAll kills processes that left the group of a running command, and reaps them', async () => {
  const marker = path.join(tmpDir(), 'daemon');
  let pid: number | undefined;
  try {
    const running = rejection(run(['sh', '-c', `trap '' TERM; ${escape(marker, true)}; sleep 30 & wait`]));
    assert.ok(await eventually(() => fs.existsSync(marker), 5_000), 'the daemon never started');
    pid = daemonPid(marker);
    await terminateAll(300);
    assert.ok(gone(pid), `daemon ${pid} survived terminateAll (or was left a zombie)`);
    assert.match((await running).message, /failed signal: killed$/);
    await settled();
    assert.deepEqual(trackedGroups(), []);
  } finally {
    cleanup(pid);
  }
});

test('the command leads its own process group, as under argocd-cmp-server (kill -$$ works)', async () => {
  const out = await run(['sh', '-c', 'cut -d" " -f5 /proc/$$/stat; echo $$']);
  const [pgrp, pid] = out.toString().split('\n');
  assert.equal(pgrp, pid);
  const err = await rejection(run(['sh', '-c', 'sleep 30 & kill -TERM -$$; wait']));
  assert.match(err.message, /failed signal: terminated$/);
});

test('without cmp-reap (no C compiler at build), commands run plainly under group kills, as before', async () => {
  const err = await rejection(run(['sh', '-c', 'sleep 5'], { reaper: false, execTimeoutMs: 300, fatalTimeoutMs: 300 }));
  assert.equal(err.message, '`sh -c "sleep 5"` failed timeout after 300ms');
  const dir = tmpDir();
  fs.writeFileSync(path.join(dir, 'gen.sh'), '#!/nonexistent/interpreter\n', { mode: 0o755 });
  for (const reaper of [false, undefined] as const) {
    assert.equal((await rejection(run(['./gen.sh'], { cwd: dir, reaper }))).message, 'fork/exec ./gen.sh: no such file or directory', `reaper ${reaper}`);
  }
});
