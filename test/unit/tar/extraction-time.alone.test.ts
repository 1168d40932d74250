/**
 * Extraction time against GNU tar's, as CPU time. A ratio, so it is measured alone: `npm test`
 * runs the `*.alone.test.js` files one by one before the others, which run three at a time
 * (shared with two other test files on two cores, a best-of-3 ratio measured 4.77 against a
 * bound of 4 in one clean-clone run).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { extractTgz } from '../../../cmp/tar/extract.js';
import { buildTgz, type TarEntry } from '../../helpers/tar-builder.js';
import { NO_LIMITS, withTmp } from './helpers.js';

test('extracting a 5k-file tree: CPU time against GNU tar -xzf, pair by pair', async t => {
  await withTmp(async dir => {
    const FILES = 5_000;
    const entries: TarEntry[] = [];
    for (let i = 0; i < FILES; i++) {
      const size = 200 + ((i * 7919) % 7000);
      entries.push({ name: `apps/app-${i % 200}/sub-${i % 7}/file-${i}.yaml`, content: Buffer.alloc(size, `k${i}: v\n`) });
    }
    const tgzPath = path.join(dir, 'tree.tgz');
    fs.writeFileSync(tgzPath, buildTgz(entries));
    // Warm the worker pool so start-up is not measured.
    fs.mkdirSync(path.join(dir, 'warm'));
    await extractTgz(tgzPath, path.join(dir, 'warm'), { preserveFileMode: false, ...NO_LIMITS });
    // CPU time, not wall time: our pipeline hands every file between threads, and each hand-off
    // waits for a core when others are busy. Ours: this process, all its threads (the extract
    // pool); GNU tar's: the children's times as its shell reports them. Both sides are mostly
    // the kernel's file creation, whose cost on these VMs swings tenfold within minutes (dirty
    // pages of an `npm ci` or of the previous pair's removal being written back: one clean-clone
    // run measured 10.6 s for ours and 1.3 s for tar, the next minute 1.0 s and 1.1 s). So: a
    // `sync` before each side, four pairs run back to back in alternating order, and the bound
    // on the best pair (a regression slows every pair; a burst, some).
    const pairs: { ours: number; gnu: number }[] = [];
    const ours = async (into: string) => {
      execFileSync('sync');
      const cpu0 = process.cpuUsage();
      const res = await extractTgz(tgzPath, into, { preserveFileMode: false, ...NO_LIMITS });
      const cpu = process.cpuUsage(cpu0);
      assert.equal(res.files, FILES);
      return (cpu.user + cpu.system) / 1000;
    };
    const gnu = (into: string) => {
      execFileSync('sync');
      return childrenCpuMs(execFileSync('sh', ['-c', 'tar -xzf "$1" -C "$2" && times', 'sh', tgzPath, into], { encoding: 'utf8' }));
    };
    for (let i = 0; i < 4; i++) {
      const oursDir = path.join(dir, `ours-${i}`);
      const gnuDir = path.join(dir, `gnu-${i}`);
      fs.mkdirSync(oursDir);
      fs.mkdirSync(gnuDir);
      if (i % 2 === 0) {
        const o = await ours(oursDir);
        pairs.push({ ours: o, gnu: gnu(gnuDir) });
      } else {
        const g = gnu(gnuDir);
        pairs.push({ ours: await ours(oursDir), gnu: g });
      }
      fs.rmSync(oursDir, { recursive: true });
      fs.rmSync(gnuDir, { recursive: true });
    }
    const ratios = pairs.map(p => p.ours / p.gnu);
    const best = Math.min(...ratios);
    t.diagnostic(`extractTgz vs tar -xzf, ms CPU per pair: ${pairs.map(p => `${p.ours.toFixed(0)}/${p.gnu.toFixed(0)}`).join(', ')}; best ratio ${best.toFixed(2)}`);
    // The wall-time target (1.5x) is the bench's; this bound only catches regressions.
    assert.ok(best < 4, `extraction takes ${best.toFixed(2)}x the CPU of GNU tar in its best pair`);
  });
});

/** The children's user + system time from sh's `times` (second line, e.g. `0m1.230000s 0m0.450000s`). */
function childrenCpuMs(times: string): number {
  const line = times.trim().split('\n')[1] ?? '';
  const parts = [...line.matchAll(/(\d+)m([\d.]+)s/g)];
  assert.equal(parts.length, 2, `unexpected output of times: ${JSON.stringify(times)}`);
  return parts.reduce((ms, m) => ms + (Number(m[1]) * 60 + Number(m[2])) * 1000, 0);
}
