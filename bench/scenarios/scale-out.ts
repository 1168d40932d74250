import { startDistributed } from '../../test/helpers/distributed.js';
import { openCmpClient } from '../../test/helpers/grpc-client.js';
import { tarballOf } from '../../test/helpers/repo.js';
import { generateCall, timedGenerate } from '../lib/calls.js';
import { pluginYaml } from '../../test/helpers/plugin-yaml.js';
import { profileEnv } from '../lib/processes.js';
import { fmt, msSince } from '../lib/stats.js';
import { row, type Scenario } from '../lib/types.js';

const PLUGIN = pluginYaml('sleepy', `generate:\n  command: [sh, -c, "sleep 0.5; printf 'kind: ConfigMap\\\\nmetadata:\\\\n  name: %s\\\\n' \\"$ARGOCD_ENV_I\\""]`);
const RUN_MS = 500;

export const scaleOut: Scenario = {
  name: 'scale-out',
  title: 'makespan of concurrent requests of a `sleep 0.5` plugin with 1, 2, 4, 8 worker processes (1 run at a time each); efficiency = ideal/actual',
  async run(opts) {
    const requests = opts.quick ? 32 : 64;
    const counts = opts.quick ? [8] : [1, 2, 4, 8];
    const tgz = await tarballOf({ 'f.txt': 'x' });
    const results: { workers: number; ms: number; ideal: number; efficiency: number }[] = [];
    for (const workers of counts) {
      const d = await startDistributed({
        pluginYaml: PLUGIN,
        socketName: 'sleepy.sock',
        workers: 1,
        env: { CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_CONCURRENCY: '1', ...profileEnv(opts, 'scale-out') },
      });
      // One at a time: eight Node processes starting at once on two cores can take longer than the helper waits.
      while (d.workers.length < workers) await d.addWorker();
      const client = openCmpClient(d.proxy.socketPath);
      try {
        // One warm-up request per worker, at once (each runs one at a time, so each takes one): a
        // worker's first job pays lazy loading and cold code, which the cold-start row measures.
        await Promise.all(Array.from({ length: workers }, (_, i) => timedGenerate(client, generateCall(tgz, { I: `warm-up-${i}` }))));
        const start = process.hrtime.bigint();
        await Promise.all(Array.from({ length: requests }, (_, i) => timedGenerate(client, generateCall(tgz, { I: String(i) }))));
        const ms = msSince(start);
        const ideal = Math.ceil(requests / workers) * RUN_MS;
        results.push({ workers, ms, ideal, efficiency: ideal / ms });
        opts.log(`scale-out ${workers} workers: ${ms.toFixed(0)} ms (ideal ${ideal})`);
      } finally {
        client.close();
        await d.stop();
      }
    }
    const top = results[results.length - 1]!;
    return [
      row({
        scenario: 'scale-out',
        case: `${requests} requests, ${top.workers} workers`,
        measured: `makespan ${fmt.s(top.ms)}; efficiency ${results.map(r => `${r.workers}w ${r.efficiency.toFixed(2)}`).join(', ')}`,
        baseline: `ideal ${fmt.s(top.ideal)} (${requests}/${top.workers} × 0.5 s)`,
        value: top.efficiency,
        unit: '',
        target: { op: '>=', value: 0.9 },
        details: { requests, results },
        note: opts.quick ? 'quick: 32 requests, 8 workers' : undefined,
      }),
    ];
  },
};
