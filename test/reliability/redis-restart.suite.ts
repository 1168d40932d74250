/**
 * Redis restarted under load: calls keep coming (10 at a time) while Redis is stopped for a few
 * seconds and started again (empty, as a restarted cache without persistence is). Each Redis
 * command waits up to CMP_OFFLOAD_REDIS_TIMEOUT (2 s, the default) for the connection: calls made
 * during the outage fail with UNAVAILABLE after about that long, unless Redis came back within it;
 * after it, calls must succeed again without restarting anything; no call may get another status
 * or hang.
 */
import fs from 'node:fs';
import net from 'node:net';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { startDistributed } from '../helpers/distributed.js';
import { openCmpClient, type RpcOutcome } from '../helpers/grpc-client.js';
import { tarballOf } from '../helpers/repo.js';
import type { ManifestResponse } from '../../proto/generated/cmpserver/plugin/plugin.js';
import { rssBytes } from '../helpers/rss.js';
import { checkDistributedInvariants } from './lib/invariants.js';
import { expectedManifests, markerCall, markerPlugin } from './lib/marker-plugin.js';
import { recordFigures, REDUCED, sandbox } from './lib/settings.js';

// Longer than the Redis timeout, so that calls made during the outage cannot wait it out.
const OUTAGE_MS = REDUCED ? 5_000 : 8_000;
const REDIS_TIMEOUT_MS = 2_000;
/** A failing call ends after its first Redis command's timeout, plus this for the rest of the call. */
const FAIL_MARGIN_MS = 1_500;

type Phase = 'before' | 'outage' | 'after';

/** The server's run id (INFO server): a restarted Redis has a new one. */
async function runId(url: string): Promise<string> {
  const r = new Redis(url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
  try {
    return /^run_id:(\w+)/m.exec(await r.info('server'))![1]!;
  } finally {
    r.disconnect();
  }
}

/** Whether a TCP connection to `port` on 127.0.0.1 is refused (nothing listens). */
function refused(port: number): Promise<boolean> {
  return new Promise(resolve => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => { s.destroy(); resolve(false); });
    s.once('error', err => resolve((err as NodeJS.ErrnoException).code === 'ECONNREFUSED'));
  });
}
interface Result { tag: string; phase: Phase; start: number; ms: number; outcome: RpcOutcome<ManifestResponse> }

