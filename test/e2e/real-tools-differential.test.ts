import fs from 'node:fs';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { openCmpClient } from '../helpers/grpc-client.js';
import { scrape } from '../helpers/metrics.js';
import { checkout, countRuns, generateApp } from '../helpers/monorepo.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { mutateRealTools, realToolRepo, realToolsPlugin, TOOL_APPS, toolOf, toolProblem, type RealToolsCommit, type Tool } from '../helpers/real-tool-repo.js';
import { freePort } from '../helpers/redis-server.js';
import { rng } from '../helpers/rng.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { inCI } from '../unit/infra/kubectl.js';
import { MODES, startCmp } from './harness.js';

/**
 * The traced cache's safety net on the tools users run as plugins (the ones the bench's
 * trace-overhead-real rows measure): kubectl kustomize, jsonnet and a cdk8s-like node generator,
 * over one generated monorepo (test/helpers/real-tool-repo.ts). After each random commit, the
 * app the commit touched (every app of a tool whose shared files it touched) and one random app
 * of each tool are asked of a traced server and of a server with the cache off: the answers must
 * be equal (errors too, up to their work dir and kubectl's log header). The
 * traced server must have reused answers for every tool and never fallen back: a run whose
 * record is incomplete is keyed by the whole tree, which is always right and would prove
 * nothing. A tool that is missing is left out, except under CI=true, where the test fails.
 * CMP_OFFLOAD_REAL_DIFF_COMMITS / _SEED override the defaults (12 commits keep CI within its time;
 * 24 or more for changes to the recorder).
 */
const COMMITS = Number(process.env.CMP_OFFLOAD_REAL_DIFF_COMMITS ?? 12);
const SEED = Number(process.env.CMP_OFFLOAD_REAL_DIFF_SEED ?? 20261201);

const problems = (['kubectl', 'jsonnet', 'node'] as const).map(t => [t, toolProblem(t)] as const).filter(([, p]) => p !== undefined);
const TOOLS: Tool[] = (['kubectl', 'jsonnet', 'node'] as const).filter(t => !problems.some(([m]) => m === t));

const work = pluginWritableTempDir('cmp-real-diff-');
after(() => fs.rmSync(work, { recursive: true, force: true }));

/** An answer with what differs between two runs of the same tool replaced: work dir paths, and klog's time and pid (kubectl's errors). */
function normalized(answer: unknown): string {
  return JSON.stringify(answer)
    .replace(/[^\s"'`]*\/_cmp_server\/[0-9a-f-]{36}/g, '<workdir>')
    .replace(/\b[EWIF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ /g, '<klog> ');
}

for (const mode of MODES) {
  describe(`traced cache differential on real tools (${mode})`, () => {
    test(`${TOOLS.join(', ')}: after each of ${COMMITS} random commits, traced answers equal a cache-off run`, { timeout: 10 * 60_000 }, async t => {
      if (inCI) for (const [tool, why] of problems) assert.fail(`${tool}: ${why}`);
      for (const [tool, why] of problems) t.diagnostic(`left out: ${tool}: ${why}`);
      const port = await freePort();
      const spec = realToolsPlugin();
      const [traced, off] = await Promise.all([
        startCmp(mode, {
          pluginYaml: pluginYaml('real-traced', spec),
          socketName: 'real-traced.sock',
          // The default cache mode: traced.
          env: { CMP_OFFLOAD_HTTP_ADDR: 'off' },
          proxyEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}` },
          workers: 1,
        }),
        startCmp(mode, { pluginYaml: pluginYaml('real-off', spec), socketName: 'real-off.sock', env: { CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_HTTP_ADDR: 'off' }, workers: 1 }),
      ]);
      const tc = openCmpClient(traced.socketPath);
      const oc = openCmpClient(off.socketPath);
      const counter = path.join(work, `runs-${mode}`);
      const offCounter = path.join(work, `off-${mode}`);
      const dir = path.join(work, `repo-${mode}`);
      try {
        const r = rng(SEED);
        const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
        const tree = realToolRepo(TOOLS, r);
        const initial = { ...tree };
        const asked = new Map<Tool, number>(TOOLS.map(tool => [tool, 0]));
        const failed = new Map<Tool, number>(TOOLS.map(tool => [tool, 0]));
        const history: string[] = [];
        for (let commit = 1; commit <= COMMITS; commit++) {
          // The first commit is the tree as generated: every app runs once.
          const change: RealToolsCommit = commit === 1 ? { what: 'initial tree' } : mutateRealTools(tree, initial, TOOLS, r);
          history.push(change.what);
          const tgz = await checkout(dir, tree);
          const apps = new Set(commit === 1 ? TOOLS.flatMap(tool => TOOL_APPS[tool]) : TOOLS.map(tool => pick(TOOL_APPS[tool])));
          if (change.app) apps.add(change.app);
          // A commit to shared files (a base, a library, a chart): every app of that tool, so that
          // the ones reading them and the ones that do not are both checked.
          if (change.shared && TOOLS.includes(change.shared)) for (const app of TOOL_APPS[change.shared]) apps.add(app);
          for (const app of apps) {
            const [cached, fresh] = await Promise.all([generateApp(tc, tgz, app, commit, counter), generateApp(oc, tgz, app, commit, offCounter)]);
            assert.equal(normalized(cached), normalized(fresh), `commit ${commit} (${history.slice(-3).join('; ')}), app ${app}`);
            asked.set(toolOf(app), asked.get(toolOf(app))! + 1);
            if (!('value' in fresh)) failed.set(toolOf(app), failed.get(toolOf(app))! + 1);
          }
        }
        const runs = countRuns(counter);
        const m = await scrape(port);
        const count = (result: string) => m.get(`cmp_offload_traced_cache_total{result="${result}"}`) ?? 0;
        for (const tool of TOOLS) {
          const ran = runs.filter(app => toolOf(app) === tool).length;
          t.diagnostic(`${tool}: ${asked.get(tool)} answers (${failed.get(tool)} of them errors), ${ran} traced runs`);
          assert.ok(ran < asked.get(tool)!, `${tool}: the traced server ran ${ran} times for ${asked.get(tool)} answers: nothing was reused`);
        }
        t.diagnostic(`traced cache: ${count('hit')} hits, ${count('miss')} misses, ${count('fallback')} fallbacks`);
        assert.equal(count('fallback'), 0, 'every successful run left a complete record');
        assert.ok(count('hit') > 0 && count('miss') > 0);
      } finally {
        tc.close();
        oc.close();
        await Promise.all([traced.stop(), off.stop()]);
      }
    });
  });
}
