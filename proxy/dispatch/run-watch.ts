import cluster from 'node:cluster';
import { readdirSync, readFileSync } from 'node:fs';
import type { Ctx, TreeWatch } from '../../cmp/context.js';
import type { Logger } from '../../cmp/log.js';
import { metrics } from '../../cmp/observe/metrics.js';

/** Why a run's answer is returned but not stored. */
export type Unstored = 'overlap' | 'stray';

/** What the log says of an answer not stored, and the app's reason for having no paths from it. */
export const UNSTORED_TEXT: Record<Unstored, string> = {
  overlap: 'answered, not stored: another plugin run was in progress during this one and could have changed its work dir (same uid)',
  stray: 'answered, not stored: a plugin process may have escaped its cmp-reap and could have changed this run',
};

/** One run, from its work dir to the end of its last process. */
export interface WatchedRun {
  /** The run's context: its commands report their process trees here. */
  readonly ctx: Ctx;
  /**
   * The run produced its answer (its commands have exited): whether the answer may be stored,
   * or why not. The run still counts as in progress until every tree it started is gone.
   */
  finish(): Unstored | undefined;
  /** Settles once the run has finished and every tree it started is gone. */
  readonly ended: Promise<void>;
}

interface Mark {
  /** Another run was in progress at some moment while this one ran. */
  overlapped: boolean;
  /** Still producing its answer (finish() not called). */
  running: boolean;
  /** Process trees started and not yet gone. */
  trees: number;
  /** Resolves `ended`. */
  end: () => void;
}

/**
 * Standalone's tamper rule. Plugin commands run as the proxy's uid, so a run can write into
 * the work dir of another run in progress, or kill its own cmp-reap and leave a process behind
 * that does so later. Argo has the same exposure, but there the tampered answer is only that
 * request's; here it would be cached. So an answer is stored only when its run overlapped no
 * other run (from the extraction to the last process of either: a daemon waiting out its
 * SIGTERM grace counts) and no plugin process may have escaped. Once one may have (a cmp-reap
 * died by a signal, or there is none), nothing is stored until this process can show that no
 * stray process remains: when, with no run in progress, it sees no process in its PID namespace
 * besides itself, its ancestors and its ingest processes (a container of its own), or until
 * restart.
 */
export class RunWatch {
  private readonly marks = new Set<Mark>();
  private strayPossible = false;

  constructor(private readonly log?: Logger) {
    metrics.strayPossible.set(0);
  }

  begin(ctx: Ctx): WatchedRun {
    if (this.strayPossible && this.marks.size === 0 && aloneInPidNamespace()) {
      this.strayPossible = false;
      metrics.strayPossible.set(0);
      this.log?.info('no stray plugin process is left in this PID namespace: answers are stored again');
    }
    let end!: () => void;
    const ended = new Promise<void>(resolve => (end = resolve));
    const mark: Mark = { overlapped: this.marks.size > 0, running: true, trees: 0, end };
    for (const other of this.marks) if (other.running) other.overlapped = true;
    this.marks.add(mark);
    const trees: TreeWatch = {
      started: () => void mark.trees++,
      ended: clean => {
        mark.trees--;
        if (!clean) this.stray();
        this.settle(mark);
      },
    };
    return {
      ctx: { ...ctx, trees },
      ended,
      finish: () => {
        if (!mark.running) return undefined;
        mark.running = false;
        this.settle(mark);
        return this.strayPossible ? 'stray' : mark.overlapped ? 'overlap' : undefined;
      },
    };
  }

  private settle(mark: Mark): void {
    if (!mark.running && mark.trees === 0 && this.marks.delete(mark)) mark.end();
  }

  private stray(): void {
    if (this.strayPossible) return;
    this.strayPossible = true;
    metrics.strayPossible.set(1);
    this.log?.error(
      'a plugin process may have escaped its cmp-reap (killed by a signal, or cmp-reap is not usable): ' +
        'it could tamper with later runs, so no answer is stored until no stray process can remain (restart the proxy)',
    );
  }
}

/**
 * Whether every live process this process can see is itself, one of its ancestors or one of its
 * ingest processes. False when /proc cannot tell. In a PID namespace shared with others (a host,
 * a pod sharing its process namespace) there are always others: then only a restart clears it.
 */
function aloneInPidNamespace(): boolean {
  const allowed = new Set<number>([process.pid]);
  for (const w of Object.values(cluster.isPrimary ? cluster.workers ?? {} : {})) if (w?.process.pid) allowed.add(w.process.pid);
  let entries: string[];
  try {
    entries = readdirSync('/proc').filter(d => /^\d+$/.test(d));
    for (let pid = process.ppid; pid > 0 && !allowed.has(pid); pid = parentOf(pid)) allowed.add(pid);
  } catch {
    return false; // no /proc: cannot tell, so not alone (see above)
  }
  for (const e of entries) {
    const pid = Number(e);
    if (allowed.has(pid)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    } catch {
      continue; // exited meanwhile
    }
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    if (state !== 'Z' && state !== 'X') return false;
  }
  return true;
}

function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}
