import { createHash, randomBytes } from 'node:crypto';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { status as Status } from '@grpc/grpc-js';
import {
  buildTar,
  buildTgz,
  flipBit,
  gzipBytes,
  gzipMembers,
  headerBlock,
  metaEntry,
  paxRecord,
  truncated,
  withChecksum,
} from '../../helpers/tar-builder.js';
import { extractBytes, listTree, modeOf, withTmp } from './helpers.js';

const umask = process.umask();
const masked = (m: number) => m & ~umask;

test('regular files and directories get 0644 and 0755 whatever the header says, parents are created', async () => {
  await withTmp(async dir => {
    const r = await extractBytes(
      dir,
      buildTgz([
        { name: '.', type: 'dir', mode: 0o700 },
        { name: './', type: 'dir' },
        { name: 'sub', type: 'dir', mode: 0o700 },
        { name: 'sub/a.txt', content: 'A', mode: 0o4777 },
        { name: 'deep/er/b.txt', content: 'BB', mode: 0o600 },
      ]),
    );
    assert.equal(r.error, undefined);
    assert.deepEqual({ files: r.files, bytes: r.bytes }, { files: 2, bytes: 3 });
    assert.deepEqual(listTree(r.dest), ['deep/', 'deep/er/', 'deep/er/b.txt', 'sub/', 'sub/a.txt']);
    assert.equal(modeOf(r.dest), 0o755 & ~umask);
    assert.equal(modeOf(path.join(r.dest, 'sub')), masked(0o755));
    assert.equal(modeOf(path.join(r.dest, 'sub/a.txt')), masked(0o644));
    assert.equal(modeOf(path.join(r.dest, 'deep/er')), masked(0o755));
    assert.equal(fs.readFileSync(path.join(r.dest, 'deep/er/b.txt'), 'utf8'), 'BB');
  });
});

test('preserveFileMode applies only the 0777 bits of the header, never setuid/setgid/sticky', async () => {
  await withTmp(async dir => {
    const r = await extractBytes(
      dir,
      buildTgz([
        { name: 'd', type: 'dir', mode: 0o3750 },
        { name: 'd/run.sh', content: '#!/bin/sh', mode: 0o4751 },
        { name: 'e/f/g.txt', content: 'x', mode: 0o600 },
        { name: 'h/i', type: 'dir', mode: 0o711 },
      ]),
      { preserveFileMode: true },
    );
    assert.equal(r.error, undefined);
    assert.equal(modeOf(path.join(r.dest, 'd')), masked(0o750));
    assert.equal(modeOf(path.join(r.dest, 'd/run.sh')), masked(0o751));
    assert.equal(modeOf(path.join(r.dest, 'e/f')), masked(0o755), 'parents of files are always 0755');
    assert.equal(modeOf(path.join(r.dest, 'e/f/g.txt')), masked(0o600));
    assert.equal(modeOf(path.join(r.dest, 'h')), masked(0o711), 'MkdirAll gives intermediate dirs the same mode');
  });
});

test('duplicate entries overwrite the content but an existing file keeps its mode', async () => {
  await withTmp(async dir => {
    const r = await extractBytes(
      dir,
      buildTgz([
        { name: 'f', content: 'first version', mode: 0o600 },
        { name: 'f', content: 'second', mode: 0o777 },
      ]),
      { preserveFileMode: true },
    );
    assert.equal(r.error, undefined);
    assert.equal(fs.readFileSync(path.join(r.dest, 'f'), 'utf8'), 'second');
    assert.equal(modeOf(path.join(r.dest, 'f')), masked(0o600));
  });
});

test('names leaving the destination are rejected with the cleaned target, absolute names are re-rooted', async () => {
  await withTmp(async dir => {
    const D = path.join(dir, 'D');
    const cases: Array<[string, string]> = [
      ['../x', `illegal filepath in archive: ${dir}/x`],
      ['a/../../x', `illegal filepath in archive: ${dir}/x`],
      ['a/..', `illegal filepath in archive: ${D}`],
      ['', `illegal filepath in archive: ${D}`],
    ];
    for (const [name, want] of cases) {
      const r = await extractBytes(dir, buildTgz([{ name, content: 'x' }]));
      assert.equal(r.error, want, name);
      assert.equal(r.code, Status.UNKNOWN);
    }
    assert.equal(fs.existsSync(path.join(dir, 'x')), false);
    const r = await extractBytes(dir, buildTgz([{ name: '/etc/x', content: 'inside' }]));
    assert.equal(r.error, undefined);
    assert.equal(fs.readFileSync(path.join(D, 'etc/x'), 'utf8'), 'inside');
  });
});

