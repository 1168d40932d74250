import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runCommand } from '../../../cmp/exec/run-command.js';
import { ReadRecorder } from '../../../cmp/trace/read-recorder.js';
import { StraceParser } from '../../../cmp/trace/strace-parse.js';

const hex = (s: string) => [...Buffer.from(s)].map(b => `\\x${b.toString(16).padStart(2, '0')}`).join('');
const str = (s: string) => `"${hex(s)}"`;
const fd = (n: number | 'AT_FDCWD', p: string) => `${n}<${hex(p)}>`;

function parse(lines: string[], cwd = '/w/app', max = 1000) {
  const p = new StraceParser(cwd, max);
  for (const l of lines) p.line(l);
  return p.finish();
}

test('relative paths resolve against the cwd, followed through chdir and AT_FDCWD annotations', () => {
  const r = parse([
    `10 execve(${str('/bin/sh')}, [...], 0x1 /* 3 vars */) = 0`,
    `10 newfstatat(${fd('AT_FDCWD', '/w/app')}, ${str('values.yaml')}, 0x7ff, 0) = -1 ENOENT (No such file or directory)`,
    `10 chdir(${str('../base')}) = 0`,
    `10 access(${str('kustomization.yaml')}, R_OK) = 0`,
    `10 openat(${fd(3, '/w/base')}, ${str('a.yaml')}, O_RDONLY) = 4<${hex('/w/base/a.yaml')}>`,
    `10 getdents64(${fd(3, '/w/base')}, 0x5 /* 3 entries */, 32768) = 72`,
    `10 readlinkat(${fd('AT_FDCWD', '/w/base')}, ${str('/proc/self/exe')}, ""..., 128) = 12`,
  ]);
  assert.equal(r.incomplete, undefined);
  assert.deepEqual([...r.touched].sort(), ['/bin/sh', '/proc/self/exe', '/w/app/values.yaml', '/w/base', '/w/base/a.yaml', '/w/base/kustomization.yaml']);
  assert.deepEqual([...r.listed], ['/w/base']);
});

test('a child that runs before its clone line is attributed to its parent\'s cwd, shared with CLONE_FS', () => {
  const r = parse([
    `10 chdir(${str('/w/app/sub')}) = 0`,
    `10 vfork( <unfinished ...>`,
    `11 execve(${str('./gen.sh')}, [...], 0x1 /* 3 vars */ <unfinished ...>`,
    `10 <... vfork resumed>) = 11`,
    `11 <... execve resumed>) = 0`,
    `11 clone(child_stack=0x1, flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_THREAD) = 12`,
    `12 chdir(${str('..')}) = 0`,
    `11 stat(${str('x')}, 0x1) = -1 ENOENT (No such file or directory)`,
  ]);
  assert.equal(r.incomplete, undefined);
  assert.ok(r.touched.has('/w/app/sub/gen.sh'));
  assert.ok(r.touched.has('/w/app/x'), 'the thread changed the cwd its process shares');
});

test('what cannot be attributed makes the record incomplete', () => {
  assert.match(parse([`10 symlinkat(${str('/w/base')}, ${fd('AT_FDCWD', '/w/app')}, ${str('l')}) = 0`]).incomplete!, /symlinkat/);
  assert.match(parse([`10 openat(${fd('AT_FDCWD', '/w')}, ${str('/proc/self/cwd/x')}, O_RDONLY) = 3`]).incomplete!, /proc/);
  assert.match(parse([`10 garbage`]).incomplete!, /unparsed/);
  assert.match(parse([`10 stat(${str('a')}, 0x1) = 0`, `11 stat(${str('x')}, 0x1) = 0`], '/w').incomplete!, /unknown/);
  assert.match(parse([`10 stat(${str('a')}, 0x1) = 0`, `10 stat(${str('b')}, 0x1) = 0`], '/w', 1).incomplete!, /more than 1 paths/);
});

test('the recorder sees the reads of a statically linked Go binary and of shell children', async () => {
  const buf = path.resolve('node_modules/@bufbuild/buf-linux-x64/bin/buf');
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'rec-')));
  try {
    fs.mkdirSync(path.join(dir, 'app'));
    fs.writeFileSync(path.join(dir, 'app/buf.yaml'), 'version: v1\n');
    fs.writeFileSync(path.join(dir, 'app/a.proto'), 'syntax = "proto3";\npackage a;\nmessage A {}\n');
    fs.writeFileSync(path.join(dir, 'unread.txt'), 'x');
    const rec = await ReadRecorder.start({ strace: 'strace', maxPaths: 10_000, maxTraceBytes: 1 << 30 }, dir, process.env);
    const env = Object.entries(process.env).map(([k, v]) => `${k}=${v}`);
    const out = await runCommand({
      argv: ['sh', '-c', `${buf} build -o /dev/null && cat ../unread-probe 2>/dev/null; echo "$0"`],
      cwd: path.join(dir, 'app'), env, ctx: { signal: new AbortController().signal, deadline: undefined },
      execTimeoutMs: 0, fatalTimeoutMs: 0, maxOutputBytes: 1 << 20,
      wrap: (argv, file, cwd, e) => rec.wrap(argv, file, cwd, e, process.env.PATH ?? ''),
    });
    assert.equal(out.toString(), 'sh', 'argv[0] is the name Argo would use');
    const reads = await rec.finish();
    assert.ok(reads.complete, JSON.stringify(reads));
    assert.ok(reads.touched.includes('app/a.proto'), JSON.stringify(reads.touched));
    assert.ok(reads.touched.includes('app/buf.yaml'));
    assert.ok(reads.touched.includes('unread-probe'), 'an absent probe is recorded');
    assert.ok(reads.listed.includes('app'), 'buf lists its module dir');
    assert.ok(!reads.touched.includes('unread.txt'));
    assert.deepEqual(fs.readdirSync(path.dirname(dir)).filter(n => n.startsWith(`${path.basename(dir)}.`)), [], 'trace files removed');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
