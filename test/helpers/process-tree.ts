import fs from 'node:fs';
import { rssBytes } from './rss.js';

/** The fields of a /proc/<pid>/stat text after the command name: [state, ppid, pgrp, session, ...]. */
export function statFields(stat: string): string[] {
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/**
 * `pid` and every live process below it, from /proc's parent links: a proxy with
 * CMP_OFFLOAD_PROXY_PROCESSES > 1 is a coordinator and its ingest processes (and, in standalone
 * mode, the plugin commands it runs).
 */
export function descendants(pid: number): number[] {
  const parent = new Map<number, number>();
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      parent.set(Number(name), Number(statFields(stat)[1]));
    } catch {
      // exited meanwhile
    }
  }
  const out = [pid];
  for (let i = 0; i < out.length; i++) for (const [child, ppid] of parent) if (ppid === out[i]) out.push(child);
  return out;
}

/** `measure` summed over `pid` and its live descendants (one that exits meanwhile counts 0). */
export function sumOverTree(pid: number, measure: (pid: number) => number): number {
  let total = 0;
  for (const p of descendants(pid)) {
    try {
      total += measure(p);
    } catch {
      // exited meanwhile
    }
  }
  return total;
}

/** The summed RSS of `pid` and its live descendants. */
export function treeRssBytes(pid: number): number {
  return sumOverTree(pid, rssBytes);
}

/**
 * The ingest processes of the proxy `pid` (none with CMP_OFFLOAD_PROXY_PROCESSES=1): its children
 * that run our launcher, not the plugin commands it runs in standalone mode.
 */
export function ingestPids(pid: number): number[] {
  return descendants(pid)
    .slice(1)
    .filter(p => {
      try {
        return ppidOf(p) === pid && fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0').some(a => a.endsWith('/bin/cmp-offload'));
      } catch {
        return false;
      }
    })
    .sort((a, b) => a - b);
}

function ppidOf(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(statFields(stat)[1]);
}

/** Send `signal` to the proxy `pid` and its ingest processes (SIGSTOP starves the whole proxy, not its plugin runs). */
export function signalProxy(pid: number, signal: NodeJS.Signals): void {
  for (const p of [pid, ...ingestPids(pid)]) {
    try {
      process.kill(p, signal);
    } catch {
      // exited meanwhile
    }
  }
}
