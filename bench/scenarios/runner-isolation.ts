import { startDistributed } from '../../test/helpers/distributed.js';
import { openCmpClient } from '../../test/helpers/grpc-client.js';
import { pluginYaml } from '../../test/helpers/plugin-yaml.js';
import { tarballOf } from '../../test/helpers/repo.js';
import { RUNNERS_ISOLATED } from '../../test/helpers/runner-process.js';
import { generateCall, timedGenerate } from '../lib/calls.js';
import { fmt, median, msSince, pct } from '../lib/stats.js';
import { row, type Row, type Scenario } from '../lib/types.js';

/** A sleep-bound plugin (waits 200 ms) and a CPU-light one (prints at once: the per-run cost shows). */
const PLUGINS = {
  'sleep 0.2': `generate:\n  command: [sh, -c, "sleep 0.2; printf 'kind: ConfigMap\\\\nmetadata:\\\\n  name: %s\\\\n' \\"$ARGOCD_ENV_I\\""]`,
  'printf only': `generate:\n  command: [sh, -c, "printf 'kind: ConfigMap\\\\nmetadata:\\\\n  name: %s\\\\n' \\"$ARGOCD_ENV_I\\""]`,
} as const;

interface Measure {
  ms: number;
  perSecond: number;
  sweepMs: number[];
}

/**
 * Runner isolation's cost (docs/security.md#cost-of-runner-isolation): one worker at CMP_OFFLOAD_CONCURRENCY=2
 * with today's one shared runner (CMP_OFFLOAD_RUNNER_ISOLATION=shared) against two isolated
 * runners (one request at a time each, a sweep after each run), on the same machine (equal CPU);
 * and the sweep's duration per run, from the worker's job log (stage `sweep`).
 */
export const runnerIsolation: Scenario = {
  name: 'runner-isolation',
  title: 'throughput of 2 isolated runners (one run at a time, sweep after each) against 1 shared runner at concurrency 2, and the sweep time per run',
  async run(opts) {
    if (!RUNNERS_ISOLATED) throw new Error('runner-isolation needs root (runners run in a PID namespace of their own, unshare)');
    const requests = opts.quick ? 24 : 80;
    const tgz = await tarballOf({ 'f.txt': 'x' });
    const rows: Row[] = [];
    for (const [label, spec] of Object.entries(PLUGINS)) {
      const measure = async (isolated: boolean): Promise<Measure> => {
        const d = await startDistributed({
          pluginYaml: pluginYaml('iso-bench', spec),
          socketName: 'iso-bench.sock',
          workers: 1,
          runners: isolated ? 2 : 1,
          env: { CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_CONCURRENCY: '2', ARGOCD_CMP_SERVER_LOGLEVEL: 'info' },
          workerEnv: isolated ? {} : { CMP_OFFLOAD_RUNNER_ISOLATION: 'shared' },
        });
        const client = openCmpClient(d.proxy.socketPath);
        try {
          for (let i = 0; i < 4; i++) await timedGenerate(client, generateCall(tgz, { I: `warm-up-${i}` }));
          const seen = d.workers[0]!.stderr().length;
          const start = process.hrtime.bigint();
          await Promise.all(Array.from({ length: requests }, (_, i) => timedGenerate(client, generateCall(tgz, { I: String(i) }))));
          const ms = msSince(start);
          const sweepMs = d.workers[0]!.stderr().slice(seen).split('\n').filter(l => l.includes('"msg":"job"'))
            .map(l => (JSON.parse(l) as { ms?: { sweep?: number } }).ms?.sweep)
            .filter((v): v is number => typeof v === 'number')
            .sort((a, b) => a - b);
          opts.log(`runner-isolation ${label} ${isolated ? '2 isolated runners' : '1 shared runner'}: ${ms.toFixed(0)} ms`);
          return { ms, perSecond: (requests * 1000) / ms, sweepMs };
        } finally {
          client.close();
          await d.stop();
        }
      };
      const shared = await measure(false);
      const isolated = await measure(true);
      const ratio = isolated.perSecond / shared.perSecond;
      const s = isolated.sweepMs;
      rows.push(
        row({
          scenario: 'runner-isolation',
          case: `${requests} requests, \`${label}\` plugin, concurrency 2`,
          measured: `2 isolated runners: ${isolated.perSecond.toFixed(1)} req/s (${fmt.s(isolated.ms)}); sweep per run p50 ${median(s).toFixed(1)} ms, p95 ${pct(s, 95).toFixed(1)} ms`,
          baseline: `1 shared runner: ${shared.perSecond.toFixed(1)} req/s (${fmt.s(shared.ms)})`,
          value: ratio,
          unit: '×',
          target: { op: '>=', value: 0.8 },
          details: { requests, shared, isolated },
          note: opts.quick ? `quick: ${requests} requests` : undefined,
        }),
      );
    }
    return rows;
  },
};
