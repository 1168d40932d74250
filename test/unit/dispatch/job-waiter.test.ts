import { EventEmitter } from 'node:events';
import { afterEach, beforeEach, mock, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Job, QueueEvents } from 'bullmq';
import type { RedisClient } from '../../../cmp/queue/redis-connection.js';
import { JobWaiter, type JobEnd } from '../../../proxy/dispatch/job-waiter.js';

/**
 * The waiter's fallback look at the jobs (how a proxy learns that its job vanished, since no
 * event ever tells): one pipeline for every job waited for, a direct look only at the jobs whose
 * record is gone or finished, a Redis outage within the grace waited out and followed by a look
 * at once. Fake Redis, fake clock: no sleeps.
 */

/** Let promise chains run (setImmediate is not faked). */
const settle = () => new Promise(r => setImmediate(r));

/**
 * Advance the fake clock by `ms` in steps of one tick (the mock fires every interval of one
 * `tick()` call with the clock already at its end), letting promises run after each.
 */
async function advance(ms: number): Promise<void> {
  for (let t = 0; t < ms; t += 250) {
    mock.timers.tick(250);
    await settle();
  }
  await settle();
}

function bed(n: number, graceMs = 2_000) {
  const records = new Set<string>();
  const key = (id: string) => `{p}:q:${id}`;
  const stats = { pipelines: 0, hmgets: 0, getJobs: [] as string[], streamReads: 0 };
  /** The queue's events stream, newest last, as BullMQ writes it. */
  const stream: [string, string[]][] = [];
  const redis = {
    status: 'ready',
    async xrevrange(k: string, end: string, start: string, count: string, n: number) {
      assert.deepEqual([k, end, start, count, n], ['{p}:q:events', '+', '-', 'COUNT', 4_000]);
      stats.streamReads++;
      return stream.slice(-n).reverse();
    },
    pipeline() {
      stats.pipelines++;
      const keys: string[] = [];
      const p = {
        hmget(k: string) {
          stats.hmgets++;
          keys.push(k);
          return p;
        },
        exec: async () => keys.map(k => [null, records.has(k) ? [String(Date.now()), null] : [null, null]]),
      };
      return p;
    },
  };
  const waiter = new JobWaiter({
    getJob: async id => {
      stats.getJobs.push(id);
      return records.has(key(id)) ? ({ finishedOn: undefined } as unknown as Job) : undefined;
    },
    jobKey: async id => key(id),
    eventsKey: async () => '{p}:q:events',
    eventsMaxLen: 4_000,
    events: new EventEmitter() as unknown as QueueEvents,
    redis: redis as unknown as RedisClient,
    graceMs,
  });
  const ends = new Map<string, JobEnd>();
  for (let i = 0; i < n; i++) {
    const id = `j${i}`;
    records.add(key(id));
    void waiter.wait(id).done.then(end => ends.set(id, end));
  }
  return { waiter, records, key, stats, redis, ends, stream };
}

beforeEach(() => mock.timers.enable({ apis: ['setInterval', 'Date'] }));
afterEach(() => mock.timers.reset());

test('one pipeline looks at every waited-for job; only a job whose record is gone gets a direct look, and ends vanished', async () => {
  const b = bed(200);
  await settle();
  assert.equal(b.stats.getJobs.length, 200, 'one direct look each at registration');
  b.stats.getJobs.length = 0;
  await advance(3_000);
  assert.deepEqual([b.stats.pipelines, b.stats.hmgets, b.stats.getJobs.length], [1, 200, 0]);
  b.records.delete(b.key('j42'));
  await advance(3_000);
  assert.deepEqual([b.stats.pipelines, b.stats.getJobs], [2, ['j42']]);
  assert.deepEqual([...b.ends], [['j42', { state: 'vanished' }]]);
  b.waiter.close();
});

test('an outage shorter than the grace is waited out and followed by a look at once; a longer one fails the waiters', async () => {
  const b = bed(3);
  await settle();
  await advance(3_000);
  assert.equal(b.stats.pipelines, 1);
  b.redis.status = 'reconnecting';
  await advance(1_750);
  assert.equal(b.ends.size, 0, 'nobody failed within the grace');
  // Back empty (a restart without persistence), 1 s after the last look: looked at without waiting for the period.
  b.records.clear();
  b.redis.status = 'ready';
  await advance(250);
  assert.equal(b.stats.pipelines, 2);
  assert.deepEqual([...b.ends.values()], [{ state: 'vanished' }, { state: 'vanished' }, { state: 'vanished' }]);

  const c = bed(2);
  await settle();
  c.redis.status = 'reconnecting';
  await advance(1_750);
  assert.equal(c.ends.size, 0);
  await advance(500);
  assert.deepEqual([...c.ends.values()], [{ state: 'redis-down' }, { state: 'redis-down' }]);
  b.waiter.close();
  c.waiter.close();
});

test("a job found gone whose 'removed' event is in the stream but not yet delivered ends removed, not vanished", async () => {
  const b = bed(3);
  await settle();
  // j0: removed by someone (BullMQ deletes the record and writes the event in one script);
  // j1: gone with no event (flushed). The events never reach the waiter's QueueEvents here.
  b.stream.push(['1-0', ['event', 'removed', 'jobId', 'j0x', 'prev', 'waiting']]);
  b.stream.push(['2-0', ['event', 'removed', 'jobId', 'j0', 'prev', 'waiting']]);
  b.stream.push(['3-0', ['event', 'completed', 'jobId', 'j1', 'returnvalue', '{}']]);
  b.records.delete(b.key('j0'));
  b.records.delete(b.key('j1'));
  await advance(3_000);
  assert.deepEqual(new Map(b.ends), new Map([['j0', { state: 'removed' }], ['j1', { state: 'vanished' }]]));
  assert.equal(b.stats.streamReads, 2, 'the stream is read only for jobs found gone');
  b.waiter.close();
});
