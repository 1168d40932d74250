import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startDistributed } from '../helpers/distributed.js';
import { openCmpClient } from '../helpers/grpc-client.js';
import { BIN } from '../helpers/paths.js';
import { startRedis } from '../helpers/redis-server.js';
import { tarballOf } from '../helpers/repo.js';
import { endsOf, generateCall, markerPlugin, retireWorkers, startsOf, until, useMarkerBed, workDirOf } from './distributed-helpers.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { ANY, assertOurError } from '../helpers/our-errors.js';

const QUEUE = 'qfail';
const markers = pluginWritableTempDir('cmp-markers-');
after(() => fs.rmSync(markers, { recursive: true, force: true }));

describe('distributed mode under failures', () => {
  const suite = useMarkerBed(QUEUE, {
    workers: 2,
    env: { MARKERS: markers, CMP_OFFLOAD_CONCURRENCY: '1', CMP_OFFLOAD_SHUTDOWN_GRACE: '10s' },
  });

  test('a worker SIGKILLed during a slow generate: the call still succeeds on another worker within seconds', async () => {
    const { client, d, tgz } = suite;
    const started = Date.now();
    const call = client.generate(generateCall(tgz, { TAG: 'crash', SLEEP: '2' }, { timeoutMs: 30_000 }));
    await until(() => startsOf(markers, 'crash').length === 1, 5_000, 'the run to start');
    const holder = d.workers.find(w => workDirOf(w) === startsOf(markers, 'crash')[0]);
    assert.ok(holder, 'the run happened on one of the workers');
    await holder.kill();
    const outcome = await call;
    assert.ok('value' in outcome, JSON.stringify(outcome));
    const runs = startsOf(markers, 'crash');
    assert.equal(runs.length, 2);
    assert.notEqual(runs[1], runs[0], 'the second run was on another worker');
    // lock 2s + stalled check 1s in the tests, plus the 2 s run.
    assert.ok(Date.now() - started < 10_000, `took ${Date.now() - started} ms`);
    d.workers.splice(d.workers.indexOf(holder), 1);
    await d.addWorker();
  });

  test('a worker stopped with SIGTERM finishes its running job, then exits cleanly', async () => {
    const { client, d, tgz } = suite;
    const call = client.generate(generateCall(tgz, { TAG: 'graceful', SLEEP: '1' }));
    await until(() => startsOf(markers, 'graceful').length === 1, 5_000, 'the run to start');
    const holder = d.workers.find(w => workDirOf(w) === startsOf(markers, 'graceful')[0])!;
    assert.equal(endsOf(markers, 'graceful'), 0, 'SIGTERM comes while the job runs');
    holder.proc.kill('SIGTERM');
    const outcome = await call;
    assert.ok('value' in outcome, JSON.stringify(outcome));
    assert.equal(await holder.exited, 0);
    assert.equal(startsOf(markers, 'graceful').length, 1);
    assert.equal(endsOf(markers, 'graceful'), 1);
    await retireWorkers(d, [holder]);
    await d.addWorker();
  });

  test('Redis stopped: calls wait CMP_OFFLOAD_REDIS_TIMEOUT (2 s) for it, then fail with UNAVAILABLE naming Redis; after a restart the service resumes by itself', async () => {
    const { client, d, tgz } = suite;
    assert.ok('value' in (await client.generate(generateCall(tgz, { TAG: 'before-outage' }))));
    await d.redis.pause();
    const started = Date.now();
    const down = await client.generate(generateCall(tgz, { TAG: 'during-outage' }, { timeoutMs: 20_000 }));
    assertOurError('redisUnreachable', down, [d.redis.url, ANY]);
    // A reconnect within the timeout would have been waited out; a longer outage fails the call then.
    const ms = Date.now() - started;
    assert.ok(ms >= 1_900 && ms < 5_000, `answered after ${ms} ms, not about CMP_OFFLOAD_REDIS_TIMEOUT (2 s)`);
    await d.redis.restart();
    await until(
      async () => 'value' in (await client.generate(generateCall(tgz, { TAG: 'after-outage' }, { timeoutMs: 5_000 }))),
      20_000,
      'the service to resume',
    );
  });
});

test('version skew between proxy and worker plugin specs: a clear error and no execution', async () => {
  const d = await startDistributed({
    pluginYaml: markerPlugin('skew'),
    workerPluginYaml: markerPlugin('skew').replace('sleep "', 'sleep  "'),
    socketName: 'skew.sock',
    workers: 1,
    env: { MARKERS: markers },
  });
  const client = openCmpClient(d.proxy.socketPath);
  try {
    const outcome = await client.generate(generateCall(await tarballOf({ 'f.txt': 'x' }), { TAG: 'skewed' }, { timeoutMs: 5_000 }));
    assertOurError('versionSkew', outcome, ['skew', ANY, ANY]);
    assert.equal(startsOf(markers, 'skewed').length, 0);
  } finally {
    client.close();
    await d.stop();
  }
});

test('distributed mode refuses to start without a signing key, naming the variable', async () => {
  const redis = await startRedis();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-nokey-'));
  fs.writeFileSync(path.join(dir, 'plugin.yaml'), markerPlugin('nokey'));
  try {
    for (const role of ['proxy', 'worker']) {
      const proc = spawn(process.execPath, [BIN, role, '--config-dir-path', dir], {
        env: { ...process.env, CMP_OFFLOAD_REDIS_URL: redis.url, ARGOCD_PLUGINSOCKFILEPATH: dir, ARGOCD_CMP_WORKDIR: dir },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      proc.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
      const code = await new Promise(resolve => proc.once('exit', resolve));
      assert.equal(code, 1, role);
      assert.match(stderr, /CMP_OFFLOAD_SIGNING_KEY/, role);
      assert.equal(fs.existsSync(path.join(dir, 'nokey.sock')), false);
    }
  } finally {
    await redis.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
