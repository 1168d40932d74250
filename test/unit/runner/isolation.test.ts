import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compileOptions } from '../../../cmp/config/options.js';
import { checkResetDirs, emptyDir, listProcesses, notAlone, type ProcEntry } from '../../../runner/isolation.js';
import { RunnerPool } from '../../../worker/runner-client.js';

test('CMP_OFFLOAD_RUNNER_SOCKET takes one path per runner; the worker\'s concurrency defaults to their number', () => {
  const one = compileOptions({ CMP_OFFLOAD_RUNNER_SOCKET: '/run/a/r.sock' });
  assert.deepEqual(one.runnerSockets, ['/run/a/r.sock']);
  assert.equal(one.runnerSocket, '/run/a/r.sock');
  assert.equal(one.concurrency, 1);
  const two = compileOptions({ CMP_OFFLOAD_RUNNER_SOCKET: '/run/a/r.sock, /run/b/r.sock' });
  assert.deepEqual(two.runnerSockets, ['/run/a/r.sock', '/run/b/r.sock']);
  assert.equal(two.concurrency, 2);
  assert.equal(compileOptions({ CMP_OFFLOAD_RUNNER_SOCKET: '/run/a/r.sock', CMP_OFFLOAD_CONCURRENCY: '3' }).concurrency, 3);
  const inProcess = compileOptions({ CMP_OFFLOAD_RUNNER_SOCKET: 'in-process' });
  assert.equal(inProcess.runnerSocket, 'in-process');
  assert.deepEqual(inProcess.runnerSockets, []);
  assert.equal(inProcess.concurrency, Math.max(1, os.availableParallelism()));
  assert.equal(compileOptions({}).runnerSocket, undefined);
  for (const bad of ['relative.sock', '/a.sock,relative', '/a.sock,/a.sock', '/a.sock,']) {
    assert.throws(() => compileOptions({ CMP_OFFLOAD_RUNNER_SOCKET: bad }), /CMP_OFFLOAD_RUNNER_SOCKET/, bad);
  }
});

test('CMP_OFFLOAD_RUNNER_ISOLATION is isolated by default; CMP_OFFLOAD_RUNNER_RESET_DIRS is explicit, absolute and never /', () => {
  assert.deepEqual(compileOptions({}).runner, { isolation: 'isolated', resetDirs: [] });
  assert.equal(compileOptions({ CMP_OFFLOAD_RUNNER_ISOLATION: 'shared' }).runner.isolation, 'shared');
  assert.throws(() => compileOptions({ CMP_OFFLOAD_RUNNER_ISOLATION: 'off' }), /CMP_OFFLOAD_RUNNER_ISOLATION.*one of isolated, shared/);
  assert.deepEqual(compileOptions({ CMP_OFFLOAD_RUNNER_RESET_DIRS: '/tmp/, /home/argocd,/tmp' }).runner.resetDirs, ['/tmp', '/home/argocd']);
  for (const bad of ['/', 'tmp', '/tmp,//', '/tmp,relative']) {
    assert.throws(() => compileOptions({ CMP_OFFLOAD_RUNNER_RESET_DIRS: bad }), /CMP_OFFLOAD_RUNNER_RESET_DIRS/, bad);
  }
});

test('a runner sweeps only when alone in its PID namespace, under an init that is its parent', () => {
  const p = (pid: number, alive = true): ProcEntry => ({ pid, ppid: 1, alive });
  assert.equal(notAlone([p(1), p(7)], 7, 1), undefined);
  assert.equal(notAlone([p(1), p(7), p(9, false)], 7, 1), undefined, 'a zombie does not count');
  assert.match(notAlone([p(7)], 1, 0)!, /PID 1/);
  // systemd on a host: ppid 1, and many others.
  assert.match(notAlone([p(1), p(2), p(300), p(7)], 7, 1)!, /not alone.*2 other processes: 2, 300/);
  // PID 1 that is not our parent (a shell between).
  assert.match(notAlone([p(1), p(5), p(7)], 7, 5)!, /its parent is not PID 1/);
  // This test process is not alone.
  assert.ok(notAlone());
  assert.ok(listProcesses().some(e => e.pid === process.pid && e.alive));
});

