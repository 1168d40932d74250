import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';

/**
 * Runner isolation (CMP_OFFLOAD_RUNNER_ISOLATION=isolated, the default): the runner runs one
 * request at a time, alone in its container's PID namespace with its init as PID 1, and after
 * every run it sweeps: every other process of the namespace is SIGKILLed, repeatedly, until none
 * is left, and what a run can write (the work root, CMP_OFFLOAD_RUNNER_RESET_DIRS) is emptied.
 * Whatever a run did (killed its cmp-reap, setsid, ignored signals, double forked), nothing of it
 * is alive when the next run starts, and it left no file for the next run to read or run.
 *
 * Processes are told apart by pid alone: in our own namespace, with no run going, the only
 * processes that can create new ones are the run's leftovers, so a pid reused between the scan
 * and the kill is one of theirs.
 */

export interface ProcEntry {
  pid: number;
  ppid: number;
  /** The thread group still runs something (a zombie leader whose other threads live counts). */
  alive: boolean;
}

/** The processes /proc shows (a vanished one is skipped). */
export function listProcesses(proc = '/proc'): ProcEntry[] {
  const out: ProcEntry[] = [];
  for (const name of fs.readdirSync(proc)) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = fs.readFileSync(`${proc}/${name}/stat`, 'latin1');
    } catch {
      continue; // exited meanwhile
    }
    // The command name may hold spaces and parentheses: the fields follow its last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const state = fields[0];
    let alive = state !== 'Z' && state !== 'X';
    if (!alive) {
      // A leader that called pthread_exit is a zombie while its other threads run on.
      try {
        alive = fs.readdirSync(`${proc}/${name}/task`).length > 1;
      } catch {
        // gone
      }
    }
    out.push({ pid: Number(name), ppid: Number(fields[1]), alive });
  }
  return out;
}

/**
 * Why this runner may not sweep its PID namespace, or undefined when it may: it must be alone
 * there but for PID 1 being its own parent (its init). A runner started on a host (by systemd,
 * in a shell) sees other processes and is refused: the sweep would kill them.
 */
export function notAlone(procs: ProcEntry[] = listProcesses(), self = process.pid, ppid = process.ppid): string | undefined {
  if (self === 1) {
    return 'it is PID 1 of its namespace: run it under an init that reaps orphaned processes (cmp-reap --init, as in the images, or tini)';
  }
  const others = procs.filter(p => p.pid !== self && !(p.pid === 1 && ppid === 1) && p.alive);
  if (others.length === 0) return undefined;
  const shown = others.slice(0, 5).map(p => p.pid).join(', ');
  return (
    `it is not alone in its PID namespace (${others.length} other process${others.length > 1 ? 'es' : ''}: ${shown}${others.length > 5 ? ', …' : ''}` +
    `${ppid !== 1 ? '; its parent is not PID 1' : ''}): the sweep after each run would kill them. Run it as the only process ` +
    `of its container under an init (no shareProcessNamespace), or set CMP_OFFLOAD_RUNNER_ISOLATION=shared (development only)`
  );
}

export class SweepError extends Error {}

/**
 * SIGKILL every process of the namespace except this one and PID 1 (its init), rescanning until
 * none is alive (a process may fork while the others die); zombies are the init's to reap and do
 * not count. Throws a SweepError when something is still alive after `timeoutMs` (a process of
 * another uid: EPERM): the runner must then stop, and its container with it.
 */
export async function killOthers(timeoutMs = 10_000): Promise<number> {
  const self = process.pid;
  const until = Date.now() + timeoutMs;
  const killed = new Set<number>();
  for (;;) {
    const left = listProcesses().filter(p => p.pid !== self && p.pid !== 1 && p.alive);
    if (left.length === 0) return killed.size;
    let denied: number | undefined;
    for (const p of left) {
      try {
        process.kill(p.pid, 'SIGKILL');
        killed.add(p.pid);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EPERM') denied = p.pid;
      }
    }
    if (Date.now() > until) {
      throw new SweepError(
        `${left.length} process${left.length > 1 ? 'es' : ''} of an earlier run still alive after ${timeoutMs} ms (pid ${left[0]!.pid}` +
          `${denied !== undefined ? `; pid ${denied} may not be killed by this uid` : ''})`,
      );
    }
    // Let the killed ones die (and the init reap them) before the next scan.
    await new Promise(resolve => setTimeout(resolve, killed.size > 0 ? 2 : 20));
  }
}

