/**
 * The stages of one request whose durations are measured. The proxy sees ingest, lookup, upload,
 * remote (waiting for a worker's job, distributed mode) and respond; whoever runs the plugin
 * (standalone proxy or worker) sees queue_wait, extract, exec and split; an isolated runner adds
 * sweep (after the run, see runner/isolation.ts). A module of its own so
 * that the runner answer's decoder thread can check stage names without loading the metrics.
 */
export const STAGES = ['ingest', 'lookup', 'upload', 'queue_wait', 'remote', 'extract', 'exec', 'split', 'sweep', 'respond'] as const;
export type Stage = (typeof STAGES)[number];
