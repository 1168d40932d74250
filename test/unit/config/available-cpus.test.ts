import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { availableCpus, containerLimits, defaultProxyProcesses, MAX_DEFAULT_PROXY_PROCESSES } from '../../../cmp/config/available-cpus.js';
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

test('availableCpus: the cgroup quota, rounded up, within the affinity', () => {
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

const MiB = 2 ** 20;

test('CMP_OFFLOAD_PROXY_PROCESSES default: 1 without a CPU limit, else the quota within affinity, a cap and the memory limit', () => {
  const quota = (cpus: number) => `${cpus * 100000} 100000\n`;
  const cases: Array<[Record<string, string>, number, RegExp]> = [
    [{}, 1, /^no CPU limit$/], // no cgroup files: whatever the node's cores, one process
    [{ 'cpu.max': 'max 100000\n', 'memory.max': `${8192 * MiB}\n` }, 1, /^no CPU limit$/],
    [{ 'cpu/cpu.cfs_quota_us': '-1\n', 'cpu/cpu.cfs_period_us': '100000\n' }, 1, /^no CPU limit$/],
    [{ 'cpu.max': quota(1) }, 1, /^CPU limit 1$/],
    [{ 'cpu.max': quota(1.5) }, Math.min(affinity, 2), /^CPU limit 1.5$/], // 2 CPUs, rounded up
    [{ 'cpu.max': quota(64) }, Math.min(affinity, MAX_DEFAULT_PROXY_PROCESSES), /^CPU limit 64$/], // capped
    // 1Gi at 256Mi a process, coordinator counted: 3 ingest processes at most.
    [{ 'cpu.max': quota(64), 'memory.max': `${1024 * MiB}\n` }, Math.min(affinity, 3), /CPU limit 64/],
    // 512Mi holds a coordinator and one ingest process: that is no better than one process.
    [{ 'cpu.max': quota(4), 'memory.max': `${512 * MiB}\n` }, 1, /memory limit 512Mi/],
    [{ 'cpu.max': quota(4), 'memory.max': 'max\n' }, Math.min(affinity, 4), /^CPU limit 4$/],
    // v1: a quota, and the "no limit" value near 2^63.
    [{ 'cpu/cpu.cfs_quota_us': '200000\n', 'cpu/cpu.cfs_period_us': '100000\n', 'memory/memory.limit_in_bytes': '9223372036854771712\n' }, Math.min(affinity, 2), /^CPU limit 2$/],
    [{ 'cpu/cpu.cfs_quota_us': '400000\n', 'cpu/cpu.cfs_period_us': '100000\n', 'memory/memory.limit_in_bytes': `${768 * MiB}\n` }, Math.min(affinity, 2), /CPU limit 4/],
  ];
  for (const [files, expected, reason] of cases) {
    const root = cgroupRoot(files);
    try {
      const chosen = defaultProxyProcesses(root);
      assert.equal(chosen.processes, expected, JSON.stringify(files));
      assert.match(chosen.reason, reason, JSON.stringify(files));
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  }
});

test('containerLimits reads the memory limit (v2, v1) and treats max, garbage and v1 no-limit as none', () => {
  const cases: Array<[Record<string, string>, number | undefined]> = [
    [{ 'memory.max': `${1024 * MiB}\n` }, 1024 * MiB],
    [{ 'memory.max': 'max\n' }, undefined],
    [{ 'memory/memory.limit_in_bytes': `${300 * MiB}\n` }, 300 * MiB],
    [{ 'memory/memory.limit_in_bytes': '9223372036854771712\n' }, undefined],
    [{ 'memory.max': 'lots\n' }, undefined],
    [{}, undefined],
  ];
  for (const [files, expected] of cases) {
    const root = cgroupRoot(files);
    try {
      assert.equal(containerLimits(root).memoryBytes, expected, JSON.stringify(files));
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  }
});

test('CMP_OFFLOAD_PROXY_PROCESSES: a number of processes, at least 1; anything else stops the start', () => {
  assert.equal(compileOptions({ CMP_OFFLOAD_PROXY_PROCESSES: '3' }).proxyProcesses, 3);
  assert.equal(compileOptions({}).proxyProcesses, defaultProxyProcesses().processes);
  assert.equal(compileOptions({ CMP_OFFLOAD_PROXY_PROCESSES: '3' }).proxyProcessesFrom, 'CMP_OFFLOAD_PROXY_PROCESSES');
  for (const bad of ['0', '-1', 'two', '1.5']) {
    assert.throws(() => compileOptions({ CMP_OFFLOAD_PROXY_PROCESSES: bad }), /CMP_OFFLOAD_PROXY_PROCESSES/);
  }
});
