/**
 * Registry of the process groups our plugin commands lead. Every command runs in its own group
 * (setsid, pgid = pid); daemons it leaves behind stay in that group, so signalling `-pgid`
 * reaches them. The registry lets the server stop everything at shutdown and lets tests wait
 * for background reaping to finish.
 */

import { readdirSync, readFileSync } from 'node:fs';

const POLL_MS = 50;

const live = new Set<number>();
const reaping = new Set<Promise<void>>();

/**
 * Whether any process of the group is alive: `kill(-pgid, 0)` succeeds (EPERM also means it
 * exists). On Linux, zombies are then discounted via /proc: an init that reaps orphans late
 * (seen: ~1.5 s) would otherwise make a dead group look alive.
 */
export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  return hasLiveMember(pgid);
}

/** Scan /proc for a non-zombie member of the group; true when /proc cannot tell. */
function hasLiveMember(pgid: number): boolean {
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return true;
  }
  for (const pid of pids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    } catch {
      continue; // exited meanwhile
    }
    // "pid (comm) state ppid pgrp …"; comm may contain spaces and parentheses.
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(pgrp) === pgid && state !== 'Z' && state !== 'X') return true;
  }
  return false;
}

/** Send a signal to a whole group; a group that is already gone is not an error. */
export function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // ESRCH: nothing left to signal.
  }
}

export function track(pgid: number): void {
  live.add(pgid);
}

export function untrack(pgid: number): void {
  live.delete(pgid);
}

/** The groups currently tracked (running commands and groups being reaped). */
export function trackedGroups(): number[] {
  return [...live];
}

/** Signal every tracked group at once. */
export function killAll(signal: NodeJS.Signals): void {
  for (const pgid of live) signalGroup(pgid, signal);
}

/** Resolve when none of the groups is alive any more, or after `ms` (whichever comes first). */
async function waitGone(pgids: readonly number[], ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (pgids.some(groupAlive) && Date.now() < end) {
    await new Promise((r) => setTimeout(r, Math.min(POLL_MS, Math.max(0, end - Date.now()))));
  }
}

/**
 * Argo's kill sequence for a group: SIGTERM now, SIGKILL `graceMs` later if anything is still
 * alive. Runs in the background (tracked, see `settled`) and ends early once the group is gone.
 * The caller may already have sent the SIGTERM (`termSent`).
 */
export function reapGroup(pgid: number, graceMs: number, termSent = false): Promise<void> {
  track(pgid);
  if (!termSent) signalGroup(pgid, 'SIGTERM');
  const done = (async () => {
    await waitGone([pgid], graceMs);
    if (groupAlive(pgid)) signalGroup(pgid, 'SIGKILL');
    untrack(pgid);
  })();
  reaping.add(done);
  void done.finally(() => reaping.delete(done));
  return done;
}

/** Wait for all background reaping started so far. */
export async function settled(): Promise<void> {
  while (reaping.size > 0) await Promise.all([...reaping]);
}

/**
 * Shutdown: SIGTERM every tracked group, give them `graceMs` to exit, SIGKILL the rest, and
 * wait for background reaping, so that no plugin process outlives the server.
 */
export async function terminateAll(graceMs: number): Promise<void> {
  const pgids = [...live];
  for (const pgid of pgids) signalGroup(pgid, 'SIGTERM');
  await waitGone(pgids, graceMs);
  for (const pgid of pgids) if (groupAlive(pgid)) signalGroup(pgid, 'SIGKILL');
  // Reapers of these groups now find them dead and finish at their next poll.
  await settled();
  for (const pgid of pgids) untrack(pgid);
}
