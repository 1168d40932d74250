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
import { argoRefreshes } from '../helpers/argo-refresh.js';
import { appName, checkout, countRuns, generateApp, LAYERED_PLUGIN, monorepoFiles } from '../helpers/monorepo.js';
import { freePort } from '../helpers/redis-server.js';
import { MODES, oneRunAtATime, startCmp } from './harness.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';

/**
 * Differential test of the traced cache: a random sequence of commits (edits, adds, deletes,
 * renames, mode changes under preserveFileMode, includes of other directories: bases, a base's
 * own base, chart-like trees) over the layered monorepo fixture. After each commit, every app's
 * answer from the traced server must equal a fresh run, byte for byte: for every app, the
 * plugin's own command run on the checkout (split like the server splits); for the changed app
 * and two random ones, also the whole answer of a server with the cache off.
 *
 * The same walk proves the derived manifest-generate-paths sound on real diffs: before each
 * commit every app's value is read from the proxy's /generate-paths; after it, every app whose
 * answer changed must be refreshed by Argo CD's rule applied to that value and the commit's
 * changed files (no miss). Needless refreshes (the rule says refresh, the answer is the same)
 * and apps without a value (Argo refreshes them on every commit) are counted and reported.
 * CMP_OFFLOAD_DIFF_COMMITS / _SEED override the defaults (10 commits, ~4.5 s each here, keep CI
 * within its time; 50 and 200 are the longer walks the figures of docs/traced-cache.md come from, for changes to
 * the recorder or the derivation).
 */
const COMMITS = Number(process.env.CMP_OFFLOAD_DIFF_COMMITS ?? 10);
const SEED = Number(process.env.CMP_OFFLOAD_DIFF_SEED ?? 20240611);
const APPS = 50;
const SPEC = `preserveFileMode: true\n${LAYERED_PLUGIN}`;
const TOKEN = 'traced-differential-token-0123456789';

const SCRIPT = (yaml.load(LAYERED_PLUGIN) as { generate: { args: string[] } }).generate.args[0]!;

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

/** The files a commit changed, as git lists them: added, deleted, modified, both sides of a rename, mode changes. */
function changedFiles(before: Tree, after: Tree): string[] {
  const mode = (t: Tree, p: string) => (p in t.files ? (t.modes[p] ?? 0o644) : undefined);
  const all = new Set([...Object.keys(before.files), ...Object.keys(after.files)]);
  return [...all].filter(p => before.files[p] !== after.files[p] || mode(before, p) !== mode(after, p)).sort();
}

type View = { app: string; value?: string; reason?: string; derivedAt: string };

/** How long the views must stay the same before apps whose record predates the commit count as current. */
const SETTLE_MS = 300;

/**
 * Every app's manifest-generate-paths from the proxy, once the records of `apps` are current: a
 * record from a generation answered since `since`, or one the latest generation confirmed. A
 * generation that derives the stored value leaves the record (and its derivedAt) as it was, so
 * such apps count once every app has a record and the views stayed the same for SETTLE_MS
 * (distributed mode writes records in the background, milliseconds after the answer).
 */
async function derivedViews(port: number, apps: Iterable<string>, since: number): Promise<Map<string, View>> {
  // Once: `apps` may be a one-shot iterator (a Map's keys).
  const wanted = [...apps];
  let last = '';
  let sameSince = Date.now();
  for (const end = Date.now() + 10_000; ; await new Promise(r => setTimeout(r, 50))) {
    const res = await fetch(`http://127.0.0.1:${port}/generate-paths`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(res.status, 200);
    const list = ((await res.json()) as { apps: View[] }).apps;
    const text = JSON.stringify(list);
    if (text !== last) [last, sameSince] = [text, Date.now()];
    const views = new Map(list.map(v => [v.app, v]));
    const missing = wanted.filter(a => !views.has(a));
    const older = wanted.filter(a => views.has(a) && Date.parse(views.get(a)!.derivedAt) < since);
    if (missing.length === 0 && (older.length === 0 || Date.now() - sameSince >= SETTLE_MS)) return views;
    assert.ok(Date.now() < end, `no record since the last commit for ${[...missing, ...older].join(', ')}`);
  }
}

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
      // Point an app at a base, a chart, another app or nowhere; or a base at another directory.
      const app = appName(1 + Math.floor(r() * APPS));
      const other = appName(1 + Math.floor(r() * APPS));
      const [p, targets] = pick<[string, string[]]>([
        [`apps/${app}/base.ref`, ['../../base', '../../bases/team', `../${other}`, '../../missing']],
        [`apps/${app}/base.ref`, ['../../base', '../../bases/team', `../${other}`, '../../missing']],
        [`apps/${app}/chart.ref`, ['../../charts/web', '../../charts/worker', `../${other}`, '../../charts/missing']],
        ['bases/team/base.ref', ['../../base', `../../apps/${other}`, '../../charts/web/templates']],
        ['base/base.ref', ['../bases/team', `../apps/${other}`, '../docs']],
      ]);
      const target = pick(targets);
      if (r() < 0.2) delete tree.files[p];
      else tree.files[p] = `${target}\n`;
      return { what: `ref ${p} -> ${tree.files[p] ?? '(removed)'}`, app: appOf(p) };
    }
  }
}