test('the reset empties dirs, keeps mount points and the dirs leading to them, and undoes chmod 000', async () => {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-reset-'));
  try {
    const home = path.join(base, 'home');
    fs.mkdirSync(path.join(home, '.cache', 'deep', 'er'), { recursive: true });
    fs.writeFileSync(path.join(home, '.cache', 'deep', 'er', 'f'), 'x');
    fs.mkdirSync(path.join(home, 'cmp-server', 'config'), { recursive: true });
    fs.writeFileSync(path.join(home, 'cmp-server', 'config', 'plugin.yaml'), 'kept');
    fs.writeFileSync(path.join(home, 'cmp-server', 'other'), 'goes');
    fs.writeFileSync(path.join(home, 'cmp-server', 'config', 'planted'), 'goes');
    fs.symlinkSync('/etc', path.join(home, 'link'));
    fs.chmodSync(path.join(home, '.cache', 'deep'), 0o000);
    const mount = path.join(home, 'cmp-server', 'config', 'plugin.yaml');
    await emptyDir(home, new Set([mount]));
    assert.deepEqual(fs.readdirSync(home), ['cmp-server']);
    assert.deepEqual(fs.readdirSync(path.join(home, 'cmp-server')), ['config']);
    assert.deepEqual(fs.readdirSync(path.join(home, 'cmp-server', 'config')), ['plugin.yaml']);
    assert.equal(fs.readFileSync(mount, 'utf8'), 'kept');
    assert.ok(fs.existsSync('/etc'), 'a symlink is removed, not followed');
    await emptyDir(path.join(base, 'missing'), new Set());
    // A symlink where a dir leading to a mount point was is removed, not followed.
    const outside = path.join(base, 'outside');
    fs.mkdirSync(outside);
    fs.writeFileSync(path.join(outside, 'keep'), 'x');
    fs.renameSync(path.join(home, 'cmp-server'), path.join(home, 'moved'));
    fs.symlinkSync(outside, path.join(home, 'cmp-server'));
    await emptyDir(home, new Set([mount]));
    assert.deepEqual(fs.readdirSync(outside), ['keep']);
    assert.deepEqual(fs.readdirSync(home), []);

    const keep = [{ path: path.join(home, 'cmp-server', 'config', 'plugin.yaml'), what: 'its plugin.yaml' }];
    assert.throws(() => checkResetDirs([home], keep, new Set()), /CMP_OFFLOAD_RUNNER_RESET_DIRS: .* holds its plugin.yaml/);
    checkResetDirs([home], keep, new Set([mount]));
    assert.throws(() => checkResetDirs([path.join(base, 'nope')], [], new Set()), /CMP_OFFLOAD_RUNNER_RESET_DIRS: .*nope/);
  } finally {
    fs.rmSync(base, { recursive: true, force: true });
  }
});

test('the worker gives each request the runner with the fewest requests; past a runner\'s capacity it waits', async () => {
  const pool = new RunnerPool(['/a', '/b'], 4);
  assert.equal(await pool.take(), '/a');
  assert.equal(await pool.take(), '/b');
  pool.give('/a');
  assert.equal(await pool.take(), '/a');
  assert.equal(await pool.take(), '/a', 'up to CMP_OFFLOAD_CONCURRENCY spread over the runners: a shared runner takes several');
  // /a refused with BUSY: an isolated runner, one at a time from now on.
  pool.oneAtATime('/a');
  pool.give('/a');
  assert.equal(await pool.take(), '/b');
  let got: string | undefined;
  const waiting = pool.take().then(p => (got = p));
  await new Promise(resolve => setImmediate(resolve));
  assert.equal(got, undefined, 'no runner below its capacity: it waits');
  pool.give('/a');
  assert.equal(await waiting, '/a');
  const ac = new AbortController();
  const aborted = pool.take(ac.signal);
  ac.abort(new Error('deadline'));
  await assert.rejects(aborted, /deadline/);
});
