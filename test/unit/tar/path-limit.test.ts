import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status as Status } from '@grpc/grpc-js';
import { CmpError } from '../../../cmp/errors.js';
import { IMPLIED_PATH_BYTES, sortedPaths, TreeIndexer, type TreeIndex } from '../../../cmp/tar/tree-index.js';
import { buildTgz, type TarEntry } from '../../helpers/tar-builder.js';
import { extractBytes, NO_LIMITS, withTmp } from './helpers.js';

async function index(entries: TarEntry[]): Promise<TreeIndex> {
  const indexer = new TreeIndexer(NO_LIMITS);
  indexer.write(buildTgz(entries));
  return indexer.end();
}

async function indexError(entries: TarEntry[]): Promise<CmpError> {
  const indexer = new TreeIndexer(NO_LIMITS);
  indexer.write(buildTgz(entries));
  return indexer.end().then(() => assert.fail('indexing should fail'), (e: CmpError) => e);
}

/** A cleaned path of exactly `bytes` bytes: `a/a/…` components, the last one padded. */
function pathOf(bytes: number, name = 1): string {
  const comp = 'a'.repeat(name);
  const parts: string[] = [];
  let len = -1;
  while (len + 1 + name <= bytes) {
    parts.push(comp);
    len += 1 + name;
  }
  parts[parts.length - 1] += 'b'.repeat(bytes - len);
  return parts.join('/');
}

test('a path of 4096 bytes is indexed and extracted; 4097 bytes is pathTooLong in both', async () => {
  const ok = pathOf(4096);
  assert.equal(Buffer.byteLength(ok), 4096);
  const idx = await index([{ name: ok, content: 'x' }]);
  assert.equal(idx.entries.get(ok)?.type, 'file');

  const long = pathOf(4097);
  const err = await indexError([{ name: long, content: 'x' }]);
  assert.equal(err.code, Status.RESOURCE_EXHAUSTED);
  assert.equal(
    err.message,
    `tarball path too long: "${long.slice(0, 100)}"… has 4097 bytes and a 1-byte name (limits 4096 and 255 bytes, Linux PATH_MAX and NAME_MAX)`,
  );
  await withTmp(async dir => {
    // Extraction checks the same bound with the same error (before touching the filesystem).
    const r = await extractBytes(dir, buildTgz([{ name: long, content: 'x' }]));
    assert.equal(r.error, err.message);
    assert.equal(r.code, Status.RESOURCE_EXHAUSTED);
  });
});

test('the bound applies to the cleaned name: `./`, `//` and `x/..` do not count', async () => {
  const ok = pathOf(4096);
  const noisy = `./${'x/../'.repeat(2000)}${ok.replace(/\//g, '//')}`;
  const idx = await index([{ name: noisy, content: 'x' }]);
  assert.equal(idx.entries.get(ok)?.type, 'file');
});

test('a name of 255 bytes is accepted, 256 bytes is pathTooLong (multi-byte characters count in bytes)', async () => {
  const idx = await index([{ name: `d/${'n'.repeat(255)}`, content: 'x' }]);
  assert.ok(idx.entries.has(`d/${'n'.repeat(255)}`));
  const err = await indexError([{ name: `d${'é'.repeat(128)}`, content: 'x' }]);
  assert.match(err.message, /has 257 bytes and a 257-byte name/);
  // The quoted head stops at 100 bytes, even inside a character.
  assert.ok(err.message.startsWith(`tarball path too long: "d${'é'.repeat(49)}\\xc3"…`), err.message);
});

test('every entry type is bounded, directories and symlinks included', async () => {
  for (const type of ['dir', 'symlink', 'hardlink'] as const) {
    const err = await indexError([{ name: pathOf(5000), type, linkname: 'x' }]);
    assert.match(err.message, /^tarball path too long: .* has 5000 bytes/, type);
  }
});

test('indexing a 4000-byte, 2000-level path and 2000 entries sharing long prefixes stays fast', async () => {
  const deep = Array.from({ length: 2000 }, () => 'a').join('/') + 'b'.repeat(1);
  const entries: TarEntry[] = [{ name: deep, content: 'deep' }];
  // Siblings under the deepest levels: every one shares a ~3900-byte prefix.
  const parent = deep.split('/').slice(0, 1950).join('/');
  for (let i = 0; i < 2000; i++) entries.push({ name: `${parent}/f${i}`, content: `${i}` });
  // CPU time of this process, not wall time: a loaded machine stretches the latter (4.9 s seen at
  // load 16 on 2 cores) but not the work the walk does.
  const cpu0 = process.cpuUsage();
  const idx = await index(entries);
  const digest = idx.contentDigest(true);
  const { user, system } = process.cpuUsage(cpu0);
  const ms = (user + system) / 1000;
  assert.equal(idx.simple, true);
  assert.equal(idx.entries.size, 2000 + 2000);
  assert.match(digest, /^[0-9a-f]{64}$/);
  // Linear in the bytes of the names (16 MB, 8 million components checked, cleaned and digested):
  // 2.1 s of CPU here beside a running suite, 2.4 s in a loaded clean-clone run. A walk probing every prefix of
  // every entry hashes depth × length bytes per entry (16 GB here): far beyond this bound.
  assert.ok(ms < 10_000, `indexed in ${ms.toFixed(0)} ms of CPU`);
});

test('sortedPaths orders a tree exactly as sorting its whole paths', () => {
  const names = ['a', 'a.b', 'a-', 'a0', 'b', 'é', 'A', 'a b', '\u{1F600}', 'ab'];
  const paths = new Set<string>();
  const children = new Map<string, Set<string>>([['', new Set()]]);
  let seed = 7;
  const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
  for (let i = 0; i < 400; i++) {
    let dir = '';
    for (let d = rand(5); d >= 0; d--) {
      const p = dir === '' ? names[rand(names.length)]! : `${dir}/${names[rand(names.length)]}`;
      if (paths.has(p) && !children.has(p)) break; // a file already there
      if (!paths.has(p)) {
        paths.add(p);
        children.get(dir)!.add(p.slice(dir === '' ? 0 : dir.length + 1));
        if (d > 0) children.set(p, new Set());
      }
      if (!children.has(p)) break;
      dir = p;
    }
  }
  assert.deepEqual(sortedPaths(children), [...paths].sort());
});

test('directories implied beyond the budget make the tree not simple instead of being built', async () => {
  // Each name implies ~2000 directories of ~2000 bytes on average: ~4 MB of new paths.
  const chains = Math.ceil(IMPLIED_PATH_BYTES / 4e6) + 1;
  const entries: TarEntry[] = [];
  for (let k = 0; k < chains + 5; k++) entries.push({ name: `k${k}/${pathOf(4000)}`, content: 'x' });
  const t0 = performance.now();
  const idx = await index(entries);
  const ms = performance.now() - t0;
  assert.equal(idx.simple, false);
  assert.ok(idx.entries.size < (IMPLIED_PATH_BYTES / 1000) * 2, `${idx.entries.size} nodes`);
  assert.ok(ms < 2_000, `indexed in ${ms.toFixed(0)} ms of CPU`);
  // The same archive still has a digest, over its ordered entries.
  assert.match(idx.contentDigest(false), /^[0-9a-f]{64}$/);
});