test('ignored entry types create nothing but their names are still bounds-checked', async () => {
  await withTmp(async dir => {
    const ok = await extractBytes(
      dir,
      buildTgz([
        { name: 'keep', content: 'k' },
        { name: 'hard', type: 'hardlink', linkname: 'keep' },
        { name: 'fifo', type: 'fifo' },
        { name: 'chr', type: 'char' },
        { name: 'blk', type: 'block' },
        { name: 'cont', type: 'contiguous', content: 'contiguous data is skipped' },
        { name: 'pax_global_header', typeflag: 'g', content: paxRecord('comment', 'hi') },
      ]),
    );
    assert.equal(ok.error, undefined);
    assert.deepEqual(listTree(ok.dest), ['keep']);
    for (const type of ['hardlink', 'fifo', 'char', 'block'] as const) {
      const r = await extractBytes(dir, buildTgz([{ name: '../escape', type, linkname: 'keep' }]));
      assert.equal(r.error, `illegal filepath in archive: ${dir}/escape`, type);
    }
  });
});

test('a global PAX header is checked under the name of its own path record', async () => {
  await withTmp(async dir => {
    const tar = Buffer.concat([
      metaEntry('g', paxRecord('path', '../../g'), 'pax_global_header'),
      buildTar([{ name: 'f', content: 'x' }]),
    ]);
    const r = await extractBytes(dir, gzipBytes(tar));
    assert.equal(r.error, `illegal filepath in archive: ${path.dirname(dir)}/g`);
  });
});

test('symlinks are re-rooted, relativised, flattened and bounds-checked', async () => {
  await withTmp(async dir => {
    const D = path.join(dir, 'D');
    const r = await extractBytes(
      dir,
      buildTgz([
        { name: 'app', type: 'dir' },
        { name: 'f', content: 'F' },
        { name: 'app/passwd', type: 'symlink', linkname: '/etc/passwd' },
        { name: 'l1', type: 'symlink', linkname: 'f' },
        { name: 'app/l2', type: 'symlink', linkname: '../l1' },
        { name: 'dangling', type: 'symlink', linkname: 'nowhere/x' },
      ]),
    );
    assert.equal(r.error, undefined);
    assert.equal(fs.readlinkSync(path.join(D, 'app/passwd')), 'etc/passwd');
    assert.equal(fs.readlinkSync(path.join(D, 'l1')), 'f');
    assert.equal(fs.readlinkSync(path.join(D, 'app/l2')), '../f', 'l2 -> l1 -> f is flattened');
    assert.equal(fs.readlinkSync(path.join(D, 'dangling')), 'nowhere/x');
  });
});

test('symlinks resolving outside or onto the destination are rejected with the unresolved target', async () => {
  await withTmp(async dir => {
    const D = path.join(dir, 'D');
    const cases: Array<[Array<Parameters<typeof buildTgz>[0][number]>, string]> = [
      [[{ name: 'app/x', content: '' }, { name: 'app/l', type: 'symlink', linkname: '../../etc/passwd' }], `illegal filepath in symlink: ${dir}/etc/passwd`],
      [[{ name: 'l', type: 'symlink', linkname: '.' }], `illegal filepath in symlink: ${D}`],
      [[{ name: 'a/x', content: '' }, { name: 'a/l', type: 'symlink', linkname: '..' }], `illegal filepath in symlink: ${D}`],
      [[{ name: 'l', type: 'symlink', linkname: '' }], `illegal filepath in symlink: ${D}`],
    ];
    for (const [entries, want] of cases) {
      fs.rmSync(D, { recursive: true, force: true });
      const r = await extractBytes(dir, buildTgz(entries));
      assert.equal(r.error, want, JSON.stringify(entries));
    }
  });
});

test('symlink creation errors carry Go texts: missing parent, existing path, file in the way', async () => {
  await withTmp(async dir => {
    const D = path.join(dir, 'D');
    const run = async (entries: Parameters<typeof buildTgz>[0]) => {
      fs.rmSync(D, { recursive: true, force: true });
      return (await extractBytes(dir, buildTgz(entries))).error;
    };
    assert.equal(
      await run([{ name: 'f', content: '' }, { name: 'nodir/l', type: 'symlink', linkname: '../f' }]),
      `error creating symlink: symlink ../f ${D}/nodir/l: no such file or directory`,
    );
    assert.equal(
      await run([{ name: 'f', content: '' }, { name: 'f2', content: '' }, { name: 'f2', type: 'symlink', linkname: 'f' }]),
      `error creating symlink: symlink f ${D}/f2: file exists`,
    );
    assert.equal(
      await run([{ name: 'f', content: '' }, { name: 'l', type: 'symlink', linkname: 'f/x' }]),
      'error checking symlink realpath: not a directory',
    );
  });
});

