import { startDistributed } from '../../test/helpers/distributed.js';
import { openCmpClient } from '../../test/helpers/grpc-client.js';
import { startProxy } from '../../test/helpers/proxy-process.js';
import { tarballOf } from '../../test/helpers/repo.js';
import { generateCall, timedGenerate } from '../lib/calls.js';
import { profileEnv } from '../lib/processes.js';
import { startBareServer } from '../lib/service.js';
import { pluginYaml } from '../../test/helpers/plugin-yaml.js';
import { fmt, pct } from '../lib/stats.js';
import { rng } from '../../test/helpers/rng.js';
import { TextGen } from '../lib/text.js';
import { row, type Row, type Scenario } from '../lib/types.js';

/** 200 ms of work, then the app's manifests. */
const PLUGIN = pluginYaml('cached', 'generate:\n  command: [sh, -c, "sleep 0.2; cat manifests.yaml"]');

/** A ~100 KB app: one manifests file and source-like files. */
function app(): Record<string, string> {
  const gen = new TextGen(rng(4));
  const files: Record<string, string> = {};
  for (let i = 0; i < 10; i++) files[`src/part-${i}.txt`] = gen.text(9_000);
  files['manifests.yaml'] = Array.from({ length: 20 }, (_, i) => `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-${i}\ndata:\n  k: "${i}"\n`).join('---\n');
  return files;
}

export const cacheHit: Scenario = {
  name: 'cache-hit',
  title: 'p50 latency of a cache hit (100 KB app) vs a bare grpc-js server receiving the same stream, and a cold run of a 200 ms plugin',
  async run(opts) {
    const files = app();
    const appBytes = Object.values(files).reduce((n, s) => n + s.length, 0);
    const tgz = await tarballOf(files);
    const hits = opts.quick ? 100 : 300;
    const colds = opts.quick ? 5 : 10;
    // Both servers' and the client's code paths are compiled before anything is measured.
    const warmUp = opts.quick ? 50 : 100;
    const rows: Row[] = [];
    const env = profileEnv(opts, 'cache-hit');
    const setups = [
      { mode: 'standalone', start: async () => { const p = await startProxy({ pluginYaml: PLUGIN, socketName: 'cached.sock', env }); return { socket: p.socketPath, stop: () => p.stop() }; } },
      { mode: 'distributed', start: async () => { const d = await startDistributed({ pluginYaml: PLUGIN, socketName: 'cached.sock', workers: 2, env }); return { socket: d.proxy.socketPath, stop: () => d.stop() }; } },
    ];
    // The floor: a grpc-js server that only receives the stream, hashes it and answers.
    const bare = await startBareServer(profileEnv(opts, 'cache-hit'));
    const bareClient = openCmpClient(bare.socketPath);
    try {
      for (const setup of setups) {
        const svc = await setup.start();
        const client = openCmpClient(svc.socket);
        try {
          // Cold: each run's env differs, so each is a miss that runs the plugin.
          const cold: number[] = [];
          for (let i = 0; i < colds; i++) cold.push((await timedGenerate(client, generateCall(tgz, { RUN: `cold-${i}` }))).ms);
          const call = generateCall(tgz, { RUN: 'hit' });
          const first = await timedGenerate(client, call);
          for (let i = 0; i < warmUp; i++) {
            await timedGenerate(client, call);
            await timedGenerate(bareClient, call);
          }
          // Interleaved, so that both see the same machine.
          const hit: number[] = [];
          const floor: number[] = [];
          for (let i = 0; i < hits; i++) {
            const r = await timedGenerate(client, call);
            if (r.manifests.join('\n') !== first.manifests.join('\n')) throw new Error('a cache hit returned different manifests');
            hit.push(r.ms);
            floor.push((await timedGenerate(bareClient, call)).ms);
          }
          hit.sort((a, b) => a - b);
          floor.sort((a, b) => a - b);
          cold.sort((a, b) => a - b);
          rows.push(
            row({
              scenario: 'cache-hit',
              case: `${setup.mode}, ${(appBytes / 1000).toFixed(0)} KB app (${tgz.length} B tarball), ${hits} hits`,
              measured: `hit p50 ${fmt.ms(pct(hit, 50))}, p99 ${fmt.ms(pct(hit, 99))}`,
              baseline: `bare server p50 ${fmt.ms(pct(floor, 50))}; cold run p50 ${fmt.ms(pct(cold, 50))}`,
              value: pct(hit, 50),
              unit: 'ms',
              target: { op: '<=', value: 2 },
              details: { hitMs: hit, bareMs: floor, coldMs: cold, appBytes, tarballBytes: tgz.length },
            }),
          );
        } finally {
          client.close();
          await svc.stop();
        }
      }
    } finally {
      bareClient.close();
      await bare.stop();
    }
    return rows;
  },
};