// The differential walk is long (hundreds of plugin runs per mode); by default it runs in
// standalone mode, whose lookups share all their code with distributed mode (the distributed
// traced path has its own e2e tests). CMP_OFFLOAD_DIFF_MODES=standalone,distributed runs both.
const DIFF_MODES = MODES.filter(m => (process.env.CMP_OFFLOAD_DIFF_MODES ?? 'standalone').split(',').includes(m));

for (const mode of DIFF_MODES) {
  describe(`traced cache differential (${mode})`, () => {
    test(`after each of ${COMMITS} random commits, cached answers equal fresh runs with the cache off`, { timeout: 15 * 60_000 }, async t => {
      const port = await freePort();
      const [traced, off] = await Promise.all([
        startCmp(mode, {
          pluginYaml: pluginYaml('diff-traced', SPEC),
          socketName: 'diff-traced.sock',
          env: { CMP_OFFLOAD_CACHE: 'traced', CMP_OFFLOAD_HTTP_ADDR: 'off', ...oneRunAtATime(mode) },
          proxyEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}`, CMP_OFFLOAD_DASHBOARD_TOKEN: TOKEN },
        }),
        startCmp(mode, { pluginYaml: pluginYaml('diff-off', SPEC), socketName: 'diff-off.sock', env: { CMP_OFFLOAD_CACHE: 'off', CMP_OFFLOAD_HTTP_ADDR: 'off' } }),
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
        const tree: Tree = { files: monorepoFiles(APPS, { layered: true }), modes: {} };
        const history: string[] = [];
        let asked = 0;
        // manifest-generate-paths: each app's answer at the last commit, and when that commit's requests began.
        let answers = new Map<string, string>();
        let since = 0;
        const gp = { checked: 0, changed: 0, unchanged: 0, needless: 0, noValue: 0, noop: 0, misses: [] as string[] };
        const reasons = new Map<string, number>();
        for (let commit = 1; commit <= COMMITS; commit++) {
          const views = commit === 1 ? new Map<string, View>() : await derivedViews(port, answers.keys(), since);
          const before: Tree = { files: { ...tree.files }, modes: { ...tree.modes } };
          const change = mutate(tree, r);
          history.push(change.what);
          const changed = changedFiles(before, tree);
          const answered = new Map<string, string>();
          since = Date.now();
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
            answered.set(app, JSON.stringify(cached));
          }
          await pool(allApps, 4, async app => {
            if (apps.has(app) || !fs.existsSync(path.join(dir, 'apps', app))) return;
            const [cached, fresh] = await Promise.all([generateApp(tc, tgz, app, commit, counter), freshRun(dir, app, groundCounter)]);
            asked++;
            answered.set(app, JSON.stringify(cached));
            if ('error' in fresh) {
              // Output that does not split: the server must fail the same way (its text ends with the splitter's).
              assert.ok('details' in cached && cached.details.endsWith(fresh.error), `${where(app)}: ${JSON.stringify(cached)} vs ${fresh.error}`);
            } else {
              assert.ok('value' in cached, `${where(app)}: ${JSON.stringify(cached)}`);
              assert.deepEqual(cached.value.manifests, fresh.manifests, where(app));
            }
          });
          if (changed.length === 0) gp.noop++;
          // An answer that changed must have been refreshed by Argo CD's rule on the value derived before the commit.
          for (const [app, answer] of changed.length > 0 ? answered : []) {
            const previous = answers.get(app);
            if (previous === undefined) continue;
            const view = views.get(app);
            const refresh = argoRefreshes(view?.value, `apps/${app}`, changed);
            gp.checked++;
            if (answer !== previous) {
              gp.changed++;
              if (!refresh) gp.misses.push(`commit ${commit} (${change.what}), app ${app}: value ${view?.value}, changed files ${JSON.stringify(changed)}`);
            } else if (view?.value !== undefined) {
              gp.unchanged++;
              if (refresh) gp.needless++;
            }
            if (view?.value === undefined) {
              gp.noValue++;
              const reason = view?.reason ?? 'no record';
              reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
            }
          }
          answers = answered;
        }
        assert.equal(gp.misses.length, 0, `${gp.misses.length} changed answers Argo CD would not have refreshed:\n${gp.misses.slice(0, 20).join('\n')}`);
        t.diagnostic(
          `manifest-generate-paths over ${COMMITS} commits (${gp.noop} without a changed file): ${gp.checked} app-commits checked, ` +
            `${gp.changed} answers changed (0 missed); ${gp.needless} of ${gp.unchanged} unchanged answers with a value refreshed needlessly; ` +
            `${gp.noValue} without a value (always refreshed)${[...reasons].map(([why, n]) => `; ${n}: ${why}`).join('')}`,
        );
        // The cache did its job: most answers came without a run.
        const runs = countRuns(counter).length;
        t.diagnostic(`${runs} traced runs for ${asked} requests`);
        assert.ok(runs < asked / 5, `traced runs ${runs} for ${asked} requests`);
      } finally {
        tc.close();
        oc.close();
        await Promise.all([traced.stop(), off.stop()]);
      }
    });
  });
}
