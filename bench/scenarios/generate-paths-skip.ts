import { randomBytes } from 'node:crypto';
import { argoRefreshes } from '../../test/helpers/argo-refresh.js';
import { freePort } from '../../test/helpers/redis-server.js';
import { fmt, sleep } from '../lib/stats.js';
import { row, type Row, type Scenario } from '../lib/types.js';
import { APP_EDIT, appNames, BASE_EDIT, storm, type PassView, type StormCommit } from '../lib/whole-repo-storm.js';

/** A pass and every app's derived value after it (undefined: no value, so Argo refreshes). */
interface Seen extends PassView {
  paths: Map<string, string | undefined>;
}

type View = { app: string; value?: string; reason?: string; derivedAt: string };

/**
 * Every app's value from the proxy's /generate-paths once the pass's records are in: every app has
 * one, and none changed for a second (distributed mode writes them in the background, right after
 * each answer). "Written during this pass" cannot be asked: a record whose outcome did not change
 * is not rewritten (refreshAfter in cmp/cache/app-paths.ts), so it keeps its older derivedAt.
 */
async function derivedValues(port: number, token: string, apps: number): Promise<Map<string, string | undefined>> {
  const deadline = Date.now() + 30_000;
  let last = '';
  let stableSince = Date.now();
  for (;;) {
    const res = await fetch(`http://127.0.0.1:${port}/generate-paths`, { headers: { authorization: `Bearer ${token}` } });
    if (res.status !== 200) throw new Error(`/generate-paths answered ${res.status}`);
    const views = new Map(((await res.json()) as { apps: View[] }).apps.map(v => [v.app, v]));
    const snapshot = JSON.stringify(appNames(apps).map(a => views.get(a) ?? null));
    if (snapshot !== last) {
      last = snapshot;
      stableSince = Date.now();
    }
    if (appNames(apps).every(a => views.has(a)) && Date.now() - stableSince >= 1_000) return new Map(appNames(apps).map(a => [a, views.get(a)!.value]));
    if (Date.now() > deadline) throw new Error(`/generate-paths: not every app has a record, or the records kept changing, for 30 s`);
    await sleep(100);
  }
}

/** Files added, removed or changed between two checkouts (what Argo's change list names). */
function changedFiles(before: Record<string, string>, after: Record<string, string>): string[] {
  const all = new Set([...Object.keys(before), ...Object.keys(after)]);
  return [...all].filter(f => before[f] !== after[f]).sort();
}

/**
 * What Argo would do at the commit after `before`, with the values derived at `before`: each
 * app's annotation against the commit's changed files. An app that must refresh (its plugin
 * reads the changed file, or its answer changed) and would be skipped fails the scenario.
 */
function skipRow(apps: number, commit: StormCommit, before: Seen, after: PassView): Row {
  const names = appNames(apps);
  const changed = changedFiles(before.files, after.files);
  const refreshed = names.filter(a => argoRefreshes(before.paths.get(a), `apps/${a}`, changed));
  const mustRefresh = new Set([...commit.readers(apps), ...names.filter(a => before.outputs.get(a) !== after.outputs.get(a))]);
  const missed = [...mustRefresh].filter(a => !refreshed.includes(a));
  if (missed.length) {
    throw new Error(`${commit.what}: Argo would skip ${missed.join(', ')}, which must refresh (values ${missed.map(a => before.paths.get(a)).join(' | ')})`);
  }
  const skipped = apps - refreshed.length;
  const tarball = after.tarballBytes;
  const withValue = names.filter(a => before.paths.get(a) !== undefined).length;
  return row({
    scenario: 'generate-paths-skip',
    case: `storm-whole-repo's ${apps} apps, traced, annotations from /generate-paths; ${commit.what} (${changed.join(', ')})`,
    measured: `${skipped} of ${apps} apps skipped by Argo; ${fmt.bytes(skipped * tarball)} of tarball not sent (${skipped} × ${fmt.bytes(tarball)})`,
    baseline: `no annotation: ${apps} requests, ${fmt.bytes(apps * tarball)} sent; ${mustRefresh.size} must refresh`,
    value: (skipped * 100) / apps,
    unit: '%',
    target: { op: '==', value: ((apps - mustRefresh.size) * 100) / apps },
    details: { apps, withValue, changed, refreshed, mustRefresh: [...mustRefresh], tarballBytes: tarball, bytesAvoided: skipped * tarball },
  });
}

export const generatePathsSkip: Scenario = {
  name: 'generate-paths-skip',
  title: "storm-whole-repo's monorepo, traced: apps whose derived manifest-generate-paths let Argo skip the request after a commit, and the tarball bytes saved",
  async run(opts) {
    const apps = opts.quick ? 20 : 100;
    const port = await freePort();
    const token = randomBytes(16).toString('hex');
    const seen: Seen[] = [];
    await storm('traced', apps, {
      proxyEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}`, CMP_OFFLOAD_DASHBOARD_TOKEN: token },
      workerEnv: { CMP_OFFLOAD_HTTP_ADDR: 'off' },
      async onPass(view) {
        seen.push({ ...view, paths: await derivedValues(port, token, apps) });
      },
    });
    const [cold, appChanged, baseChanged] = seen as [Seen, Seen, Seen];
    const withValue = appNames(apps).filter(a => cold.paths.get(a) !== undefined).length;
    opts.log(`  ${withValue} of ${apps} apps have a value after the cold pass`);
    return [skipRow(apps, APP_EDIT, cold, appChanged), skipRow(apps, BASE_EDIT, appChanged, baseChanged)];
  },
};
