import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { status as Status } from '@grpc/grpc-js';
import { contextWithDeadline } from '../../../cmp/context.js';
import { commandEnv } from '../../../cmp/exec/env.js';
import { rejection, run, tmpDir } from './helpers.js';

const SH = fs.existsSync('/usr/bin/sh') ? '/usr/bin/sh' : '/bin/sh';

test('stdout is returned with exactly one trailing newline removed', async () => {
  assert.equal((await run(['sh', '-c', "printf 'a\\n\\n'"])).toString(), 'a\n');
  assert.equal((await run(['sh', '-c', "printf '\\n'"])).toString(), '');
  assert.equal((await run(['sh', '-c', "printf 'a'"])).toString(), 'a');
  assert.equal((await run(['sh', '-c', "printf 'a\\r\\n'"])).toString(), 'a\r');
});

test('stdout bytes come back unchanged, invalid UTF-8 included', async () => {
  const out = await run(['sh', '-c', "printf '\\377\\000\\303'"]);
  assert.deepEqual([...out], [0xff, 0x00, 0xc3]);
});

test('a failing command gives the CmdError text with trimmed stderr (docs/argo-contract.md#error-texts)', async () => {
  const err = await rejection(run(['sh', '-c', "echo out; echo '  err line  ' >&2; exit 3"]));
  assert.equal(err.message, '`sh -c "echo out; echo \'  err line  \' >&2; exit 3"` failed exit status 3: err line');
  assert.equal(err.code, Status.UNKNOWN);
});

test('an empty stderr adds nothing after the cause', async () => {
  const err = await rejection(run(['sh', '-c', 'exit 1', 'x', '']));
  assert.equal(err.message, '`sh -c "exit 1" x ""` failed exit status 1');
});

test('stderr is trimmed of Unicode whitespace the way Go does, not the way JS does', async () => {
  // NBSP and NEL are Go spaces; U+FEFF is not (JS trim() would remove it).
  const err = await rejection(run(['sh', '-c', "printf '\\302\\240 msg \\302\\205\\n\\t' >&2; printf '\\357\\273\\277' >&2; exit 2"]));
  assert.equal(err.message, '`sh -c "printf \'\\\\302\\\\240 msg \\\\302\\\\205\\\\n\\\\t\' >&2; printf \'\\\\357\\\\273\\\\277\' >&2; exit 2"` failed exit status 2: msg \u0085\n\t\ufeff');
});

test('a command killed by a signal reports it in Go ProcessState form', async () => {
  const term = await rejection(run(['sh', '-c', 'kill -TERM $$']));
  assert.equal(term.message, '`sh -c "kill -TERM $$"` failed signal: terminated');
  const segv = await rejection(run(['sh', '-c', 'kill -SEGV $$']));
  assert.match(segv.message, /^`sh -c "kill -SEGV \$\$"` failed signal: segmentation fault( \(core dumped\))?$/);
  const usr1 = await rejection(run(['sh', '-c', 'kill -USR1 $$']));
  assert.equal(usr1.message, '`sh -c "kill -USR1 $$"` failed signal: user defined signal 1');
});

test('an empty command is refused before anything runs', async () => {
  assert.equal((await rejection(run([]))).message, 'Command is empty');
});

test('argv[0] is looked up in the server PATH, not in the PATH of the request env', async () => {
  const dir = tmpDir();
  fs.writeFileSync(path.join(dir, 'my-tool'), '#!/bin/sh\necho tool "$0"\n', { mode: 0o755 });
  const out = await run(['my-tool'], { pathEnv: `/nonexistent:${dir}`, env: ['PATH=/nowhere'] });
  assert.equal(out.toString(), `tool ${path.join(dir, 'my-tool')}`);
  const err = await rejection(run(['my-tool'], { pathEnv: '/usr/bin:/bin', env: [`PATH=${dir}`] }));
  assert.equal(err.message, 'exec: "my-tool": executable file not found in $PATH');
  assert.equal(err.code, Status.UNKNOWN);
  const quoted = await rejection(run(['my"tool\t'], { pathEnv: dir }));
  assert.equal(quoted.message, 'exec: "my\\"tool\\t": executable file not found in $PATH');
});

