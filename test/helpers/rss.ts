import fs from 'node:fs';

/** Resident set size of a process, from /proc (Linux). */
export function rssBytes(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
}
