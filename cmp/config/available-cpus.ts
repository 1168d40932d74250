import fs from 'node:fs';
import os from 'node:os';

/**
 * What the container is given, read from its cgroup (v2 `cpu.max` / `memory.max`, else v1
 * `cpu/cpu.cfs_quota_us` + `cpu.cfs_period_us` / `memory/memory.limit_in_bytes`). `root` is
 * for tests. A missing, unlimited or unreadable value is undefined.
 */
export interface ContainerLimits {
  /** The CPU quota in CPUs (e.g. 1.5). */
  cpuQuota?: number;
  /** The memory limit in bytes. */
  memoryBytes?: number;
}

export function containerLimits(root = '/sys/fs/cgroup'): ContainerLimits {
  const limits: ContainerLimits = {};
  const quota = cgroupQuota(root);
  if (quota !== undefined) limits.cpuQuota = quota;
  const memory = cgroupMemory(root);
  if (memory !== undefined) limits.memoryBytes = memory;
  return limits;
}

/**
 * The CPUs this container may use: the affinity mask (os.availableParallelism) capped by the
 * cgroup's CPU quota, rounded up, at least 1. A pod with `limits.cpu: 2` on a 64-core node is 2.
 */
export function availableCpus(root = '/sys/fs/cgroup'): number {
  const affinity = Math.max(1, os.availableParallelism());
  const quota = cgroupQuota(root);
  return quota === undefined ? affinity : Math.max(1, Math.min(affinity, Math.ceil(quota)));
}

/**
 * Memory a proxy process may reach: ~100 MiB idle (measured: coordinator 111, ingest processes
 * 94-99 MiB RSS) plus the hostile-output allowance its requests are held to. Sizing rule of the
 * shipped sidecar: (processes + 1) × this must fit its memory limit.
 */
export const PROXY_PROCESS_BUDGET_BYTES = 256 * 1024 * 1024;

/** More ingest processes than this only add idle memory: one coordinator deals all connections. */
export const MAX_DEFAULT_PROXY_PROCESSES = 4;

/**
 * The default of CMP_OFFLOAD_PROXY_PROCESSES, and why. Only a CPU quota earns more than one
 * process: without one the sidecar shares the node's cores with the repo-server and everything
 * else on it (the node's core count says nothing about what the sidecar gets, and on a big node
 * it would start one ~100 MiB process per core). With a quota: its CPUs (within the affinity),
 * at most MAX_DEFAULT_PROXY_PROCESSES, and no more than the memory limit holds at
 * PROXY_PROCESS_BUDGET_BYTES each, counting the coordinator. Fewer than 2 is 1 (no coordinator).
 */
export function defaultProxyProcesses(root = '/sys/fs/cgroup'): { processes: number; reason: string } {
  const limits = containerLimits(root);
  if (limits.cpuQuota === undefined) return { processes: 1, reason: 'no CPU limit' };
  const cpus = availableCpus(root);
  let processes = Math.min(cpus, MAX_DEFAULT_PROXY_PROCESSES);
  let reason = `CPU limit ${limits.cpuQuota}`;
  if (limits.memoryBytes !== undefined) {
    const fit = Math.floor(limits.memoryBytes / PROXY_PROCESS_BUDGET_BYTES) - 1;
    if (fit < processes) {
      processes = fit;
      reason += `, memory limit ${Math.round(limits.memoryBytes / 2 ** 20)}Mi`;
    }
  }
  return { processes: processes < 2 ? 1 : processes, reason };
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

/** v1 reports "no limit" as a number near 2^63 (page-rounded): anything from 2^60 up is none. */
function cgroupMemory(root: string): number | undefined {
  const text = (read(`${root}/memory.max`) ?? read(`${root}/memory/memory.limit_in_bytes`))?.trim();
  if (text === undefined || !/^\d+$/.test(text)) return undefined;
  const bytes = Number(text);
  return bytes > 0 && bytes < 2 ** 60 ? bytes : undefined;
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
    // No such cgroup file (v1 vs v2, or none in this container): that limit is unknown.
    return undefined;
  }
}
