import { Worker, type Job, type Processor, type Span, type WorkerOptions } from 'bullmq';

/** How BullMQ recorded the end of a run: the job moved to completed, to failed (or back for a retry), or nothing recorded, and why. */
export type Recorded = { as: 'completed' | 'failed' } | { as: 'nothing'; reason: string };

/**
 * Runs whose outcome is reported once BullMQ has recorded their end. A processor returns (or
 * throws) before its worker moves the job to completed (or failed), and that move fails when the
 * job's lock is gone: Redis stalled or unreachable for longer than the lock duration, the job
 * taken back as stalled and perhaps running elsewhere. BullMQ then only emits an `error` and the
 * job runs again: its first run must not count as done.
 */
export class RecordedRuns {
  private readonly pending = new WeakMap<Job, { report(r: Recorded): void; reason?: string; completing?: boolean }>();

  /** Call `report` once, when BullMQ has recorded the end of `job`'s current run or given up. */
  expect(job: Job, report: (r: Recorded) => void): void {
    this.pending.set(job, { report });
  }

  /** The move's `completed` or `failed` event: recorded. */
  recorded(job: Job, as: 'completed' | 'failed'): void {
    const p = this.pending.get(job);
    if (!p) return;
    this.pending.delete(job);
    p.report({ as });
  }

  /**
   * A move failed (BullMQ may try again: it retries Redis connection errors). The reason given
   * is the last error of the move to completed, if there was one: a refused completion is
   * followed by a move to failed that fails alike, and that one would say less.
   */
  moveFailed(job: Job, err: unknown, move: 'completed' | 'failed'): void {
    const p = this.pending.get(job);
    if (!p || (move === 'failed' && p.completing)) return;
    p.reason = err instanceof Error ? err.message : String(err);
    p.completing = move === 'completed';
  }

  /** BullMQ is done with the run: if nothing was recorded, say so. */
  settled(job: Job): void {
    const p = this.pending.get(job);
    if (!p) return;
    this.pending.delete(job);
    p.report({ as: 'nothing', reason: p.reason ?? 'the worker was closing' });
  }
}

/**
 * A BullMQ Worker that tells `runs` what became of each run: its completed and failed events
 * (emitted only once the move is stored), the errors of the moves (through the protected
 * handlers BullMQ's Worker provides for subclasses), and the end of its handling of a job.
 */
export class RecordingWorker extends Worker {
  constructor(name: string, processor: Processor, opts: WorkerOptions, private readonly runs: RecordedRuns) {
    super(name, processor, opts);
    this.on('completed', job => runs.recorded(job, 'completed'));
    this.on('failed', job => job && runs.recorded(job, 'failed'));
  }

  protected override handleCompleted(result: unknown, job: Job, token: string, fetchNext?: () => boolean, span?: Span): Promise<Job> {
    return this.move(job, 'completed', super.handleCompleted(result, job, token, fetchNext, span));
  }

  protected override handleFailed(err: Error, job: Job, token: string, fetchNext?: () => boolean, span?: Span): Promise<Job> {
    return this.move(job, 'failed', super.handleFailed(err, job, token, fetchNext, span));
  }

  /** A move of BullMQ's, whose error (if any) `runs` learns. */
  private async move(job: Job, to: 'completed' | 'failed', moving: Promise<Job>): Promise<Job> {
    try {
      return await moving;
    } catch (err) {
      this.runs.moveFailed(job, err, to);
      throw err;
    }
  }

  override async processJob(job: Job, token: string, fetchNext?: () => boolean): Promise<void | Job> {
    try {
      return await super.processJob(job, token, fetchNext);
    } finally {
      this.runs.settled(job);
    }
  }
}
