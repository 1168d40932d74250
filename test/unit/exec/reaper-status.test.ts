import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { trackedGroups } from '../../../cmp/exec/process-groups.js';
import { BUILT_REAPER } from '../../../cmp/exec/reaper.js';
import { exists, run, tmpDir } from './helpers.js';

// cmp-reap's status channel (fd 3, cmp-reap.c): "exit N gone" when the command left nothing
// behind, so that the server neither signals nor watches a tree that is already gone.

const built = fs.existsSync(BUILT_REAPER);

/** Run `sh -c script` under cmp-reap directly; its status lines and exit code. */
async function statusOf(script: string): Promise<{ lines: string[]; code: number | null }> {
  const child = spawn(BUILT_REAPER, ['/bin/sh', 'sh', '-c', script], { stdio: ['ignore', 'ignore', 'ignore', 'pipe'], detached: true });
  let text = '';
  (child.stdio[3] as NodeJS.ReadableStream).on('data', (b: Buffer) => (text += b.toString('latin1')));
  const code = await new Promise<number | null>(resolve => child.once('close', resolve));
  return { lines: text.split('\n').filter(Boolean), code };
}

test('cmp-reap says "gone" with the exit of a command that left no process behind', { skip: !built && 'cmp-reap is not built' }, async () => {
  const ok = await statusOf('true');
  assert.equal(ok.code, 0);
  assert.match(ok.lines[0]!, /^pid \d+$/);
  assert.deepEqual(ok.lines.slice(1), ['exit 0 gone']);
  const failed = await statusOf('exit 3');
  assert.deepEqual(failed.lines.slice(1), ['exit 3 gone']);
  const killed = await statusOf('kill -KILL $$');
  assert.deepEqual(killed.lines.slice(1), ['signal 9 gone']);
});

test('cmp-reap does not say "gone" while a process the command started still runs', { skip: !built && 'cmp-reap is not built' }, async () => {
  const marker = path.join(tmpDir(), 'daemon');
  // A daemon in a session of its own, alive when the command exits; it ends by itself soon after.
  const { lines, code } = await statusOf(`(setsid sh -c 'echo $$ > ${marker}; sleep 0.5' </dev/null >/dev/null 2>&1 &); until [ -s ${marker} ]; do sleep 0.02; done`);
  assert.equal(code, 0, 'the helper exits once the daemon has');
  assert.deepEqual(lines.slice(1), ['exit 0']);
  assert.equal(exists(Number(fs.readFileSync(marker, 'utf8'))), false);
});

test('a command that left nothing behind is untracked at its end: no reaping follows it', async () => {
  assert.equal((await run(['sh', '-c', 'echo hi'])).toString(), 'hi');
  assert.deepEqual(trackedGroups(), []);
  await assert.rejects(run(['sh', '-c', 'exit 4']));
  assert.deepEqual(trackedGroups(), []);
});
