import fs from 'node:fs';
import { startDistributed } from '../../test/helpers/distributed.js';
import { openCmpClient } from '../../test/helpers/grpc-client.js';
import { pluginWritableTempDir } from '../../test/helpers/runner-process.js';
import { commitChange, executions, makeMonorepo, packPerApp, refreshAll, STORM_PLUGIN } from '../lib/monorepo.js';
import { fmt } from '../lib/stats.js';
import { row, type Scenario } from '../lib/types.js';

// 50 apps with --quick.
const APPS = 200;

/** One storm: refresh all apps at commit A, change one app, refresh all again; executions and wall time of the second refresh. */
async function storm(cache: 'on' | 'off', apps: number): Promise<{ runs: number; ms: number }> {
  const repo = makeMonorepo(apps);
  const markers = pluginWritableTempDir('cmp-storm-');
  const d = await startDistributed({ pluginYaml: STORM_PLUGIN, socketName: 'storm.sock', workers: 2, env: { MARKERS: markers, CMP_OFFLOAD_CACHE: cache } });
  const client = openCmpClient(d.proxy.socketPath);
  try {
    const dirs = Array.from({ length: apps }, (_, i) => repo.appDir(i));
    await refreshAll(client, await packPerApp(dirs));
    commitChange(repo.root, repo.appDir(7), '2');
    const tarballs = await packPerApp(dirs);
    const before = executions(markers);
    const ms = await refreshAll(client, tarballs);
    return { runs: executions(markers) - before, ms };
  } finally {
    client.close();
    await d.stop();
    repo.remove();
    fs.rmSync(markers, { recursive: true, force: true });
  }
}

export const monorepoStorm: Scenario = {
  name: 'monorepo-storm',
  title: `${APPS} apps, per-app tarballs (--plugin-use-manifest-generate-paths); one app changes, all refresh: cache vs CMP_OFFLOAD_CACHE=off`,
  async run(opts) {
    const apps = opts.quick ? 50 : APPS;
    const cached = await storm('on', apps);
    const stock = await storm('off', apps);
    opts.log(`storm: cache ${cached.runs} runs ${cached.ms} ms; off ${stock.runs} runs ${stock.ms} ms`);
    return [
      row({
        scenario: 'monorepo-storm',
        case: `${apps} apps, 1 changed, 1 proxy + 2 workers, 10 refreshes at a time`,
        measured: `${cached.runs} plugin execution(s), ${fmt.s(cached.ms)}`,
        baseline: `cache off: ${stock.runs} executions, ${fmt.s(stock.ms)}`,
        value: cached.runs,
        unit: '',
        target: { op: '==', value: 1 },
        details: { cached, stock, speedup: stock.ms / cached.ms },
        note: `${(stock.ms / cached.ms).toFixed(1)}× faster`,
      }),
    ];
  },
};
