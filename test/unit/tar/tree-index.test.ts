import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { status as Status } from '@grpc/grpc-js';
import { realFs, type GlobFs } from '../../../cmp/go/glob-fs.js';
import { packDirectory } from '../../../cmp/tar/pack.js';
import { traceableIndexOf, TreeIndexer, type TreeIndex } from '../../../cmp/tar/tree-index.js';
import { buildTgz, flipBit, gzipBytes, truncated, type TarEntry } from '../../helpers/tar-builder.js';
import { extractBytes, NO_LIMITS, withTmp } from './helpers.js';

async function index(tgz: Buffer, chunk = 1024, limits = NO_LIMITS): Promise<TreeIndex> {
  const indexer = new TreeIndexer(limits);
  for (let i = 0; i < tgz.length; i += chunk) indexer.write(tgz.subarray(i, i + chunk));
  return indexer.end();
}

async function indexError(tgz: Buffer, limits = NO_LIMITS): Promise<Error> {
  const indexer = new TreeIndexer(limits);
  for (let i = 0; i < tgz.length; i += 1024) indexer.write(tgz.subarray(i, i + 1024));
  const err = await indexer.end().then(
    () => assert.fail('indexing should fail'),
    (e: Error) => e,
  );
  assert.equal(indexer.error, err);
  return err;
}

const base: TarEntry[] = [
  { name: '.', type: 'dir' },
  { name: 'apps', type: 'dir', mode: 0o755 },
  { name: 'apps/a.yaml', content: 'a: 1\n' },
  { name: 'apps/b.yaml', content: 'b: 2\n', mode: 0o600 },
  { name: 'bin/run.sh', content: '#!/bin/sh\n', mode: 0o755 },
];

test('the digest ignores mtimes, owners and entry order', async () => {
  const a = await index(buildTgz(base));
  const shuffled = [...base].reverse().map(e => ({ ...e, mtime: 1234, uid: 42, gid: 7, uname: 'x', gname: 'y' }));
  const b = await index(buildTgz(shuffled), 7);
  assert.equal(a.simple, true);
  assert.equal(b.simple, true);
  for (const preserve of [false, true]) assert.equal(a.contentDigest(preserve), b.contentDigest(preserve));
});

test('the same directory packed twice with different mtimes has the same digest', async () => {
  await withTmp(async dir => {
    const repo = path.join(dir, 'repo');
    fs.mkdirSync(path.join(repo, 'a/b'), { recursive: true });
    fs.writeFileSync(path.join(repo, 'a/b/c.yaml'), 'c: 3\n');
    fs.writeFileSync(path.join(repo, 'top.txt'), 'top\n');
    const digest = async () => {
      const out = path.join(dir, 'r.tgz');
      await packDirectory(repo, { out });
      const idx = await index(fs.readFileSync(out));
      return [idx.contentDigest(false), idx.contentDigest(true)];
    };
    const first = await digest();
    fs.utimesSync(path.join(repo, 'a/b/c.yaml'), 1000, 1000);
    fs.utimesSync(path.join(repo, 'a'), 2000, 2000);
    assert.deepEqual(await digest(), first);
  });
});

test('content, symlink targets and (only with preserveFileMode) modes change the digest', async () => {
  const a = await index(buildTgz(base));
  const content = await index(buildTgz(base.map(e => (e.name === 'apps/a.yaml' ? { ...e, content: 'a: 2\n' } : e))));
  const mode = await index(buildTgz(base.map(e => (e.name === 'bin/run.sh' ? { ...e, mode: 0o644 } : e))));
  const dirMode = await index(buildTgz(base.map(e => (e.name === 'apps' ? { ...e, mode: 0o700 } : e))));
  const renamed = await index(buildTgz(base.map(e => (e.name === 'apps/b.yaml' ? { ...e, name: 'apps/c.yaml' } : e))));
  assert.notEqual(content.contentDigest(false), a.contentDigest(false));
  assert.notEqual(renamed.contentDigest(false), a.contentDigest(false));
  assert.equal(mode.contentDigest(false), a.contentDigest(false));
  assert.notEqual(mode.contentDigest(true), a.contentDigest(true));
  assert.notEqual(dirMode.contentDigest(true), a.contentDigest(true));
  const link = (target: string) => index(buildTgz([...base, { name: 'l', type: 'symlink', linkname: target }]));
  const [l1, l2] = await Promise.all([link('apps/a.yaml'), link('apps/b.yaml')]);
  assert.equal(l1.simple, false);
  assert.notEqual(l1.contentDigest(false), l2.contentDigest(false));
});

