import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as yaml from 'js-yaml';
import { splitManifests } from '../../cmp/split/split-manifests.js';
import { openCmpClient } from '../helpers/grpc-client.js';
import { pool } from '../helpers/pool.js';
import { rng } from '../helpers/rng.js';
import { appName, checkout, countRuns, generateApp, KUSTOMIZE_LIKE, monorepoFiles } from '../helpers/monorepo.js';
import { MODES, startCmp } from './harness.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';

/**
 * Differential test of the traced cache: a random sequence of commits (edits, adds, deletes,
 * renames, mode changes under preserveFileMode) over the monorepo fixture. After each commit,
 * every app's answer from the traced server must equal a fresh run, byte for byte: for every app,
 * the plugin's own command run on the checkout (split like the server splits); for the changed
 * app and two random ones, also the whole answer of a server with the cache off.
 * CMP_OFFLOAD_DIFF_COMMITS / _SEED override the defaults.
 */
const COMMITS = Number(process.env.CMP_OFFLOAD_DIFF_COMMITS ?? 200);
const SEED = Number(process.env.CMP_OFFLOAD_DIFF_SEED ?? 20240611);
const APPS = 50;
const SPEC = `preserveFileMode: true\n${KUSTOMIZE_LIKE}`;

const SCRIPT = (yaml.load(KUSTOMIZE_LIKE) as { generate: { args: string[] } }).generate.args[0]!;

/** The plugin's generate command run directly on the checkout: what any fresh run must answer. */
function freshRun(dir: string, app: string, counter: string): Promise<{ manifests: string[] } | { error: string }> {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, ARGOCD_APP_NAME: app, COUNTER: counter };
    execFile('sh', ['-c', SCRIPT], { cwd: path.join(dir, 'apps', app), env, encoding: 'buffer' }, (err, stdout) => {
      if (err) return reject(err);
      try {
        resolve({ manifests: splitManifests(stdout) });
      } catch (e) {
        resolve({ error: (e as Error).message });
      }
    });
  });
}

const work = pluginWritableTempDir('cmp-traced-diff-');
after(() => fs.rmSync(work, { recursive: true, force: true }));

type Tree = { files: Record<string, string>; modes: Record<string, number> };

/** One random commit; returns a short description and the app it touched, if any. */
function mutate(tree: Tree, r: () => number): { what: string; app?: string } {
  const pick = <T>(xs: T[]): T => xs[Math.floor(r() * xs.length)]!;
  const paths = Object.keys(tree.files).sort();
  const dirs = [...new Set(paths.map(p => path.posix.dirname(p)))].sort();
  const appOf = (p: string) => /^apps\/(a\d\d)\//.exec(p)?.[1];
  const content = () => `k${Math.floor(r() * 5)}: ${Math.floor(r() * 1000)}\n`;
  const name = () => pick(['config', 'extra', 'values-prod', 'notes', 'kustomization']) + pick(['.yaml', '.yaml', '.txt']);
  const op = pick(['edit', 'edit', 'add', 'add', 'delete', 'rename', 'chmod', 'ref']);
  switch (op) {
    case 'edit': {
      const p = pick(paths);
      tree.files[p] = content();
      return { what: `edit ${p}`, app: appOf(p) };
    }
    case 'add': {
      const dir = pick([...dirs, 'apps', `apps/${appName(1 + Math.floor(r() * APPS))}/sub`]);
      const p = path.posix.join(dir, name());
      tree.files[p] = content();
      return { what: `add ${p}`, app: appOf(p) };
    }
    case 'delete': {
      const p = pick(paths);
      delete tree.files[p];
      delete tree.modes[p];
      return { what: `delete ${p}`, app: appOf(p) };
    }
    case 'rename': {
      const from = pick(paths);
      const to = path.posix.join(r() < 0.5 ? path.posix.dirname(from) : pick(dirs), name());
      if (to === from) return { what: 'rename to itself' };
      tree.files[to] = tree.files[from]!;
      if (tree.modes[from] !== undefined) tree.modes[to] = tree.modes[from]!;
      delete tree.files[from];
      delete tree.modes[from];
      return { what: `rename ${from} ${to}`, app: appOf(to) ?? appOf(from) };
    }
    case 'chmod': {
      const p = pick(paths);
      tree.modes[p] = tree.modes[p] === 0o755 ? 0o644 : 0o755;
      return { what: `chmod ${p} ${tree.modes[p]!.toString(8)}`, app: appOf(p) };
    }
    default: {
      // Point an app at the shared base, at another app, or nowhere.
      const app = appName(1 + Math.floor(r() * APPS));
      const p = `apps/${app}/base.ref`;
      const target = pick(['../../base', `../${appName(1 + Math.floor(r() * APPS))}`, '../../missing']);
      if (r() < 0.2) delete tree.files[p];
      else tree.files[p] = `${target}\n`;
      return { what: `ref ${p} -> ${tree.files[p] ?? '(removed)'}`, app };
    }
  }
}

