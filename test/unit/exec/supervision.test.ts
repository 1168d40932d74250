import { test } from 'node:test';
import assert from 'node:assert/strict';
import { contextWithDeadline } from '../../../cmp/context.js';
import { type SupervisionState } from '../../../cmp/exec/run-command.js';
import { GROUP_CLEANUP_MS, SUPERVISION_STATES, Supervision, type SupervisionSpec } from '../../../cmp/exec/supervision.js';
import { noDeadline, rejection, run } from './helpers.js';

// The supervision's transitions, driven by hand (fake effects, no process), then the sequences
// real commands go through.

/** A supervision with recording effects: `log` has the states entered and the effects, in order. */
function supervision(spec: Partial<SupervisionSpec> = {}) {
  const log: string[] = [];
  const timers: { ms: number; fn: () => void }[] = [];
  const settled: { out?: Buffer; err?: Error } = {};
  const m = new Supervision(
    { argv: ['sh', '-c', 'x'], file: '/bin/sh', ctx: noDeadline, execTimeoutMs: 0, fatalTimeoutMs: 0, maxOutputBytes: 10, ...spec },
    {
      signalGroup: (signal) => log.push(signal),
      killMain: () => log.push('killMain'),
      reapGroup: () => log.push('reapGroup'),
      releaseGroup: () => log.push('releaseGroup'),
      untrack: () => log.push('untrack'),
      dropPipes: () => log.push('dropPipes'),
      after: (ms, fn) => void timers.push({ ms, fn }),
      stop: () => log.push('stop'),
      resolve: (out) => (settled.out = out),
      reject: (err) => (settled.err = err),
      onState: (state) => log.push(state),
    },
  );
  m.start();
  /** Fire the timer armed for `ms`. */
  const fire = (ms: number) => timers.find((t) => t.ms === ms)!.fn();
  const states = () => log.filter((e): e is SupervisionState => (SUPERVISION_STATES as readonly string[]).includes(e));
  return { m, log, timers, settled, fire, states };
}

test('a normal exit once the pipes closed: running → done, stdout minus one newline', () => {
  const s = supervision();
  s.m.stdout(Buffer.from('out\n'));
  s.m.pipeClosed();
  s.m.pipeClosed();
  assert.equal(s.m.state, 'running');
  s.m.exited(undefined);
  assert.deepEqual(s.log, ['running', 'done', 'stop', 'releaseGroup']);
  assert.equal(s.settled.out?.toString(), 'out');
});

test('an exit while something still holds a pipe: running → exited-draining → done', () => {
  const s = supervision();
  s.m.stderr(Buffer.from(' oops \n'));
  s.m.exited('exit status 2');
  s.m.pipeClosed();
  assert.equal(s.m.state, 'exited-draining');
  s.m.pipeClosed();
  assert.deepEqual(s.states(), ['running', 'exited-draining', 'done']);
  assert.equal(s.settled.err?.message, '`sh -c x` failed exit status 2: oops');
});

test('a command ignoring SIGTERM: running → terminating → killing → done, with the fatal timeout text', () => {
  const s = supervision({ execTimeoutMs: 300, fatalTimeoutMs: 700 });
  assert.deepEqual(s.timers.map((t) => t.ms), [300]);
  s.fire(300);
  assert.equal(s.m.state, 'terminating');
  s.fire(700);
  s.m.pipeClosed();
  s.m.pipeClosed();
  s.m.exited('signal: killed');
  assert.deepEqual(s.log, ['running', 'terminating', 'SIGTERM', 'killing', 'SIGKILL', 'dropPipes', 'done', 'stop', 'releaseGroup']);
  assert.equal(s.settled.err?.message, '`sh -c x` failed fatal timeout after 1s');
});

test('a command that exits on SIGTERM ends in terminating: the timeout text, whatever its status', () => {
  const s = supervision({ execTimeoutMs: 1_000, fatalTimeoutMs: 5_000 });
  s.fire(1_000);
  s.m.exited(undefined);
  s.m.pipeClosed();
  s.m.pipeClosed();
  assert.deepEqual(s.states(), ['running', 'terminating', 'done']);
  assert.equal(s.settled.err?.message, '`sh -c x` failed timeout after 1s');
});

test('the exec timeout also applies while draining: exited-draining → terminating', () => {
  const s = supervision({ execTimeoutMs: 500 });
  s.m.exited(undefined);
  s.fire(500);
  s.m.pipeClosed();
  s.m.pipeClosed();
  assert.deepEqual(s.states(), ['running', 'exited-draining', 'terminating', 'done']);
  assert.equal(s.settled.err?.message, '`sh -c x` failed timeout after 500ms');
});

