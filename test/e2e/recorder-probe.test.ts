import fs from 'node:fs';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { pluginWritableTempDir } from '../helpers/runner-process.js';
import { unrelatedChange } from '../helpers/unrelated-change.js';
import { MODES } from './harness.js';

/**
 * The recorder is probed once at start where traced commands run (the standalone proxy; in
 * distributed mode the runner). Where it cannot work, one log line says why and the server
 * runs as CMP_OFFLOAD_CACHE=on: a change no plugin reads runs the plugin again, and every
 * generation counts as a traced fallback.
 */
const work = pluginWritableTempDir('cmp-recorder-probe-');
after(() => fs.rmSync(work, { recursive: true, force: true }));

const LINE = 'traced cache: the read recorder cannot work here';
const linesOf = (stderr: string) => stderr.split('\n').filter(l => l.includes(LINE));

for (const mode of MODES) {
  describe(`the read recorder's start-up probe (${mode})`, () => {
    const notExecutable = path.join(work, 'cmp-trace-not-executable');
    fs.writeFileSync(notExecutable, '#!/bin/sh\nexit 0\n', { mode: 0o644 });
    for (const [what, tracer, reason] of [
      ['does not exist', path.join(work, 'no-such-cmp-trace'), /the tracer \S+no-such-cmp-trace does not exist/],
      ['is not executable', notExecutable, /the tracer \S+cmp-trace-not-executable is not executable/],
    ] as const) {
      test(`a tracer that ${what}: one log line says why, and the server runs as CMP_OFFLOAD_CACHE=on, counting fallbacks`, async () => {
        const r = await unrelatedChange(mode, work, { env: { CMP_OFFLOAD_CACHE: 'traced', CMP_OFFLOAD_TRACER: tracer }, workers: 1 });
        const lines = linesOf(r.stderr);
        assert.equal(lines.length, 1, r.stderr);
        assert.match(lines[0]!, reason);
        assert.match(lines[0]!, /running as CMP_OFFLOAD_CACHE=on/);
        assert.deepEqual([r.runs, r.hit, r.miss, r.fallback], [2, 0, 0, 2]);
      });
    }

    test('the built tracer passes: no such line, and a change no plugin reads is a traced hit', async () => {
      const r = await unrelatedChange(mode, work, { env: { CMP_OFFLOAD_CACHE: 'traced' }, workers: 1 });
      assert.deepEqual(linesOf(r.stderr), []);
      assert.deepEqual([r.runs, r.hit, r.miss, r.fallback], [1, 1, 1, 0]);
    });
  });
}
