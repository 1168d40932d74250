/**
 * Redis restarted under load: calls keep coming (10 at a time) while Redis is stopped for a few
 * seconds and started again (empty, as a restarted cache without persistence is). Calls made
 * during the outage must fail fast with UNAVAILABLE; after it, calls must succeed again without
 * restarting anything; no call may get another status or hang.
 */
import fs from 'node:fs';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { startDistributed } from '../helpers/distributed.js';
import { openCmpClient, type RpcOutcome } from '../helpers/grpc-client.js';
import { tarballOf } from '../helpers/repo.js';
import type { ManifestResponse } from '../../proto/generated/cmpserver/plugin/plugin.js';
import { rssBytes } from '../helpers/rss.js';
import { checkDistributedInvariants } from './lib/invariants.js';
import { expectedManifests, markerCall, markerPlugin } from './lib/marker-plugin.js';
import { recordFigures, REDUCED, sandbox } from './lib/settings.js';

const OUTAGE_MS = REDUCED ? 3_000 : 6_000;
const FAIL_FAST_MS = 2_000;

type Phase = 'before' | 'outage' | 'after';
interface Result { tag: string; phase: Phase; start: number; ms: number; outcome: RpcOutcome<ManifestResponse> }

test(`Redis down for ${OUTAGE_MS / 1000} s under load: UNAVAILABLE within ${FAIL_FAST_MS / 1000} s during the outage, success after it`, { timeout: 300_000 }, async () => {
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
    await d.redis.pause();
    phase = 'outage';
    const outageStart = Date.now();
    await new Promise(r => setTimeout(r, OUTAGE_MS));
    phase = 'after';
    await d.redis.restart();
    const restartedAt = Date.now();
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
    await Promise.all(lanes);

    const wrong = results.filter(r => 'value' in r.outcome && JSON.stringify(r.outcome.value.manifests) !== JSON.stringify(expectedManifests(r.tag)));
    const otherStatus = results.filter(r => 'code' in r.outcome && r.outcome.code !== Status.UNAVAILABLE);
    const outageCalls = results.filter(r => r.phase === 'outage');
    const slowFailures = outageCalls.filter(r => r.ms > FAIL_FAST_MS);
    const outageSuccesses = outageCalls.filter(r => 'value' in r.outcome);
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
    assert.ok(outageCalls.length > 10, `calls were made during the outage (${outageCalls.length})`);
    assert.deepEqual(outageSuccesses.map(r => r.tag), [], 'no call made while Redis was down succeeded');
    assert.deepEqual(slowFailures.map(r => `${r.tag} ${r.ms} ms`), [], `calls during the outage fail within ${FAIL_FAST_MS} ms`);
    assert.ok(recovered !== undefined, 'calls succeed again after the restart');
    assert.ok(outageStart > 0);

    await checkDistributedInvariants('redis-restart', d, box, baselines);
  } finally {
    client.close();
    await d.stop();
    box.remove();
    fs.rmSync(markers, { recursive: true, force: true });
  }
});
