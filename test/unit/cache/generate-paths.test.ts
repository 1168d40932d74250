import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { deriveFromShape, generatePathsValue, gitQuoted, tarballRoot } from '../../../cmp/cache/generate-paths.js';
import { shapeOf, stateDigest } from '../../../cmp/cache/read-set.js';
import { goMatch } from '../../../cmp/go/filepath-glob.js';
import type { TreeEntry, TreeIndex } from '../../../cmp/tar/tree-index.js';
import { argoRefreshes, changedFilesOf, filesHaveChanged, gitAsArgo, refreshPaths, repoServerRefreshes } from '../../helpers/argo-refresh.js';
import { rng } from '../../helpers/rng.js';

const refreshes = (annotation: string | undefined, changed: string[], source = 'apps/web') => argoRefreshes(annotation, source, changed);

test('rule: no annotation, an empty one or an empty change list means refresh', () => {
  assert.equal(refreshes(undefined, ['docs/readme.md']), true);
  assert.equal(refreshes('', ['docs/readme.md']), true);
  assert.equal(refreshes(';', ['docs/readme.md']), true);
  assert.equal(refreshes('/apps/web', []), true);
});

test('rule: equal, under, elsewhere', () => {
  assert.equal(refreshes('/apps/web/values.yaml', ['apps/web/values.yaml']), true);
  assert.equal(refreshes('/apps/web', ['apps/web/templates/deploy.yaml']), true);
  assert.equal(refreshes('/apps/web', ['apps/webshop/values.yaml']), false);
  assert.equal(refreshes('/apps/web/values.yaml', ['apps/web/other.yaml']), false);
  assert.equal(refreshes('/apps/web', ['apps/other/a.yaml', 'docs/x.md']), false);
  assert.equal(refreshes('/', ['anything/at/all']), true);
});

test('rule: root-relative versus app-relative entries, `.` and `..` cleaned', () => {
  assert.equal(refreshes('.', ['apps/web/a.yaml']), true);
  assert.equal(refreshes('.', ['apps/api/a.yaml']), false);
  assert.equal(refreshes('../base', ['apps/base/kustomization.yaml']), true);
  assert.equal(refreshes('../base', ['base/kustomization.yaml']), false);
  assert.equal(refreshes('/base', ['base/kustomization.yaml']), true);
  assert.equal(refreshes('./values/../values.yaml', ['apps/web/values.yaml']), true);
  // Leaving the repository through `..` climbs to the root: everything matches.
  assert.equal(refreshes('../../..', ['docs/x.md']), true);
});

test('rule: entries are filepath.Match patterns (`*` does not cross `/`)', () => {
  assert.equal(refreshes('/apps/*/values.yaml', ['apps/api/values.yaml']), true);
  assert.equal(refreshes('/apps/*.yaml', ['apps/web/values.yaml']), false);
  assert.equal(refreshes('/v[12].yaml', ['v1.yaml']), true);
  // A name with pattern syntax matches itself only through the equality test, not as a pattern.
  assert.equal(refreshes('/v[1].yaml', ['v[1].yaml']), true);
  assert.equal(refreshes('/x/v[1].yaml', ['x/v[1].yaml/inner']), true);
  assert.equal(goMatch('/v[1].yaml', '/v[1].yaml'), false);
});

test('tarball root: the source path minus the app path', () => {
  assert.equal(tarballRoot('apps/web', 'apps/web'), '');
  assert.equal(tarballRoot('apps/web', 'web'), 'apps');
  assert.equal(tarballRoot('./apps/web/', '.'), 'apps/web');
  assert.equal(tarballRoot('/apps/web', 'apps/web'), '');
  assert.equal(tarballRoot('', '.'), '');
  assert.equal(tarballRoot('apps/web', 'eb'), undefined);
  assert.equal(tarballRoot('apps/web', 'other'), undefined);
  assert.equal(tarballRoot('../x', '.'), undefined);
  assert.equal(tarballRoot(undefined, 'apps/web'), undefined);
});

test('value: root-relative, sorted, entries under another dropped, each also as git quotes it, opened', () => {
  assert.equal(generatePathsValue(['b/x.yaml', 'a', 'a/c.yaml', 'b']), '/"a;/"b;/a;/b');
  assert.equal(generatePathsValue(['z.yaml', 'a b/c', 'a/b']), '/"a b/c;/"a/b;/"z.yaml;/a b/c;/a/b;/z.yaml');
  assert.equal(generatePathsValue(['a', '', 'b']), '/');
});

