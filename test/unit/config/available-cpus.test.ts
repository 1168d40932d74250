import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { availableCpus } from '../../../cmp/config/available-cpus.js';
import { compileOptions } from '../../../cmp/config/options.js';

/** A cgroup file system root with these files (relative path → content). */
function cgroupRoot(files: Record<string, string>): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cmp-cgroup-'));
  for (const [rel, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    fs.writeFileSync(path.join(root, rel), text);
  }
  return root;
}

const affinity = os.availableParallelism();

test('CMP_OFFLOAD_PROXY_PROCESSES defaults to the CPUs the container may use: the cgroup quota, rounded up, within the affinity', () => {
  const cases: Array<[Record<string, string>, number]> = [
    [{}, affinity], // no cgroup files: the affinity mask
    [{ 'cpu.max': 'max 100000\n' }, affinity], // v2, no quota
    [{ 'cpu.max': '100000 100000\n' }, 1],
    [{ 'cpu.max': '150000 100000\n' }, Math.min(affinity, 2)], // 1.5 CPUs: 2 processes
    [{ 'cpu.max': '10000 100000\n' }, 1], // a tenth of a CPU: still one
    [{ 'cpu.max': `${(affinity + 8) * 100000} 100000\n` }, affinity], // a quota above the mask
    [{ 'cpu/cpu.cfs_quota_us': '-1\n', 'cpu/cpu.cfs_period_us': '100000\n' }, affinity], // v1, no quota
    [{ 'cpu/cpu.cfs_quota_us': '100000\n', 'cpu/cpu.cfs_period_us': '100000\n' }, 1],
    [{ 'cpu.max': 'garbage\n' }, affinity],
  ];
  for (const [files, expected] of cases) {
    const root = cgroupRoot(files);
    try {
      assert.equal(availableCpus(root), expected, JSON.stringify(files));
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  }
});

test('CMP_OFFLOAD_PROXY_PROCESSES: a number of processes, at least 1; anything else stops the start', () => {
  assert.equal(compileOptions({ CMP_OFFLOAD_PROXY_PROCESSES: '3' }).proxyProcesses, 3);
  assert.equal(compileOptions({}).proxyProcesses, availableCpus());
  for (const bad of ['0', '-1', 'two', '1.5']) {
    assert.throws(() => compileOptions({ CMP_OFFLOAD_PROXY_PROCESSES: bad }), /CMP_OFFLOAD_PROXY_PROCESSES/);
  }
});
