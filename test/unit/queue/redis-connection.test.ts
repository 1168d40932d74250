import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compileOptions, redactRedisUrl } from '../../../cmp/config/options.js';
import { clusterOptions, connectionOptions, redisUnavailable } from '../../../cmp/queue/redis-connection.js';

const ro = (url: string, extra: Record<string, string> = {}) => compileOptions({ CMP_OFFLOAD_REDIS_URL: url, CMP_OFFLOAD_REDIS_TIMEOUT: '3s', ...extra }).redis!;

test('a Sentinel target connects through its sentinels with the roles of one Redis', () => {
  const opts = ro('rediss+sentinel://app:pw@s1:26379,s2:26380/argocd/2', { CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD: 'spw' });
  const command = connectionOptions(opts, 'command');
  assert.deepEqual(command.sentinels, [
    { host: 's1', port: 26379 },
    { host: 's2', port: 26380 },
  ]);
  assert.equal(command.name, 'argocd');
  assert.equal(command.db, 2);
  assert.equal(command.username, 'app');
  assert.equal(command.password, 'pw');
  assert.equal(command.sentinelPassword, 'spw');
  assert.equal(command.sentinelUsername, undefined);
  assert.equal(command.enableTLSForSentinelMode, true);
  assert.deepEqual(command.sentinelTLS, {});
  // Commands wait out a reconnect within their timeout; blocking reads
  // never give up (BullMQ requires null there).
  assert.equal(command.enableOfflineQueue, undefined);
  assert.equal(command.maxRetriesPerRequest, null);
  assert.equal(command.commandTimeout, 3_000);
  const blocking = connectionOptions(opts, 'blocking');
  assert.equal(blocking.maxRetriesPerRequest, null);
  assert.equal(blocking.commandTimeout, undefined);
  assert.equal(blocking.enableOfflineQueue, undefined);
  // A demoted master's READONLY makes the connection ask the sentinels again.
  assert.equal((command.reconnectOnError as (e: Error) => unknown)(new Error('READONLY You can\'t write against a read only replica.')), 1);
  assert.equal((blocking.reconnectOnError as (e: Error) => unknown)(new Error('READONLY x')), 2);
  assert.equal((blocking.reconnectOnError as (e: Error) => unknown)(new Error('ERR other')), false);
  // Reconnects behind Sentinel back off to 500 ms at most (a failover is noticed within it), others to 2 s.
  const backoff = (o: { retryStrategy?: unknown }) => [1, 3, 10].map(n => (o.retryStrategy as (times: number) => number)(n));
  assert.deepEqual(backoff(command), [100, 400, 500]);
  assert.deepEqual(backoff(blocking), [100, 400, 500]);
  assert.deepEqual(backoff(connectionOptions(ro('redis://r1:6379'), 'command')), [100, 400, 2_000]);
  // Plain TLS is not switched on for a non-TLS sentinel URL.
  assert.equal(connectionOptions(ro('redis+sentinel://s1/m'), 'command').tls, undefined);
});

test('a Cluster target gives each node the role options, the URL credentials and TLS', () => {
  const command = clusterOptions(ro('rediss+cluster://u:pw@c1:7000,c2:7001'), 'command');
  assert.equal(command.enableOfflineQueue, true);
  assert.equal(command.redisOptions?.maxRetriesPerRequest, null);
  assert.equal(command.redisOptions?.commandTimeout, 3_000);
  // CLUSTERDOWN is retried every 100 ms for as long as the command timeout.
  assert.equal(command.retryDelayOnClusterDown, 100);
  assert.ok(command.maxRedirections! >= 3_000 / 100);
  assert.equal(command.redisOptions?.username, 'u');
  assert.equal(command.redisOptions?.password, 'pw');
  assert.deepEqual(command.redisOptions?.tls, {});
  // TLS: node names are not resolved to IPs before connecting (certificates name hosts).
  let resolved = '';
  command.dnsLookup!('node.example', (_err, address) => (resolved = address));
  assert.equal(resolved, 'node.example');
  const blocking = clusterOptions(ro('redis+cluster://c1'), 'blocking');
  assert.equal(blocking.enableOfflineQueue, true);
  assert.equal(blocking.redisOptions?.maxRetriesPerRequest, null);
  assert.equal(blocking.redisOptions?.tls, undefined);
  assert.equal(blocking.redisOptions?.password, undefined);
  assert.equal(blocking.dnsLookup, undefined);
});

test('the UNAVAILABLE text names the Redis without credentials, whatever the form', () => {
  for (const [url, shown] of [
    ['redis+sentinel://u:s3cret@s1:26379,s2:26379/m/1', 'redis+sentinel://s1:26379,s2:26379/m/1'],
    ['rediss+cluster://:s3cret@c1:7000,c2:7001', 'rediss+cluster://c1:7000,c2:7001'],
    ['redis://:s3cret@h:6379/0', 'redis://h:6379/0'],
  ] as const) {
    const err = redisUnavailable(ro(url), new Error('connect ECONNREFUSED'));
    assert.equal(err.message, `cmp-offload: Redis is unreachable at ${shown} (CMP_OFFLOAD_REDIS_URL): connect ECONNREFUSED`);
    assert.equal(redactRedisUrl(url), shown);
  }
});