// The differential walk is long (hundreds of plugin runs per mode); by default it runs in
// standalone mode, whose lookups share all their code with distributed mode (the distributed
// traced path has its own e2e tests). CMP_OFFLOAD_DIFF_MODES=standalone,distributed runs both.
const DIFF_MODES = MODES.filter(m => (process.env.CMP_OFFLOAD_DIFF_MODES ?? 'standalone').split(',').includes(m));

for (const mode of DIFF_MODES) {
  describe(`traced cache differential (${mode})`, () => {
    test(`after each of ${COMMITS} random commits, cached answers equal fresh runs with the cache off`, { timeout: 15 * 60_000 }, async () => {
      const [traced, off] = await Promise.all([
        startCmp(mode, { pluginYaml: pluginYaml('diff-traced', SPEC), socketName: 'diff-traced.sock', env: { CMP_OFFLOAD_CACHE: 'traced' } }),
        startCmp(mode, { pluginYaml: pluginYaml('diff-off', SPEC), socketName: 'diff-off.sock', env: { CMP_OFFLOAD_CACHE: 'off' } }),
      ]);
      const tc = openCmpClient(traced.socketPath);
      const oc = openCmpClient(off.socketPath);
      const counter = path.join(work, `runs-${mode}`);
      const offCounter = path.join(work, `off-${mode}`);
      const groundCounter = path.join(work, `fresh-${mode}`);
      const allApps = Array.from({ length: APPS }, (_, i) => appName(i + 1));
      const dir = path.join(work, `repo-${mode}`);
      try {
        const r = rng(SEED);
        const tree: Tree = { files: monorepoFiles(APPS), modes: {} };
        const history: string[] = [];
        let asked = 0;
        for (let commit = 1; commit <= COMMITS; commit++) {
          const change = mutate(tree, r);
          history.push(change.what);
          const tgz = await checkout(dir, tree.files, tree.modes);
          const apps = new Set<string>([appName(1 + Math.floor(r() * APPS)), appName(1 + Math.floor(r() * APPS))]);
          if (change.app) apps.add(change.app);
          const where = (app: string) => `commit ${commit} (${history.slice(-3).join('; ')}), app ${app}`;
          for (const app of apps) {
            const [cached, fresh] = await Promise.all([
              generateApp(tc, tgz, app, commit, counter),
              generateApp(oc, tgz, app, commit, offCounter),
            ]);
            asked++;
            assert.deepEqual(cached, fresh, where(app));
          }
          await pool(allApps, 4, async app => {
            if (apps.has(app) || !fs.existsSync(path.join(dir, 'apps', app))) return;
            const [cached, fresh] = await Promise.all([generateApp(tc, tgz, app, commit, counter), freshRun(dir, app, groundCounter)]);
            asked++;
            if ('error' in fresh) {
              // Output that does not split: the server must fail the same way (its text ends with the splitter's).
              assert.ok('details' in cached && cached.details.endsWith(fresh.error), `${where(app)}: ${JSON.stringify(cached)} vs ${fresh.error}`);
            } else {
              assert.ok('value' in cached, `${where(app)}: ${JSON.stringify(cached)}`);
              assert.deepEqual(cached.value.manifests, fresh.manifests, where(app));
            }
          });
        }
        // The cache did its job: most answers came without a run.
        const runs = countRuns(counter).length;
        assert.ok(runs < asked / 5, `traced runs ${runs} for ${asked} requests`);
      } finally {
        tc.close();
        oc.close();
        await Promise.all([traced.stop(), off.stop()]);
      }
    });
  });
}
