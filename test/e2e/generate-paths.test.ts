import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { chunksOf, openCmpClient, repoMetadata, type CmpTestClient } from '../helpers/grpc-client.js';
import { checkout, KUSTOMIZE_LIKE, monorepoFiles, PRINTS_REVISION, revisionEnv } from '../helpers/monorepo.js';
import { TEST_SIGNING_KEY } from '../helpers/distributed.js';
import { scrape } from '../helpers/metrics.js';
import { BIN } from '../helpers/paths.js';
import { pluginYaml } from '../helpers/plugin-yaml.js';
import { freePort } from '../helpers/redis-server.js';
import { packRepo } from '../helpers/repo.js';
import { until } from '../integration/distributed-helpers.js';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { MODES, startCmp } from './harness.js';
import { argoRefreshes, changedFilesOf, gitAsArgo, repoServerRefreshes } from '../helpers/argo-refresh.js';

/**
 * manifest-generate-paths derived from traced reads: a generation reads some files of a
 * monorepo; the proxy's /generate-paths and `cmp-offload paths` name exactly those, relative to
 * the repository root, also when the repo-server sent a subtree.
 */
const work = pluginWritableTempDir('cmp-genpaths-');
after(() => fs.rmSync(work, { recursive: true, force: true }));
const run = promisify(execFile);
let serial = 0;

async function generate(client: CmpTestClient, tgz: Buffer, app: string, appRelPath: string, sourcePath: string, counter: string, extraEnv: Array<{ name: string; value: string }> = []) {
  const out = await client.generate({
    metadata: repoMetadata(tgz, {
      appName: app,
      appRelPath,
      env: [
        { name: 'ARGOCD_APP_NAME', value: app },
        { name: 'ARGOCD_APP_SOURCE_REPO_URL', value: 'https://git.example/monorepo.git' },
        { name: 'ARGOCD_APP_SOURCE_PATH', value: sourcePath },
        { name: 'COUNTER', value: counter },
        ...revisionEnv(1),
        ...extraEnv,
      ],
    }),
    chunks: chunksOf(tgz, 64 * 1024),
  });
  assert.ok('value' in out, JSON.stringify(out));
  return out.value;
}

const TOKEN = 'generate-paths-token-0123456789';
const auth = { headers: { authorization: `Bearer ${TOKEN}` } };

type View = { app: string; value?: string; reason?: string; derivedAt: string };

/** A plugin that reads its a.yaml and every file of ../../shared, printing no name (any name stays valid YAML). */
const READS_SHARED = `generate:
  command: [sh, -c]
  args:
    - |
      echo "$ARGOCD_APP_NAME" >> "$COUNTER"
      cat a.yaml
      for f in ../../shared/*; do
        printf -- '---\\nname: "%s"\\ncontent: "%s"\\n' "$(printf %s "$f" | cksum | cut -d' ' -f1)" "$(cksum < "$f" | cut -d' ' -f1)"
      done`;

/** a05's value: its directory and the base it reads, each also as git quotes it (opened). */
const A05 = '/"apps/a05;/"base;/apps/a05;/base';

