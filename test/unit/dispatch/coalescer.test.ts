import { test } from 'node:test';
import assert from 'node:assert/strict';
import { contextWithDeadline } from '../../../cmp/context.js';
import { Coalescer } from '../../../proxy/dispatch/coalescer.js';
import { Semaphore } from '../../../proxy/dispatch/semaphore.js';

function deferred<T>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>(r => (resolve = r));
  return { promise, resolve };
}

test('identical keys in flight run once and share the result', async () => {
  const c = new Coalescer<string>();
  let runs = 0;
  const gate = deferred<string>();
  const start = () => (runs++, gate.promise);
  const a = c.run('k', contextWithDeadline(undefined), start);
  const b = c.run('k', contextWithDeadline(undefined), start);
  gate.resolve('done');
  assert.deepEqual(await Promise.all([a, b]), ['done', 'done']);
  assert.equal(runs, 1);
  assert.equal(c.coalesced, 1);
  // Once finished, the next call runs again.
  await c.run('k', contextWithDeadline(undefined), async () => (runs++, 'again'));
  assert.equal(runs, 2);
});

test('the shared run is cancelled only when the last caller leaves, and that caller gets the run\'s own error', async () => {
  const c = new Coalescer<string>();
  let runSignal!: AbortSignal;
  const start = (ctx: { signal: AbortSignal }) => {
    runSignal = ctx.signal;
    return new Promise<string>((_, reject) => ctx.signal.addEventListener('abort', () => reject(new Error('killed by abort'))));
  };
  const first = contextWithDeadline(undefined);
  const second = contextWithDeadline(undefined);
  const a = c.run('k', first, start);
  const b = c.run('k', second, start);
  first.cancel();
  await assert.rejects(a, /context canceled/);
  assert.equal(runSignal.aborted, false, 'another caller still waits');
  second.cancel();
  await assert.rejects(b, /killed by abort/);
  assert.equal(runSignal.aborted, true);
});

test('the semaphore bounds holders, queues the rest in order, and lets waiters give up', async () => {
  const s = new Semaphore(1);
  const release = await s.acquire(new AbortController().signal);
  const order: number[] = [];
  const w1 = s.acquire(new AbortController().signal).then(r => (order.push(1), r));
  const giveUp = new AbortController();
  const w2 = s.acquire(giveUp.signal);
  const w3 = s.acquire(new AbortController().signal).then(r => (order.push(3), r));
  giveUp.abort(new Error('gone'));
  await assert.rejects(w2, /gone/);
  assert.equal(s.inUse, 1);
  release();
  (await w1)();
  (await w3)();
  assert.deepEqual(order, [1, 3]);
  assert.equal(s.inUse, 0);
});
