import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { sumOverTree } from '../../test/helpers/process-tree.js';
import { rssBytes } from '../../test/helpers/rss.js';
import type { BenchOptions } from './types.js';

/** Samples the RSS of some processes every `everyMs` and keeps each one's peak. */
export class RssSampler {
  readonly peak = new Map<number, number>();
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly pids: number[], everyMs = 50) {
    this.sample();
    this.timer = setInterval(() => this.sample(), everyMs);
  }

  private sample(): void {
    for (const pid of this.pids) {
      try {
        this.peak.set(pid, Math.max(this.peak.get(pid) ?? 0, rssBytes(pid)));
      } catch {
        // The process exited: keep its last peak.
      }
    }
  }

  stop(): Map<number, number> {
    clearInterval(this.timer);
    this.sample();
    return this.peak;
  }
}

/** Clock ticks per second of /proc/<pid>/stat (USER_HZ, 100 on Linux everywhere). */
export const TICKS_PER_S = 100;

/**
 * CPU time (user + system) a process has used so far, in ms; with `children`, also that of its
 * children it has waited for (a `tar` it ran).
 */
export function cpuMs(pid: number, children = false): number {
  // Fields after the `(comm)`, which may hold spaces: utime, stime, cutime, cstime are the 12th to 15th.
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ').map(Number);
  const ticks = f[11]! + f[12]! + (children ? f[13]! + f[14]! : 0);
  return (ticks * 1000) / TICKS_PER_S;
}

/** Env for the service processes a scenario starts: a CPU profile of each when the run profiles. */
export function profileEnv(opts: BenchOptions, scenario: string): Record<string, string> {
  if (!opts.profile) return {};
  const dir = path.join(opts.outDir, 'profiles', scenario);
  fs.mkdirSync(dir, { recursive: true });
  // Runners run as another uid (test/helpers/runner-process.ts) and write their profiles here too.
  fs.chmodSync(dir, 0o1777);
  const preload = pathToFileURL(path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'cpu-profile-preload.js')).href;
  return { NODE_OPTIONS: `--import=${preload}`, CMP_BENCH_PROFILE_DIR: dir };
}

/**
 * CPU time (user + system) of a process and of its live descendants, in ms: a proxy with
 * CMP_OFFLOAD_PROXY_PROCESSES > 1 is a coordinator and its ingest processes.
 */
export function treeCpuMs(pid: number): number {
  return sumOverTree(pid, p => cpuMs(p));
}
