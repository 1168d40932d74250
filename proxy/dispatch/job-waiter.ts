import type { Job, QueueEvents } from 'bullmq';
import type { RedisClient } from '../../cmp/queue/redis-connection.js';

/**
 * How a job ended, as far as a waiting proxy is concerned. `removed`: BullMQ says someone removed
 * it; `vanished`: its record is simply not there any more (Redis flushed, restarted empty, failed
 * over to a replica that never got it, or evicted it); `redis-down`: Redis stayed unreachable.
 */
export type JobEnd =
  | { state: 'completed'; returnvalue: unknown }
  | { state: 'failed'; reason: string }
  | { state: 'removed' }
  | { state: 'vanished' }
  | { state: 'redis-down' };

interface Waiting {
  settle(end: JobEnd): void;
}

/** Readiness of the command connection is checked this often. */
const TICK_MS = 250;
/**
 * Jobs are looked at this often, in case their events were missed (reconnect, stream trimmed or
 * flushed) or they vanished (nothing tells of that: QueueEvents never speaks of a job that is
 * not there). One round trip for every job waited for, whatever their number.
 */
const POLL_MS = 3_000;

export interface JobWaiterOptions {
  getJob: (jobId: string) => Promise<Job | undefined>;
  /** The Redis key of a job's hash (BullMQ's `queue.toKey(id)`). */
  jobKey: (jobId: string) => Promise<string>;
  /** The queue's events stream (BullMQ's `queue.keys.events`) and its bounded length. */
  eventsKey: () => Promise<string>;
  eventsMaxLen: number;
  events: QueueEvents;
  redis: RedisClient;
  /**
   * How long the command connection may be down before its waiters are failed (redis-down): a
   * restart or a failover within it is waited out, then every job is looked at at once.
   */
  graceMs: number;
}

/**
 * The one QueueEvents of a proxy process, shared by every waiting caller (each QueueEvents reads
 * every event of the queue, so one per caller would multiply the fan-out). Callers register a
 * job id and get its end: from the events stream normally, from a batched look at the job
 * records as a fallback, which is also how a job that vanished from Redis is noticed.
 */
export class JobWaiter {
  private readonly waiting = new Map<string, Set<Waiting>>();
  private readonly timer: NodeJS.Timeout;
  private lastPoll = Date.now();
  private polling = false;
  /** Since when the command connection is not ready (undefined while it is). */
  private downSince: number | undefined;

  constructor(private readonly o: JobWaiterOptions) {
    o.events.on('completed', ({ jobId, returnvalue }) => this.fire(jobId, { state: 'completed', returnvalue }));
    o.events.on('failed', ({ jobId, failedReason }) => this.fire(jobId, { state: 'failed', reason: failedReason }));
    o.events.on('removed', ({ jobId }) => this.fire(jobId, { state: 'removed' }));
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

  /** Look the job up directly and settle its waiters if it has ended or vanished. */
  async check(jobId: string): Promise<void> {
    let end: JobEnd | undefined;
    try {
      const job = await this.o.getJob(jobId);
      if (!job) end = (await this.removedEventOf(jobId)) ? { state: 'removed' } : { state: 'vanished' };
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

  /**
   * Whether the events stream tells that the job was removed. BullMQ writes that event in the
   * same script that deletes the record, so a record found gone may only be called vanished once
   * the stream has been read up to now: the 'removed' event may still be on its way to our
   * QueueEvents. One bounded read (the stream is capped), only for a job found gone.
   */
  private async removedEventOf(jobId: string): Promise<boolean> {
    const entries = await this.o.redis.xrevrange(await this.o.eventsKey(), '+', '-', 'COUNT', this.o.eventsMaxLen);
    return entries.some(([, fields]) => {
      let event: string | undefined;
      let id: string | undefined;
      for (let i = 0; i + 1 < fields.length; i += 2) {
        if (fields[i] === 'event') event = fields[i + 1];
        else if (fields[i] === 'jobId') id = fields[i + 1];
      }
      return event === 'removed' && id === jobId;
    });
  }

  /**
   * Every job waited for, in one pipeline: the ones whose record is gone or finished get the
   * full look of `check` (removed or vanished; their events were missed). The rest wait on.
   */
  private async poll(): Promise<void> {
    const ids = [...this.waiting.keys()];
    if (ids.length === 0) return;
    const keys = await Promise.all(ids.map(id => this.o.jobKey(id)));
    const pipeline = this.o.redis.pipeline();
    for (const key of keys) pipeline.hmget(key, 'timestamp', 'finishedOn');
    const replies = (await pipeline.exec()) ?? [];
    await Promise.allSettled(
      ids.map((id, i) => {
        const [err, fields] = replies[i] ?? [new Error('no reply'), null];
        if (err || !Array.isArray(fields)) return undefined;
        const [timestamp, finishedOn] = fields as (string | null)[];
        // Confirmed by a direct look: never call a job gone on a reply that raced with its add.
        if (timestamp === null || finishedOn !== null) return this.check(id);
        return undefined;
      }),
    );
  }

  private fire(jobId: string, end: JobEnd): void {
    const set = this.waiting.get(jobId);
    if (!set) return;
    this.waiting.delete(jobId);
    for (const w of set) w.settle(end);
  }

  private tick(): void {
    if (this.o.redis.status !== 'ready') {
      this.downSince ??= Date.now();
      if (Date.now() - this.downSince < this.o.graceMs) return;
      for (const id of [...this.waiting.keys()]) this.fire(id, { state: 'redis-down' });
      return;
    }
    // Back after an outage: what we wait for may be gone with it (restart without persistence, failover).
    if (this.downSince !== undefined) this.lastPoll = 0;
    this.downSince = undefined;
    if (this.waiting.size === 0) return;
    if (this.polling || Date.now() - this.lastPoll < POLL_MS) return;
    this.lastPoll = Date.now();
    this.polling = true;
    void this.poll()
      .catch(() => {}) // Redis trouble: the next tick polls again, or reports the outage
      .finally(() => (this.polling = false));
  }

  close(): void {
    clearInterval(this.timer);
    for (const id of [...this.waiting.keys()]) this.fire(id, { state: 'redis-down' });
  }
}
