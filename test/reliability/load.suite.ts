/**
 * Load with crashes: ≥ 1000 GenerateManifest calls (reduced: 300), 50 at a time, through 1 proxy
 * and 3 workers while, at evenly spaced points of the load, a worker running a plugin is
 * SIGKILLed and replaced. Every answer must
 * equal the expected bytes, none may be lost, and no request may run to completion twice except
 * where the first run's worker was killed (at-least-once after a crash: its output died with it).
 */
import fs from 'node:fs';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { startDistributed } from '../helpers/distributed.js';
import { openCmpClient } from '../helpers/grpc-client.js';
import { tarballOf } from '../helpers/repo.js';
import { rssBytes } from '../helpers/rss.js';
import { checkDistributedInvariants } from './lib/invariants.js';
import { expectedManifests, markerCall, markerLines, markerPlugin } from './lib/marker-plugin.js';
import { recordFigures, REDUCED, sandbox } from './lib/settings.js';
import { killWorker, workerWithRunInProgress } from './lib/worker-kill.js';

const CALLS = REDUCED ? 300 : 1000;
const CONCURRENCY = 50;
const KILLS = REDUCED ? 3 : 5;

const tick = () => new Promise(r => setTimeout(r, 25));

test(`${CALLS} calls, ${CONCURRENCY} concurrent, ${KILLS} workers SIGKILLed mid-run during the load: every answer correct, none lost, no double completion`, { timeout: 600_000 }, async () => {
  const box = sandbox('load');
  const markers = pluginWritableTempDir('cmp-rel-markers-');
  const d = await startDistributed({
    pluginYaml: markerPlugin('load', markers),
    socketName: 'load.sock',
    workers: 3,
    // Locks of 4 s: with runners, 2 cores carry twice the processes and 2 s locks were lost under load.
    // The job attempts are the default (CMP_OFFLOAD_JOB_ATTEMPTS, 3): no job is cut twice here.
    env: { TMPDIR: box.tmp, CMP_OFFLOAD_LOCK_DURATION: '4s', CMP_OFFLOAD_STALLED_INTERVAL: '2s' },
  });
  const client = openCmpClient(d.proxy.socketPath);
  const killed = new Set<string>();
  let kills = 0;
  try {
    const tgz = await tarballOf({ 'app/values.yaml': 'replicas: 1\n', 'README.md': 'load\n' });
    // Warm-up, then the baselines for the memory check.
    for (let i = 0; i < 10; i++) assert.deepEqual(await client.generate(markerCall(tgz, box.token, `warm-${i}`)), { value: { manifests: expectedManifests(`warm-${i}`), sourceType: '' } });

    const baselines = [
      { name: 'proxy', pid: d.proxy.proc.pid!, baseline: rssBytes(d.proxy.proc.pid!) },
      ...d.workers.map((w, i) => ({ name: `worker ${i}`, pid: w.proc.pid!, baseline: rssBytes(w.proc.pid!) })),
    ];
    const latencies: number[] = [];
    const failures: string[] = [];
    let next = 0;
    // Kills are placed by progress, not by the clock (a clock-driven killer found the load over
    // before its second kill on a fast machine): kill k comes once the calls before its gate have
    // started, and calls from the gate on wait for it. The victim is a worker with a plugin run in
    // progress (a start marker without its end marker), so every kill cuts a running job.
    const gates = Array.from({ length: KILLS }, (_, k) => Math.round(((k + 1) * CALLS) / (KILLS + 1)));
    // Every 10th call sleeps 0.5 s in the plugin, and so do the 3 calls before each gate: they are
    // the last to start before the kill, so the killer always has fresh running plugins to cut.
    const isSlow = (tag: string) => {
      const i = /^t(\d+)$/.exec(tag) ? Number(tag.slice(1)) : -1;
      return i >= 0 && (i % 10 === 0 || gates.some(g => i >= g - 3 && i < g));
    };
    const killDone = gates.map(() => {
      let done!: () => void;
      return { promise: new Promise<void>(r => (done = r)), done };
    });
    let inFlight = 0;
    let killsMidRun = 0;
    // Tags whose run a kill already cut: a victim runs none of these (see workerWithRunInProgress).
    const cut = new Set<string>();
    /** A worker with a run in progress (a slow one if any) and no run of a job cut before. */
    const runningOn = () => workerWithRunInProgress(markers, d.workers, cut, isSlow);
    const killer = (async () => {
      for (let k = 0; k < KILLS; k++) {
        while (next < gates[k]!) await tick();
        let victim = runningOn();
        while (!victim && inFlight > 0) {
          await tick();
          victim = runningOn();
        }
        if (await killWorker(d, victim, killed)) killsMidRun++;
        kills++;
        killDone[k]!.done();
        await d.addWorker();
      }
    })();
    // A rejected killer must not leave lanes waiting at a gate.
    killer.catch(() => killDone.forEach(g => g.done()));

    const lane = async () => {
      while (next < CALLS) {
        const i = next++;
        const tag = `t${i}`;
        for (let k = KILLS - 1; k >= 0; k--) {
          if (i >= gates[k]!) {
            await killDone[k]!.promise;
            break;
          }
        }
        // Some calls are slow, so that the killer finds running plugins.
        const sleep = isSlow(tag) ? '0.5' : '0';
        const start = Date.now();
        inFlight++;
        const outcome = await client.generate(markerCall(tgz, box.token, tag, { SLEEP: sleep }));
        inFlight--;
        latencies.push(Date.now() - start);
        const expected = { value: { manifests: expectedManifests(tag), sourceType: '' } };
        if (JSON.stringify(outcome) !== JSON.stringify(expected)) failures.push(`${tag}: ${JSON.stringify(outcome)}`);
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, lane));
    await killer;

    // Completions per request; a second one is allowed only when an earlier one ran on a killed worker.
    const ends = new Map<string, string[]>();
    for (const [dir, tag] of markerLines(markers, 'ends')) if (tag.startsWith('t')) ends.set(tag, [...(ends.get(tag) ?? []), dir]);
    let rerunsAfterKill = 0;
    const doubles: string[] = [];
    for (const [tag, dirs] of ends) {
      if (dirs.length <= 1) continue;
      const survivors = dirs.filter(dir => !killed.has(dir));
      if (survivors.length > 1) doubles.push(`${tag}: ${dirs.join(', ')}`);
      else rerunsAfterKill++;
    }
    const missing = Array.from({ length: CALLS }, (_, i) => `t${i}`).filter(t => !ends.has(t));
    latencies.sort((a, b) => a - b);
    recordFigures('load', {
      calls: CALLS,
      concurrency: CONCURRENCY,
      workerKills: kills,
      workerKillsMidRun: killsMidRun,
      failures: failures.length,
      doubleCompletions: doubles.length,
      rerunsAfterKill,
      p50Ms: latencies[Math.floor(latencies.length / 2)]!,
      p99Ms: latencies[Math.floor(latencies.length * 0.99)]!,
      maxLatencyMs: latencies[latencies.length - 1]!,
    });
    assert.deepEqual(failures, [], 'every call answered with the exact expected manifests');
    assert.deepEqual(missing, [], 'every request ran');
    assert.deepEqual(doubles, [], 'no request ran to completion twice on workers that stayed alive');
    assert.equal(kills, KILLS, 'workers killed during the load');
    assert.equal(killsMidRun, KILLS, 'every kill cut a running plugin');

    // Workers killed meanwhile are gone; the others must be back near their baseline.
    const alive = baselines.filter(b => d.proxy.proc.pid === b.pid || d.workers.some(w => w.proc.pid === b.pid));
    await checkDistributedInvariants('load', d, box, alive);
  } finally {
    client.close();
    await d.stop();
    box.remove();
    fs.rmSync(markers, { recursive: true, force: true });
  }
});
