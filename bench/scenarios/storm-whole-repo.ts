import fs from 'node:fs';
import path from 'node:path';
import { startDistributed, type Distributed } from '../../test/helpers/distributed.js';
import { openCmpClient, type CmpTestClient } from '../../test/helpers/grpc-client.js';
import { appName, checkout, countRuns, generateApp, KUSTOMIZE_LIKE, monorepoFiles, usesBase } from '../../test/helpers/monorepo.js';
import { pluginYaml } from '../../test/helpers/plugin-yaml.js';
import { pluginWritableTempDir } from '../../test/helpers/runner-process.js';
import { pool } from '../../test/helpers/pool.js';
import { fmt } from '../lib/stats.js';
import { row, type Scenario } from '../lib/types.js';

type CacheMode = 'traced' | 'on' | 'off';

interface Pass {
  /** Plugin executions during the pass. */
  runs: number;
  /** Wall time of refreshing every app. */
  ms: number;
  /** Sums over the workers' `job` log lines of the pass, by stage (`total`: the whole job), for results.json. */
  stagesMs: Record<string, number>;
}

interface Storm {
  /** The first refresh of every app (not run with the cache off). */
  cold: Pass | undefined;
  appChanged: Pass;
  baseChanged: Pass;
}

/**
 * Argo's default: the whole repo is sent for every app (no manifest-generate-paths). Refresh all
 * apps at commit 1 (cold), then after a commit touching one app's file, then after a commit
 * touching `base/` (read by every fifth app), each with a new revision as Argo sends it.
 */
async function storm(cache: CacheMode, apps: number): Promise<Storm> {
  const work = pluginWritableTempDir('cmp-storm-whole-');
  const counter = path.join(work, 'runs');
  const checkoutDir = path.join(work, 'checkout');
  const files = monorepoFiles(apps);
  const d = await startDistributed({
    pluginYaml: pluginYaml('storm-whole', KUSTOMIZE_LIKE),
    socketName: 'storm-whole.sock',
    workers: 2,
    env: { CMP_OFFLOAD_CACHE: cache },
  });
  const client = openCmpClient(d.proxy.socketPath);
  try {
    const pass = async (commit: number) => refreshAll(d, client, await checkout(checkoutDir, files), apps, commit, counter);
    // Without a cache every pass runs every app: the stock behaviour needs no warm-up pass.
    const cold = cache === 'off' ? undefined : await pass(1);
    files[`apps/${appName(7)}/config.yaml`] = 'replicas: 70\n';
    const appChanged = await pass(2);
    files['base/common.yaml'] = 'common: 2\n';
    const baseChanged = await pass(3);
    return { cold, appChanged, baseChanged };
  } finally {
    client.close();
    await d.stop();
    fs.rmSync(work, { recursive: true, force: true });
  }
}

async function refreshAll(d: Distributed, client: CmpTestClient, tgz: Buffer, apps: number, commit: number, counter: string): Promise<Pass> {
  const runsBefore = countRuns(counter).length;
  const logFrom = d.workers.map(w => w.stderr().length);
  const start = Date.now();
  await pool(
    Array.from({ length: apps }, (_, i) => appName(i + 1)),
    10,
    async app => {
      const outcome = await generateApp(client, tgz, app, commit, counter);
      if (!('value' in outcome)) throw new Error(`${app} at commit ${commit} failed: ${JSON.stringify(outcome)}`);
    },
  );
  const ms = Date.now() - start;
  const stagesMs: Record<string, number> = {};
  d.workers.forEach((w, i) => {
    for (const line of w.stderr().slice(logFrom[i]).split('\n')) {
      if (!line.includes('"msg":"job"')) continue;
      for (const [stage, v] of Object.entries((JSON.parse(line) as { ms?: Record<string, number> }).ms ?? {})) {
        stagesMs[stage] = Math.round((stagesMs[stage] ?? 0) + v);
      }
    }
  });
  return { runs: countRuns(counter).length - runsBefore, ms, stagesMs };
}

export const stormWholeRepo: Scenario = {
  name: 'storm-whole-repo',
  title: 'monorepo storm, whole repo sent per app (Argo default): CMP_OFFLOAD_CACHE=traced vs on (content cache) vs off',
  async run(opts) {
    // Every request carries the whole repo, so a pass costs apps × repo size: 100 apps keep the full run to about a minute.
    const apps = opts.quick ? 20 : 100;
    const readBase = Array.from({ length: apps }, (_, i) => i + 1).filter(usesBase).length;
    const result: Partial<Record<CacheMode, Storm>> = {};
    for (const mode of ['traced', 'on', 'off'] as const) {
      const s = await storm(mode, apps);
      result[mode] = s;
      if (s.cold) opts.log(`  ${mode}: job stages of the cold pass (ms, summed): ${JSON.stringify(s.cold.stagesMs)}`);
      opts.log(
        `  ${mode}: cold ${s.cold ? `${s.cold.runs} runs ${s.cold.ms} ms` : '-'}; one app changed ${s.appChanged.runs} runs ${s.appChanged.ms} ms; ` +
          `base changed ${s.baseChanged.runs} runs ${s.baseChanged.ms} ms`,
      );
    }
    const { traced, on, off } = result as Record<CacheMode, Storm>;
    const versus = (pick: (s: Storm) => Pass) =>
      `content cache: ${pick(on).runs} executions, ${fmt.s(pick(on).ms)}; off: ${pick(off).runs}, ${fmt.s(pick(off).ms)}`;
    const common = `${apps} apps, 1 proxy + 2 workers, 10 refreshes at a time, kustomize-like sh plugin`;
    return [
      row({
        scenario: 'storm-whole-repo',
        case: `${common}; one app's file changed`,
        measured: `traced: ${traced.appChanged.runs} execution(s), ${fmt.s(traced.appChanged.ms)}`,
        baseline: versus(s => s.appChanged),
        value: traced.appChanged.runs,
        unit: '',
        target: { op: '==', value: 1 },
        details: { apps, traced, on, off },
        note: `${(off.appChanged.ms / traced.appChanged.ms).toFixed(1)}× faster than off`,
      }),
      row({
        scenario: 'storm-whole-repo',
        case: `${common}; base/ changed (read by ${readBase} apps)`,
        measured: `traced: ${traced.baseChanged.runs} execution(s), ${fmt.s(traced.baseChanged.ms)}`,
        baseline: versus(s => s.baseChanged),
        value: traced.baseChanged.runs,
        unit: '',
        target: { op: '==', value: readBase },
        details: {},
      }),
    ];
  },
};
