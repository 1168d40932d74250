import fs from 'node:fs';
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { startDistributed } from '../helpers/distributed.js';
import { openCmpClient } from '../helpers/grpc-client.js';
import { startProxy } from '../helpers/proxy-process.js';
import { tarballOf } from '../helpers/repo.js';
import { startWorker } from '../helpers/worker-process.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { ANY, assertOurError } from '../helpers/our-errors.js';
import { generateCall, markerPlugin, startsOf, until, workDirOf, type Outcome } from './distributed-helpers.js';

/**
 * A plugin.yaml rollout: proxies and workers of the old and the new spec share one queue while
 * their pods are replaced. A worker hands a job of the other spec back (delayed) to a worker of
 * its own, so no request fails; with no such worker the job still ends in versionSkew, before
 * its caller's deadline.
 */

const PLUGIN = 'roll';
const markers = pluginWritableTempDir('cmp-markers-');
after(() => fs.rmSync(markers, { recursive: true, force: true }));

/** The same plugin, its output marked with its spec: `on: <mark>`. */
const specOf = (mark: string) => markerPlugin(PLUGIN).replace('on: 1.50', `on: ${mark}`);
const OLD = specOf('old');
const NEW = specOf('new');

/** The spec mark of a GenerateManifest answer's one manifest. */
function markOf(o: Outcome): string {
  assert.ok('value' in o, JSON.stringify(o));
  assert.equal(o.value.manifests.length, 1);
  // `on` is YAML 1.1's true: whatever the key became, the one value is the mark.
  return Object.values((JSON.parse(o.value.manifests[0]!) as { data: Record<string, string> }).data)[0]!;
}

test('a rolling update: old and new proxies and workers on one queue, every request answered by a worker of its own spec', async () => {
  const env = { MARKERS: markers, CMP_OFFLOAD_CONCURRENCY: '1' };
  const d = await startDistributed({ pluginYaml: OLD, socketName: `${PLUGIN}.sock`, workers: 1, env });
  const stops: (() => Promise<unknown>)[] = [() => d.stop()];
  const stopAll = async () => {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
  };
  let newProxy, newWorker;
  try {
    // The repo-server pod rolls first: a new-spec proxy while only an old-spec worker runs.
    newProxy = await startProxy({ pluginYaml: NEW, socketName: `${PLUGIN}.sock`, env: d.env });
    stops.push(() => newProxy!.stop());
  } catch (err) {
    await stopAll();
    throw err;
  }
  const oldClient = openCmpClient(d.proxy.socketPath);
  const newClient = openCmpClient(newProxy.socketPath);
  try {
    const tgz = await tarballOf({ 'f.txt': 'x' });
    const early = newClient.generate(generateCall(tgz, { TAG: 'early' }, { timeoutMs: 30_000 }));
    await until(() => /handed back for a worker of its spec/.test(d.workers[0]!.stderr()), 10_000, 'the old worker to hand the new-spec job back');
    newWorker = await startWorker({ pluginYaml: NEW, env: d.env });
    stops.push(() => newWorker!.stop());
    const workerOf = { old: workDirOf(d.workers[0]!), new: workDirOf(newWorker) };
    assert.equal(markOf(await early), 'new');
    assert.deepEqual(startsOf(markers, 'early'), [workerOf.new], 'the early job ran once, on the new worker');
    // Both specs at once, from a proxy of each.
    const calls: { spec: 'old' | 'new'; tag: string; outcome: Promise<Outcome> }[] = [];
    for (let i = 0; i < 6; i++) {
      for (const [spec, client] of [['old', oldClient], ['new', newClient]] as const) {
        const tag = `${spec}-${i}`;
        calls.push({ spec, tag, outcome: client.generate(generateCall(tgz, { TAG: tag }, { timeoutMs: 30_000 })) });
      }
    }
    for (const c of calls) {
      const outcome = await c.outcome;
      assert.equal(markOf(outcome), c.spec, `${c.tag}: answered by the other spec's plugin`);
      assert.deepEqual(startsOf(markers, c.tag), [workerOf[c.spec]], `${c.tag}: ran once, on the worker of its spec`);
    }
  } finally {
    oldClient.close();
    newClient.close();
    await stopAll();
  }
});

test('a spec no worker has: the job is handed back until its bound, then fails with versionSkew before the caller\'s deadline', async () => {
  const d = await startDistributed({ pluginYaml: specOf('orphan'), workerPluginYaml: OLD, socketName: `${PLUGIN}.sock`, workers: 1, env: { MARKERS: markers } });
  const client = openCmpClient(d.proxy.socketPath);
  try {
    const started = Date.now();
    const outcome = await client.generate(generateCall(await tarballOf({ 'f.txt': 'y' }), { TAG: 'orphan' }, { timeoutMs: 4_000 }));
    const ms = Date.now() - started;
    assertOurError('versionSkew', outcome, [PLUGIN, ANY, ANY]);
    assert.equal(startsOf(markers, 'orphan').length, 0, 'nothing ran');
    // Handed back a few times (100, 200, 400, 800 ms...), refused one margin before the deadline.
    assert.ok(ms >= 1_000 && ms < 4_000, `answered after ${ms} ms`);
    const handBacks = d.workers[0]!.stderr().match(/handed back for a worker of its spec/g)?.length ?? 0;
    assert.ok(handBacks >= 2 && handBacks <= 8, `${handBacks} hand-backs: too few to wait, or a busy loop`);
  } finally {
    client.close();
    await d.stop();
  }
});