test('value: a name git quotes appears as itself, and quoted opened and closed, with and without core.quotePath', () => {
  assert.equal(
    generatePathsValue(['shared/värden.yaml', 'apps/f']),
    '/"apps/f;/"shared/v\\303\\244rden.yaml;/"shared/v\\303\\244rden.yaml";/"shared/värden.yaml;/apps/f;/shared/värden.yaml',
  );
  assert.equal(generatePathsValue(['c/q"x']), '/"c/q\\"x;/"c/q\\"x";/c/q"x');
  // Control characters, and whitespace at either end of a name (newer Argo CD trims entries), are left to the directory.
  assert.equal(generatePathsValue(['a/tab\there', 'b/trail ', 'c/ lead', 'd/nbsp\u00a0', 'e/del\u007f']), '/"a;/"b;/"c;/"d;/"e;/a;/b;/c;/d;/e');
  assert.equal(gitQuoted('a/b\u0007\b\t\n\v\f\r\u0001\u007f"\\ü'), '"a/b\\a\\b\\t\\n\\v\\f\\r\\001\\177\\"\\\\\\303\\274"');
  assert.equal(gitQuoted('a/ü', false), 'a/ü');
  assert.equal(gitQuoted('a b;c'), 'a b;c');
});

test('value: names with pattern syntax or `;` become their nearest clean ancestor', () => {
  assert.equal(generatePathsValue(['apps/v[1].yaml', 'apps/web/x.yaml']), '/"apps;/apps');
  assert.equal(generatePathsValue(['a/b*/c', 'd/e?', 'f/g\\h']), '/"a;/"d;/"f;/a;/d;/f');
  assert.equal(generatePathsValue(['x/y', 'k;l']), '/');
});

test('value: longer than the bound, the deepest entries collapse first', () => {
  const paths = Array.from({ length: 50 }, (_, i) => `apps/web/templates/file-${i}.yaml`).concat('base/one.yaml');
  const full = generatePathsValue(paths, 100_000);
  assert.equal(full.split(';').length, 102);
  assert.equal(generatePathsValue(paths, 200), '/"apps/web/templates;/"base/one.yaml;/apps/web/templates;/base/one.yaml');
  assert.equal(generatePathsValue(paths, 40), '/"apps/web;/"base;/apps/web;/base');
  assert.equal(generatePathsValue(paths, 10), '/');
  assert.ok(generatePathsValue(paths, 40).length <= 40);
});

test('derivation: none when bound to the revision, reading .git or nothing', () => {
  const shape = { touched: ['web/a.yaml'], listed: ['web'], revision: false };
  assert.deepEqual(deriveFromShape(shape, 'apps'), { value: '/"apps/web;/apps/web' });
  assert.deepEqual(deriveFromShape({ ...shape, listed: [''] }, 'apps'), { value: '/"apps;/apps' });
  assert.deepEqual(deriveFromShape({ ...shape, listed: [''] }, ''), { value: '/' });
  assert.ok('reason' in deriveFromShape({ ...shape, revision: true }, ''));
  assert.ok('reason' in deriveFromShape({ ...shape, touched: ['.git/HEAD'] }, ''));
  assert.ok('reason' in deriveFromShape({ touched: [], listed: [], revision: false }, ''));
});

// Soundness: random trees, random read sets, random commits. The traced cache's own state
// digest says whether a commit changed what the run read; whenever it did, Argo's rule on the
// derived value must say "refresh" (no miss). When it did not, a refresh is only wasted work:
// counted and reported.

const NAMES = ['a', 'b', 'c', 'd', 'base', 'x.yaml', 'values.yaml', 'k*s', 'v[1].yaml', 's;t', 'q?', 'e\\f', 'a b', 'ab', 'overlays', 'prod'];

/** A tree of files (path → content), directories implied as in git. */
type Files = Map<string, string>;

function indexOf(files: Files): TreeIndex {
  const entries = new Map<string, TreeEntry>();
  for (const [p, content] of files) {
    entries.set(p, { path: p, type: 'file', mode: 0o644, size: content.length, sha256: content });
    for (let d = path.posix.dirname(p); d !== '.'; d = path.posix.dirname(d)) entries.set(d, { path: d, type: 'dir', mode: 0o755, size: 0 });
  }
  return { entries, simple: true, traceable: true, contentDigest: () => '', globFs: () => { throw new Error('unused'); } };
}

