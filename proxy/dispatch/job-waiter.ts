import type { Job, QueueEvents } from 'bullmq';
import type { RedisClient } from '../../cmp/queue/redis-connection.js';

/** How a job ended, as far as a waiting proxy is concerned. */
export type JobEnd =
  | { state: 'completed'; returnvalue: unknown }
  | { state: 'failed'; reason: string }
  | { state: 'removed' }
  | { state: 'redis-down' };

interface Waiting {
  settle(end: JobEnd): void;
}

/** Readiness of the command connection is checked this often: a Redis outage fails waiters within it. */
const TICK_MS = 250;
/** Job states are polled this often, in case the events of a job were missed (reconnect, stream trimmed). */
const POLL_MS = 3_000;

/**
 * The one QueueEvents of a proxy process, shared by every waiting caller (each QueueEvents reads
 * every event of the queue, so one per caller would multiply the fan-out). Callers register a
 * job id and get its end: from the events stream normally, from a state poll as a fallback.
 */
export class JobWaiter {
  private readonly waiting = new Map<string, Set<Waiting>>();
  private readonly timer: NodeJS.Timeout;
  private lastPoll = Date.now();
  private polling = false;

  constructor(
    private readonly getJob: (jobId: string) => Promise<Job | undefined>,
    events: QueueEvents,
    private readonly redis: RedisClient,
  ) {
    events.on('completed', ({ jobId, returnvalue }) => this.fire(jobId, { state: 'completed', returnvalue }));
    events.on('failed', ({ jobId, failedReason }) => this.fire(jobId, { state: 'failed', reason: failedReason }));
    events.on('removed', ({ jobId }) => this.fire(jobId, { state: 'removed' }));
    this.timer = setInterval(() => this.tick(), TICK_MS);
    this.timer.unref();
  }

  /** Resolve when the job ends (or Redis goes away); `stop` gives up waiting. */
  wait(jobId: string): { done: Promise<JobEnd>; stop(): void } {
    let entry!: Waiting;
    const done = new Promise<JobEnd>(resolve => {
      entry = { settle: resolve };
    });
    let set = this.waiting.get(jobId);
    if (!set) this.waiting.set(jobId, (set = new Set()));
    set.add(entry);
    const stop = () => {
      set.delete(entry);
      if (set.size === 0 && this.waiting.get(jobId) === set) this.waiting.delete(jobId);
    };
    void done.then(stop);
    // The job may have ended before we registered (events arrive on another connection).
    void this.check(jobId);
    return { done, stop };
  }

  /** Look the job up directly and settle its waiters if it has ended. */
  async check(jobId: string): Promise<void> {
    let end: JobEnd | undefined;
    try {
      const job = await this.getJob(jobId);
      if (!job) end = { state: 'removed' };
      else if (job.finishedOn && job.failedReason !== undefined && (await job.isFailed())) {
        end = { state: 'failed', reason: job.failedReason };
      } else if (job.finishedOn && (await job.isCompleted())) {
        // Only a snapshot read after the job finished carries its return value; an earlier
        // one (job still active) is left to the completed event or the next poll.
        end = { state: 'completed', returnvalue: job.returnvalue };
      }
    } catch {
      return; // Redis trouble: the readiness tick reports it.
    }
    if (end) this.fire(jobId, end);
  }

  private fire(jobId: string, end: JobEnd): void {
    const set = this.waiting.get(jobId);
    if (!set) return;
    this.waiting.delete(jobId);
    for (const w of set) w.settle(end);
  }

  private tick(): void {
    if (this.waiting.size === 0) return;
    if (this.redis.status !== 'ready') {
      for (const id of [...this.waiting.keys()]) this.fire(id, { state: 'redis-down' });
      return;
    }
    if (Date.now() - this.lastPoll < POLL_MS || this.polling) return;
    this.lastPoll = Date.now();
    this.polling = true;
    void Promise.allSettled([...this.waiting.keys()].map(id => this.check(id))).finally(() => (this.polling = false));
  }

  close(): void {
    clearInterval(this.timer);
    for (const id of [...this.waiting.keys()]) this.fire(id, { state: 'redis-down' });
  }
}
