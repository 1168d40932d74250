import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { openCmpClient, type CmpTestClient } from '../helpers/grpc-client.js';
import { appName, checkout, countRuns, generateApp, KUSTOMIZE_LIKE, monorepoFiles, PRINTS_REVISION, revisionEnv, usesBase } from '../helpers/monorepo.js';
import { MODES, oneRunAtATime, startCmp, type CmpServer } from './harness.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';

/**
 * The input-traced cache (CMP_OFFLOAD_CACHE=traced) on a 50-app monorepo, whole repo sent per
 * app: after a commit, only the apps whose recorded inputs changed run again, and every
 * answer equals a fresh run's.
 */
const APPS = 50;
const ALL = Array.from({ length: APPS }, (_, i) => appName(i + 1));
const work = pluginWritableTempDir('cmp-traced-');
after(() => fs.rmSync(work, { recursive: true, force: true }));

let serial = 0;
function counterFile(): string {
  return path.join(work, `counter-${++serial}`);
}

/** A server, a client, a checkout dir and a run counter. */
async function setup(mode: (typeof MODES)[number], spec: string, env: Record<string, string> = {}) {
  const name = `traced${++serial}`;
  const server: CmpServer = await startCmp(mode, {
    pluginYaml: pluginYaml(name, spec),
    socketName: `${name}.sock`,
    env: { CMP_OFFLOAD_CACHE: 'traced', ...oneRunAtATime(mode), ...env },
  });
  const client: CmpTestClient = openCmpClient(server.socketPath);
  return { server, client, dir: path.join(work, `repo-${serial}`), counter: counterFile() };
}

/**
 * A plugin spec that also prints the name of the app that asked (`{"app":"aNN"}`): an answer
 * that was another request's shows it (answers are bound to their request).
 */
function named(spec: string): string {
  return `${spec}\n      printf -- '---\\napp: %s\\n' "$ARGOCD_APP_NAME"`;
}

type Answer = { value: { manifests: string[] } };

/**
 * Ask for every app of a checkout; returns which apps ran and the answers, each checked to be
 * manifests naming the app that asked (a failed request fails here, with its error, rather
 * than as a missing run).
 */
async function refreshAll(client: CmpTestClient, tgz: Buffer, commit: number, counter: string, apps = ALL) {
  const before = countRuns(counter).length;
  const answers = new Map<string, Answer>();
  // A few at a time, as a repo-server with a parallelism limit would.
  for (let i = 0; i < apps.length; i += 10) {
    const batch = apps.slice(i, i + 10);
    const outs = await Promise.all(batch.map(app => generateApp(client, tgz, app, commit, counter)));
    batch.forEach((app, j) => {
      const out = outs[j] as Answer;
      assert.ok(out && 'value' in out && out.value.manifests.includes(JSON.stringify({ app })), `${app} (commit ${commit}): ${JSON.stringify(out)}`);
      answers.set(app, out);
    });
  }
  return { ran: countRuns(counter).slice(before).sort(), answers };
}