for (const mode of MODES) {
  describe(`manifest-generate-paths (${mode})`, () => {
    async function withServer(spec: string, fn: (client: CmpTestClient, port: number, env: Record<string, string>) => Promise<void>) {
      const port = await freePort();
      const name = `genpaths${++serial}`;
      const server = await startCmp(mode, {
        pluginYaml: pluginYaml(name, spec),
        socketName: `${name}.sock`,
        env: { CMP_OFFLOAD_CACHE: 'traced' },
        proxyEnv: { CMP_OFFLOAD_HTTP_ADDR: `127.0.0.1:${port}`, CMP_OFFLOAD_DASHBOARD_TOKEN: TOKEN },
      });
      const client = openCmpClient(server.socketPath);
      try {
        // The ops server starts after the socket (fastify loads in the background): until it
        // listens, fetch() is refused.
        await until(() => fetch(`http://127.0.0.1:${port}/healthz`).then(r => r.ok, () => false), 30_000, 'the proxy HTTP server');
        const cliEnv: Record<string, string> = server.redisUrl ? { CMP_OFFLOAD_REDIS_URL: server.redisUrl, CMP_OFFLOAD_SIGNING_KEY: TEST_SIGNING_KEY } : {};
        await fn(client, port, cliEnv);
      } finally {
        client.close();
        await server.stop();
      }
    }

    test('the apps read files: the endpoint, the metric and the command name them', async () => {
      await withServer(KUSTOMIZE_LIKE, async (client, port, cliEnv) => {
        const dir = path.join(work, `repo-${++serial}`);
        const counter = path.join(work, `counter-${serial}`);
        const files = monorepoFiles(5);
        const tgz = await checkout(dir, files);
        await generate(client, tgz, 'a01', 'apps/a01', 'apps/a01', counter);
        await generate(client, tgz, 'a05', 'apps/a05', 'apps/a05', counter);
        // The repo-server with --plugin-use-manifest-generate-paths sends the common root only.
        await generate(client, await packRepo(path.join(dir, 'apps')), 'a02', 'a02', 'apps/a02', counter);
        // An app path that is not the end of the source path: the repository root is unknown.
        await generate(client, tgz, 'a03', 'apps/a03', 'elsewhere/a03', counter);

        // App names and paths: only with the token.
        assert.equal((await fetch(`http://127.0.0.1:${port}/generate-paths`)).status, 401);
        assert.equal((await fetch(`http://127.0.0.1:${port}/generate-paths/a01`, { headers: { authorization: 'Bearer wrong' } })).status, 401);
        const res = await fetch(`http://127.0.0.1:${port}/generate-paths`, auth);
        assert.equal(res.status, 200);
        const doc = (await res.json()) as { annotation: string; apps: View[] };
        assert.equal(doc.annotation, 'argocd.argoproj.io/manifest-generate-paths');
        const byApp = new Map(doc.apps.map(v => [v.app, v]));
        assert.deepEqual([...byApp.keys()], ['a01', 'a02', 'a03', 'a05']);
        assert.equal(byApp.get('a01')!.value, '/"apps/a01;/apps/a01');
        assert.equal(byApp.get('a02')!.value, '/"apps/a02;/apps/a02');
        assert.equal(byApp.get('a05')!.value, A05);
        assert.equal(byApp.get('a03')!.value, undefined);
        assert.match(byApp.get('a03')!.reason!, /ARGOCD_APP_SOURCE_PATH/);
        assert.ok(Math.abs(Date.parse(byApp.get('a01')!.derivedAt) - Date.now()) < 120_000);

        const one = await fetch(`http://127.0.0.1:${port}/generate-paths/a05`, auth);
        assert.equal(((await one.json()) as View).value, A05);
        assert.equal((await fetch(`http://127.0.0.1:${port}/generate-paths/nope`, auth)).status, 404);
        assert.equal((await scrape(port)).get('cmp_offload_generate_paths_apps'), 3);

        // The command: from Redis in distributed mode, from the proxy in standalone mode.
        const from = mode === 'distributed' ? [] : ['--proxy', `http://127.0.0.1:${port}`];
        const env = { ...process.env, ...cliEnv, CMP_OFFLOAD_DASHBOARD_TOKEN: TOKEN };
        const text = await run(process.execPath, [BIN, 'paths', '--all', ...from], { env });
        const lines = text.stdout.trim().split('\n').map(l => l.split('\t'));
        assert.deepEqual(lines.map(l => [l[0], l[2]]), [
          ['a01', '/"apps/a01;/apps/a01'],
          ['a02', '/"apps/a02;/apps/a02'],
          ['a03', `(no value: ${byApp.get('a03')!.reason})`],
          ['a05', A05],
        ]);
        const json = await run(process.execPath, [BIN, 'paths', '--app', 'a05', '--json', ...from], { env });
        assert.equal((JSON.parse(json.stdout) as View).value, A05);
        await assert.rejects(run(process.execPath, [BIN, 'paths', '--app', 'nope', ...from], { env }), (err: { code: number; stderr: string }) => {
          assert.equal(err.code, 1);
          assert.match(err.stderr, /no traced generation of app "nope"/);
          return true;
        });

        // A generation that bypasses the cache is not traced: the earlier value no longer counts.
        await generate(client, tgz, 'a01', 'apps/a01', 'apps/a01', counter, [{ name: 'ARGOCD_ENV_CMP_OFFLOAD_CACHE', value: 'off' }]);
        const view = async () => (await (await fetch(`http://127.0.0.1:${port}/generate-paths/a01`, auth)).json()) as View;
        let after = await view();
        // Distributed mode writes the record in the background.
        for (const end = Date.now() + 10_000; after.value !== undefined && Date.now() < end; after = await view()) await new Promise(r => setTimeout(r, 50));
        assert.equal(after.value, undefined);
        assert.match(after.reason!, /not cached/);
      });
    });

    test('names git quotes: each commit that changes what the app read makes Argo refresh it, by git diff and by webhook', async () => {
      await withServer(READS_SHARED, async (client, port) => {
        const dir = path.join(work, `repo-${++serial}`);
        const counter = path.join(work, `counter-${serial}`);
        const repo = path.join(work, `git-${serial}`);
        fs.mkdirSync(repo);
        gitAsArgo(repo, ['init', '-q']);
        // The app reads its a.yaml, lists shared/ and reads the files there.
        let files: Record<string, string> = { 'apps/f/a.yaml': 'a: 1\n', 'shared/v\u00e4rden.yaml': 'v: 1\n', 'shared/plain.yaml': 'p: 1\n', 'docs/x.md': 'x\n' };
        const commit = (next: Record<string, string>) => {
          fs.rmSync(path.join(repo, 'apps'), { recursive: true, force: true });
          fs.rmSync(path.join(repo, 'shared'), { recursive: true, force: true });
          fs.rmSync(path.join(repo, 'docs'), { recursive: true, force: true });
          for (const [rel, content] of Object.entries(next)) {
            fs.mkdirSync(path.dirname(path.join(repo, rel)), { recursive: true });
            fs.writeFileSync(path.join(repo, rel), content);
          }
          gitAsArgo(repo, ['add', '-A']);
          gitAsArgo(repo, ['commit', '-q', '--allow-empty', '-m', 'c']);
          return gitAsArgo(repo, ['rev-parse', 'HEAD']).trim();
        };
        let rev = commit(files);
        let answer = await generate(client, await checkout(dir, files), 'f', 'apps/f', 'apps/f', counter);
        const view = async () => (await (await fetch(`http://127.0.0.1:${port}/generate-paths/f`, auth)).json()) as View;
        const value = (await until(async () => (await view()).value, 10_000, 'the value of f'))!;
        // Each commit: what it changes, and whether the app's answer must change.
        const steps: Array<[string, (f: Record<string, string>) => Record<string, string>, boolean]> = [
          ['edit the UTF-8 name', f => ({ ...f, 'shared/v\u00e4rden.yaml': 'v: 2\n' }), true],
          ['add a name with a tab', f => ({ ...f, 'shared/tab\there.yaml': 't: 1\n' }), true],
          ['add a name with quotes and a backslash', f => ({ ...f, 'shared/q\"b\\s.yaml': 'q: 1\n' }), true],
          ['add a name with a newline', f => ({ ...f, 'shared/new\nline.yaml': 'n: 1\n' }), true],
          ['a file elsewhere', f => ({ ...f, 'docs/\u00fc.md': 'y\n' }), false],
        ];
        for (const [what, change, answerChanges] of steps) {
          const next = change(files);
          const nextRev = commit(next);
          const out = gitAsArgo(repo, ['diff', '--name-only', `${rev}..${nextRev}`]);
          const raw = gitAsArgo(repo, ['diff', '--name-only', '-z', `${rev}..${nextRev}`]).split('\0').filter(Boolean);
          const nextAnswer = await generate(client, await checkout(dir, next), 'f', 'apps/f', 'apps/f', counter);
          assert.equal(JSON.stringify(nextAnswer) !== JSON.stringify(answer), answerChanges, what);
          if (answerChanges) {
            assert.match(out, /^"shared\//, `${what}: git quotes the name (${out})`);
            assert.ok(repoServerRefreshes(value, 'apps/f', out), `${what}: the repo-server's list ${JSON.stringify(changedFilesOf(out))} against ${value}`);
            assert.ok(argoRefreshes(value, 'apps/f', raw), `${what}: the webhook's list ${JSON.stringify(raw)} against ${value}`);
          } else {
            assert.equal(repoServerRefreshes(value, 'apps/f', out), false, `${what}: ${out} against ${value}`);
            assert.equal(argoRefreshes(value, 'apps/f', raw), false, `${what}: ${JSON.stringify(raw)} against ${value}`);
          }
          [files, rev, answer] = [next, nextRev, nextAnswer];
        }
        assert.equal(value, '/"apps/f;/"shared;/apps/f;/shared');
      });
    });

    test('an output bound to the revision has no value', async () => {
      await withServer(PRINTS_REVISION, async (client, port) => {
        const dir = path.join(work, `repo-${++serial}`);
        await generate(client, await checkout(dir, monorepoFiles(1)), 'a01', 'apps/a01', 'apps/a01', path.join(work, `counter-${serial}`));
        const view = (await (await fetch(`http://127.0.0.1:${port}/generate-paths/a01`, auth)).json()) as View;
        assert.equal(view.value, undefined);
        assert.match(view.reason!, /bound to the revision/);
      });
    });
  });
}