test('the PATH lookup skips directories and files without the x bit', async () => {
  const dir1 = tmpDir();
  const dir2 = tmpDir();
  fs.mkdirSync(path.join(dir1, 'tool'));
  fs.writeFileSync(path.join(dir2, 'tool'), '#!/bin/sh\necho hi\n', { mode: 0o644 });
  const err = await rejection(run(['tool'], { pathEnv: `${dir1}:${dir2}` }));
  assert.equal(err.message, 'exec: "tool": executable file not found in $PATH');
});

test('a tool found through a relative PATH entry is refused, like Go ErrDot', async () => {
  const dir = tmpDir();
  fs.writeFileSync(path.join(dir, 'tool'), '#!/bin/sh\necho hi\n', { mode: 0o755 });
  const err = await rejection(run(['tool'], { pathEnv: path.relative(process.cwd(), dir) }));
  assert.equal(err.message, 'exec: "tool": cannot run executable found relative to current directory');
});

test('argv[0] with a slash is relative to the cwd, and argv[0] is passed as given', async () => {
  const dir = tmpDir();
  fs.writeFileSync(path.join(dir, 'gen.sh'), '#!/bin/sh\necho "$0" "$@"\n', { mode: 0o755 });
  assert.equal((await run(['./gen.sh', 'a b', ''], { cwd: dir })).toString(), './gen.sh a b ');
});

test('a repo script without the x bit fails with the raw fork/exec permission error', async () => {
  const dir = tmpDir();
  fs.writeFileSync(path.join(dir, 'gen.sh'), '#!/bin/sh\necho hi\n', { mode: 0o644 });
  const err = await rejection(run(['./gen.sh'], { cwd: dir }));
  assert.equal(err.message, 'fork/exec ./gen.sh: permission denied');
  assert.equal(err.code, Status.UNKNOWN);
});

test('an executable without #! fails with exec format error instead of running under sh', async () => {
  const dir = tmpDir();
  fs.writeFileSync(path.join(dir, 'plain'), 'echo hi\n', { mode: 0o755 });
  fs.writeFileSync(path.join(dir, 'empty'), '', { mode: 0o755 });
  assert.equal((await rejection(run(['./plain'], { cwd: dir }))).message, 'fork/exec ./plain: exec format error');
  assert.equal((await rejection(run(['./empty'], { cwd: dir }))).message, 'fork/exec ./empty: exec format error');
});

test('a missing cwd fails at start with the resolved binary in the message', async () => {
  const err = await rejection(run(['sh', '-c', 'true'], { cwd: '/nonexistent/app', pathEnv: path.dirname(SH) }));
  assert.equal(err.message, `fork/exec ${SH}: no such file or directory`);
});

test('an already expired or cancelled context is the start error', async () => {
  const expired = contextWithDeadline(Date.now() - 1);
  const deadline = await rejection(run(['sh', '-c', 'echo ran'], { ctx: expired }));
  assert.equal(deadline.message, 'context deadline exceeded');
  assert.equal(deadline.code, Status.DEADLINE_EXCEEDED);
  const c = contextWithDeadline(undefined);
  c.cancel();
  const cancelled = await rejection(run(['sh', '-c', 'echo ran'], { ctx: c }));
  assert.equal(cancelled.message, 'context canceled');
  assert.equal(cancelled.code, Status.CANCELLED);
});