test(`Redis down for ${OUTAGE_MS / 1000} s under load: UNAVAILABLE after the ${REDIS_TIMEOUT_MS / 1000} s Redis timeout during the outage, success after it`, { timeout: 300_000 }, async () => {
  const box = sandbox('redis');
  const markers = pluginWritableTempDir('cmp-rel-markers-');
  const d = await startDistributed({ pluginYaml: markerPlugin('outage', markers), socketName: 'outage.sock', workers: 2, env: { TMPDIR: box.tmp } });
  const client = openCmpClient(d.proxy.socketPath);
  try {
    const tgz = await tarballOf({ 'values.yaml': 'a: 1\n' });
    for (let i = 0; i < 5; i++) assert.ok('value' in (await client.generate(markerCall(tgz, box.token, `warm-${i}`))));
    const baselines = [d.proxy, ...d.workers].map((p, i) => ({ name: i ? `worker ${i}` : 'proxy', pid: p.proc.pid!, baseline: rssBytes(p.proc.pid!) }));

    let phase: Phase = 'before';
    let stop = false;
    let n = 0;
    const results: Result[] = [];
    const lane = async () => {
      while (!stop) {
        const tag = `r${n++}`;
        const callPhase = phase;
        const start = Date.now();
        // Some runs are slow so that the outage catches calls in every stage.
        const outcome = await client.generate(markerCall(tgz, box.token, tag, { SLEEP: n % 5 === 0 ? '0.3' : '0' }, 30_000));
        results.push({ tag, phase: callPhase, start, ms: Date.now() - start, outcome });
        if ('code' in outcome) await new Promise(r => setTimeout(r, 50));
      }
    };
    const lanes = Array.from({ length: 10 }, lane);
    await new Promise(r => setTimeout(r, 2_000));
    const runBefore = await runId(d.redis.url);
    // The outage starts with the SIGTERM: Redis refuses calls while it shuts down, and under load
    // calls failing then can end before this test sees its exit.
    const outageStart = Date.now();
    await d.redis.pause();
    phase = 'outage';
    // Calls in flight at the outage's start can hold every lane for two timeouts, so the lanes
    // alone may start nothing early enough to fail: probes on their own channel start soon after
    // the outage begins, and must fail within the timeout like any call made then.
    const probeClient = openCmpClient(d.proxy.socketPath);
    await new Promise(r => setTimeout(r, 300));
    const probes = Array.from({ length: 3 }, async (_, i) => {
      const tag = `probe-${i}`;
      const start = Date.now();
      const outcome = await probeClient.generate(markerCall(tgz, box.token, tag, {}, 30_000));
      results.push({ tag, phase: 'outage', start, ms: Date.now() - start, outcome });
    });
    await new Promise(r => setTimeout(r, OUTAGE_MS - 300));
    const outageEnd = Date.now();
    const downAtEnd = await refused(d.redis.port);
    phase = 'after';
    await d.redis.restart();
    const restartedAt = Date.now();
    const runAfter = await runId(d.redis.url);
    // Run until 50 calls made after the restart succeeded in a row (or give up after 30 s).
    const recovered = await new Promise<number | undefined>(resolve => {
      const timer = setInterval(() => {
        const after = results.filter(r => r.phase === 'after').sort((a, b) => a.start - b.start);
        const lastFailure = after.findLastIndex(r => !('value' in r.outcome));
        if (after.length - lastFailure - 1 >= 50) {
          clearInterval(timer);
          resolve((after[lastFailure + 1]?.start ?? restartedAt) - restartedAt);
        } else if (Date.now() - restartedAt > 30_000) {
          clearInterval(timer);
          resolve(undefined);
        }
      }, 100);
    });
    stop = true;
    await Promise.all([...lanes, ...probes]);
    probeClient.close();

    const wrong = results.filter(r => 'value' in r.outcome && JSON.stringify(r.outcome.value.manifests) !== JSON.stringify(expectedManifests(r.tag)));
    const otherStatus = results.filter(r => 'code' in r.outcome && r.outcome.code !== Status.UNAVAILABLE);
    // What a call made while Redis is down gets: Redis named as unreachable (README.md errors table: redisUnreachable).
    const documented = new RegExp(`^cmp-offload: Redis is unreachable at redis://127\\.0\\.0\\.1:${d.redis.port} \\(CMP_OFFLOAD_REDIS_URL\\): .+`, 's');
    const undocumented = results.filter(r => r.phase === 'outage' && 'code' in r.outcome && !documented.test(r.outcome.details));
    const failed = results.filter(r => 'code' in r.outcome);
    const failedBeforeOutage = failed.filter(r => r.start + r.ms < outageStart);
    const outageCalls = results.filter(r => r.phase === 'outage');
    const outageFailures = outageCalls.filter(r => 'code' in r.outcome);
    const slowFailures = outageFailures.filter(r => r.ms > REDIS_TIMEOUT_MS + FAIL_MARGIN_MS);
    // A failure before the timeout means a command did not wait for Redis.
    const hastyFailures = outageFailures.filter(r => r.ms < REDIS_TIMEOUT_MS - 100);
    // Only a call whose Redis timeout outlasted the outage may succeed.
    const outageSuccesses = outageCalls.filter(r => 'value' in r.outcome && outageEnd - r.start > REDIS_TIMEOUT_MS + 500);
    recordFigures('redis-restart', {
      calls: results.length,
      outageMs: OUTAGE_MS,
      callsDuringOutage: outageCalls.length,
      unavailable: results.filter(r => 'code' in r.outcome).length,
      maxOutageCallMs: Math.max(0, ...outageCalls.map(r => r.ms)),
      recoveredAfterRestartMs: recovered ?? 'never',
      maxLatencyMs: Math.max(...results.map(r => r.ms)),
      otherStatuses: otherStatus.length,
    });
    assert.deepEqual(wrong.map(r => r.tag), [], 'every successful answer has the expected bytes');
    assert.deepEqual(otherStatus.map(r => JSON.stringify(r.outcome)), [], 'failures are UNAVAILABLE only');
    assert.deepEqual(undocumented.map(r => `${r.tag} ${JSON.stringify(r.outcome)}`), [], 'calls made during the outage name Redis as unreachable');
    assert.ok(downAtEnd, 'Redis refused connections at the end of the outage');
    assert.notEqual(runAfter, runBefore, 'Redis was restarted (a new run id)');
    assert.deepEqual(failedBeforeOutage.map(r => r.tag), [], 'no call failed that had ended before Redis went down');
    // Calls in flight at the outage's start wait for Redis too (their commands, then their job's
    // waiter, each up to the timeout), so fewer new calls start during it than before.
    assert.ok(outageCalls.length >= 5, `calls were made during the outage (${outageCalls.length})`);
    assert.deepEqual(outageSuccesses.map(r => r.tag), [], 'no call made while Redis was down succeeded, unless Redis came back within its timeout');
    const probeResults = outageCalls.filter(r => r.tag.startsWith('probe-'));
    assert.deepEqual(probeResults.filter(r => 'value' in r.outcome).map(r => r.tag), [], 'probes started 0.3 s into the outage failed');
    assert.ok(outageFailures.length >= 1, `calls made during the outage failed (${outageFailures.length}): ${JSON.stringify(outageCalls.map(r => [r.start - outageStart, r.ms, 'code' in r.outcome ? r.outcome.details.slice(-60) : 'ok']))}`);
    assert.deepEqual(slowFailures.map(r => `${r.tag} ${r.ms} ms`), [], `calls during the outage fail within ${REDIS_TIMEOUT_MS + FAIL_MARGIN_MS} ms`);
    assert.deepEqual(hastyFailures.map(r => `${r.tag} ${r.ms} ms`), [], `calls during the outage wait ${REDIS_TIMEOUT_MS} ms for Redis before failing`);
    assert.ok(recovered !== undefined, 'calls succeed again after the restart');

    await checkDistributedInvariants('redis-restart', d, box, baselines);
  } finally {
    client.close();
    await d.stop();
    box.remove();
    fs.rmSync(markers, { recursive: true, force: true });
  }
});
