import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { compileOptions } from '../../cmp/config/options.js';
import { connectRedis, type RedisClient } from '../../cmp/queue/redis-connection.js';
import { TEST_SIGNING_KEY } from '../helpers/distributed.js';
import { redisCli, startRedisSentinel } from '../helpers/redis-topology.js';
import { until } from './distributed-helpers.js';

const pidOf = async (port: number) => Number(/^process_id:(\d+)/m.exec(await redisCli(port, 'info', 'server'))![1]);

/**
 * The sentinels announce +switch-master while our connections are reconnecting: the master was
 * SIGKILLed and the first sentinel they ask is stopped, so each attempt hangs there for the
 * sentinel command timeout (2 s) and the switch comes during one. ioredis's failover detector used
 * to end that attempt and with it the connection, for good (status `end`: a worker took no job
 * again after a failover). Every connection kind, and BullMQ's copies, must come back on the new
 * master.
 */
test('connections reconnecting when the sentinels announce a new master reach it and never end', { timeout: 120_000 }, async () => {
  const topo = await startRedisSentinel(3);
  const clients: RedisClient[] = [];
  let stoppedSentinel: number | undefined;
  try {
    const ro = compileOptions({ CMP_OFFLOAD_REDIS_URL: topo.url, CMP_OFFLOAD_SIGNING_KEY: TEST_SIGNING_KEY }).redis!;
    const command = connectRedis(ro, 'command');
    const blocking = connectRedis(ro, 'blocking');
    const copy = (blocking as Redis).duplicate();
    copy.on('error', () => {});
    clients.push(command, blocking, copy);
    const ended: number[] = [];
    clients.forEach((c, i) => c.on('end', () => ended.push(i)));
    await Promise.all(clients.map(c => c.ping()));

    const old = await topo.masterPort();
    const replica = topo.dataPorts.find(p => p !== old)!;
    stoppedSentinel = await pidOf(topo.sentinelPorts[0]!);
    process.kill(stoppedSentinel, 'SIGSTOP');
    process.kill(await pidOf(old), 'SIGKILL');
    const named = async () => Number((await redisCli(topo.sentinelPorts[1]!, 'sentinel', 'get-master-addr-by-name', topo.masterName)).split('\n')[1]);
    await until(async () => (await named()) === replica, 60_000, 'the sentinels to promote the replica');
    // Attempts under way hang on the stopped sentinel until its timeout: give them time to end.
    await new Promise(r => setTimeout(r, 3_000));
    process.kill(stoppedSentinel, 'SIGCONT');
    stoppedSentinel = undefined;

    await until(() => clients.every(c => c.status === 'ready'), 30_000, `every connection ready (now: ${clients.map(c => c.status).join(', ')})`);
    assert.deepEqual(ended, [], 'connections that ended');
    await command.set('switch-probe', 'new-master', 'PX', 60_000);
    assert.equal(await redisCli(replica, 'get', 'switch-probe'), 'new-master');
    for (const c of clients.slice(1)) assert.equal(await c.ping(), 'PONG');
  } finally {
    if (stoppedSentinel !== undefined) process.kill(stoppedSentinel, 'SIGCONT');
    for (const c of clients) c.disconnect();
    await topo.stop();
  }
});
