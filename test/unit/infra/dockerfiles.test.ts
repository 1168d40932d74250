import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_HTTP_ADDR } from '../../../cmp/config/options.js';
import { REPO_ROOT, SOURCE_ROOTS } from '../../helpers/paths.js';

const read = (name: string) => fs.readFileSync(path.join(REPO_ROOT, 'infra/docker', name), 'utf8');
/** Instructions of the last stage (the image that ships), continuation lines joined. */
const finalStage = (text: string) => {
  const lines = text.replace(/\\\n/g, ' ').split('\n').filter(l => l.trim() !== '' && !l.trim().startsWith('#'));
  const from = lines.map((l, i) => (/^FROM\s/i.test(l) ? i : -1)).filter(i => i >= 0).at(-1)!;
  return lines.slice(from);
};
const last = (lines: string[], instr: string) => lines.filter(l => l.startsWith(`${instr} `)).at(-1);

for (const [file, role] of [['proxy.Dockerfile', 'proxy'], ['worker.Dockerfile', 'worker']] as const) {
  test(`${file}: the shipped stage runs as uid 999, exposes the default HTTP port and copies paths that exist`, () => {
    const text = read(file);
    const stage = finalStage(text);
    assert.equal(last(stage, 'USER'), 'USER 999:999');
    assert.equal(last(stage, 'EXPOSE'), `EXPOSE ${DEFAULT_HTTP_ADDR[role].slice(1)}`);
    assert.match(last(stage, 'CMD')!, new RegExp(`\\["${role}"\\]`));
    assert.match(text, /useradd --uid 999 --gid 999 .*--home-dir \/home\/argocd argocd/);
    // Every COPY from the build context, in whatever form, is one the check below understands.
    const fromContext = text.split('\n').filter(l => /^COPY\s/i.test(l) && !/^COPY\s+--from=/i.test(l));
    const sources = [...text.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap(m => m[1]!.split(/\s+/));
    assert.deepEqual(sources, ['package.json', 'package-lock.json', 'tsconfig.json', ...SOURCE_ROOTS, 'proto']);
    assert.equal([...text.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].length, fromContext.length, `${file}: a COPY the check cannot read`);
    for (const src of sources) assert.ok(fs.existsSync(path.join(REPO_ROOT, src)), `${file} copies ${src}, which does not exist`);
    // The entrypoint's files are what the build stage produced.
    for (const p of ['dist', 'bin', 'proto', 'node_modules']) assert.match(text, new RegExp(`COPY --from=build /src/${p} ./${p}`));
    assert.ok(fs.existsSync(path.join(REPO_ROOT, 'bin/cmp-offload')));
    // git's askpass helper for provideGitCreds (GIT_ASKPASS=argocd) is on the PATH, linked to the copied bin/,
    // while the build still runs as root (before USER).
    const link = stage.findIndex(l => l === 'RUN ln -s /app/bin/git-askpass/argocd /usr/local/bin/argocd');
    assert.ok(link > stage.findIndex(l => l === 'COPY --from=build /src/bin ./bin'), `${file}: argocd is linked after bin/ is copied`);
    assert.ok(link < stage.findIndex(l => l.startsWith('USER ')), `${file}: argocd is linked before USER`);
    assert.equal(fs.statSync(path.join(REPO_ROOT, 'bin/git-askpass/argocd')).mode & 0o111, 0o111, 'bin/git-askpass/argocd is executable');
    assert.ok(fs.existsSync(path.join(REPO_ROOT, 'infra/docker', `${file}.dockerignore`)));
  });
}

test('both images build and run on Node 24 LTS, which package.json engines admits', () => {
  for (const file of ['proxy.Dockerfile', 'worker.Dockerfile']) {
    const bases = [...read(file).matchAll(/^FROM\s+(\S+)/gm)].map(m => m[1]!);
    assert.deepEqual(bases, ['node:24-bookworm-slim', 'node:24-bookworm-slim'], `${file}: every stage on Node 24 LTS`);
  }
  const engines = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')).engines.node as string;
  assert.equal(engines, '^20.19.0 || >=22.12', 'engines.node: update README.md (Quick start) and docs/development.md (Node.js versions) with it');
});

test('the worker image runs tini as PID 1 in front of node', () => {
  const stage = finalStage(read('worker.Dockerfile'));
  assert.equal(last(stage, 'ENTRYPOINT'), 'ENTRYPOINT ["/usr/bin/tini", "--", "node", "--max-semi-space-size=16", "/app/bin/cmp-offload"]');
  assert.ok(stage.some(l => /^RUN .*apt-get install .*\btini\b/.test(l)), 'tini is installed in the shipped stage');
});

test('the proxy image stays small: no plugin tools, no package manager step in the shipped stage', () => {
  const stage = finalStage(read('proxy.Dockerfile'));
  assert.ok(!stage.some(l => /apt-get install/.test(l)));
  assert.equal(last(stage, 'ENTRYPOINT'), 'ENTRYPOINT ["node", "--max-semi-space-size=16", "/app/bin/cmp-offload"]');
});

test('the example tool image builds on the worker image, verifies its downloads and returns to uid 999', () => {
  const text = read('worker-helm-kustomize.Dockerfile');
  assert.match(text, /^ARG BASE=ghcr\.io\/cmp-offload\/cmp-offload-worker:/m);
  assert.match(text, /^FROM \$\{BASE\}$/m);
  assert.equal((text.match(/sha256sum -c -/g) ?? []).length, 2);
  assert.match(text, /install -m 0755 \/tmp\/linux-amd64\/helm \/usr\/local\/bin\/helm/);
  assert.equal(last(finalStage(text), 'USER'), 'USER 999:999');
});
