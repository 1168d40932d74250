/**
 * The read recorder's fallbacks under the suites of its preferred paths: the recorder's unit
 * tests and the read techniques (standalone; a chosen subset in `npm test`, all of them with
 * CMP_SECURITY_FULL=1) run again with a tracer that cannot use `kcmp` and whose filter cannot
 * be WAIT_KILLABLE_RECV (test/helpers/degraded-tracer.ts), each in a child `node --test`.
 * `.alone`: those children start proxies of their own, so npm test runs this file by itself.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildDegradedTracer } from '../helpers/degraded-tracer.js';

const FULL = process.env.CMP_SECURITY_FULL === '1';
/** The techniques whose soundness leans on what the fallbacks replace: who may rewrite a path the kernel reads again, calls performed once. */
const SUBSET = ['cat', 'exists-probe', 'toctou-thread', 'vfork-child', 'write-only-mapping', 'exec-script', 'rename-dir', 'rename-exchange', 'rename-ancestor', 'hardlink', 'socket-swap', 'background-reader'];
const degraded = buildDegradedTracer();
const dist = path.resolve('dist/test');

function nodeTest(file: string, env: Record<string, string>, pattern?: string): { status: number | null; summary: string; out: string } {
  const args = ['--enable-source-maps', '--test', ...(pattern ? ['--test-name-pattern', pattern] : []), file];
  // NODE_TEST_CONTEXT would make the child report to this runner instead of printing TAP.
  const { NODE_TEST_CONTEXT: _, ...ours } = process.env;
  const r = spawnSync(process.execPath, args, { env: { ...ours, CMP_OFFLOAD_TRACER: degraded.tracer, ...env }, encoding: 'utf8', maxBuffer: 64 << 20 });
  const out = `${r.stdout}${r.stderr}`;
  const summary = out.split('\n').filter(l => /^# (pass|fail|skipped|todo) /.test(l)).join(', ');
  return { status: r.status, summary, out };
}

function failures(out: string): string {
  return out.split('\n').filter(l => /^\s*not ok|error:|expected|actual/.test(l)).slice(0, 40).join('\n');
}

test('the wrapper takes kcmp away (EPERM), as the default container profiles do', () => {
  const probe = `import ctypes, platform
libc = ctypes.CDLL(None, use_errno=True)
import os
nr = 312 if platform.machine() == 'x86_64' else 272
r = libc.syscall(nr, os.getpid(), os.getpid(), 1, 0, 0)  # KCMP_VM of this process with itself
print(r, ctypes.get_errno())`;
  const plain = spawnSync('python3', ['-c', probe], { encoding: 'utf8' });
  const under = spawnSync(degraded.wrapper, ['/usr/bin/env', 'python3', '-c', probe], { encoding: 'utf8' });
  assert.equal(under.stdout.trim(), '-1 1', under.stderr);
  assert.equal(plain.stdout.trim(), '0 0', `kcmp works here without the wrapper: ${plain.stderr}`);
});

test('the recorder\'s unit tests pass with the degraded tracer', { timeout: 300_000 }, () => {
  const r = nodeTest(path.join(dist, 'unit/trace/read-recorder.test.js'), {});
  assert.equal(r.status, 0, `${r.summary}\n${failures(r.out)}`);
  assert.match(r.summary, /# fail 0/);
});

test(`read techniques (standalone) pass with the degraded tracer: ${FULL ? 'all' : SUBSET.join(', ')}`, { timeout: 600_000 }, () => {
  const pattern = FULL ? undefined : `^(${SUBSET.join('|')}):`;
  const r = nodeTest(path.join(dist, 'security/read-techniques.test.js'), { CMP_OFFLOAD_E2E_MODES: 'standalone' }, pattern);
  assert.equal(r.status, 0, `${r.summary}\n${failures(r.out)}`);
  const passed = Number(/# pass (\d+)/.exec(r.summary)?.[1] ?? 0);
  assert.ok(passed >= (FULL ? 40 : SUBSET.length), `too few techniques ran: ${r.summary}`);
});
