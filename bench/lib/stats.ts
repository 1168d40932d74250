/** Percentile of an ascending-sorted list (nearest rank). */
export function pct(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export function median(values: readonly number[]): number {
  return pct([...values].sort((a, b) => a - b), 50);
}

/** Milliseconds since `start` (a `process.hrtime.bigint()` value). */
export function msSince(start: bigint): number {
  return Number(process.hrtime.bigint() - start) / 1e6;
}

/** Time one async call in ms. */
export async function timed<T>(fn: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t = process.hrtime.bigint();
  const value = await fn();
  return { ms: msSince(t), value };
}

export const MiB = 1024 * 1024;

export const fmt = {
  ms: (v: number) => (v >= 100 ? `${v.toFixed(0)} ms` : `${v.toFixed(2)} ms`),
  s: (v: number) => `${(v / 1000).toFixed(2)} s`,
  mib: (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`,
  /** KiB below 1 MiB, else MiB. */
  bytes: (bytes: number) => (bytes < MiB ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / MiB).toFixed(1)} MiB`),
  rate: (bytes: number, ms: number) => `${(bytes / MiB / (ms / 1000)).toFixed(1)} MiB/s`,
  x: (v: number) => `${v.toFixed(2)}×`,
};

export const sleep = (ms: number) => new Promise<void>(r => setTimeout(r, ms));