test('with symlinks the entry order is part of the digest, since it changes what extraction makes', async () => {
  const f: TarEntry = { name: 'f', content: 'F' };
  const l1: TarEntry = { name: 'l1', type: 'symlink', linkname: 'f' };
  const l2: TarEntry = { name: 'l2', type: 'symlink', linkname: 'l1' };
  // l2 -> l1 -> f is flattened to l2 -> f only when l1 exists first.
  const a = await index(buildTgz([f, l1, l2]));
  const b = await index(buildTgz([f, l2, l1]));
  assert.notEqual(a.contentDigest(false), b.contentDigest(false));
  assert.equal(a.contentDigest(false), (await index(buildTgz([f, l1, l2]), 3)).contentDigest(false));
});

test('simple is false for symlinks, duplicates, conflicts, ignored types and escaping names', async () => {
  const cases: TarEntry[][] = [
    [{ name: 'l', type: 'symlink', linkname: 'x' }],
    [{ name: 'f', content: '1' }, { name: 'f', content: '2' }],
    [{ name: 'f', content: '1' }, { name: 'f/g', content: '2' }],
    [{ name: 'd', type: 'dir' }, { name: 'd', content: '2' }],
    [{ name: 'h', type: 'hardlink', linkname: 'f' }],
    [{ name: 'p', type: 'fifo' }],
    [{ name: '../x', content: 'x' }],
  ];
  for (const entries of cases) {
    const idx = await index(buildTgz([{ name: 'ok', content: 'ok' }, ...entries]));
    assert.equal(idx.simple, false, JSON.stringify(entries));
  }
  const dup = await index(buildTgz([{ name: 'f', content: 'old', mode: 0o600 }, { name: 'f', content: 'new', mode: 0o777 }]));
  const f = dup.entries.get('f')!;
  assert.equal(f.size, 3);
  assert.equal(f.mode, 0o600, 'an overwritten file keeps its first mode');
});

test('traceable: symlinks as plain leaves keep per-app keys; chains, escapes, conflicts and writes through links do not', async () => {
  const base: TarEntry[] = [
    { name: 'shared', type: 'dir' },
    { name: 'shared/values.yaml', content: 'v: 1' },
    { name: 'apps', type: 'dir' },
    { name: 'apps/a', type: 'dir' },
  ];
  const traceable = async (extra: TarEntry[]) => (await index(buildTgz([...base, ...extra]))).traceable;
  // A linked values file, a linked directory, a dangling link, an absolute name (below the link's dir in Go's Join).
  const leaves = await index(
    buildTgz([
      ...base,
      { name: 'apps/a/values.yaml', type: 'symlink', linkname: '../../shared/values.yaml' },
      { name: 'apps/a/shared', type: 'symlink', linkname: '../../shared' },
      { name: 'apps/a/later', type: 'symlink', linkname: 'not-yet' },
      { name: 'apps/a/not-yet', content: 'n' },
      { name: 'apps/a/abs', type: 'symlink', linkname: '/x' },
    ]),
  );
  assert.equal(leaves.simple, false, 'symlinks are never simple (discovery is not answered from the index)');
  assert.equal(leaves.traceable, true);
  assert.equal(leaves.entries.get('apps/a/values.yaml')!.targetExisted, true);
  assert.equal(leaves.entries.get('apps/a/later')!.targetExisted, false, 'its target came after it');
  assert.equal(leaves.entries.get('apps/a/abs')!.targetExisted, false);
  assert.equal((await index(buildTgz(base))).traceable, true, 'a simple tree is traceable');
  const cases: TarEntry[][] = [
    // l2 -> l1: extraction follows l1 when it exists first.
    [{ name: 'l1', type: 'symlink', linkname: 'shared' }, { name: 'l2', type: 'symlink', linkname: 'l1' }],
    // through a link to a directory
    [{ name: 'l1', type: 'symlink', linkname: 'shared' }, { name: 'l2', type: 'symlink', linkname: 'l1/values.yaml' }],
    // a file where a directory is needed: extraction fails
    [{ name: 'l', type: 'symlink', linkname: 'shared/values.yaml/x' }],
    // outside the tree, or the root itself
    [{ name: 'apps/a/out', type: 'symlink', linkname: '../../../etc/passwd' }],
    [{ name: 'apps/a/root', type: 'symlink', linkname: '../..' }],
    // written through: an entry under a link
    [{ name: 'l', type: 'symlink', linkname: 'shared' }, { name: 'l/new.yaml', content: 'x' }],
    // a link over an existing path, and a path over a link
    [{ name: 'shared/values.yaml', type: 'symlink', linkname: 'x' }],
    [{ name: 'l', type: 'symlink', linkname: 'shared' }, { name: 'l', content: 'x' }],
    // duplicates and other non-simple causes stay untraceable
    [{ name: 'f', content: '1' }, { name: 'f', content: '2' }],
    [{ name: 'h', type: 'hardlink', linkname: 'shared/values.yaml' }],
  ];
  for (const extra of cases) assert.equal(await traceable(extra), false, JSON.stringify(extra));
});

