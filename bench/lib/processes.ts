import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
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

/** Env for the service processes a scenario starts: a CPU profile of each when the run profiles. */
export function profileEnv(opts: BenchOptions, scenario: string): Record<string, string> {
  if (!opts.profile) return {};
  const dir = path.join(opts.outDir, 'profiles', scenario);
  fs.mkdirSync(dir, { recursive: true });
  const preload = pathToFileURL(path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'cpu-profile-preload.js')).href;
  return { NODE_OPTIONS: `--import=${preload}`, CMP_BENCH_PROFILE_DIR: dir };
}
