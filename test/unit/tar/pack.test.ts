import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { packDirectory } from '../../../cmp/tar/pack.js';
import { extractBytes, listTree, modeOf, withTmp } from './helpers.js';

/** A small repo with the shapes the repo-server meets: nested dirs, .git, symlinks, long names. */
function makeRepo(root: string): void {
  const w = (rel: string, content: string, mode = 0o644) => {
    fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    fs.writeFileSync(path.join(root, rel), content, { mode });
    fs.chmodSync(path.join(root, rel), mode);
  };
  w('README.md', '# repo\n');
  w('apps/guestbook/kustomization.yaml', 'resources: [deploy.yaml]\n');
  w('apps/guestbook/deploy.yaml', 'kind: Deployment\n');
  w('scripts/run.sh', '#!/bin/sh\necho hi\n', 0o755);
  w('.git/HEAD', 'ref: refs/heads/main\n');
  w(`${'long-dir-name-'.repeat(8)}/${'long-file-name-'.repeat(8)}.yaml`, 'long: true\n');
  w('ünïcode/名前.txt', 'utf8 name\n');
  fs.mkdirSync(path.join(root, 'empty'));
  fs.symlinkSync('apps/guestbook', path.join(root, 'gb'));
  fs.symlinkSync('/etc/hostname', path.join(root, 'abs-link'));
  fs.symlinkSync('does/not/exist', path.join(root, 'broken'));
  execFileSync('mkfifo', [path.join(root, 'a-fifo')]);
}

test('pack then extract reproduces the tree; fifos are skipped and symlinks keep their raw targets', async () => {
  await withTmp(async dir => {
    const repo = path.join(dir, 'repo');
    fs.mkdirSync(repo);
    makeRepo(repo);
    const tgzPath = path.join(dir, 'repo.tgz');
    const res = await packDirectory(repo, { out: tgzPath });
    const bytes = fs.readFileSync(tgzPath);
    assert.equal(res.size, bytes.length);
    assert.equal(res.sha256, createHash('sha256').update(bytes).digest('hex'));
    assert.equal(res.filesWritten, 7);
    const listing = execFileSync('tar', ['-tvzf', tgzPath], { encoding: 'utf8' });
    assert.match(listing, /abs-link -> \/etc\/hostname/);
    assert.doesNotMatch(listing, /a-fifo/);
    const r = await extractBytes(dir, bytes, { preserveFileMode: true });
    assert.equal(r.error, undefined);
    const want = listTree(repo).filter(p => p !== 'a-fifo' && !p.startsWith('abs-link'));
    assert.deepEqual(listTree(r.dest).filter(p => !p.startsWith('abs-link')), want);
    assert.equal(fs.readlinkSync(path.join(r.dest, 'abs-link')), 'etc/hostname', 'Argo re-roots absolute targets');
    assert.equal(modeOf(path.join(r.dest, 'scripts/run.sh')) & 0o100, 0o100);
    assert.equal(fs.readFileSync(path.join(r.dest, 'ünïcode/名前.txt'), 'utf8'), 'utf8 name\n');
  });
});

test('headers follow Go: root entry ".", lexical order, no trailing slash, numeric ids, seconds mtime', async () => {
  await withTmp(async dir => {
    const repo = path.join(dir, 'repo');
    fs.mkdirSync(repo);
    fs.mkdirSync(path.join(repo, 'b'));
    fs.writeFileSync(path.join(repo, 'b/z'), 'z');
    fs.writeFileSync(path.join(repo, 'B'), 'B');
    fs.writeFileSync(path.join(repo, 'a'), 'a');
    fs.chmodSync(path.join(repo, 'a'), 0o4755);
    fs.utimesSync(path.join(repo, 'a'), 1700000000.6, 1700000000.6);
    const tgzPath = path.join(dir, 'repo.tgz');
    await packDirectory(repo, { out: tgzPath });
    const names = execFileSync('tar', ['-tzf', tgzPath], { encoding: 'utf8' }).trim().split('\n');
    assert.deepEqual(names, ['.', 'B', 'a', 'b', 'b/z']);
    const verbose = execFileSync('tar', ['--numeric-owner', '--full-time', '-tvzf', tgzPath], { encoding: 'utf8' });
    const line = verbose.split('\n').find(l => l.endsWith(' a'))!;
    assert.match(line, /^-rwsr-xr-x \d+\/\d+ +1 2023-11-14 22:13:21 a$/, 'setuid kept, mtime rounded to the second');
    assert.equal(fs.readFileSync(tgzPath)[9], 255, 'gzip OS byte as Go writes it');
  });
});

test('exclusions match the path relative to the root, prune directories, and reject bad patterns', async () => {
  await withTmp(async dir => {
    const repo = path.join(dir, 'repo');
    fs.mkdirSync(path.join(repo, '.git/objects'), { recursive: true });
    fs.writeFileSync(path.join(repo, '.git/objects/o'), 'o');
    fs.mkdirSync(path.join(repo, 'docs'));
    fs.writeFileSync(path.join(repo, 'docs/x.md'), 'x');
    fs.writeFileSync(path.join(repo, 'top.md'), 't');
    fs.writeFileSync(path.join(repo, 'keep.yaml'), 'k');
    const tgzPath = path.join(dir, 'repo.tgz');
    const res = await packDirectory(repo, { out: tgzPath, exclusions: ['.git/*', '*.md'] });
    assert.equal(res.filesWritten, 2);
    const names = execFileSync('tar', ['-tzf', tgzPath], { encoding: 'utf8' }).trim().split('\n');
    assert.deepEqual(names, ['.', '.git', 'docs', 'docs/x.md', 'keep.yaml']);
    await packDirectory(repo, { out: tgzPath, exclusions: ['docs'] });
    assert.doesNotMatch(execFileSync('tar', ['-tzf', tgzPath], { encoding: 'utf8' }), /docs/);
    await assert.rejects(packDirectory(repo, { out: tgzPath, exclusions: ['[x'] }), {
      message: 'error verifying exclusion pattern "[x": syntax error in pattern',
    });
  });
});

test('a tree without regular files is refused locally, as is a missing root', async () => {
  await withTmp(async dir => {
    const repo = path.join(dir, 'repo');
    fs.mkdirSync(path.join(repo, 'only/dirs'), { recursive: true });
    fs.symlinkSync('only', path.join(repo, 'link'));
    await assert.rejects(packDirectory(repo, { out: path.join(dir, 'x.tgz') }), { message: `no files to send(${repo})` });
    await assert.rejects(packDirectory(path.join(dir, 'nope'), { out: path.join(dir, 'x.tgz') }), {
      message: `error inspecting srcPath "${dir}/nope": stat ${dir}/nope: no such file or directory`,
    });
  });
});

test('packing into a stream writes the same bytes the checksum covers and leaves the stream open', async () => {
  await withTmp(async dir => {
    const repo = path.join(dir, 'repo');
    fs.mkdirSync(repo);
    fs.writeFileSync(path.join(repo, 'big.bin'), Buffer.alloc(3 << 20, 7));
    const sink = new PassThrough();
    const chunks: Buffer[] = [];
    sink.on('data', c => chunks.push(c));
    const res = await packDirectory(repo, { out: sink });
    const all = Buffer.concat(chunks);
    assert.equal(all.length, res.size);
    assert.equal(createHash('sha256').update(all).digest('hex'), res.sha256);
    assert.equal(sink.writableEnded, false);
    const r = await extractBytes(dir, all);
    assert.equal(fs.statSync(path.join(r.dest, 'big.bin')).size, 3 << 20);
  });
});
