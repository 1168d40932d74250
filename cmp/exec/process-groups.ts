/**
 * Registry of the process groups our plugin commands run in. A command runs in its own group;
 * daemons it leaves behind stay in that group, so signalling `-pgid` reaches them. A process
 * that leaves the group (setsid, a double fork into a new session) is out of reach of group
 * signals: when cmp-reap is built, each command therefore runs under it (cmp/exec/cmp-reap.c)
 * and is tracked by the helper's pid, which is its own group of one. Signals for such a "group"
 * go to the helper, which passes them to the command's group and to every escaped descendant,
 * and the helper lives exactly as long as any of them. The registry lets the server stop
 * everything at shutdown and lets tests wait for background reaping to finish.
 */

import { readdirSync, readFileSync } from 'node:fs';

const POLL_MS = 50;

const live = new Set<number>();
const reaping = new Set<Promise<void>>();

/** A cmp-reap helper, keyed by its pid: the command's group once known, and whether it runs. */
interface Reaper {
  pgid: number | undefined;
  alive: boolean;
}
const reapers = new Map<number, Reaper>();

/** Give the helper this long to kill the tree before it is SIGKILLed itself (it was stopped or wedged). */
const REAPER_KILL_BACKSTOP_MS = 5_000;

/** Record that `pid` is a cmp-reap helper (tracked as a group of its own, see the module comment). */
export function addReaper(pid: number): void {
  reapers.set(pid, { pgid: undefined, alive: true });
}

/** The helper reported its command's group. */
export function setReaperGroup(pid: number, pgid: number): void {
  const r = reapers.get(pid);
  if (r) r.pgid = pgid;
}

/**
 * The helper reported, with the command's exit, that it has no child left: nothing the command
 * started runs any more, and the helper exits right after. Its group counts as gone from now
 * on, so that the end of the command sends no signal and waits for nothing.
 */
export function reaperTreeGone(pid: number): void {
  const r = reapers.get(pid);
  if (!r) return;
  r.alive = false;
  r.pgid = undefined;
}

/** The helper exited: the whole tree is gone (unless something killed the helper itself). */
export function reaperExited(pid: number): void {
  const r = reapers.get(pid);
  if (!r) return;
  r.alive = false;
  if (!live.has(pid)) reapers.delete(pid);
}

/**
 * Whether any process of the group is alive: `kill(-pgid, 0)` succeeds (EPERM also means it
 * exists). On Linux, zombies are then discounted via /proc: an init that reaps orphans late
 * (seen: ~1.5 s) would otherwise make a dead group look alive.
 */
export function groupAlive(pgid: number): boolean {
  const r = reapers.get(pgid);
  if (r) return r.alive || (r.pgid !== undefined && rawGroupAlive(r.pgid));
  return rawGroupAlive(pgid);
}

/**
 * Send `signal` to the main process of the command run under the cmp-reap helper `pid` (the
 * command leads its own group, so its pid is that group's id), while that group has live
 * members: its id cannot have been reused then. False when the command's pid is not known yet
 * or its group is gone.
 */
export function signalReapedCommand(pid: number, signal: NodeJS.Signals): boolean {
  const r = reapers.get(pid);
  if (r?.pgid === undefined || !rawGroupAlive(r.pgid)) return false;
  kill(r.pgid, signal);
  return true;
}

function rawGroupAlive(pgid: number): boolean {
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
    return true; // no /proc: cannot tell, so assume a live member (see above)
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

/**
 * Send a signal to a whole group; a group that is already gone is not an error. For a command
 * under cmp-reap, SIGTERM and SIGKILL go through the helper (SIGTERM as is, SIGKILL as SIGUSR2:
 * a SIGKILL to the helper would orphan the escaped processes before anyone killed them); the
 * command's group is also SIGKILLed directly, and the helper itself if it has not finished
 * within 5 s (a command of the same uid could have stopped it).
 */
export function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  const r = reapers.get(pgid);
  if (!r || !r.alive) {
    const target = r ? r.pgid : pgid;
    if (target !== undefined && (!r || rawGroupAlive(target))) kill(-target, signal);
    return;
  }
  if (signal !== 'SIGTERM' && signal !== 'SIGKILL') return;
  kill(pgid, 'SIGCONT');
  kill(pgid, signal === 'SIGTERM' ? 'SIGTERM' : 'SIGUSR2');
  if (signal !== 'SIGKILL') return;
  // Only while the group has live members: its id cannot have been reused then.
  if (r.pgid !== undefined && rawGroupAlive(r.pgid)) kill(-r.pgid, 'SIGKILL');
  setTimeout(() => {
    if (r.alive) kill(pgid, 'SIGKILL');
  }, REAPER_KILL_BACKSTOP_MS).unref();
}

function kill(id: number, signal: NodeJS.Signals): void {
  try {
    process.kill(id, signal);
  } catch {
    // ESRCH: nothing left to signal.
  }
}

export function track(pgid: number): void {
  live.add(pgid);
}

export function untrack(pgid: number): void {
  live.delete(pgid);
  if (reapers.get(pgid)?.alive === false) reapers.delete(pgid);
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
 * Shutdown: SIGTERM every tracked group, give them `graceMs` to exit, SIGKILL the rest (and
 * wait for cmp-reap helpers to finish killing their trees), and wait for background reaping,
 * so that no plugin process outlives the server.
 */
export async function terminateAll(graceMs: number): Promise<void> {
  const pgids = [...live];
  for (const pgid of pgids) signalGroup(pgid, 'SIGTERM');
  await waitGone(pgids, graceMs);
  for (const pgid of pgids) if (groupAlive(pgid)) signalGroup(pgid, 'SIGKILL');
  await waitGone(pgids, REAPER_KILL_BACKSTOP_MS + 1_000);
  // Reapers of these groups now find them dead and finish at their next poll.
  await settled();
  for (const pgid of pgids) untrack(pgid);
}
