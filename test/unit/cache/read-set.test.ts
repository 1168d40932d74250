import { test } from 'node:test';
import assert from 'node:assert/strict';
import { shapeOf, stateDigest } from '../../../cmp/cache/read-set.js';
import type { TreeEntry, TreeIndex } from '../../../cmp/tar/tree-index.js';

/** An index of directories (paths ending in /) and files (all with the same content). */
function indexOf(paths: string[]): TreeIndex {
  const entries = new Map<string, TreeEntry>();
  for (const p of paths) {
    if (p.endsWith('/')) entries.set(p.slice(0, -1), { path: p.slice(0, -1), type: 'dir', mode: 0o755, size: 0 });
    else entries.set(p, { path: p, type: 'file', mode: 0o644, size: 1, sha256: 'a'.repeat(64) });
  }
  return { entries, simple: true, traceable: true, contentDigest: () => '', globFs: () => { throw new Error('unused'); } };
}

function keyChanges(reads: { touched: string[]; listed: string[]; traversed?: string[] }, before: string[], after: string[]): boolean {
  const old = indexOf(before);
  const shape = shapeOf({ complete: true, traversed: [], ...reads, moved: [] }, old, false)!;
  return stateDigest(old, shape, false) !== stateDigest(indexOf(after), shape, false);
}

test('a stat of a directory is keyed by what it reveals: its link count (subdirectories) and size (entries)', () => {
  const before = ['d/', 'd/a', 'd/s/', 'd/s/x'];
  const statOfD = { touched: ['d'], listed: [] };
  assert.ok(keyChanges(statOfD, before, [...before, 'd/t/']), 'a new subdirectory changes the link count');
  assert.ok(keyChanges(statOfD, before, [...before, 'd/b']), 'a new file changes the size');
  assert.ok(!keyChanges(statOfD, before, ['d/', 'd/a', 'd/s/', 'd/s/y']), 'deeper changes are not revealed');
  const statOfRoot = { touched: [''], listed: [] };
  assert.ok(keyChanges(statOfRoot, before, [...before, 'e/']), 'the work dir itself too');
});

test('a directory a lookup only passed (`..`, a link crossed) counts by its type, not its entries', () => {
  const before = ['apps/', 'apps/a/', 'apps/a/k', 'base/', 'base/x'];
  const reads = { touched: ['base/x'], listed: [], traversed: ['apps/a', 'apps'] };
  assert.ok(!keyChanges(reads, before, [...before, 'apps/README.md']), 'apps/a/../../base/x does not look at the entries of apps');
  assert.ok(keyChanges(reads, before, ['apps', 'base/', 'base/x']), 'apps turned into a file');
  assert.ok(keyChanges(reads, before, ['base/', 'base/x']), 'apps removed');
  // Not as the directory itself: for manifest-generate-paths a directory matches every change under it.
  const shape = shapeOf({ complete: true, moved: [], ...reads }, indexOf(before), false)!;
  assert.deepEqual(shape.touched, ['apps/a/k', 'base/x'], 'apps/a/k witnesses both directories');
});

test('a renamed directory or symlink (either end of the rename) leaves no shape', () => {
  const index: TreeIndex = indexOf(['d/', 'd/a', 'f']);
  (index.entries as Map<string, TreeEntry>).set('l', { path: 'l', type: 'symlink', mode: 0o777, size: 0, linkTarget: 'd' });
  const shape = (moved: string[]) => shapeOf({ complete: true, touched: [], listed: [], traversed: [], moved }, index, false);
  assert.equal(shape(['d']), undefined);
  assert.equal(shape(['l']), undefined, 'lookups through l (one running at the same time too) changed');
  assert.ok(shape(['f']));
});

test('a listing is keyed by entry names and types (getdents gives the type, the link count follows it)', () => {
  const listing = { touched: [], listed: ['d'] };
  assert.ok(keyChanges(listing, ['d/', 'd/a'], ['d/', 'd/a/']), 'a file replaced by a directory of the same name');
  assert.ok(!keyChanges(listing, ['d/', 'd/a'], ['d/', 'd/a']));
});
