import fs from 'node:fs';
import os from 'node:os';

/**
 * The CPUs this container may use: the affinity mask (os.availableParallelism) capped by the
 * cgroup's CPU quota (v2 `cpu.max`, else v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`), rounded up,
 * at least 1. A pod with `limits.cpu: 2` on a 64-core node is 2, not 64. `root` is for tests.
 */
export function availableCpus(root = '/sys/fs/cgroup'): number {
  const affinity = Math.max(1, os.availableParallelism());
  const quota = cgroupQuota(root);
  return quota === undefined ? affinity : Math.max(1, Math.min(affinity, Math.ceil(quota)));
}

/** The quota in CPUs, or undefined when there is none (`max`, -1) or it cannot be read. */
function cgroupQuota(root: string): number | undefined {
  const v2 = read(`${root}/cpu.max`);
  if (v2 !== undefined) {
    const [quota, period] = v2.trim().split(/\s+/);
    return ratio(quota, period);
  }
  return ratio(read(`${root}/cpu/cpu.cfs_quota_us`)?.trim(), read(`${root}/cpu/cpu.cfs_period_us`)?.trim());
}

function ratio(quota: string | undefined, period: string | undefined): number | undefined {
  if (quota === undefined || period === undefined || !/^\d+$/.test(quota) || !/^\d+$/.test(period)) return undefined;
  const q = Number(quota);
  const p = Number(period);
  return q > 0 && p > 0 ? q / p : undefined;
}

function read(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}