test('too much stdout: overflowed, the group killed, and it stays the outcome', () => {
  const s = supervision({ execTimeoutMs: 100, maxOutputBytes: 4 });
  s.m.stdout(Buffer.from('1234'));
  s.m.stdout(Buffer.from('5'));
  s.m.stdout(Buffer.from('6'));
  s.fire(100);
  assert.equal(s.m.state, 'overflowed');
  s.m.exited('signal: killed');
  s.m.pipeClosed();
  s.m.pipeClosed();
  assert.deepEqual(s.states(), ['running', 'overflowed', 'done']);
  assert.deepEqual(s.log.slice(0, 4), ['running', 'overflowed', 'SIGKILL', 'dropPipes']);
  assert.equal(s.settled.err?.message, 'plugin output exceeds the limit of 4 bytes (CMP_OFFLOAD_MAX_OUTPUT_BYTES)');
});

test('the ctx while running: cancelled, the main process killed, the group reaped, no exec timeout after', () => {
  const ctx = contextWithDeadline(undefined);
  const s = supervision({ ctx, execTimeoutMs: 100 });
  ctx.cancel();
  s.m.aborted();
  s.fire(100);
  s.m.pipeClosed();
  s.m.pipeClosed();
  s.m.exited(undefined);
  assert.deepEqual(s.log, ['running', 'cancelled', 'killMain', 'reapGroup', 'done', 'stop']);
  assert.deepEqual(s.timers.map((t) => t.ms), [100, GROUP_CLEANUP_MS + 1_000]);
  // Killed, yet exited 0: Go reports ctx.Err().
  assert.equal(s.settled.err?.message, '`sh -c x` failed context canceled');
});

test('the ctx after the exit only ends the wait for the pipes: the exit status stands', () => {
  const s = supervision();
  s.m.stdout(Buffer.from('ok'));
  s.m.exited(undefined);
  s.m.aborted();
  s.fire(GROUP_CLEANUP_MS + 1_000);
  s.m.pipeClosed();
  s.m.pipeClosed();
  assert.deepEqual(s.log, ['running', 'exited-draining', 'cancelled', 'reapGroup', 'dropPipes', 'done', 'stop']);
  assert.equal(s.settled.out?.toString(), 'ok');
});

test('the ctx during the exec timeout leaves the timeout the outcome', () => {
  const s = supervision({ execTimeoutMs: 100, fatalTimeoutMs: 100 });
  s.fire(100);
  s.m.aborted();
  assert.equal(s.m.state, 'terminating');
  s.m.exited('signal: killed');
  s.m.pipeClosed();
  s.m.pipeClosed();
  assert.deepEqual(s.states(), ['running', 'terminating', 'done']);
  assert.equal(s.settled.err?.message, '`sh -c x` failed timeout after 100ms');
});

test('a failed exec under cmp-reap is done at once with the fork/exec text; later events change nothing', () => {
  const s = supervision({ execTimeoutMs: 100 });
  s.m.execFailed(Object.assign(new Error('x'), { errno: -2, code: 'ENOENT' }));
  s.m.exited('exit status 127');
  s.m.pipeClosed();
  s.m.pipeClosed();
  s.m.aborted();
  assert.deepEqual(s.log, ['running', 'done', 'stop', 'dropPipes', 'untrack']);
  assert.equal(s.settled.err?.message, 'fork/exec /bin/sh: no such file or directory');
});

test('real commands: the states a run goes through', async () => {
  const seen = (states: SupervisionState[]) => ({ onState: (s: SupervisionState) => void states.push(s) });
  const ignoring: SupervisionState[] = [];
  await rejection(run(['sh', '-c', "trap '' TERM; sleep 30"], { execTimeoutMs: 200, fatalTimeoutMs: 200, ...seen(ignoring) }));
  assert.deepEqual(ignoring, ['running', 'terminating', 'killing', 'done']);

  const draining: SupervisionState[] = [];
  assert.equal((await run(['sh', '-c', 'sleep 0.5 & echo hi'], seen(draining))).toString(), 'hi');
  assert.deepEqual(draining, ['running', 'exited-draining', 'done']);

  // Whether the exit or the pipes' close is seen first is the kernel's and libuv's business.
  const normal: SupervisionState[] = [];
  assert.equal((await run(['echo', 'hi'], seen(normal))).toString(), 'hi');
  assert.ok(['running,done', 'running,exited-draining,done'].includes(normal.join()), normal.join());
});
