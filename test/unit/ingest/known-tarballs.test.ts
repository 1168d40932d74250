import { createHash } from 'node:crypto';
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

function stores() {
  const dir = path.join(root, `store-${++serial}`);
  fs.mkdirSync(dir);
  return { memo: new IndexMemo(1 << 20), spools: new SpoolStore(dir), dir };
}

test('a known tarball held by a request in flight is neither spooled nor indexed again: both share one copy and one index', async () => {
  const { memo, spools, dir } = stores();
  const first = ingest(memo, spools, TGZ);
  const a: IngestedRepo = await first.done;
  assert.equal(path.dirname(a.tgzPath), dir, 'the verified tarball became the shared copy');
  assert.deepEqual(fs.readFileSync(a.tgzPath), TGZ);
  assert.equal(memo.stats().entries, 1);
  const second = ingest(memo, spools, TGZ);
  const b = await second.done;
  assert.equal(fs.existsSync(second.tgzPath), false, 'the known tarball was spooled again');
  assert.equal(b.tgzPath, a.tgzPath);
  assert.equal(b.index, a.index, 'the remembered index was not used');
  await a.release();
  assert.ok(fs.existsSync(b.tgzPath), 'the copy went while a request held it');
  await b.release();
  await b.release();
  assert.deepEqual(fs.readdirSync(dir), []);
});

test('a known tarball nobody holds is spooled again but not indexed again', async () => {
  const { memo, spools, dir } = stores();
  const a = await ingest(memo, spools, TGZ).done;
  await a.release();
  const b = await ingest(memo, spools, TGZ).done;
  assert.equal(b.index, a.index);
  assert.deepEqual(fs.readFileSync(b.tgzPath), TGZ);
  await b.release();
  assert.deepEqual(fs.readdirSync(dir), []);
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