test('a file entry writes through an existing in-tree symlink', async () => {
  await withTmp(async dir => {
    const r = await extractBytes(
      dir,
      buildTgz([
        { name: 'real', content: 'old' },
        { name: 'link', type: 'symlink', linkname: 'real' },
        { name: 'link', content: 'new' },
      ]),
    );
    assert.equal(r.error, undefined);
    assert.equal(fs.readFileSync(path.join(r.dest, 'real'), 'utf8'), 'new');
    assert.equal(fs.readlinkSync(path.join(r.dest, 'link')), 'real');
  });
});

test('a symlink planted through a shallower in-tree symlink cannot reach outside the tree', async () => {
  await withTmp(async dir => {
    const D = path.join(dir, 'D');
    // Argo relativises from the lexical dir a/b/c/x, but the link really lives in a/x.
    const r = await extractBytes(
      dir,
      buildTgz([
        { name: 'a/b', type: 'dir' },
        { name: 'a/b/c', type: 'symlink', linkname: '..' },
        { name: 'a/b/c/x/f', content: 'ok' },
        { name: 'a/b/c/x/s', type: 'symlink', linkname: '../../../../p' },
        { name: 'a/b/c/x/s', content: 'pwned' },
      ]),
    );
    assert.equal(r.error, `illegal filepath in symlink: ${D}/p`);
    assert.equal(fs.existsSync(path.join(path.dirname(dir), 'p')), false);
    assert.equal(fs.readFileSync(path.join(D, 'a/x/f'), 'utf8'), 'ok');
  });
});

test('path conflicts fail like Go: file over a directory, file under a file', async () => {
  await withTmp(async dir => {
    const D = path.join(dir, 'D');
    let r = await extractBytes(dir, buildTgz([{ name: 'a', type: 'dir' }, { name: 'a', content: 'x' }]));
    assert.equal(r.error, `error creating file "${D}/a": open ${D}/a: is a directory`);
    fs.rmSync(D, { recursive: true });
    r = await extractBytes(dir, buildTgz([{ name: 'a', content: 'x' }, { name: 'a/b/c', content: 'y' }]));
    assert.equal(r.error, `error creating nested folders: mkdir ${D}/a: not a directory`);
    fs.rmSync(D, { recursive: true });
    r = await extractBytes(dir, buildTgz([{ name: 'a', content: 'x' }, { name: 'a', type: 'dir' }]));
    assert.equal(r.error, `error creating nested folders: mkdir ${D}/a: not a directory`);
    fs.rmSync(D, { recursive: true });
    r = await extractBytes(dir, buildTgz([{ name: 'q"\n', type: 'dir' }, { name: 'q"\n', content: 'x' }]));
    assert.equal(r.error, `error creating file "${D}/q\\"\\n": open ${D}/q"\n: is a directory`);
  });
});

test('PAX and GNU long names and link targets, and legacy NUL type flags, are read like Go', async () => {
  await withTmp(async dir => {
    const long = `${'d'.repeat(120)}/${'f'.repeat(150)}.txt`;
    const r = await extractBytes(
      dir,
      buildTgz([
        { name: long, content: 'pax' },
        { name: `gnu/${'g'.repeat(200)}`, content: 'gnu', longNames: 'gnu' },
        { name: `l${'l'.repeat(120)}`, type: 'symlink', linkname: long, longNames: 'gnu' },
        { name: 'legacy', typeflag: '\0', content: 'old' },
        { name: 'legacydir/', typeflag: '\0' },
        { name: 'ünïcode-名前', content: 'utf8', pax: { path: 'ünïcode-名前' } },
      ]),
    );
    assert.equal(r.error, undefined);
    assert.equal(fs.readFileSync(path.join(r.dest, long), 'utf8'), 'pax');
    assert.equal(fs.readFileSync(path.join(r.dest, 'gnu', 'g'.repeat(200)), 'utf8'), 'gnu');
    assert.equal(fs.readlinkSync(path.join(r.dest, `l${'l'.repeat(120)}`)), long);
    assert.equal(fs.readFileSync(path.join(r.dest, 'legacy'), 'utf8'), 'old');
    assert.ok(fs.statSync(path.join(r.dest, 'legacydir')).isDirectory());
    assert.equal(fs.readFileSync(path.join(r.dest, 'ünïcode-名前'), 'utf8'), 'utf8');
  });
});

