import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { anchorsOf, brokenCodeReferences, brokenLinks, slug } from '../../helpers/doc-links.js';
import { REPO_ROOT } from '../../helpers/paths.js';

test('every relative link and #anchor of README.md, SECURITY.md, CHANGELOG.md and docs/ resolves', () => {
  assert.deepEqual(brokenLinks(REPO_ROOT), []);
});

test('every docs/ reference in code comments names a page and an anchor that exist', () => {
  assert.deepEqual(brokenCodeReferences(REPO_ROOT), []);
});

test('anchors are computed as GitHub does: lower case, punctuation dropped, spaces to -, duplicates numbered', () => {
  assert.equal(slug('1.6 Redis Sentinel and Cluster'), '16-redis-sentinel-and-cluster');
  assert.equal(slug('Git credentials (provideGitCreds)'), 'git-credentials-providegitcreds');
  assert.equal(slug("Argo CD's own error texts"), 'argo-cds-own-error-texts');
  assert.equal(slug('The `cache` CLI: [purge](x.md) — all'), 'the-cache-cli-purge--all');
  assert.deepEqual([...anchorsOf('# A\n## B\n```\n# not a heading\n```\n## B\n### B\n<a id="x"></a>\n')], ['a', 'b', 'b-1', 'b-2', 'x']);
});

test('the checks find a missing file, a missing anchor and a broken code reference', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'doc-links-'));
  try {
    fs.mkdirSync(path.join(root, 'docs'));
    fs.mkdirSync(path.join(root, 'cmp'));
    fs.writeFileSync(path.join(root, 'README.md'), '# Top\n[ok](docs/a.md#part-one) [gone](docs/b.md) [typo](docs/a.md#part-two) `[code](nowhere.md)`\n');
    fs.writeFileSync(path.join(root, 'docs', 'a.md'), '# A\n## Part one\n[self](#part-one) [up](../README.md#top) [bad](#nope)\n');
    fs.writeFileSync(path.join(root, 'cmp', 'x.ts'), '/** See docs/a.md#part-one and docs/a.md#gone. */\nconst s = "docs/b.md";\n');
    assert.deepEqual(brokenLinks(root), [
      'README.md:2: docs/b.md (no such file)',
      'README.md:2: docs/a.md#part-two (no heading with the anchor #part-two)',
      'docs/a.md:3: #nope (no heading with the anchor #nope)',
    ]);
    assert.deepEqual(brokenCodeReferences(root), ['cmp/x.ts: docs/a.md#gone (no heading with the anchor #gone)']);
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});