/** Mount points (mountinfo's fifth field, octal escapes decoded). */
export function mountPoints(): Set<string> {
  const out = new Set<string>();
  try {
    for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
      const field = line.split(' ')[4];
      if (field) out.add(field.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))));
    }
  } catch {
    // no mountinfo: no mount point is known, so every entry is removed (rm fails on a busy one)
  }
  return out;
}

/**
 * Remove everything inside `dir` but mount points (e.g. plugin.yaml mounted under $HOME) and the
 * dirs that lead to them, whose other entries go. Entries a run made unreadable or unwritable
 * (chmod 000) are made ours again first. `dir` itself stays (an emptyDir's mount point).
 */
export async function emptyDir(dir: string, mounts: ReadonlySet<string>): Promise<void> {
  let names: string[];
  try {
    names = await fsp.readdir(dir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return;
    if (code !== 'EACCES') throw err;
    await fsp.chmod(dir, 0o700);
    names = await fsp.readdir(dir);
  }
  for (const name of names) {
    const p = path.join(dir, name);
    if (mounts.has(p)) continue;
    // Into a real dir only: a run may have put a symlink where a dir leading to a mount point was.
    const leadsToMount = [...mounts].some(m => m.startsWith(`${p}/`)) && (await fsp.lstat(p).catch(() => undefined))?.isDirectory(); // gone: nothing to empty
    if (leadsToMount) await emptyDir(p, mounts);
    else await removeTree(p);
  }
}

/** `rm -rf p`, also when a run removed the permissions on the dirs inside. */
export async function removeTree(p: string): Promise<void> {
  try {
    await fsp.rm(p, { recursive: true, force: true });
    return;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EACCES' && code !== 'EPERM' && code !== 'ENOTEMPTY') throw err;
  }
  await makeOurs(p);
  await fsp.rm(p, { recursive: true, force: true });
}

async function makeOurs(p: string): Promise<void> {
  const st = await fsp.lstat(p).catch(() => undefined); // gone: nothing to make ours
  if (!st?.isDirectory()) return;
  await fsp.chmod(p, 0o700);
  for (const name of await fsp.readdir(p)) await makeOurs(path.join(p, name));
}

/**
 * The reset dirs as the runner may empty them: each an existing directory, and none holding the
 * runner's own files (its install dir, config dir or socket) unless those sit on a mount point
 * inside it, which the sweep keeps. Throws naming CMP_OFFLOAD_RUNNER_RESET_DIRS otherwise.
 */
export function checkResetDirs(dirs: readonly string[], keep: { path: string; what: string }[], mounts: ReadonlySet<string>): void {
  for (const dir of dirs) {
    let st;
    try {
      st = fs.statSync(dir);
    } catch (err) {
      throw new Error(`CMP_OFFLOAD_RUNNER_RESET_DIRS: ${dir}: ${(err as Error).message}`);
    }
    if (!st.isDirectory()) throw new Error(`CMP_OFFLOAD_RUNNER_RESET_DIRS: ${dir} is not a directory`);
    for (const k of keep) {
      const inside = k.path === dir || k.path.startsWith(`${dir}/`);
      const mounted = [...mounts].some(m => m.startsWith(`${dir}/`) && (k.path === m || k.path.startsWith(`${m}/`)));
      if (inside && !mounted) {
        throw new Error(`CMP_OFFLOAD_RUNNER_RESET_DIRS: ${dir} holds ${k.what} ${k.path}, which the sweep after each run would remove`);
      }
    }
  }
}