test('start errors come in Go order: lookup, then context, then env', async () => {
  const expired = contextWithDeadline(Date.now() - 1);
  const nul = ['A=\0'];
  assert.equal((await rejection(run(['no-such-tool-x'], { ctx: expired, env: nul }))).message, 'exec: "no-such-tool-x": executable file not found in $PATH');
  assert.equal((await rejection(run(['sh'], { ctx: expired, env: nul }))).message, 'context deadline exceeded');
  assert.equal((await rejection(run(['sh', '-c', 'echo ran'], { env: nul }))).message, 'exec: environment variable contains NUL');
});

test('the child sees the request env over the server env, with empty values and A=B=C verbatim', async () => {
  const env = commandEnv(['PATH=/usr/bin:/bin', 'MODE=server', 'KEEP=1'], [
    { name: 'MODE', value: 'request' },
    { name: 'EMPTY', value: '' },
    { name: 'A=B', value: 'C' },
  ]);
  const out = await run(['env'], { env });
  assert.equal(out.toString(), 'PATH=/usr/bin:/bin\nKEEP=1\nMODE=request\nEMPTY=\nA=B=C');
});

test('an env too big for execve fails at start with the Go errno text', async () => {
  const err = await rejection(run(['sh', '-c', 'true'], { env: [`BIG=${'x'.repeat(200_000)}`], pathEnv: path.dirname(SH) }));
  assert.equal(err.message, `fork/exec ${SH}: argument list too long`);
});

test('PWD is passed as given, not updated to the cwd', async () => {
  const dir = tmpDir();
  const out = await run(['printenv', 'PWD'], { cwd: dir, env: ['PWD=/server/cwd'] });
  assert.equal(out.toString(), '/server/cwd');
  assert.equal((await run(['pwd'], { cwd: dir })).toString(), fs.realpathSync(dir));
});

test('stdin is /dev/null', async () => {
  assert.equal((await run(['sh', '-c', 'cat; echo eof'])).toString(), 'eof');
});

test('stdout and stderr are pipes, as for Go exec under argocd-cmp-server (the helper relays them)', async () => {
  const types = "stat -L -c %F /dev/stdout; stat -L -c %F /dev/stderr >&2; exit 1";
  const err = await rejection(run(['sh', '-c', types]));
  assert.match(err.message, /failed exit status 1: fifo$/);
  // and the stdout side, with a large output that must arrive whole
  const out = await run(['sh', '-c', 'stat -L -c %F /dev/stdout; head -c 900000 /dev/zero | tr "\\0" x']);
  assert.equal(out.subarray(0, 5).toString(), 'fifo\n');
  assert.equal(out.length, 5 + 900_000);
});

test('stdout up to the limit passes; one byte more kills the command with RESOURCE_EXHAUSTED', async () => {
  assert.equal((await run(['head', '-c', '1000', '/dev/zero'], { maxOutputBytes: 1000 })).length, 1000);
  const err = await rejection(run(['head', '-c', '1001', '/dev/zero'], { maxOutputBytes: 1000 }));
  assert.equal(err.message, 'plugin output exceeds the limit of 1000 bytes (CMP_OFFLOAD_MAX_OUTPUT_BYTES)');
  assert.equal(err.code, Status.RESOURCE_EXHAUSTED);
});

test('an endless producer is stopped by the output limit', async () => {
  const started = Date.now();
  const err = await rejection(run(['sh', '-c', 'yes; sleep 30'], { maxOutputBytes: 1 << 20 }));
  assert.equal(err.code, Status.RESOURCE_EXHAUSTED);
  assert.ok(Date.now() - started < 10_000);
});

test('a huge stderr is kept bounded: its start and its end appear in the error', async () => {
  const script = "echo FIRST >&2; head -c 1000000 /dev/zero | tr '\\0' x >&2; echo >&2; echo LAST >&2; exit 1";
  const err = await rejection(run(['sh', '-c', script]));
  assert.ok(err.message.length < 80 * 1024, `message of ${err.message.length} chars`);
  assert.match(err.message, /failed exit status 1: FIRST\nx+\n\.\.\. \[\d+ bytes of stderr omitted\] \.\.\.\nx+\nLAST$/);
});