for (const mode of MODES) {
  describe(`traced cache (${mode})`, () => {
    let s: Awaited<ReturnType<typeof setup>>;
    let files: Record<string, string>;
    let commit = 0;
    before(async () => {
      s = await setup(mode, named(KUSTOMIZE_LIKE));
      files = monorepoFiles(APPS);
      const first = await refreshAll(s.client, await checkout(s.dir, files), ++commit, s.counter);
      assert.deepEqual(first.ran, ALL);
    });
    after(async () => {
      s.client.close();
      await s.server.stop();
    });

    const commitAndRefresh = async (change: (f: Record<string, string>) => void) => {
      change(files);
      return refreshAll(s.client, await checkout(s.dir, files), ++commit, s.counter);
    };

    test('a commit touching one app runs exactly that app on refresh-all', async () => {
      const r = await commitAndRefresh(f => (f['apps/a07/config.yaml'] = 'replicas: 70\n'));
      assert.deepEqual(r.ran, ['a07']);
      const out = r.answers.get('a07')!;
      assert.ok(out.value.manifests.includes('{"replicas":70,"src":"config.yaml"}'), JSON.stringify(out));
    });

    test('a commit touching base/ runs exactly the apps that read it', async () => {
      const r = await commitAndRefresh(f => (f['base/common.yaml'] = 'common: 2\n'));
      assert.deepEqual(r.ran, ALL.filter((_, i) => usesBase(i + 1)));
    });

    test('a new file in a directory the plugin listed runs the apps that listed it', async () => {
      let r = await commitAndRefresh(f => (f['apps/a03/notes.txt'] = 'not yaml, but listed\n'));
      assert.deepEqual(r.ran, ['a03']);
      r = await commitAndRefresh(f => (f['base/extra.yaml'] = 'extra: 1\n'));
      assert.deepEqual(r.ran, ALL.filter((_, i) => usesBase(i + 1)));
    });

    test('a change to files no plugin read runs nothing', async () => {
      const r = await commitAndRefresh(f => {
        f['README.md'] = 'changed\n';
        f['docs/new.md'] = 'new\n';
        f['apps/README.md'] = 'next to the apps, never listed\n';
      });
      assert.deepEqual(r.ran, []);
    });

    test('a removed app file and a revert are both answered right', async () => {
      let r = await commitAndRefresh(f => delete f['apps/a11/service.yaml']);
      assert.deepEqual(r.ran, ['a11']);
      r = await commitAndRefresh(f => (f['apps/a11/service.yaml'] = 'port: 8011\n'));
      // The earlier tree's entry still holds: no run.
      assert.deepEqual(r.ran, []);
      const out = r.answers.get('a11')!;
      assert.ok(out.value.manifests.includes('{"port":8011,"src":"service.yaml"}'));
    });
  });

  describe(`traced cache with symlinks in the tree (${mode})`, () => {
    // A linked values file (a04), a base reached through a linked directory (a08), a link nobody reads.
    const APPS12 = ALL.slice(0, 12);
    let s: Awaited<ReturnType<typeof setup>>;
    let files: Record<string, string>;
    let links: Record<string, string>;
    let commit = 0;
    before(async () => {
      s = await setup(mode, named(KUSTOMIZE_LIKE));
      files = {
        ...monorepoFiles(12),
        'shared/values.yaml': 'shared: 1\n',
        'shared/other.yaml': 'other: 1\n',
        'base2/common.yaml': 'common: 20\n',
        'apps/a08/base.ref': '../../linked-base\n',
      };
      links = { 'apps/a04/values.yaml': '../../shared/values.yaml', 'linked-base': 'base', 'docs/latest.md': 'guide.md' };
      const first = await refreshAll(s.client, await checkout(s.dir, files, {}, links), ++commit, s.counter, APPS12);
      assert.deepEqual(first.ran, APPS12);
    });
    after(async () => {
      s.client.close();
      await s.server.stop();
    });

    const commitAndRefresh = async (change: () => void) => {
      change();
      return refreshAll(s.client, await checkout(s.dir, files, {}, links), ++commit, s.counter, APPS12);
    };

    test('a commit touching one app runs exactly that app, though the tree holds symlinks', async () => {
      const r = await commitAndRefresh(() => (files['apps/a07/config.yaml'] = 'replicas: 70\n'));
      assert.deepEqual(r.ran, ['a07']);
    });

    test('a file changed behind a link runs the app that reads through it', async () => {
      const r = await commitAndRefresh(() => (files['shared/values.yaml'] = 'shared: 2\n'));
      assert.deepEqual(r.ran, ['a04']);
      assert.ok(r.answers.get('a04')!.value.manifests.includes('{"shared":2,"src":"values.yaml"}'), JSON.stringify(r.answers.get('a04')));
    });

    test('a link given another target runs the apps that crossed it', async () => {
      let r = await commitAndRefresh(() => (links['apps/a04/values.yaml'] = '../../shared/other.yaml'));
      assert.deepEqual(r.ran, ['a04']);
      assert.ok(r.answers.get('a04')!.value.manifests.includes('{"other":1,"src":"values.yaml"}'), JSON.stringify(r.answers.get('a04')));
      r = await commitAndRefresh(() => (links['linked-base'] = 'base2'));
      assert.deepEqual(r.ran, ['a08']);
      assert.ok(r.answers.get('a08')!.value.manifests.some(m => m.includes('"common":20')), JSON.stringify(r.answers.get('a08')));
    });

    test('a change behind a linked directory runs the apps that reach it either way; a link nobody crossed runs nothing', async () => {
      let r = await commitAndRefresh(() => (files['base2/common.yaml'] = 'common: 21\n'));
      assert.deepEqual(r.ran, ['a08']);
      r = await commitAndRefresh(() => (links['docs/latest.md'] = '../README.md'));
      assert.deepEqual(r.ran, []);
    });
  });

  describe(`traced cache and the revision (${mode})`, () => {
    test('a plugin that prints ARGOCD_APP_REVISION runs on every commit; one that does not, does not', async () => {
      const apps = ALL.slice(0, 5);
      const printing = await setup(mode, named(PRINTS_REVISION));
      const quiet = await setup(mode, named(KUSTOMIZE_LIKE));
      try {
        const files = monorepoFiles(APPS);
        for (let c = 1; c <= 3; c++) {
          files['README.md'] = `commit ${c}\n`;
          const tgz = await checkout(printing.dir, files);
          const p = await refreshAll(printing.client, tgz, c, printing.counter, apps);
          const q = await refreshAll(quiet.client, tgz, c, quiet.counter, apps);
          assert.deepEqual(p.ran, apps, `commit ${c}: the revision-printing plugin reruns`);
          const rev = JSON.stringify({ rev: revisionEnv(c)[0]!.value });
          for (const [app, out] of p.answers) assert.ok(out.value.manifests.includes(rev), `commit ${c}: ${app} quotes its own revision: ${JSON.stringify(out)}`);
          assert.deepEqual(q.ran, c === 1 ? apps : [], `commit ${c}: the quiet plugin is reused across revisions`);
        }
      } finally {
        for (const x of [printing, quiet]) {
          x.client.close();
          await x.server.stop();
        }
      }
    });

    test('CMP_OFFLOAD_CACHE_REVISION=always binds every entry to its revision', async () => {
      const s = await setup(mode, named(KUSTOMIZE_LIKE), { CMP_OFFLOAD_CACHE_REVISION: 'always' });
      try {
        const files = monorepoFiles(APPS);
        const apps = ALL.slice(0, 3);
        await refreshAll(s.client, await checkout(s.dir, files), 1, s.counter, apps);
        files['README.md'] = 'commit 2\n';
        const r = await refreshAll(s.client, await checkout(s.dir, files), 2, s.counter, apps);
        assert.deepEqual(r.ran, apps);
      } finally {
        s.client.close();
        await s.server.stop();
      }
    });
  });

  describe(`traced cache when recording fails (${mode})`, () => {
    for (const [what, env] of [
      ['the tracer is missing', { CMP_OFFLOAD_TRACER: '/nonexistent/cmp-trace' }],
      ['the path limit is tiny', { CMP_OFFLOAD_TRACE_MAX_PATHS: '3' }],
    ] as const) {
      test(`when ${what}, entries fall back to the whole-tree key and answers stay correct`, async () => {
        const s = await setup(mode, named(KUSTOMIZE_LIKE), env);
        const off = await setup(mode, named(KUSTOMIZE_LIKE), { CMP_OFFLOAD_CACHE: 'off' });
        try {
          const files = monorepoFiles(APPS);
          const apps = ALL.slice(0, 5);
          let tgz = await checkout(s.dir, files);
          await refreshAll(s.client, tgz, 1, s.counter, apps);
          // Same tree again: the whole-tree key hits.
          assert.deepEqual((await refreshAll(s.client, tgz, 1, s.counter, apps)).ran, []);
          // Only an unread file changed, but without a record every app must run again.
          files['README.md'] = 'changed\n';
          files['apps/a02/config.yaml'] = 'replicas: 22\n';
          tgz = await checkout(s.dir, files);
          const r = await refreshAll(s.client, tgz, 1, s.counter, apps);
          assert.deepEqual(r.ran, apps);
          const fresh = await refreshAll(off.client, tgz, 1, off.counter, apps);
          assert.deepEqual([...r.answers], [...fresh.answers]);
        } finally {
          for (const x of [s, off]) {
            x.client.close();
            await x.server.stop();
          }
        }
      });
    }

    test('a command the tracer cannot start (missing #! interpreter) fails with Go\'s own text, as without the cache', async () => {
      const spec = 'preserveFileMode: true\ngenerate:\n  command: [./gen.sh]\n';
      const s = await setup(mode, spec);
      const off = await setup(mode, spec, { CMP_OFFLOAD_CACHE: 'off' });
      try {
        const tgz = await checkout(s.dir, { 'apps/a01/gen.sh': '#!/nonexistent/interpreter\necho hi\n' }, { 'apps/a01/gen.sh': 0o755 });
        const traced = await generateApp(s.client, tgz, 'a01', 1, s.counter);
        const plain = await generateApp(off.client, tgz, 'a01', 1, off.counter);
        assert.deepEqual(traced, plain);
        assert.match(JSON.stringify(traced), /fork\/exec \.\/gen\.sh: no such file or directory/);
      } finally {
        for (const x of [s, off]) {
          x.client.close();
          await x.server.stop();
        }
      }
    });
  });
}
