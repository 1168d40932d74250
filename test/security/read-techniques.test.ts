/**
 * Adversarial read techniques against the traced cache (CMP_OFFLOAD_CACHE=traced): each way a
 * plugin can learn something about a repository file (test/security/lib/read-techniques.ts) is
 * run through a real proxy on a tiny repository in three states that differ only in what the
 * technique reads. In every state the traced server's answer must equal a cache-off server's
 * (a fresh run): either the recorder saw the read, or it gave the record up and the run fell
 * back to the whole-tree key. And when the traced server derived a manifest-generate-paths
 * value, Argo CD's rule applied to it must refresh the app for the next state's changed files
 * whenever the fresh answer changed. Each test also checks that the technique works at all
 * (the fresh answers of the three states differ), so that none can pass by reading nothing.
 *
 * A few plain reads must be recorded completely, so that a recorder that gives every record up
 * cannot pass.
 *
 * Standalone mode always; distributed mode too when redis-server is installed (narrow with
 * CMP_OFFLOAD_E2E_MODES). A technique whose tool (python3, cc) is missing is skipped with the
 * reason, except under CI=true, where it fails.
 */
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { MODES } from '../e2e/harness.js';
import { argoRefreshes } from '../helpers/argo-refresh.js';
import { packRepo } from '../helpers/repo.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { inCI } from '../unit/infra/kubectl.js';
import { buildKit, stateOf, TECHNIQUES, todoOf, writeTree, type Technique, type Tree } from './lib/read-techniques.js';
import { startPair, type TracedPair, type View } from './lib/traced-pair.js';

const work = pluginWritableTempDir('cmp-read-tech-');
const kit = path.join(work, 'kit');
fs.mkdirSync(kit);
fs.chmodSync(kit, 0o755);
const unbuilt = buildKit(kit, TECHNIQUES);
after(() => fs.rmSync(work, { recursive: true, force: true }));

/**
 * The plugin: the technique named by the app. Each mode gets its own scratch dir: a symlink one
 * uid left in a sticky dir is not followed by another (fs.protected_symlinks).
 */
function spec(mode: string): string {
  const scratch = path.join(work, `tmp-${mode}`);
  fs.mkdirSync(scratch);
  fs.chmodSync(scratch, 0o1777);
  return `preserveFileMode: true
generate:
  command: [sh, -c]
  args: [${JSON.stringify(`KIT=${kit} T=${scratch} exec "${kit}/$ARGOCD_APP_NAME"`)}]`;
}

/** Files whose content, type or presence differ between two trees (git's changed-file list). */
function changedFiles(a: Tree, b: Tree): string[] {
  const all = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...all].filter(p => JSON.stringify(a[p]) !== JSON.stringify(b[p])).sort();
}

function describeView(v: View | undefined): string {
  if (!v) return 'no record';
  return v.value !== undefined ? `recorded (manifest-generate-paths ${JSON.stringify(v.value)})` : `not used: ${v.reason}`;
}

async function exercise(pair: TracedPair, mode: string, tech: Technique): Promise<string[]> {
  const dir = path.join(work, `repo-${mode}-${tech.name}`);
  const fresh: string[] = [];
  const outcomes: string[] = [];
  let previous: { tree: Tree; view: View | undefined; fresh: string } | undefined;
  try {
    for (let n = 0; n < 3; n++) {
      const tree = stateOf(tech, n);
      writeTree(dir, tree);
      const tgz = await packRepo(dir);
      const since = Date.now();
      const [cached, plain] = await pair.generate(tgz, tech.name);
      const where = `${tech.name} (${tech.what}), state ${n}; the previous state was ${outcomes.at(-1) ?? 'none'}`;
      assert.ok(plain && typeof plain === 'object' && 'value' in plain, `${where}: the fresh run failed: ${JSON.stringify(plain)}`);
      assert.deepEqual(cached, plain, `${where}: the traced answer differs from a fresh run's`);
      const answer = JSON.stringify(plain);
      if (previous && answer !== previous.fresh && previous.view?.value !== undefined) {
        const changed = changedFiles(previous.tree, tree);
        assert.ok(
          argoRefreshes(previous.view.value, `apps/${tech.name}`, changed),
          `${where}: Argo CD would not refresh: manifest-generate-paths ${JSON.stringify(previous.view.value)}, changed files ${JSON.stringify(changed)}`,
        );
      }
      const view = await pair.view(tech.name, since);
      outcomes.push(describeView(view));
      if (tech.recorded) assert.ok(view?.value !== undefined, `${where}: a plain read must leave a complete record (else every test here passes by giving up): ${describeView(view)}`);
      fresh.push(answer);
      previous = { tree, view, fresh: answer };
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  assert.equal(new Set(fresh).size, 3, `${tech.name}: the technique must see each state differently, got ${fresh.join(' | ')}`);
  return outcomes;
}

for (const mode of MODES) {
  // Techniques are independent (own app, own checkout): a few at a time, as a repo-server asks;
  // one at a time in standalone mode, whose proxy stores no run that overlapped another (a
  // background reader counts), and the plain reads must be stored.
  describe(`read techniques against the traced cache (${mode})`, { concurrency: mode === 'standalone' ? 1 : 4 }, () => {
    let pair: TracedPair;
    before(async () => {
      pair = await startPair(mode, `tech-${mode}`, spec(mode));
    });
    after(async () => {
      await pair?.stop();
    });

    for (const tech of TECHNIQUES) {
      const skip =
        (tech.arch !== undefined && tech.arch !== process.arch && `only on ${tech.arch}`) ||
        (mode === 'distributed' && tech.standaloneOnly) ||
        (!inCI && unbuilt.get(tech.name));
      test(`${tech.name}: ${tech.what}`, { skip, todo: todoOf(tech.name, mode) }, async t => {
        if (unbuilt.has(tech.name)) assert.fail(`CI=true and ${unbuilt.get(tech.name)}`);
        const outcomes = await exercise(pair, mode, tech);
        t.diagnostic(`${tech.name}: ${outcomes.join('; ')}`);
      });
    }
  });
}
