import { createHash, randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { contextWithDeadline } from '../../../cmp/context.js';
import { IndexMemo } from '../../../proxy/ingest/index-memo.js';
import { receiveRepoStream, type IngestedRepo } from '../../../proxy/ingest/receive-repo-stream.js';
import { SpoolStore } from '../../../proxy/ingest/spool-store.js';
import { chunksOf, repoMetadata } from '../../helpers/grpc-client.js';
import { buildTgz } from '../../helpers/tar-builder.js';

/**
 * Ingest of known tarballs (issue 12), with a fake stream: what is spooled where, which index is
 * used, and when the shared copy goes. The end-to-end suite (test/e2e/known-tarballs) checks the
 * answers and the metrics through the real proxy.
 */

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-known-'));
after(() => fs.rmSync(root, { recursive: true, force: true }));
let serial = 0;

const TGZ = buildTgz([
  { name: 'app', type: 'dir' },
  { name: 'app/a.yaml', content: 'a: 1\n' },
]);

class FakeStream extends EventEmitter {
  pause() {}
  resume() {}
}

/** Ingest `bytes` in 1 KiB chunks under `checksum`; `tgzPath` is where a spool would go. */
function ingest(memo: IndexMemo, spools: SpoolStore, bytes: Buffer, checksum = sha256(bytes)) {
  const stream = new FakeStream();
  const tgzPath = path.join(root, `spool-${++serial}`);
  const done = receiveRepoStream(stream, {
    ctx: contextWithDeadline(undefined),
    tgzPath,
    memo,
    spools,
    maxTarballBytes: 1 << 30,
    maxExtractedBytes: 1 << 30,
    maxEntries: 1000,
  });
  stream.emit('data', { metadata: repoMetadata(bytes, { checksum }) });
  for (const chunk of chunksOf(bytes, 1024)) stream.emit('data', { file: { chunk } });
  stream.emit('end');
  return { done, tgzPath };
}

function sha256(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}

/** A request whose run needed the tarball's file, then done. */
async function used(repo: IngestedRepo): Promise<void> {
  await repo.file();
  await repo.release();
}

function stores(keepBytes = 0) {
  const dir = path.join(root, `store-${++serial}`);
  fs.mkdirSync(dir);
  return { memo: new IndexMemo(1 << 20), spools: new SpoolStore(dir, { keepBytes }), dir };
}

test('a known tarball held by a request in flight is neither spooled nor indexed again: both share one copy and one index', async () => {
  const { memo, spools, dir } = stores();
  const first = ingest(memo, spools, TGZ);
  const a: IngestedRepo = await first.done;
  assert.equal(path.dirname(await a.file()), dir, 'the verified tarball became the shared copy');
  assert.deepEqual(fs.readFileSync(await a.file()), TGZ);
  assert.equal(memo.stats().entries, 1);
  const second = ingest(memo, spools, TGZ);
  const b = await second.done;
  assert.equal(fs.existsSync(second.tgzPath), false, 'the known tarball was spooled again');
  assert.equal(b.bytes, undefined, 'the known tarball was received into memory again');
  assert.equal(await b.file(), await a.file());
  assert.equal(b.index, a.index, 'the remembered index was not used');
  await a.release();
  assert.ok(fs.existsSync(await b.file()), 'the copy went while a request held it');
  await b.release();
  await b.release();
  assert.deepEqual(fs.readdirSync(dir), []);
});

test('a tarball within the receive buffer stays in memory: no file unless a run asks for one; a larger one is spooled while it arrives', async () => {
  const { memo, spools, dir } = stores();
  const small = ingest(memo, spools, TGZ);
  const a = await small.done;
  assert.deepEqual(a.bytes, TGZ);
  assert.equal(fs.existsSync(small.tgzPath), false, 'a small tarball was spooled');
  assert.deepEqual(fs.readdirSync(dir), [], 'a small tarball reached the spool store before a run asked');
  await a.release();
  assert.deepEqual(fs.readdirSync(dir), []);
  // Random bytes do not compress: a tarball of 300 KiB, over the 256 KiB buffer.
  const large = buildTgz([{ name: 'big.bin', content: randomBytes(300 * 1024) }]);
  const spooled = ingest(memo, spools, large);
  const b = await spooled.done;
  assert.equal(b.bytes, undefined, 'a large tarball was kept in memory');
  assert.ok(fs.existsSync(spooled.tgzPath), 'a large tarball was not spooled at its path');
  assert.deepEqual(fs.readFileSync(await b.file()), large);
  assert.equal(path.dirname(await b.file()), dir);
  await b.release();
  assert.deepEqual(fs.readdirSync(dir), []);
});

test('a tarball in memory that cannot be written when a run needs it fails with the receive error text, and leaves nothing', async () => {
  const dir = path.join(root, `gone-${++serial}`);
  const spools = new SpoolStore(dir);
  const a = await ingest(new IndexMemo(1 << 20), spools, TGZ).done;
  await assert.rejects(a.file(), (err: Error) => err.message.startsWith('error receiving tgz file: error writing tgz file: ENOENT'));
  await a.release();
  assert.equal(fs.existsSync(dir), false);
});

test('a known tarball nobody holds is spooled again but not indexed again', async () => {
  const { memo, spools, dir } = stores();
  const a = await ingest(memo, spools, TGZ).done;
  await a.release();
  const b = await ingest(memo, spools, TGZ).done;
  assert.equal(b.index, a.index);
  assert.deepEqual(fs.readFileSync(await b.file()), TGZ);
  await b.release();
  assert.deepEqual(fs.readdirSync(dir), []);
});

test('CMP_OFFLOAD_SPOOL_KEEP_BYTES: copies nobody holds are kept within the bound, the least recently used removed first; a kept copy is not spooled again', async () => {
  const tgz = (n: number) => buildTgz([{ name: `f${n}.txt`, content: `${n}\n`.repeat(200) }]);
  const [t1, t2, t3] = [tgz(1), tgz(2), tgz(3)];
  // Room for two of them (each under a disk block, so each counted as one), not three.
  assert.ok([t1, t2, t3].every(t => t.length < 4096));
  const { memo, spools, dir } = stores(2 * 4096 + 2048);
  for (const t of [t1, t2]) await used(await ingest(memo, spools, t).done);
  assert.equal(fs.readdirSync(dir).length, 2, 'both copies kept');
  // t1 again: its kept copy is used (nothing spooled) and becomes the most recently used.
  const again = ingest(memo, spools, t1);
  const a = await again.done;
  assert.equal(a.bytes, undefined, 'a kept copy was received into memory again');
  assert.deepEqual(fs.readFileSync(await a.file()), t1);
  await a.release();
  // A third: t2, the least recently used, goes.
  await used(await ingest(memo, spools, t3).done);
  const kept = fs.readdirSync(dir).map(f => fs.readFileSync(path.join(dir, f)));
  assert.equal(kept.length, 2);
  assert.ok(kept.some(b => b.equals(t1)) && kept.some(b => b.equals(t3)), 'not t1 and t3 kept');
  // A copy larger than the bound is removed with its last holder.
  const big = await ingest(memo, spools, buildTgz([{ name: 'big.bin', content: randomBytes(16 * 1024) }])).done;
  const bigPath = await big.file();
  await big.release();
  assert.equal(fs.existsSync(bigPath), false, 'a copy over the bound was kept');
  // Other bytes under a kept copy's checksum: the checksum error, and the kept copy stays as it was.
  const corrupt = Buffer.from(t3);
  corrupt[corrupt.length >> 1]! ^= 1;
  await assert.rejects(ingest(memo, spools, corrupt, sha256(t3)).done, { message: 'error receiving tgz file: file checksum validation error' });
  assert.equal(fs.readdirSync(dir).length, 2);
  const d = await ingest(memo, spools, t3).done;
  assert.deepEqual(fs.readFileSync(await d.file()), t3);
  await d.release();
});

test('an empty tarball is no exception: removed with its last holder without CMP_OFFLOAD_SPOOL_KEEP_BYTES, and counted as a disk block with it', async () => {
  const empty = Buffer.alloc(0);
  const off = stores(0);
  await used(await ingest(off.memo, off.spools, empty).done);
  assert.deepEqual(fs.readdirSync(off.dir), [], 'an empty copy outlived its request');
  // Room for two blocks: a third empty tarball (they are all one, so a non-empty one) evicts.
  const on = stores(2 * 4096);
  await used(await ingest(on.memo, on.spools, empty).done);
  const small = buildTgz([{ name: 'x', content: 'x' }]);
  const other = buildTgz([{ name: 'y', content: 'y' }]);
  for (const t of [small, other]) await used(await ingest(on.memo, on.spools, t).done);
  assert.equal(fs.readdirSync(on.dir).length, 2);
  assert.ok(!fs.readdirSync(on.dir).some(f => fs.statSync(path.join(on.dir, f)).size === 0), 'the empty copy, the least recently used, was kept');
});

test('other bytes under a known checksum fail the checksum check, release their hold and leave the memo alone', async () => {
  const { memo, spools, dir } = stores();
  const a = await ingest(memo, spools, TGZ).done;
  const corrupt = Buffer.from(TGZ);
  corrupt[corrupt.length >> 1]! ^= 1;
  await assert.rejects(ingest(memo, spools, corrupt, sha256(TGZ)).done, { message: 'error receiving tgz file: file checksum validation error' });
  assert.deepEqual(memo.stats().entries, 1);
  await a.release();
  assert.deepEqual(fs.readdirSync(dir), [], 'the failed request kept the copy');
  // The corrupt bytes under their own digest are a tarball of their own, never the known index.
  const own = await ingest(memo, spools, corrupt).done;
  assert.notEqual(own.index, a.index);
  await own.release();
});

test('a kept copy found gone, replaced, resized or with another mtime is dropped, not reused: the tarball is spooled anew', async () => {
  const { memo, spools, dir } = stores(1 << 20);
  const copyOf = () => {
    const [name] = fs.readdirSync(dir);
    return path.join(dir, name!);
  };
  await used(await ingest(memo, spools, TGZ).done);
  const changes: Array<[string, (p: string) => void]> = [
    ['written and resized', p => fs.appendFileSync(p, 'x')],
    ['given another mtime', p => fs.utimesSync(p, new Date(), new Date(Date.now() - 60_000))],
    ['replaced by another file', p => {
      fs.writeFileSync(`${p}.new`, TGZ);
      fs.renameSync(`${p}.new`, p);
    }],
    ['removed', p => fs.rmSync(p)],
  ];
  for (const [what, change] of changes) {
    const before = copyOf();
    change(before);
    const again = await ingest(memo, spools, TGZ).done;
    assert.notEqual((await again.file()), before, `a copy ${what} was reused`);
    assert.deepEqual(fs.readFileSync(await again.file()), TGZ);
    await again.release();
    assert.deepEqual(fs.readdirSync(dir), [path.basename(await again.file())], `after a copy ${what}: only the new copy is left`);
  }
  // Found changed while another request holds it: dropped, and removed by its last holder.
  const held = await ingest(memo, spools, TGZ).done;
  fs.appendFileSync((await held.file()), 'x');
  const next = await ingest(memo, spools, TGZ).done;
  assert.notEqual(await next.file(), await held.file());
  await held.release();
  assert.ok(!fs.existsSync(await held.file()), 'the changed copy outlived its last holder');
  await next.release();
  assert.deepEqual(fs.readdirSync(dir), [path.basename(await next.file())], 'the new copy is the one kept');
});

test('the memo keeps within its byte bound and drops the least recently used', () => {
  const memo = new IndexMemo(3000);
  const index = (n: number) => ({ entries: new Map(Array.from({ length: n }, (_, i) => [`f${i}`, { path: `f${i}`, type: 'file' as const, mode: 0o644, size: 1, sha256: 'x'.repeat(64) }])) }) as never;
  memo.remember('a', index(3));
  memo.remember('b', index(3));
  memo.remember('a', index(3));
  memo.remember('c', index(3));
  assert.ok(memo.stats().bytes <= 3000);
  assert.equal(memo.peek('b'), undefined, 'b was the least recently used');
  assert.ok(memo.peek('a') && memo.peek('c'));
  memo.remember('huge', index(100));
  assert.equal(memo.peek('huge'), undefined);
  assert.ok(memo.stats().bytes <= 3000);
});