function randomPath(r: () => number, depth = 1 + Math.floor(r() * 4)): string {
  return Array.from({ length: depth }, () => NAMES[Math.floor(r() * NAMES.length)]!).join('/');
}

/** A file may not sit where a directory is: keep the first of two conflicting paths. */
function addFile(files: Files, p: string, content: string): void {
  for (const q of files.keys()) if (q.startsWith(`${p}/`) || p.startsWith(`${q}/`)) return;
  files.set(p, content);
}

function randomTree(r: () => number): Files {
  const files: Files = new Map();
  for (let i = 0, n = 5 + Math.floor(r() * 40); i < n; i++) addFile(files, randomPath(r), `c${Math.floor(r() * 3)}`);
  return files;
}

function randomCommit(r: () => number, files: Files): Files {
  const next = new Map(files);
  const keys = [...files.keys()];
  for (let i = 0, n = 1 + Math.floor(r() * 3); i < n; i++) {
    const pick = keys[Math.floor(r() * keys.length)]!;
    const what = r();
    if (what < 0.35) next.set(pick, `${next.get(pick) ?? ''}+`);
    else if (what < 0.55) next.delete(pick);
    else if (what < 0.65) {
      // A directory replaced by a file: everything under it goes.
      const dir = path.posix.dirname(pick);
      if (dir === '.') continue;
      for (const q of [...next.keys()]) if (q.startsWith(`${dir}/`)) next.delete(q);
      next.set(dir, 'now a file');
    } else addFile(next, randomPath(r), 'new');
  }
  return next;
}

function changedFiles(before: Files, after: Files): string[] {
  const out = new Set<string>();
  for (const [p, c] of before) if (after.get(p) !== c) out.add(p);
  for (const p of after.keys()) if (!before.has(p)) out.add(p);
  return [...out];
}

function randomReads(r: () => number, files: Files): { touched: string[]; listed: string[] } {
  const index = indexOf(files);
  const existing = [...index.entries.keys()];
  const dirs = existing.filter(p => index.entries.get(p)!.type === 'dir');
  const touched = new Set<string>();
  const listed = new Set<string>();
  for (let i = 0, n = 1 + Math.floor(r() * 8); i < n; i++) {
    const kind = r();
    if (kind < 0.5 && existing.length > 0) touched.add(existing[Math.floor(r() * existing.length)]!);
    else if (kind < 0.8) touched.add(randomPath(r));
    else if (dirs.length > 0) listed.add(dirs[Math.floor(r() * dirs.length)]!);
  }
  if (r() < 0.03) listed.add('');
  return { touched: [...touched], listed: [...listed] };
}

test('soundness: every commit that changes what the run read matches the derived value', t => {
  const seed = Number(process.env.GENERATE_PATHS_SEED ?? 17);
  const r = rng(seed);
  let relevant = 0;
  let irrelevant = 0;
  let needless = 0;
  for (let round = 0; round < 3000; round++) {
    const root = r() < 0.1 ? 'a/b*' : r() < 0.5 ? 'apps' : '';
    const maxChars = r() < 0.5 ? 2048 : 10 + Math.floor(r() * 80);
    const before = randomTree(r);
    const reads = randomReads(r, before);
    const oldIndex = indexOf(before);
    const shape = shapeOf({ complete: true, ...reads, moved: [], traversed: [] }, oldIndex, false);
    assert.ok(shape);
    const derived = deriveFromShape(shape, root, maxChars);
    assert.ok('value' in derived, JSON.stringify(derived));
    assert.ok(derived.value.length <= maxChars || derived.value === '/', `${derived.value.length} > ${maxChars}`);
    for (let c = 0; c < 5; c++) {
      const after = randomCommit(r, before);
      const changed = changedFiles(before, after).map(f => (root === '' ? f : `${root}/${f}`));
      if (changed.length === 0) continue;
      const inputsChanged = stateDigest(oldIndex, shape, false) !== stateDigest(indexOf(after), shape, false);
      const refresh = filesHaveChanged(refreshPaths(derived.value, ['ignored']), changed);
      if (inputsChanged) {
        relevant++;
        assert.ok(refresh, `seed ${seed} round ${round}: missed ${JSON.stringify(changed)} against ${derived.value} (reads ${JSON.stringify(reads)})`);
      } else {
        irrelevant++;
        if (refresh) needless++;
      }
    }
  }
  assert.ok(relevant > 1000 && irrelevant > 1000, `${relevant} relevant, ${irrelevant} irrelevant commits`);
  t.diagnostic(`seed ${seed}: ${relevant} commits changed the inputs (0 missed); ${needless} of ${irrelevant} others refreshed needlessly (${((100 * needless) / irrelevant).toFixed(1)} %)`);
});