test('a traceable tree with symlinks travels as entries; its content digest does not', async () => {
  const idx = await index(buildTgz([{ name: 'f', content: 'F' }, { name: 'l', type: 'symlink', linkname: 'f' }]));
  const copy = traceableIndexOf(structuredClone([...idx.entries.values()]));
  assert.equal(copy.traceable, true);
  assert.equal(copy.simple, false);
  assert.deepEqual(copy.entries.get('l'), idx.entries.get('l'));
  assert.throws(() => copy.contentDigest(false), /no content digest/);
});

test('entries hold the final tree with implicit parents, content digests and raw link targets', async () => {
  const idx = await index(
    buildTgz([
      { name: './x/y/z.txt', content: 'hello' },
      { name: '/abs/file', content: '' },
      { name: 'x/l', type: 'symlink', linkname: '/etc/passwd' },
    ]),
  );
  assert.deepEqual([...idx.entries.keys()].sort(), ['abs', 'abs/file', 'x', 'x/l', 'x/y', 'x/y/z.txt']);
  assert.deepEqual(idx.entries.get('x/y'), { path: 'x/y', type: 'dir', mode: 0o755, size: 0 });
  assert.equal(idx.entries.get('x/y/z.txt')!.sha256, '2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824');
  assert.equal(idx.entries.get('x/l')!.linkTarget, '/etc/passwd');
});

async function walk(fsys: GlobFs, root: string): Promise<string[]> {
  const out: string[] = [];
  const visit = async (dir: string, rel: string) => {
    for (const name of ((await fsys.readdir(dir)) ?? []).sort()) {
      const p = `${dir}/${name}`;
      const r = rel ? `${rel}/${name}` : name;
      const l = await fsys.lstat(p);
      const s = await fsys.stat(p);
      out.push(`${r} lstat=${JSON.stringify(l)} stat=${JSON.stringify(s)}`);
      if (l?.isDir) await visit(p, r);
    }
  };
  await visit(root, '');
  return out;
}

test('the GlobFs of the index answers like the extracted tree on disk', async () => {
  await withTmp(async dir => {
    const tgz = buildTgz([
      { name: 'apps/a/kustomization.yaml', content: 'k' },
      { name: 'apps/b', type: 'dir' },
      { name: 'apps/b/values.yaml', content: 'v' },
      { name: 'README.md', content: 'r' },
      { name: 'gb', type: 'symlink', linkname: 'apps/a' },
      { name: 'apps/b/up', type: 'symlink', linkname: '../a/kustomization.yaml' },
      { name: 'broken', type: 'symlink', linkname: 'missing/file' },
      { name: 'abs', type: 'symlink', linkname: '/README.md' },
    ]);
    const r = await extractBytes(dir, tgz);
    assert.equal(r.error, undefined);
    const idx = await index(tgz);
    const virtual = idx.globFs(r.dest);
    assert.deepEqual(await walk(virtual, r.dest), await walk(realFs, r.dest));
    assert.deepEqual((await virtual.readdir(`${r.dest}/gb`))?.sort(), ['kustomization.yaml']);
    assert.deepEqual(await virtual.stat(r.dest), { isDir: true, isSymlink: false });
    assert.equal(await virtual.stat(`${r.dest}/nope`), undefined);
    assert.equal(await virtual.stat(path.dirname(r.dest)), undefined);
    assert.equal(await virtual.readdir(`${r.dest}/README.md`), undefined);
  });
});

