import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { BUILT_NO_DUMP } from '../../../cmp/exec/no-dump.js';

/**
 * no-dump.node (cmp/exec/no-dump.c): a process that loads it keeps a process of its own uid out
 * of its /proc files. Both processes run as `nobody` when the test runs as root (root could read
 * anything), else as the test's uid.
 */
const uid = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : {};
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-no-dump-'));
fs.chmodSync(dir, 0o755);
const target = path.join(dir, 'target.mjs');
fs.writeFileSync(
  target,
  [
    `const { becomeNonDumpable } = await import(${JSON.stringify(new URL('../../../cmp/exec/no-dump.js', import.meta.url).href)});`,
    "process.stdout.write(`${process.argv[2] === 'load' ? becomeNonDumpable() ?? 'ok' : 'not loaded'}\\n`);",
    'setInterval(() => {}, 1000);',
  ].join('\n'),
);
fs.chmodSync(target, 0o644);
after(() => fs.rmSync(dir, { recursive: true, force: true }));

/** What another process of the same uid gets when it reads the target's environ. */
async function environSeen(load: boolean): Promise<{ said: string; status: number | null }> {
  const child = spawn(process.execPath, [target, load ? 'load' : 'plain'], { ...uid, stdio: ['ignore', 'pipe', 'inherit'], env: { SECRET: 'tenant-data' } });
  try {
    const said = await new Promise<string>((resolve, reject) => {
      child.stdout!.once('data', (d: Buffer) => resolve(d.toString().trim()));
      child.once('exit', code => reject(new Error(`target exited ${code}`)));
    });
    const read = spawnSync('cat', [`/proc/${child.pid}/environ`], { ...uid });
    return { said, status: read.status };
  } finally {
    child.kill('SIGKILL');
  }
}

test('a process that loaded no-dump.node hides its environ (and memory) from another process of its uid; one that did not does not', async () => {
  assert.ok(fs.existsSync(BUILT_NO_DUMP), 'npm run build compiles no-dump.node (needs cc)');
  assert.deepEqual(await environSeen(false), { said: 'not loaded', status: 0 });
  const loaded = await environSeen(true);
  assert.equal(loaded.said, 'ok');
  assert.notEqual(loaded.status, 0, 'the environ of a non-dumpable process was read');
});