test('a monorepo app: one-file commits elsewhere in the repository refresh it rarely', t => {
  // 40 apps of 6 files, a shared base; the app lists its dir and reads its files and two of base/.
  const files: Files = new Map();
  for (let a = 0; a < 40; a++) for (let f = 0; f < 6; f++) files.set(`apps/app${a}/f${f}.yaml`, 'x');
  for (let f = 0; f < 10; f++) files.set(`base/b${f}.yaml`, 'x');
  files.set('README.md', 'x');
  const index = indexOf(files);
  const touched = [...files.keys()].filter(p => p.startsWith('apps/app7/')).concat('base/b1.yaml', 'base/b2.yaml', 'apps/app7/absent.yaml');
  const shape = shapeOf({ complete: true, touched, listed: ['apps/app7'], moved: [], traversed: [] }, index, false)!;
  const derived = deriveFromShape(shape, '');
  assert.ok('value' in derived);
  // base/ is listed as the directory of the files read there (shapeOf's conservative rule).
  assert.equal(derived.value, '/"apps/app7;/"base;/apps/app7;/base');
  let needless = 0;
  let relevant = 0;
  const paths = [...files.keys()];
  for (const p of paths) {
    const after = new Map(files).set(p, 'changed');
    const changed = stateDigest(index, shape, false) !== stateDigest(indexOf(after), shape, false);
    const refresh = filesHaveChanged(refreshPaths(derived.value, ['apps/app7']), [p]);
    if (changed) {
      relevant++;
      assert.ok(refresh, p);
    } else if (refresh) needless++;
  }
  t.diagnostic(`${relevant} of ${paths.length} one-file commits change the inputs (all refresh); ${needless} others refresh needlessly (files of base/ not read)`);
  assert.equal(needless, 8);
});

// Soundness on real git: the same random trees, reads and commits, with names git quotes (UTF-8,
// control characters, quotes, backslashes), spaces, `;` and pattern characters, committed to a
// real repository. Argo CD learns a commit's changed files two ways, and each must refresh the
// app whenever the commit changed what it read: the webhook's list (the names themselves) and
// the repo-server's `git diff --name-only synced..new` (git's own output, run as Argo runs it:
// no user or system configuration, so core.quotePath and rename detection are on; and once more
// with core.quotePath=false, which some installs set); each with and without the trimming of
// entries that newer Argo CD versions do.

const GIT_NAMES = [
  ...NAMES,
  'värden.yaml',
  'ü',
  '日本語',
  'a"b',
  '"q"',
  'c\\d',
  'new\nline',
  'tab\there',
  'cr\rx',
  'del\u007f',
  'bell\u0007',
  'sp ace',
  'trail ',
  ' lead',
  'nbsp\u00a0',
  'semi;v\u00e4',
];

const git = gitAsArgo;

/** A path in fast-import's C-style quoting: every byte but letters, digits, `._-/` in octal (not git's own quoting, which is under test). */
function importPath(p: string): string {
  return `"${[...Buffer.from(p, 'utf8')].map(b => (/[A-Za-z0-9._\-/]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : `\\${b.toString(8).padStart(3, '0')}`)).join('')}"`;
}

/**
 * One line per file version, unlike any other: git's rename detection pairs a deleted file with
 * an added one of (nearly) the same content, and a pair would list only the new name (see the
 * rename test below).
 */
function blobOf(p: string, content: string): string {
  return `${createHash('sha256').update(`${p}\0${content}`).digest('hex')}\n`;
}

/** fast-import commands for a commit of `files` (under `root`) on `ref`, from `parent` (a mark) if any. */
function importCommit(ref: string, mark: number, files: Files, root: string, parent?: number): string {
  let s = `commit ${ref}\nmark :${mark}\ncommitter t <t@t> 0 +0000\ndata 0\n${parent ? `from :${parent}\n` : ''}deleteall\n`;
  for (const [p, content] of files) {
    const full = root === '' ? p : `${root}/${p}`;
    const blob = blobOf(full, content);
    s += `M 100644 inline ${importPath(full)}\ndata ${Buffer.byteLength(blob)}\n${blob}\n`;
  }
  return s;
}