test('indexing reports the extractor texts for parse and limit errors, and write never throws', async () => {
  assert.equal((await indexError(Buffer.from('not gzip at all, sorry'))).message, 'error reading file: gzip: invalid header');
  assert.equal((await indexError(Buffer.alloc(0))).message, 'error reading file: EOF');
  const tgz = buildTgz([{ name: 'big', content: Buffer.alloc(100_000, 1) }]);
  assert.equal((await indexError(truncated(tgz, tgz.length - 30))).message, 'error writing tgz file: unexpected EOF');
  assert.equal(
    (await indexError(gzipBytes(Buffer.alloc(512, 'x')))).message,
    'error while iterating on tar reader: archive/tar: invalid tar header',
  );
  const many = buildTgz(Array.from({ length: 10 }, (_, i) => ({ name: `f${i}`, content: 'x' })));
  const err = await indexError(many, { maxEntries: 3, maxExtractedBytes: 1e9 });
  assert.equal(err.message, 'tarball has more than 3 entries (CMP_OFFLOAD_MAX_ENTRIES)');
  assert.equal((err as { code?: number }).code, Status.RESOURCE_EXHAUSTED);
  const bytes = await indexError(many, { maxEntries: 100, maxExtractedBytes: 5 });
  assert.equal(bytes.message, 'extracted size exceeds the limit of 5 bytes (CMP_OFFLOAD_MAX_EXTRACTED_BYTES)');
  // A corrupt stream: write() keeps accepting bytes after the failure.
  const indexer = new TreeIndexer(NO_LIMITS);
  const good = buildTgz([{ name: 'f', content: Buffer.alloc(300_000, 3) }], { end: false });
  const bad = Buffer.concat([flipBit(good, good.length - 5), good]);
  for (let i = 0; i < bad.length; i += 100) indexer.write(bad.subarray(i, i + 100));
  await assert.rejects(indexer.end(), { message: 'error while iterating on tar reader: gzip: invalid checksum' });
});

test('chunk size does not change the index', async () => {
  const tgz = buildTgz([...base, { name: `${'x'.repeat(200)}/${'y'.repeat(200)}`, content: Buffer.alloc(70_000, 9) }]);
  const whole = await index(tgz, tgz.length);
  for (const chunk of [1, 1000, 65536 + 3]) {
    const idx = await index(tgz, chunk);
    assert.equal(idx.contentDigest(true), whole.contentDigest(true));
    assert.deepEqual([...idx.entries.keys()], [...whole.entries.keys()]);
  }
});

test('a simple index rebuilt from its entries as plain data (the copy a coordinator keeps) is the same index', async () => {
  const idx = await index(buildTgz([...base, { name: 'apps/deep/er/c.yaml', content: 'c: 3\n', mode: 0o640 }]));
  assert.equal(idx.simple, true);
  // As the entries cross a process boundary: structured clone, parents first.
  const copy = traceableIndexOf(structuredClone([...idx.entries.values()]));
  assert.equal(copy.simple, true);
  assert.deepEqual([...copy.entries], [...idx.entries]);
  for (const modes of [false, true]) assert.equal(copy.contentDigest(modes), idx.contentDigest(modes));
  assert.deepEqual(await walk(copy.globFs('/r'), '/r'), await walk(idx.globFs('/r'), '/r'));
  // Out of order (a child before its parent) or repeated: refused, not a different tree.
  const entries = [...idx.entries.values()];
  assert.throws(() => traceableIndexOf([...entries].reverse()), /out of order or repeated/);
  assert.throws(() => traceableIndexOf([...entries, entries[0]!]), /out of order or repeated/);
});
