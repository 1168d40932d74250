import { DelayedError } from 'bullmq';

/**
 * A job of another plugin spec (a rollout under way: proxies and workers of the old and the new
 * plugin.yaml share the queue) goes back as a delayed job for a worker of its spec to take, each
 * time a little later: 100 ms, doubled per hand-back up to 2 s (no busy loop between two workers
 * of the wrong spec). It fails with versionSkew once the next try would come later than
 * SKEW_WAIT_MS after its enqueue or SKEW_MARGIN_MS before its deadline, so that its caller still
 * gets that error and not its own deadline.
 */
const SKEW_FIRST_DELAY_MS = 100;
const SKEW_MAX_DELAY_MS = 2_000;
const SKEW_WAIT_MS = 120_000;
const SKEW_MARGIN_MS = 1_000;

/** The delay of a job's next hand-back to a worker of its spec, or undefined when it must fail now (versionSkew). */
export function skewDelay(handBacks: number, now: number, enqueuedAt: number, expiresAt: number): number | undefined {
  const delay = Math.min(SKEW_MAX_DELAY_MS, SKEW_FIRST_DELAY_MS * 2 ** Math.min(handBacks, 16));
  const giveUpAt = Math.min(enqueuedAt + SKEW_WAIT_MS, expiresAt - SKEW_MARGIN_MS);
  return now + delay > giveUpAt ? undefined : delay;
}

/**
 * A job handed back because it is of another plugin spec (moved to delayed by the processor
 * itself): not a run, nothing recorded by BullMQ.
 */
export class SkewHandBack extends DelayedError {}
