import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { runProbeCommand } from '../../../cmp/exec/probe-command.js';
import { statFields } from '../../helpers/process-tree.js';

/** The start-up probes' runner with real processes: what a failure says, and that a probe past its time is killed with its group. */
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-probe-cmd-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

function script(name: string, body: string): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
  return file;
}

test('exit 0 is success; a failure says its stderr, or its exit when it printed nothing; a missing file says so', async () => {
  const opts = { env: process.env, timeoutMs: 10_000 };
  assert.equal(await runProbeCommand(script('ok', 'exit 0'), [], opts), undefined);
  assert.deepEqual(await runProbeCommand(script('says', 'echo "  no seccomp here  " >&2; exit 1'), [], opts), { text: 'no seccomp here', timedOut: false });
  const silent = script('silent', 'exit 3');
  assert.deepEqual(await runProbeCommand(silent, ['--probe'], opts), { text: `${silent} --probe exited with 3`, timedOut: false });
  assert.deepEqual(await runProbeCommand(path.join(dir, 'absent'), [], opts), { text: `spawn ${path.join(dir, 'absent')} ENOENT`, timedOut: false });
});

test('a probe past its time is killed with its whole group', async () => {
  const pidFile = path.join(dir, 'bg.pid');
  const failed = await runProbeCommand(script('hangs', `sleep 30 & echo $! > ${pidFile}; wait`), [], { env: process.env, timeoutMs: 300 });
  assert.deepEqual(failed, { text: 'did not finish within 0.3 s', timedOut: true });
  const bg = Number(fs.readFileSync(pidFile, 'utf8'));
  const gone = () => {
    try {
      return statFields(fs.readFileSync(`/proc/${bg}/stat`, 'utf8'))[0] === 'Z';
    } catch {
      return true;
    }
  };
  for (let i = 0; i < 100 && !gone(); i++) await new Promise(r => setTimeout(r, 20));
  assert.ok(gone(), `the probe's background process ${bg} outlived it`);
});
