import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { BUILT_TRACER, probeTracer } from '../../../cmp/trace/tracer-probe.js';
import { statFields } from '../../helpers/process-tree.js';

/**
 * The recorder's start-up probe with real processes: the built cmp-trace passes; a missing, a
 * non-executable, an old kernel, a tracer the kernel refuses a listener to, and stand-ins that
 * exit 0 without a usable record each fail with their own reason.
 */
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-probe-test-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

function script(name: string, body: string, mode = 0o755): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, `#!/bin/sh\n${body}\n`, { mode });
  return file;
}

/** The probe's own temp dirs are removed. */
function leftovers(): string[] {
  return fs.readdirSync(dir).filter(n => n.startsWith('.cmp-trace-probe-'));
}

test('the built cmp-trace works here (a complete record naming the probed path)', async () => {
  assert.equal(await probeTracer(BUILT_TRACER, process.env, dir), undefined);
  assert.deepEqual(leftovers(), []);
});

test('a tracer that does not exist, is not executable or is a directory: said before anything runs', async () => {
  assert.match((await probeTracer(path.join(dir, 'absent'), process.env, dir))!, /the tracer \S+absent does not exist/);
  assert.match((await probeTracer(script('plain', 'exit 0', 0o644), process.env, dir))!, /the tracer \S+plain is not executable/);
  assert.match((await probeTracer(dir, process.env, dir))!, /is not a file/);
});

test('a kernel older than 5.14 is refused by its version, before the tracer is run', async () => {
  assert.equal(
    await probeTracer(BUILT_TRACER, process.env, dir, '5.13.0-52-generic'),
    'Linux 5.13.0-52-generic is older than 5.14 (seccomp user notifications that continue a call or answer it with a descriptor)',
  );
  assert.equal(await probeTracer(BUILT_TRACER, process.env, dir, '5.14.0'), undefined);
});

test('a tracer that exits 0 without a complete record fails the probe (starting is not enough)', async () => {
  assert.equal(await probeTracer(script('silent', 'exit 0'), process.env, dir), 'the record of a trivial command is incomplete: the tracer did not finish');
  assert.equal(await probeTracer(script('ends', 'printf "V 2\\nE\\n" > "$2"'), process.env, dir), 'the record of a trivial command misses the path it looked up');
  assert.equal(await probeTracer(script('unsure', 'printf "V 2\\nX the plugin\'s memory could not be read\\n" > "$2"'), process.env, dir), "the record of a trivial command is incomplete: the plugin's memory could not be read");
  // A tracer from before V 2 normalized paths lexically: its records are refused.
  assert.equal(await probeTracer(script('old', 'echo E > "$2"'), process.env, dir), 'the record of a trivial command is incomplete: a trace from another cmp-trace version ("E", expected "V 2")');
  assert.match((await probeTracer(script('fails', 'echo "cmp-trace: exec: seccomp listener: Operation not permitted" >&2; exit 127'), process.env, dir))!, /the tracer failed on a trivial command: cmp-trace: exec: seccomp listener: Operation not permitted/);
  assert.deepEqual(leftovers(), []);
});

test('the tracer leads a process group of its own (a Ctrl-C of the proxy\'s group does not fail the probe); a failure without stderr names the exit code', async () => {
  const seen = path.join(dir, 'probe-stat');
  const why = await probeTracer(script('group', `cat /proc/$$/stat > ${seen}; exit 3`), process.env, dir);
  assert.match(why!, /^the tracer failed on a trivial command: \S+\/group --cpus=all .* exited with 3$/);
  const stat = fs.readFileSync(seen, 'utf8');
  const pgid = (s: string) => Number(statFields(s)[2]);
  assert.equal(pgid(stat), Number(stat.split(' ')[0]), 'the tracer is its group\'s leader');
  assert.notEqual(pgid(stat), pgid(fs.readFileSync('/proc/self/stat', 'utf8')));
  assert.deepEqual(leftovers(), []);
});

test('where the kernel refuses cmp-trace its seccomp listener (here: inside another cmp-trace), the probe says so', async () => {
  // A process already under a seccomp listener cannot install a second one (EBUSY): a real
  // policy refusal, as a sandbox that listens to its containers' syscalls would give.
  const probe = `import(${JSON.stringify(path.resolve('dist/cmp/trace/tracer-probe.js'))}).then(m => m.probeTracer(m.BUILT_TRACER, process.env, ${JSON.stringify(dir)})).then(r => console.log(JSON.stringify(r ?? null)))`;
  const out = await new Promise<string>((resolve, reject) =>
    execFile(BUILT_TRACER, ['--cpus=all', '/dev/null', '1000000', process.execPath, 'node', '-e', probe], { timeout: 30_000 }, (err, stdout) => (err ? reject(err) : resolve(stdout))),
  );
  assert.match(JSON.parse(out), /^the tracer failed on a trivial command: cmp-trace: exec: seccomp listener: Device or resource busy$/);
});
