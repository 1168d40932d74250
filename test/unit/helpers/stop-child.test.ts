import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { stopChild } from '../../helpers/stop-child.js';

/** `sh -c script`, resolved once it has printed its first line (its traps are set by then). */
async function shell(script: string): Promise<ChildProcess> {
  const child = spawn('sh', ['-c', script], { stdio: ['ignore', 'pipe', 'ignore'] });
  await once(child.stdout!, 'data');
  return child;
}

test('stopChild: SIGTERM ends a running child; its exit code is returned', async () => {
  const child = await shell('trap "exit 7" TERM; echo up; while :; do sleep 0.05; done');
  assert.equal(await stopChild(child), 7);
});

test('stopChild: a stopped child gets SIGCONT and handles the SIGTERM', async () => {
  const child = await shell('trap "exit 9" TERM; echo up; while :; do sleep 0.05; done');
  child.kill('SIGSTOP');
  const t = Date.now();
  assert.equal(await stopChild(child, 20_000), 9);
  assert.ok(Date.now() - t < 10_000, 'ended by the SIGTERM, not the SIGKILL');
});

test('stopChild: a child ignoring SIGTERM is SIGKILLed after killAfterMs', async () => {
  const child = await shell('trap "" TERM; echo up; while :; do sleep 0.05; done');
  const t = Date.now();
  assert.equal(await stopChild(child, 300), null);
  assert.equal(child.signalCode, 'SIGKILL');
  assert.ok(Date.now() - t >= 250);
});

test('stopChild: a child that exited already resolves with its code', async () => {
  const child = spawn('sh', ['-c', 'exit 3'], { stdio: 'ignore' });
  await once(child, 'exit');
  assert.equal(await stopChild(child), 3);
});