test('header-only types have no data section even when their size field says otherwise', async () => {
  await withTmp(async dir => {
    // Go ignores the size of a directory entry, so the next header follows immediately.
    const tar = Buffer.concat([
      headerBlock({ name: 'dir', typeflag: '5', size: 1024, mode: 0o755 }),
      buildTar([{ name: 'dir/f', content: 'after' }]),
    ]);
    const r = await extractBytes(dir, gzipBytes(tar));
    assert.equal(r.error, undefined);
    assert.equal(fs.readFileSync(path.join(r.dest, 'dir/f'), 'utf8'), 'after');
  });
});

test('input that is not gzip, or too short, fails with Go gzip.NewReader texts', async () => {
  await withTmp(async dir => {
    const cases: Array<[Buffer, string]> = [
      [Buffer.alloc(0), 'error reading file: EOF'],
      [Buffer.from('hello'), 'error reading file: unexpected EOF'],
      [Buffer.from('this is not a gzip file at all'), 'error reading file: gzip: invalid header'],
      [buildTar([{ name: 'f', content: 'plain tar' }]), 'error reading file: gzip: invalid header'],
      [truncated(buildTgz([{ name: 'f', content: 'x' }]), 7), 'error reading file: unexpected EOF'],
      [flipBit(buildTgz([{ name: 'f', content: 'x' }]), 2), 'error reading file: gzip: invalid header'],
    ];
    for (const [bytes, want] of cases) {
      const r = await extractBytes(dir, bytes);
      assert.equal(r.error, want, bytes.subarray(0, 12).toString('hex'));
      assert.equal(r.code, Status.UNKNOWN);
    }
  });
});

test('an empty gzip stream, or one holding only the end blocks, extracts nothing and succeeds', async () => {
  await withTmp(async dir => {
    for (const tgz of [gzipBytes(Buffer.alloc(0)), gzipBytes(Buffer.alloc(1024)), gzipBytes(Buffer.alloc(512))]) {
      const r = await extractBytes(dir, tgz);
      assert.equal(r.error, undefined);
      assert.deepEqual(listTree(r.dest), []);
    }
  });
});

test('truncated tar or gzip fails with unexpected EOF, worded by where Go would notice', async () => {
  await withTmp(async dir => {
    const big = Buffer.alloc(200_000, 'abcdefghij');
    const tar = buildTar([{ name: 'a', content: 'A' }, { name: 'big', content: big }]);
    // Inside a header block: Next() fails.
    let r = await extractBytes(dir, gzipBytes(truncated(tar, 512 + 512 + 100)));
    assert.equal(r.error, 'error while iterating on tar reader: unexpected EOF');
    // Inside the content of a file being written: Argo's io.Copy fails.
    r = await extractBytes(dir, gzipBytes(truncated(tar, 512 * 3 + 1000)));
    assert.equal(r.error, 'error writing tgz file: unexpected EOF');
    // A gzip stream cut in the middle.
    const tgz = gzipBytes(tar, 0);
    r = await extractBytes(dir, truncated(tgz, Math.floor(tgz.length / 2)));
    assert.equal(r.error, 'error writing tgz file: unexpected EOF');
    // Garbage where the tar header should be.
    r = await extractBytes(dir, gzipBytes(Buffer.alloc(512, 'x')));
    assert.equal(r.error, 'error while iterating on tar reader: archive/tar: invalid tar header');
  });
});

test('a tar ending at an entry boundary without end blocks is a normal end, as in Go', async () => {
  await withTmp(async dir => {
    const r = await extractBytes(dir, buildTgz([{ name: 'f', content: 'x'.repeat(700) }], { end: false }));
    assert.equal(r.error, undefined);
    assert.equal(fs.readFileSync(path.join(r.dest, 'f'), 'utf8'), 'x'.repeat(700));
  });
});

test('multi-member gzip is read as one stream; after the end blocks, trailer damage and garbage are never read', async () => {
  await withTmp(async dir => {
    const tar = buildTar([{ name: 'one', content: '1' }, { name: 'two', content: '2' }]);
    let r = await extractBytes(dir, gzipMembers(tar.subarray(0, 1024), tar.subarray(1024)));
    assert.equal(r.error, undefined);
    assert.deepEqual(listTree(r.dest), ['one', 'two']);
    const tgz = gzipBytes(tar);
    r = await extractBytes(dir, Buffer.concat([flipBit(tgz, tgz.length - 6), Buffer.from('trailing garbage')]));
    assert.equal(r.error, undefined);
  });
});

