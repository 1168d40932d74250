import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import assert from 'node:assert/strict';
import type { Distributed } from '../helpers/distributed.js';
import { openCmpClient } from '../helpers/grpc-client.js';
import { wireGenerate } from '../helpers/raw-grpc.js';
import { BIN } from '../helpers/paths.js';
import { endsOf, generateCall, sleep, startsOf, until } from './distributed-helpers.js';

const run = promisify(execFile);

/** The manifests the marker plugin prints for a tag. */
export const manifestsOf = (tag: string) => [`{"data":{"true":1.5},"kind":"ConfigMap","metadata":{"name":"${tag}"}}`];

/**
 * What every Redis topology must carry end to end, through a real proxy, workers with their
 * runners and the `cache` CLI: a GenerateManifest run on a worker, a cache hit (no second run),
 * `cache stats` and `cache purge --app` (the entry is computed again afterwards), and the cancel
 * of a running job whose caller's deadline passed (the plugin is killed on the worker).
 */
/** How many jobs the workers have finished (one `job` log line each, whatever the outcome). */
function jobLines(d: Distributed): number {
  return d.workers.reduce((n, w) => n + (w.stderr().match(/"msg":"job"/g)?.length ?? 0), 0);
}

export async function topologyFlow(d: Distributed, markers: string, tgz: Buffer, tag: string): Promise<void> {
  const client = openCmpClient(d.proxy.socketPath);
  const app = `${tag}-app`;
  try {
    const first = await client.generate(generateCall(tgz, { TAG: tag }, { appName: app }));
    assert.deepEqual(first, { value: { manifests: manifestsOf(tag), sourceType: '' } });
    const workerDirs = d.workers.map(w => path.join(w.base, 'work'));
    assert.ok(workerDirs.includes(startsOf(markers, tag)[0]!), 'the run happened on a worker');

    const hit = await client.generate(generateCall(tgz, { TAG: tag }, { appName: app }));
    assert.deepEqual(hit, first);
    assert.equal(startsOf(markers, tag).length, 1, 'the repeat was a cache hit');

    const env = { ...process.env, ...d.env };
    const stats = await run(process.execPath, [BIN, 'cache', 'stats'], { env });
    assert.match(stats.stdout, /^cache entries: [1-9]\d* \(\d+ bytes\)\n {2}plugin \S+: [1-9]\d*\ntarball blobs: [1-9]\d* /);
    const purged = await run(process.execPath, [BIN, 'cache', 'purge', '--app', app], { env });
    // One run's entries: its whole-tree entry and, with the default traced cache, its traced one.
    assert.equal(purged.stdout, 'purged 2 cache entries\n');
    const again = await client.generate(generateCall(tgz, { TAG: tag }, { appName: app }));
    assert.deepEqual(again, first);
    assert.equal(startsOf(markers, tag).length, 2, 'a purged entry is computed again');

    // A caller whose deadline passes while its job runs: the run is killed on the worker (the
    // proxy publishes a cancel, the worker also holds the deadline), and the job ends long
    // before the plugin's 30 s sleep would.
    const cancelTag = `${tag}-cancel`;
    const jobsBefore = jobLines(d);
    const timeoutMs = 3_000;
    const res = await wireGenerate(d.proxy.socketPath, generateCall(tgz, { TAG: cancelTag, SLEEP: '30' }, { appName: app, timeoutMs }));
    assert.ok('noStatus' in res || res.status !== 0, `the call did not fail: ${JSON.stringify(res)}`);
    assert.equal(startsOf(markers, cancelTag).length, 1, 'the run started before the deadline');
    await until(() => jobLines(d) > jobsBefore, 15_000, 'the cancelled job to end on its worker').catch(e => {
      throw new Error(`${(e as Error).message}\nproxy: ${d.proxy.stderr().slice(-3000)}\nworkers: ${d.workers.map(w => w.stderr().slice(-3000)).join('\n')}`);
    });
    await sleep(500);
    assert.equal(endsOf(markers, cancelTag), 0, 'the plugin was killed before writing its marker');
    await until(() => fs.readdirSync(d.proxy.workRoot).length === 0, 15_000, 'the proxy to finish the request');
  } finally {
    client.close();
  }
}
