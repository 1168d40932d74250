import { randomUUID } from 'node:crypto';
import { accessSync, constants as fsConstants, createReadStream, statSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import type { TraceOptions } from '../config/options.js';
import { TraceRecords, type RawReads } from './trace-records.js';
import { BUILT_TRACER, recorderProblem } from './tracer-probe.js';

export { BUILT_TRACER };
export type { TraceOptions };


/**
 * What a run read under its work dir, relative to it (`''` is the work dir itself), or why
 * that is unknown. `touched`: every path given to a file syscall; `listed`: directories whose
 * entries were read; `moved`: rename sources; `traversed`: paths a lookup only passed through
 * (a directory left with `..`, a symlink crossed), whose type (and link target) counts.
 */
export type RecordedReads =
  | { complete: true; touched: string[]; listed: string[]; moved: string[]; traversed: string[] }
  | { complete: false; reason: string };

/** How one command is spawned under the tracer. */
export interface TracedSpawn {
  file: string;
  args: string[];
  argv0: string;
}

/** Whether the tracer works here (see probeTracer; asked once per binary and process). */
export async function tracerWorks(tracer: string, env: NodeJS.ProcessEnv): Promise<boolean> {
  return (await recorderProblem(tracer, env, os.tmpdir())) === undefined;
}

/**
 * Records the reads of one request's commands (init, generate) under `workDir`: each command
 * runs under cmp-trace writing its own trace file next to the work dir; `finish()` parses
 * them. Any doubt — tracer unusable, a command it could not wrap faithfully, a trace too big,
 * a path it cannot attribute — makes the record incomplete, never smaller than the truth.
 */
export class ReadRecorder {
  private readonly traces: string[] = [];
  private incomplete: string | undefined;
  private readonly watchers: NodeJS.Timeout[] = [];

  private constructor(
    private readonly opts: TraceOptions,
    private readonly tracer: string,
    private readonly workDir: string,
    problem: string | undefined,
  ) {
    if (problem) this.incomplete = `the read recorder cannot work here: ${problem}`;
  }

  /** A recorder for the work dir `workDir` (resolved to its real path, as the tracer reports paths). */
  static async start(opts: TraceOptions, workDir: string, env: NodeJS.ProcessEnv): Promise<ReadRecorder> {
    const tracer = opts.tracer || BUILT_TRACER;
    // Probed at start where commands run (checkRecorder); else here, once.
    const problem = await recorderProblem(tracer, env, path.dirname(workDir));
    return new ReadRecorder(opts, tracer, await fs.realpath(workDir), problem);
  }

  /**
   * How to spawn one command under the tracer, or undefined to run it as is (the record is
   * then incomplete). The tracer execs `file` (already looked up in PATH) with argv[0] as
   * given, exactly as the plain spawn would; it must be runnable, otherwise Go's own exec
   * error text must reach the caller.
   */
  wrap(argv: readonly string[], file: string, cwd: string): TracedSpawn | undefined {
    if (this.incomplete) return undefined;
    const full = path.resolve(cwd, file);
    try {
      if (!statSync(full).isFile()) throw new Error('not a file');
      accessSync(full, fsConstants.X_OK);
    } catch {
      this.incomplete = 'the command is not runnable';
      return undefined;
    }
    const traceFile = path.join(path.dirname(this.workDir), `${path.basename(this.workDir)}.${randomUUID()}.trace`);
    this.traces.push(traceFile);
    this.watch(traceFile);
    return { file: this.tracer, args: [`--cpus=${this.opts.cpus}`, traceFile, String(this.opts.maxPaths), full, ...argv], argv0: this.tracer };
  }

  /** Mark the record incomplete (e.g. a command could not be checked before wrapping). */
  giveUp(reason: string): void {
    this.incomplete ??= reason;
  }

  /** Parse the traces and remove them; relative paths under the work dir. */
  async finish(): Promise<RecordedReads> {
    for (const w of this.watchers) clearInterval(w);
    try {
      // The watchdog samples every 250 ms: a command that wrote past the limit in less time
      // is caught here, before its trace is parsed.
      for (const t of this.traces) {
        const size = await fs.stat(t).then(st => st.size, () => 0);
        if (size > this.opts.maxTraceBytes) this.tooBig();
      }
      if (this.incomplete) return { complete: false, reason: this.incomplete };
      const touched = new Set<string>();
      const listed = new Set<string>();
      const moved = new Set<string>();
      const traversed = new Set<string>();
      for (const t of this.traces) {
        const raw = await this.parse(t);
        if (raw.incomplete) return { complete: false, reason: raw.incomplete };
        for (const p of raw.touched) addRelative(touched, this.workDir, p);
        for (const p of raw.listed) addRelative(listed, this.workDir, p);
        for (const p of raw.moved) addRelative(moved, this.workDir, p);
        for (const p of raw.traversed) addRelative(traversed, this.workDir, p);
      }
      // Re-checked after parsing: the watchdog may have fired meanwhile.
      if (this.incomplete) return { complete: false, reason: this.incomplete };
      return { complete: true, touched: [...touched].sort(), listed: [...listed].sort(), moved: [...moved].sort(), traversed: [...traversed].sort() };
    } finally {
      await Promise.all(this.traces.map(t => fs.rm(t, { force: true })));
    }
  }

  private async parse(file: string): Promise<RawReads> {
    const parser = new TraceRecords(this.opts.maxPaths);
    try {
      const lines = createInterface({ input: createReadStream(file), crlfDelay: Infinity });
      for await (const line of lines) parser.line(line);
    } catch (err) {
      return { touched: new Set(), listed: new Set(), moved: new Set(), traversed: new Set(), incomplete: `trace unreadable: ${(err as Error).message}` };
    }
    return parser.finish();
  }

  private tooBig(): void {
    this.giveUp(`the trace exceeded ${this.opts.maxTraceBytes} bytes (CMP_OFFLOAD_TRACE_MAX_BYTES)`);
  }

  /** Bound the trace's disk use: past the limit the record is given up and the file emptied (it then stays sparse). */
  private watch(file: string): void {
    const timer = setInterval(() => {
      void fs.stat(file).then(
        st => {
          if (st.size <= this.opts.maxTraceBytes) return;
          this.tooBig();
          void fs.truncate(file, 0).catch(() => {}); // only saves disk: the record is already marked too big
        },
        () => {}, // not there yet, or gone: the next tick looks again
      );
    }, 250);
    timer.unref();
    this.watchers.push(timer);
  }
}

/** Add `abs` relative to `root` when it lies in it (`''` for the root itself). */
function addRelative(into: Set<string>, root: string, abs: string): void {
  if (abs === root) into.add('');
  else if (abs.startsWith(`${root}/`)) into.add(abs.slice(root.length + 1));
}