test('a bad CRC is reported when the tar still needs data past the member end', async () => {
  await withTmp(async dir => {
    const tgz = buildTgz([{ name: 'f', content: 'x' }], { end: false });
    const r = await extractBytes(dir, flipBit(tgz, tgz.length - 6));
    assert.equal(r.error, 'error while iterating on tar reader: gzip: invalid checksum');
    const r2 = await extractBytes(dir, Buffer.concat([tgz, Buffer.from('not another member')]));
    assert.equal(r2.error, 'error while iterating on tar reader: gzip: invalid header');
  });
});

test('malformed PAX records and bad checksums are invalid tar headers', async () => {
  await withTmp(async dir => {
    const bad = Buffer.concat([metaEntry('x', '5 a\n'), buildTar([{ name: 'f', content: 'x' }])]);
    let r = await extractBytes(dir, gzipBytes(bad));
    assert.equal(r.error, 'error while iterating on tar reader: archive/tar: invalid tar header');
    const tar = buildTar([{ name: 'f', content: 'x' }]);
    tar[0] = 0x67;
    r = await extractBytes(dir, gzipBytes(tar));
    assert.equal(r.error, 'error while iterating on tar reader: archive/tar: invalid tar header');
    withChecksum(tar.subarray(0, 512));
    r = await extractBytes(dir, gzipBytes(tar));
    assert.equal(r.error, undefined);
  });
});

test('the entry and byte limits fail with RESOURCE_EXHAUSTED and name their variable', async () => {
  await withTmp(async dir => {
    const entries = Array.from({ length: 5 }, (_, i) => ({ name: `f${i}`, content: '0123456789' }));
    let r = await extractBytes(dir, buildTgz(entries), { maxEntries: 4 });
    assert.equal(r.error, 'tarball has more than 4 entries (CMP_OFFLOAD_MAX_ENTRIES)');
    assert.equal(r.code, Status.RESOURCE_EXHAUSTED);
    r = await extractBytes(dir, buildTgz(entries), { maxEntries: 5, maxExtractedBytes: 45 });
    assert.equal(r.error, 'extracted size exceeds the limit of 45 bytes (CMP_OFFLOAD_MAX_EXTRACTED_BYTES)');
    assert.equal(r.code, Status.RESOURCE_EXHAUSTED);
    r = await extractBytes(dir, buildTgz(entries), { maxEntries: 5, maxExtractedBytes: 50 });
    assert.equal(r.error, undefined);
  });
});

test('a gzip bomb stops at the byte limit without writing the data', async () => {
  await withTmp(async dir => {
    const tar = Buffer.concat([headerBlock({ name: 'bomb', typeflag: '0', size: 1 << 30 })]);
    const r = await extractBytes(dir, gzipBytes(tar), { maxExtractedBytes: 1 << 20 });
    assert.equal(r.error, `extracted size exceeds the limit of ${1 << 20} bytes (CMP_OFFLOAD_MAX_EXTRACTED_BYTES)`);
    assert.equal(fs.existsSync(path.join(r.dest, 'bomb')), false);
  });
});

test('with the sha256 it was verified under, a file changed since is refused, even where its bytes would extract', async () => {
  await withTmp(async dir => {
    const good = buildTgz([{ name: 'a.yaml', content: randomBytes(4096).toString('hex') }]);
    const sha256 = createHash('sha256').update(good).digest('hex');
    assert.deepEqual(await extractBytes(dir, good, { sha256 }), { dest: path.join(dir, 'D'), files: 1, bytes: 8192 });
    // Another valid tarball written over the start, the old bytes left after its end blocks
    // (never read by the extraction): same size, and extractable as is.
    const evil = Buffer.from(good);
    buildTgz([{ name: 'a.yaml', content: 'evil: true\n' }]).copy(evil);
    assert.equal((await withTmp(d => extractBytes(d, evil))).files, 1, 'the changed file extracts without a sha256');
    const changedText = `cmp-offload: the proxy's copy of tarball ${sha256} was changed on disk before its extraction (by a plugin command, which runs as the same uid in standalone mode); the next request receives it anew`;
    const r = await withTmp(d => extractBytes(d, evil, { sha256 }));
    // Its kind crosses the extraction thread: the proxy drops the changed copy on it, not on the text.
    assert.deepEqual([r.error, r.code, r.kind], [changedText, Status.DATA_LOSS, 'spoolChanged']);
    // Changed bytes that break the gzip: the change is the error, not what it broke.
    const broken = await withTmp(d => extractBytes(d, flipBit(good, good.length >> 1), { sha256 }));
    assert.deepEqual([broken.error, broken.code], [changedText, Status.DATA_LOSS]);
  });
});
