import { Redis } from 'ioredis';
import { startDistributed } from '../../test/helpers/distributed.js';
import { untilHttpListening } from '../../test/integration/distributed-helpers.js';
import { openCmpClient } from '../../test/helpers/grpc-client.js';
import { tarballOf } from '../../test/helpers/repo.js';
import { generateCall, timedGenerate } from '../lib/calls.js';
import { pluginYaml } from '../../test/helpers/plugin-yaml.js';
import { profileEnv } from '../lib/processes.js';
import { fmt, median, msSince, sleep } from '../lib/stats.js';
import { row, type Scenario } from '../lib/types.js';

const PLUGIN = pluginYaml('cold', `generate:\n  command: [sh, -c, "printf 'kind: ConfigMap\\\\nmetadata:\\\\n  name: x\\\\n'"]`);

export const coldStart: Scenario = {
  name: 'cold-start',
  // A worker is a pod's two processes, worker and runner, started together as its containers are
  // (test/helpers/worker-process.ts); the worker fetches jobs once its runner listens.
  title: 'scale from zero: worker start (worker + runner processes, together) → the job already waiting in the queue is completed',
  async run(opts) {
    const samples = opts.quick ? 2 : 5;
    const tgz = await tarballOf({ 'f.txt': 'x' });
    const d = await startDistributed({ pluginYaml: PLUGIN, socketName: 'cold.sock', workers: 0, env: { CMP_OFFLOAD_CACHE: 'off', ...profileEnv(opts, 'cold-start') } });
    const client = openCmpClient(d.proxy.socketPath);
    const redis = new Redis(d.redis.url);
    const coldMs: number[] = [];
    const readyMs: number[] = [];
    const warmMs: number[] = [];
    try {
      for (let i = 0; i < samples; i++) {
        const pending = timedGenerate(client, generateCall(tgz, { I: String(i) }, { timeoutMs: 60_000 }));
        while ((await redis.llen('{cmp-offload}:cold:wait')) === 0) await sleep(10);
        const start = process.hrtime.bigint();
        const ready = d.addWorker().then(w => ({ w, ms: msSince(start) }));
        await pending;
        coldMs.push(msSince(start));
        const { w, ms } = await ready;
        readyMs.push(ms);
        // The same request path once the worker is warm, for comparison: its ops server loads
        // (fastify, ~70 ms of its loop) while the first jobs run; the warm request comes after it.
        await untilHttpListening(w, 'the worker\'s ops server');
        warmMs.push((await timedGenerate(client, generateCall(tgz, { I: `warm-${i}` }))).ms);
        d.workers.splice(d.workers.indexOf(w), 1);
        await w.stop();
      }
    } finally {
      redis.disconnect();
      client.close();
      await d.stop();
    }
    const cold = median(coldMs);
    opts.log(`cold start: ${coldMs.map(x => x.toFixed(0)).join('/')} ms; ready ${readyMs.map(x => x.toFixed(0)).join('/')} ms`);
    return [
      row({
        scenario: 'cold-start',
        case: `worker spawn → first job done, median of ${samples}`,
        measured: `${fmt.ms(cold)} (process ready after ${fmt.ms(median(readyMs))})`,
        baseline: `same request on a warm worker ${fmt.ms(median(warmMs))}`,
        value: cold,
        unit: 'ms',
        target: { op: '<=', value: 1000 },
        details: { coldMs, readyMs, warmMs },
      }),
    ];
  },
};