test('soundness on real git diffs: names git quotes, spaces, `;`, through the webhook and the repo-server', t => {
  const seed = Number(process.env.GENERATE_PATHS_SEED ?? 17);
  const rounds = Number(process.env.GENERATE_PATHS_GIT_ROUNDS ?? 100);
  const r = rng(seed);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-genpaths-git-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  git(dir, ['init', '-q', '--bare']);
  const pick = (n: number) => Math.floor(r() * n);
  const randomGitPath = () => Array.from({ length: 1 + pick(4) }, () => GIT_NAMES[pick(GIT_NAMES.length)]!).join('/');

  // The model: rounds of a tree, the reads of one run, up to 4 commits from it.
  type Round = { root: string; before: Files; reads: { touched: string[]; listed: string[] }; commits: Files[] };
  const plan: Round[] = [];
  let stream = '';
  let mark = 0;
  for (let round = 0; round < rounds; round++) {
    const root = r() < 0.1 ? 'a/b*' : r() < 0.3 ? 'apps/v\u00e4' : r() < 0.6 ? 'apps' : '';
    const before: Files = new Map();
    for (let i = 0, n = 5 + pick(30); i < n; i++) addFile(before, randomGitPath(), `c${pick(3)}`);
    const index = indexOf(before);
    const existing = [...index.entries.keys()];
    const dirs = existing.filter(p => index.entries.get(p)!.type === 'dir');
    const touched = new Set<string>();
    const listed = new Set<string>();
    for (let i = 0, n = 1 + pick(8); i < n; i++) {
      const kind = r();
      if (kind < 0.5) touched.add(existing[pick(existing.length)]!);
      else if (kind < 0.8) touched.add(randomGitPath());
      else if (dirs.length > 0) listed.add(dirs[pick(dirs.length)]!);
    }
    const commits: Files[] = [];
    for (let c = 0; c < 4; c++) {
      const after = new Map(before);
      const keys = [...before.keys()];
      for (let i = 0, n = 1 + pick(3); i < n; i++) {
        const p = keys[pick(keys.length)]!;
        const what = r();
        // (A file replaced by a directory earlier in the commit is gone: a tree holds one of them.)
        if (what < 0.35) {
          if (after.has(p)) after.set(p, `${after.get(p)}+`);
        } else if (what < 0.55) after.delete(p);
        else if (what < 0.65 && path.posix.dirname(p) !== '.') {
          const d = path.posix.dirname(p);
          for (const q of [...after.keys()]) if (q.startsWith(`${d}/`)) after.delete(q);
          after.set(d, 'now a file');
        } else addFile(after, randomGitPath(), 'new');
      }
      commits.push(after);
    }
    const base = ++mark;
    stream += importCommit(`refs/heads/r${round}`, base, before, root);
    commits.forEach((after, c) => (stream += importCommit(`refs/heads/r${round}c${c}`, ++mark, after, root, base)));
    plan.push({ root, before, reads: { touched: [...touched], listed: [...listed] }, commits });
  }
  git(dir, ['fast-import', '--quiet'], stream);

  const ways = ['webhook', 'webhook, entries trimmed', 'git diff', 'git diff, entries trimmed', 'git diff with core.quotePath=false'] as const;
  let relevant = 0;
  let irrelevant = 0;
  let needless = 0;
  let quoted = 0;
  const misses: string[] = [];
  plan.forEach(({ root, before, reads, commits }, round) => {
    const inRepo = (f: string) => (root === '' ? f : `${root}/${f}`);
    const oldIndex = indexOf(before);
    const shape = shapeOf({ complete: true, ...reads, moved: [], traversed: [] }, oldIndex, false)!;
    const derived = deriveFromShape(shape, root);
    assert.ok('value' in derived, JSON.stringify(derived));
    commits.forEach((after, c) => {
      const range = `r${round}..r${round}c${c}`;
      const changed = changedFiles(before, after).map(inRepo).sort();
      // The model's change list is git's (-z: the names as they are; no renames by construction).
      const raw = git(dir, ['diff', '--name-only', '-z', range]).split('\0').filter(Boolean).sort();
      assert.deepEqual(raw, changed, `round ${round} commit ${c}`);
      if (changed.length === 0) return;
      const out = git(dir, ['diff', '--name-only', range]);
      const unquotedUtf8 = git(dir, ['-c', 'core.quotePath=false', 'diff', '--name-only', range]);
      // Git's quoting is the one the derivation assumes.
      assert.deepEqual(changedFilesOf(out).sort(), changed.map(f => gitQuoted(f)).sort(), `round ${round} commit ${c}`);
      assert.deepEqual(changedFilesOf(unquotedUtf8).sort(), changed.map(f => gitQuoted(f, false)).sort(), `round ${round} commit ${c}`);
      if (out.includes('"')) quoted++;
      const verdicts = [
        argoRefreshes(derived.value, 'ignored', changed),
        argoRefreshes(derived.value, 'ignored', changed, { trimSpace: true }),
        repoServerRefreshes(derived.value, 'ignored', out),
        repoServerRefreshes(derived.value, 'ignored', out, { trimSpace: true }),
        repoServerRefreshes(derived.value, 'ignored', unquotedUtf8),
      ];
      const inputsChanged = stateDigest(oldIndex, shape, false) !== stateDigest(indexOf(after), shape, false);
      if (inputsChanged) {
        relevant++;
        verdicts.forEach((v, i) => {
          if (!v) misses.push(`round ${round} commit ${c}, ${ways[i]}: changed ${JSON.stringify(i >= 2 ? changedFilesOf(i === 4 ? unquotedUtf8 : out) : changed)} against ${JSON.stringify(derived.value)} (reads ${JSON.stringify(reads)})`);
        });
      } else {
        irrelevant++;
        if (verdicts.some(Boolean)) needless++;
      }
    });
  });
  assert.equal(misses.length, 0, `seed ${seed}: ${misses.length} misses, first:\n${misses.slice(0, 5).join('\n')}`);
  assert.ok(relevant > rounds && quoted > rounds / 2, `${relevant} relevant commits, ${quoted} with quoted names`);
  t.diagnostic(`seed ${seed}: ${relevant} commits changed the inputs (0 missed in any of ${ways.length} ways), ${quoted} listed quoted names; ${needless} of ${irrelevant} others refreshed needlessly`);
});

