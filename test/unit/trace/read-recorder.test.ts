import fs, { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { runCommand } from '../../../cmp/exec/run-command.js';
import { BUILT_REAPER } from '../../../cmp/exec/reaper.js';
import { BUILT_TRACER, ReadRecorder, type RecordedReads } from '../../../cmp/trace/read-recorder.js';
import { TraceRecords } from '../../../cmp/trace/trace-records.js';

const BUF = path.resolve('node_modules/@bufbuild/buf-linux-x64/bin/buf');
/** Run again by test/security/degraded-recorder.alone.test.ts with the degraded tracer (no kcmp, not killable). */
const DEGRADED = process.env.CMP_OFFLOAD_TRACER !== undefined;
const ENV = Object.entries(process.env).map(([k, v]) => `${k}=${v}`);

/** A fresh work dir (real path, as the tracer reports paths) with `files`; removed after `fn`. */
async function inWorkDir(files: Record<string, string>, fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'rec-')));
  try {
    for (const [rel, text] of Object.entries(files)) {
      fs.mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
      fs.writeFileSync(path.join(dir, rel), text);
    }
    await fn(dir);
    assert.deepEqual(fs.readdirSync(path.dirname(dir)).filter(n => n.startsWith(`${path.basename(dir)}.`)), [], 'trace files removed');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Run `script` with sh in `cwd`, traced when `traced`; its output or its error text, and the record. */
async function run(dir: string, cwd: string, script: string, opts: { traced?: boolean; maxPaths?: number; execTimeoutMs?: number; cpus?: 'one' | 'all'; abortAfterMs?: number; reaper?: false; workDir?: string } = {}) {
  const settings = { tracer: process.env.CMP_OFFLOAD_TRACER ?? '', cpus: opts.cpus ?? 'one', maxPaths: opts.maxPaths ?? 10_000, maxTraceBytes: 1 << 30 };
  const rec = opts.traced === false ? undefined : await ReadRecorder.start(settings, path.join(dir, opts.workDir ?? ''), process.env);
  let result: string;
  const ac = new AbortController();
  const deadline = opts.abortAfterMs === undefined ? undefined : setTimeout(() => ac.abort(new Error('deadline')), opts.abortAfterMs);
  try {
    const out = await runCommand({
      argv: ['sh', '-c', script], cwd: path.join(dir, cwd), env: ENV, ctx: { signal: ac.signal, deadline: undefined }, reaper: opts.reaper,
      execTimeoutMs: opts.execTimeoutMs ?? 0, fatalTimeoutMs: 1000, maxOutputBytes: 1 << 20,
      wrap: rec ? (argv, file, c) => rec.wrap(argv, file, c) : undefined,
    });
    result = out.toString();
  } catch (err) {
    result = `error: ${(err as Error).message}`;
  } finally {
    clearTimeout(deadline);
  }
  const reads = (await rec?.finish()) as RecordedReads;
  return { result, reads };
}

function complete(reads: RecordedReads) {
  assert.ok(reads.complete, JSON.stringify(reads));
  return reads;
}

test('the recorder sees the reads of a statically linked, multi-threaded Go binary and of shell children', async () => {
  await inWorkDir({ 'app/buf.yaml': 'version: v1\n', 'app/a.proto': 'syntax = "proto3";\npackage a;\nmessage A {}\n', 'unread.txt': 'x' }, async dir => {
    // buf makes its cache dirs (~/.cache/buf) on its first run on a machine: made by a
    // multi-threaded process, they give the record up where the recorder cannot make them itself
    // (degraded: not killable). Made first, so that the record depends on nothing of the machine.
    assert.equal((await run(dir, 'app', `${BUF} build -o /dev/null`, { traced: false })).result, '');
    const { result, reads } = await run(dir, 'app', `${BUF} build -o /dev/null && cat ../unread-probe 2>/dev/null; echo "$0"`);
    assert.equal(result, 'sh', 'argv[0] is the name Argo would use');
    const r = complete(reads);
    assert.ok(r.touched.includes('app/a.proto'), JSON.stringify(r.touched));
    assert.ok(r.touched.includes('app/buf.yaml'));
    assert.ok(r.touched.includes('unread-probe'), 'an absent probe is recorded');
    assert.ok(r.listed.includes('app'), 'buf lists its module dir');
    assert.ok(!r.touched.includes('unread.txt'));
  });
});

test('relative paths resolve against each process\'s cwd, through cd and descriptor-relative calls', async () => {
  await inWorkDir({ 'app/sub/a.yaml': 'a\n', 'base/b.yaml': 'b\n', 'base/deep/c.yaml': 'c\n', 'other/x': 'x' }, async dir => {
    const { result, reads } = await run(dir, 'app', 'cd sub && cat a.yaml && cd ../../base && [ -f maybe.yaml ]; find deep -name "*.yaml" | sort; ls ../other >/dev/null');
    assert.equal(result, 'a\ndeep/c.yaml');
    const r = complete(reads);
    for (const p of ['app/sub/a.yaml', 'base/maybe.yaml', 'base/deep']) assert.ok(r.touched.includes(p), `${p} in ${JSON.stringify(r.touched)}`);
    assert.deepEqual(r.listed.filter(p => !p.startsWith('..')), ['base/deep', 'other'], 'find lists through a directory descriptor, ls by path');
    assert.ok(!r.touched.includes('base/b.yaml') && !r.touched.includes('other/x'));
  });
});

test('children that outlive the command run on as without the tracer; the record is given up', async () => {
  await inWorkDir({ 'late.txt': 'late\n', 'a': 'a' }, async dir => {
    // The child reads only once the shell is gone (reaped by the tracer), so it always outlives it.
    const late = await run(dir, '', '(while kill -0 $$ 2>/dev/null; do sleep 0.05; done; cat late.txt) & exit 0');
    assert.equal(late.result, 'late', 'the output waits for a child holding stdout, as a plain run does');
    assert.deepEqual(late.reads, { complete: false, reason: 'processes outlived the command' });
    // A daemon (own session, no pipes) neither holds the run up nor loses its file syscalls. When
    // the command ends, it gets what the command's process group gets (cmp-reap: SIGTERM, SIGKILL
    // 5 s later, whether or not it left the group); this one ignores SIGTERM and finishes within
    // those 5 s, after the tracer has exited, then is killed (the tracer's helper with it).
    const start = Date.now();
    const daemon = await run(dir, '', 'setsid sh -c "trap \'\' TERM; echo \\$\\$ > up; sleep 1; cat a > b; exec sleep 60" </dev/null >/dev/null 2>&1 & until [ -s up ]; do sleep 0.05; done; echo ok');
    assert.equal(daemon.result, 'ok');
    // Held by the daemon, the run would last until its SIGKILL 5 s after the command's end; under
    // load a run alone can take 2 s (it did in CI), hence the wide margin.
    assert.ok(Date.now() - start < 4000, `the run waited ${Date.now() - start} ms for the daemon`);
    assert.equal(daemon.reads.complete, false);
    // The shell creates b (empty) before cat writes to it: wait for the content, not the file.
    const written = () => fs.existsSync(path.join(dir, 'b')) && fs.readFileSync(path.join(dir, 'b'), 'utf8') !== '';
    for (let i = 0; i < 100 && !written(); i++) await new Promise(r => setTimeout(r, 100));
    assert.equal(fs.readFileSync(path.join(dir, 'b'), 'utf8'), 'a', 'the daemon\'s own reads and writes worked');
    const pid = Number(fs.readFileSync(path.join(dir, 'up'), 'utf8'));
    if (existsSync(BUILT_REAPER)) {
      const alive = () => { try { process.kill(pid, 0); return true; } catch { return false; } };
      for (let i = 0; i < 80 && alive(); i++) await new Promise(r => setTimeout(r, 100));
      assert.equal(alive(), false, 'the daemon outlived the 5 s after the command');
    }
  });
});

test('renames are recorded as moves; symlink creation and unknown syscalls make the record incomplete', async () => {
  await inWorkDir({ 'a.txt': 'a', 'd/f': 'f' }, async dir => {
    const moved = complete((await run(dir, '', 'mv a.txt b.txt')).reads);
    assert.deepEqual(moved.moved, ['a.txt', 'b.txt'], 'both ends of a rename');
    assert.ok(moved.touched.includes('b.txt'));
    const link = (await run(dir, '', 'ln -s d e')).reads;
    assert.deepEqual(link, { complete: false, reason: 'the plugin called symlinkat' });
    // A syscall newer than the tracer's table might take a path it cannot see (perl is in every Debian).
    const newer = await run(dir, '', 'perl -e "syscall(470); print q(ok)"');
    assert.equal(newer.result, 'ok');
    assert.deepEqual(newer.reads, { complete: false, reason: 'a syscall unknown to cmp-trace' });
  });
});

test('paths are resolved as the kernel resolves them: /proc and /dev/fd aliases, `..` after links, links from outside', async () => {
  await inWorkDir({ 'app/sub/k.yaml': 'k', 'shared/x': 'x', 'shared/y': 'y', 'deep/inner/z': 'z', 'deep/y': 'dy' }, async dir => {
    fs.symlinkSync('../deep/inner', path.join(dir, 'app/l'));
    const outside = fs.mkdtempSync(path.join(os.tmpdir(), 'rec-out-'));
    try {
      fs.symlinkSync(dir, path.join(outside, 'tree'));
      const cases: [string, string[]][] = [
        // Lexically /proc/shared/x, outside the work dir: it was dropped.
        ['cat /proc/self/cwd/../../shared/x', ['shared/x']],
        ['cat /proc/thread-self/cwd/../../shared/y', ['shared/y']],
        ['exec 3<../../shared; cat /dev/fd/3/x', ['shared/x']],
        [`cat /proc/$$/root${dir}/shared/x`, ['shared/x']],
        // `..` after a symlink goes up from its target: deep/y, not app/y.
        ['cat ../l/../y', ['app/l', 'deep/inner', 'deep/y']],
        // A link outside the tree, made by a process the tracer does not see.
        [`cat ${outside}/tree/shared/x`, ['shared/x']],
        // Every directory left with `..` counts, absent ones too: creating it makes the call succeed.
        ['cat ../missing/../k.yaml 2>/dev/null; true', ['app/missing', 'app/k.yaml']],
      ];
      for (const [script, expected] of cases) {
        const r = complete((await run(dir, 'app/sub', script)).reads);
        const seen = [...r.touched, ...r.traversed];
        for (const p of expected) assert.ok(seen.includes(p), `${script}: ${p} in ${JSON.stringify(r)}`);
      }
    } finally {
      fs.rmSync(outside, { recursive: true, force: true });
    }
  });
});

test('an executed file\'s interpreters, which the kernel opens itself, are recorded', async () => {
  await inWorkDir({ 'app/x': 'x' }, async dir => {
    // An ELF interpreter in the tree: the kernel maps it, nothing of the caller opens it.
    fs.copyFileSync('/bin/echo', path.join(dir, 'app/interp'));
    fs.chmodSync(path.join(dir, 'app/interp'), 0o755);
    fs.writeFileSync(path.join(dir, 'app/tool'), `#!${dir}/app/interp\n`, { mode: 0o755 });
    const { result, reads } = await run(dir, 'app', './tool');
    assert.equal(result, './tool');
    const r = complete(reads);
    assert.ok(r.touched.includes('app/tool') && r.touched.includes('app/interp'), JSON.stringify(r.touched));
  });
});

test('a named unix socket is a path: connecting to one in the tree is recorded', async () => {
  await inWorkDir({ 'app/x': 'x' }, async dir => {
    const script = 'perl -MSocket -e \'socket(S, PF_UNIX, SOCK_STREAM, 0) or die; print connect(S, pack_sockaddr_un("sock")) ? "up" : "down"\'';
    const { result, reads } = await run(dir, 'app', script);
    assert.equal(result, 'down');
    assert.ok(complete(reads).touched.includes('app/sock'), JSON.stringify(reads));
  });
});

/** A small C program for calls the shell cannot make (compiled once, with the cc the build uses). */
const PROBE_C = `
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
static void *idle(void *a) { (void)a; for (;;) pause(); return NULL; }
/* An inet socket call to 127.0.0.1:9, with flags: "threads" (beside another thread),
 * "unix-before" / "unix-after" (a unix socketpair made before or after it). Prints its result
 * as "<0|-1> <errno name>". */
static int net(const char *what, char **flags) {
  int threads = 0, before = 0, after = 0, sp[2];
  for (; *flags; flags++) threads |= !strcmp(*flags, "threads"), before |= !strcmp(*flags, "unix-before"), after |= !strcmp(*flags, "unix-after");
  pthread_t t;
  if (threads) pthread_create(&t, NULL, idle, NULL);
  if (before) socketpair(AF_UNIX, SOCK_STREAM, 0, sp);
  struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(9)};
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int r, udp = socket(AF_INET, SOCK_DGRAM, 0);
  if (!strcmp(what, "udp-connect")) r = connect(udp, (void *)&in, sizeof in);
  else if (!strcmp(what, "tcp-nonblock")) r = connect(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), (void *)&in, sizeof in);
  else if (!strcmp(what, "tcp-block")) r = connect(socket(AF_INET, SOCK_STREAM, 0), (void *)&in, sizeof in);
  else if (!strcmp(what, "sendto")) r = sendto(udp, "x", 1, 0, (void *)&in, sizeof in) < 0 ? -1 : 0;
  else if (!strcmp(what, "bind")) in.sin_port = 0, r = bind(udp, (void *)&in, sizeof in);
  else return 2;
  int e = errno;
  if (after) socketpair(AF_UNIX, SOCK_STREAM, 0, sp);
  printf("%d %s", r, r == 0 ? "-" : e == EINPROGRESS ? "EINPROGRESS" : e == ECONNREFUSED ? "ECONNREFUSED" : "other");
  return 0;
}
int main(int argc, char **argv) {
  if (argc < 3) return 2;
  if (!strcmp(argv[1], "net")) return net(argv[2], argv + 3);
  struct { uint64_t flags, mode, resolve; } how = {O_RDONLY, 0, 0};
  if (!strcmp(argv[1], "wronly")) {
    /* The path in a write-only page: the kernel reads it, process_vm_readv cannot. */
    char *p = mmap(0, 4096, PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    strcpy(p, argv[2]);
    return syscall(SYS_openat, AT_FDCWD, p, O_RDONLY) < 0;
  }
  if (!strcmp(argv[1], "in-root")) how.resolve = 0x10;
  else if (!strcmp(argv[1], "beneath")) how.resolve = 0x08;
  else if (!strcmp(argv[1], "empty-path")) {
    struct stat st;
    return syscall(SYS_newfstatat, atoi(argv[2]), "", &st, AT_EMPTY_PATH) < 0;
  } else return 2;
  return syscall(SYS_openat2, AT_FDCWD, argv[2], &how, sizeof how) < 0;
}
`;

let probeBinary: string | undefined;
function probeProgram(): string {
  if (probeBinary) return probeBinary;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rec-probe-'));
  fs.writeFileSync(path.join(dir, 'probe.c'), PROBE_C);
  const cc = spawnSync(process.env.CC ?? 'cc', ['-O2', '-pthread', '-o', path.join(dir, 'probe'), path.join(dir, 'probe.c')], { encoding: 'utf8' });
  assert.equal(cc.status, 0, cc.stderr);
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  return (probeBinary = path.join(dir, 'probe'));
}

test('a path the recorder cannot read, openat2 resolve flags and descriptors from outside: modelled or given up', async () => {
  const probe = probeProgram();
  await inWorkDir({ 'app/x': 'x' }, async dir => {
    const wronly = await run(dir, 'app', `${probe} wronly x && echo opened`);
    assert.equal(wronly.result, 'opened', 'the kernel read the path');
    assert.deepEqual(wronly.reads, { complete: false, reason: 'a path the recorder could not read' });
    const inRoot = await run(dir, 'app', `${probe} in-root x && echo opened`);
    assert.equal(inRoot.result, 'opened');
    assert.deepEqual(inRoot.reads, { complete: false, reason: 'openat2 with RESOLVE_IN_ROOT or an unknown resolve flag' });
    const beneath = complete((await run(dir, 'app', `${probe} beneath x && echo opened`)).reads);
    assert.ok(beneath.touched.includes('app/x'), JSON.stringify(beneath.touched));
    // A descriptor the command did not open (here: inherited from outside the tracer), stat'ed
    // through AT_EMPTY_PATH: the file it is counts.
    const trace = path.join(dir, '..', `${path.basename(dir)}.fd.trace`);
    const file = fs.openSync(path.join(dir, 'app/x'), 'r');
    try {
      const r = spawnSync(BUILT_TRACER, ['--cpus=all', trace, '1000', probe, 'probe', 'empty-path', '0'], { stdio: [file, 'pipe', 'pipe'], encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
      const records = new TraceRecords(1000);
      for (const line of fs.readFileSync(trace, 'utf8').split('\n')) if (line !== '') records.line(line);
      const raw = records.finish();
      assert.equal(raw.incomplete, undefined);
      assert.ok(raw.touched.has(path.join(dir, 'app/x')), JSON.stringify([...raw.touched]));
    } finally {
      fs.closeSync(file);
      fs.rmSync(trace, { force: true });
    }
  });
});

test('inet socket calls beside another thread: sound whatever a thread swaps onto the descriptor', async () => {
  // Another thread could swap a unix socket onto the descriptor and rewrite the address as the
  // kernel goes on, which would look up a path nobody recorded. Commands get pipes, not sockets,
  // for stdio: with no unix socket made, there is none to swap; once one is, connect and bind
  // are done by the recorder on the socket itself, and the rest gives up; and a unix socket made
  // after such a call gives up.
  const probe = probeProgram();
  const UNSURE = 'a socket message whose address another task could rewrite, on a descriptor it could swap';
  const AFTER = 'a unix socket made after a socket call whose descriptor it could have taken';
  await inWorkDir({ 'app/x': 'x' }, async dir => {
    const cases: [string, string, string | undefined][] = [
      ['udp-connect', '0 -', undefined], ['tcp-nonblock', '-1 EINPROGRESS', undefined], ['bind', '0 -', undefined], ['sendto', '0 -', undefined],
      ['udp-connect threads unix-before', '0 -', undefined], ['tcp-nonblock threads unix-before', '-1 EINPROGRESS', undefined],
      ['bind threads unix-before', '0 -', undefined], ['sendto threads unix-before', '0 -', UNSURE],
      ['tcp-block threads unix-before', '', 'a connect or bind the recorder could not perform, its address another task could rewrite'],
      ['udp-connect threads', '0 -', undefined], ['sendto threads', '0 -', undefined], ['tcp-block threads', '', undefined],
      ['udp-connect threads unix-after', '0 -', AFTER], ['sendto unix-after', '0 -', undefined], ['udp-connect unix-before', '0 -', undefined],
    ];
    for (const [args, result, givenUp] of cases) {
      const r = await run(dir, 'app', `${probe} net ${args}`);
      const expected = result || (await run(dir, 'app', `${probe} net ${args}`, { traced: false })).result;
      assert.equal(r.result, expected, args);
      if (givenUp) assert.deepEqual(r.reads, { complete: false, reason: givenUp }, args);
      else assert.ok(r.reads.complete, `${args}: ${JSON.stringify(r.reads)}`);
    }
    // Without cmp-reap, Node hands the command its stdio as unix sockets: one is there to swap.
    const plain = await run(dir, 'app', `${probe} net sendto threads`, { reaper: false });
    assert.deepEqual(plain.reads, { complete: false, reason: UNSURE });
  });
});

test('renaming a directory older than the run, or a symlink, or hard-linking a symlink, gives the record up', async () => {
  // Moved onto a path as another call's lookup goes on, they could lead it through links made
  // before the run; above the work dir, reads through the new name would fall outside it.
  const GIVEN_UP = { complete: false, reason: 'a directory older than the run, or a symlink, renamed' };
  await inWorkDir({ 'outer/w/app/x': 'x', 'other/y': 'y' }, async dir => {
    fs.symlinkSync('y', path.join(dir, 'other/l'));
    const opts = { workDir: 'outer/w' };
    const above = await run(dir, 'outer/w/app', 'mv ../../../outer ../../../moved && cat ../../../moved/w/app/x; mv ../../../moved ../../../outer', opts);
    assert.equal(above.result, 'x');
    assert.deepEqual(above.reads, GIVEN_UP);
    const beside = await run(dir, 'outer/w/app', 'mv ../../../other ../../../moved; mv ../../../moved ../../../other', opts);
    assert.deepEqual(beside.reads, GIVEN_UP);
    const symlink = await run(dir, 'outer/w/app', 'mv ../../../other/l ../../../other/m; mv ../../../other/m ../../../other/l', opts);
    assert.deepEqual(symlink.reads, GIVEN_UP);
    const hardlink = await run(dir, 'outer/w/app', 'ln -P ../../../other/l ../../../other/h; echo made', opts);
    assert.equal(hardlink.result, 'made');
    assert.deepEqual(hardlink.reads, { complete: false, reason: 'a hard link to a symlink' });
    fs.rmSync(path.join(dir, 'other/h'));
    // What the run made itself moves freely; so do files. Where the kernel makes the directory
    // (a tracer whose filter is not WAIT_KILLABLE_RECV, before Linux 5.19: mkdir continues),
    // the recorder does not know it as the run's, and its rename gives up too.
    const own = await run(dir, 'outer/w/app', 'mkdir ../../../other/new && mkdir ../../../other/new/in && mv ../../../other/new ../../../other/renamed && mv ../../../other/y ../../../other/z && mv ../../../other/z ../../../other/y && ln ../../../other/y ../../../other/hy && cat ../../../other/hy && rm -r ../../../other/renamed ../../../other/hy', opts);
    assert.equal(own.result, 'y');
    if (DEGRADED) assert.deepEqual(own.reads, GIVEN_UP);
    else complete(own.reads);
  });
});

test('more distinct paths than the limit make the record incomplete', async () => {
  await inWorkDir({ 'a': '', 'b': '', 'c': '' }, async dir => {
    const { result, reads } = await run(dir, '', 'cat a b c; echo ok', { maxPaths: 3 });
    assert.equal(result, 'ok', 'the command itself is not disturbed');
    assert.equal(reads.complete, false);
  });
});

test('exit codes, signals, stderr and timeouts look exactly as without the tracer', async () => {
  await inWorkDir({}, async dir => {
    for (const script of ['echo out; echo err >&2; exit 3', 'kill -TERM $$', 'kill -SEGV $$', 'trap "echo bye; exit 0" TERM; sleep 5 & wait']) {
      const plain = await run(dir, '', script, { traced: false, execTimeoutMs: 300 });
      const traced = await run(dir, '', script, { execTimeoutMs: 300 });
      assert.equal(traced.result, plain.result, script);
    }
  });
});

test('after the deadline kills the main process, the rest of the group can still write files until the SIGKILL, traced as plain', async () => {
  // Argo SIGKILLs the main process on ctx done and gives the group SIGTERM and 5 s. Killing the
  // tracer instead left the grandchild with an unserved filter: its open() failed with ENOSYS.
  await inWorkDir({}, async dir => {
    const script = 'sh -c "trap \\"echo bye > term.txt\\" TERM; touch up; sleep 5 & wait" & while [ ! -e up ]; do sleep 0.02; done; wait';
    for (const reaper of [undefined, false] as const) {
      for (const traced of [false, true]) {
        fs.rmSync(path.join(dir, 'term.txt'), { force: true });
        fs.rmSync(path.join(dir, 'up'), { force: true });
        const { result } = await run(dir, '', script, { traced, reaper, abortAfterMs: 1000 });
        // Argo sends both at once: either the SIGKILL or the group SIGTERM may end the main process.
        assert.match(result, /signal: (killed|terminated)$/, `${traced} ${reaper}`);
        const written = () => fs.existsSync(path.join(dir, 'term.txt')) && fs.readFileSync(path.join(dir, 'term.txt'), 'utf8') === 'bye\n';
        for (let i = 0; i < 50 && !written(); i++) await new Promise(r => setTimeout(r, 100));
        assert.ok(written(), `traced=${traced} reaper=${reaper}: the TERM handler wrote its file`);
      }
    }
  });
});

test('plugin code of the same uid cannot open the tracer\'s /proc files (it is not dumpable)', { skip: process.getuid?.() !== 0 && 'needs root to run both as nobody' }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rec-dump-'));
  try {
    fs.chmodSync(dir, 0o777);
    const probe = 'for f in environ mem; do if head -c1 /proc/$PPID/$f >/dev/null 2>&1; then echo "$f readable"; else echo "$f denied"; fi; done';
    const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', BUILT_TRACER, '--cpus=all', path.join(dir, 'trace'), '1000', '/bin/sh', 'sh', '-c', probe], { cwd: dir, encoding: 'utf8' });
    assert.equal(r.stdout, 'environ denied\nmem denied\n', r.stderr);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('CMP_OFFLOAD_TRACE_CPUS=one runs a traced command and its children on one CPU; all leaves them every CPU', { skip: os.availableParallelism() < 2 && 'one CPU here' }, async () => {
  await inWorkDir({}, async dir => {
    const all = String(os.availableParallelism());
    assert.equal((await run(dir, '', 'nproc', { traced: false })).result, all);
    assert.equal((await run(dir, '', 'sh -c nproc', { cpus: 'one' })).result, '1');
    assert.equal((await run(dir, '', 'sh -c nproc', { cpus: 'all' })).result, all);
  });
});

test('io_uring_setup is refused with ENOSYS: node (libuv) falls back to plain syscalls and the record stays complete', async () => {
  // UV_USE_IO_URING=1 makes Node 20's libuv set up a ring at start, as Node 24's does by itself;
  // a ring would read files without syscalls the tracer sees, so it must never come up.
  await inWorkDir({ 'app/values.yaml': 'a: 1\n' }, async dir => {
    const script = `UV_USE_IO_URING=1 "${process.execPath}" -e "process.stdout.write(require('fs').readFileSync('values.yaml', 'utf8'))"`;
    const { result, reads } = await run(dir, 'app', script);
    assert.equal(result.trim(), 'a: 1');
    const r = complete(reads);
    assert.ok(r.touched.includes('app/values.yaml'), JSON.stringify(r.touched));
  });
});
