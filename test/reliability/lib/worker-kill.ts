import path from 'node:path';
import type { Distributed } from '../../helpers/distributed.js';
import type { WorkerProcess } from '../../helpers/worker-process.js';
import { markerLines } from './marker-plugin.js';

/**
 * A worker with a plugin run in progress (a start marker without its end marker) and no run of a
 * job a kill cut before; the tags it runs are added to `cut`. The worker gives up on a job after
 * its third stall (docs/reliability.md#failure-behaviour), so a killer never aims at a job twice. With `prefer`,
 * a worker running a tag it prefers comes first (e.g. slow runs: a fast one may end before the
 * kill lands); without, the first candidate in `workers` order.
 */
export function workerWithRunInProgress(
  markers: string,
  workers: WorkerProcess[],
  cut: Set<string>,
  prefer?: (tag: string) => boolean,
): WorkerProcess | undefined {
  const open = new Map<string, number>();
  for (const [dir, tag] of markerLines(markers, 'starts')) open.set(`${dir} ${tag}`, (open.get(`${dir} ${tag}`) ?? 0) + 1);
  for (const [dir, tag] of markerLines(markers, 'ends')) open.set(`${dir} ${tag}`, (open.get(`${dir} ${tag}`) ?? 0) - 1);
  const tagsOn = new Map<string, string[]>();
  for (const [key, n] of open) {
    if (n <= 0) continue;
    const [dir, tag] = key.split(' ') as [string, string];
    tagsOn.set(dir, [...(tagsOn.get(dir) ?? []), tag]);
  }
  const candidates = workers
    .map(w => ({ w, tags: tagsOn.get(path.join(w.base, 'work')) ?? [] }))
    .filter(c => c.tags.length > 0 && !c.tags.some(t => cut.has(t)));
  if (prefer) candidates.sort((a, b) => Number(b.tags.some(prefer)) - Number(a.tags.some(prefer)));
  const c = candidates[0];
  c?.tags.forEach(t => cut.add(t));
  return c?.w;
}

/**
 * SIGKILL `victim` (a worker with a run in progress) or, when there is none, a random worker of
 * `d`: it leaves `d.workers` and its work dir goes into `killed`. Whether it was `victim`
 * (a kill mid-run). No worker is started in its place.
 */
export async function killWorker(d: Distributed, victim: WorkerProcess | undefined, killed: Set<string>): Promise<boolean> {
  const w = victim ?? d.workers[Math.floor(Math.random() * d.workers.length)]!;
  d.workers.splice(d.workers.indexOf(w), 1);
  killed.add(path.join(w.base, 'work'));
  await w.kill();
  return victim !== undefined;
}