test("Argo CD's own limit, on real git: a file moved out of the entries reaches the repo-server under its new name only", t => {
  // The run listed apps/web; a commit moves one of its files elsewhere. The webhook names both
  // paths; `git diff --name-only` with git's default rename detection names only the new one, so
  // the repo-server finds no match, whatever the annotation says short of `/`. With
  // diff.renames=false in the repo-server's git configuration it names both.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-genpaths-rename-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  git(dir, ['init', '-q', '--bare']);
  const extra = 'kind: ConfigMap\nmetadata:\n  name: extra\ndata:\n  a: "1"\n  b: "2"\n';
  const tree = (files: Record<string, string>) =>
    Object.entries(files)
      .map(([p, c]) => `M 100644 inline ${importPath(p)}\ndata ${Buffer.byteLength(c)}\n${c}\n`)
      .join('');
  git(dir, ['fast-import', '--quiet'], `commit refs/heads/a\nmark :1\ncommitter t <t@t> 0 +0000\ndata 0\n${tree({ 'apps/web/a.yaml': 'a: 1\n', 'apps/web/extra.yaml': extra })}commit refs/heads/b\ncommitter t <t@t> 0 +0000\ndata 0\nfrom :1\ndeleteall\n${tree({ 'apps/web/a.yaml': 'a: 1\n', 'archive/extra.yaml': extra })}`);
  const value = generatePathsValue(['apps/web', 'apps/web/a.yaml', 'apps/web/extra.yaml']);
  assert.equal(value, '/"apps/web;/apps/web');
  assert.equal(argoRefreshes(value, 'apps/web', ['apps/web/extra.yaml', 'archive/extra.yaml']), true);
  const out = git(dir, ['diff', '--name-only', 'a..b']);
  assert.deepEqual(changedFilesOf(out), ['archive/extra.yaml']);
  assert.equal(repoServerRefreshes(value, 'apps/web', out), false);
  const both = git(dir, ['-c', 'diff.renames=false', 'diff', '--name-only', 'a..b']);
  assert.deepEqual(changedFilesOf(both), ['apps/web/extra.yaml', 'archive/extra.yaml']);
  assert.equal(repoServerRefreshes(value, 'apps/web', both), true);
});
