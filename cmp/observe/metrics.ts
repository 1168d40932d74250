import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { STAGES, type Stage } from './stages.js';
import { countTraceEventsIn } from './request-trace.js';
import { preparedOf } from '../split/prepared.js';

export { STAGES, type Stage } from './stages.js';

export type { CacheResult, KillReason } from './outcomes.js';

// Latencies from a cache hit (sub-ms) to a slow helmfile run (minutes).
const SECONDS_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

/**
 * Every metric this process exports, in one registry (one per process: proxy or worker). Ours
 * are `cmp_offload_*` with the unit in the name; prom-client's process and runtime metrics keep
 * their usual unprefixed names (`process_*`, `nodejs_*`), so that generic Node.js and process
 * dashboards find them. The Grafana dashboard and the docs use exactly these names (a test checks
 * both against `metricNames()`).
 */
export const registry = new Registry();
collectDefaultMetrics({ register: registry });

export const metrics = {
  requests: new Counter({
    name: 'cmp_offload_requests_total',
    help: 'Streaming RPCs answered, by RPC and outcome (gRPC status code name).',
    labelNames: ['rpc', 'outcome'] as const,
    registers: [registry],
  }),
  requestSeconds: new Histogram({
    name: 'cmp_offload_request_duration_seconds',
    help: 'Time from the first message of an RPC to its answer, by RPC.',
    labelNames: ['rpc'] as const,
    buckets: SECONDS_BUCKETS,
    registers: [registry],
  }),
  stageSeconds: new Histogram({
    name: 'cmp_offload_stage_duration_seconds',
    help: `Time spent in one stage of a request or job (${STAGES.join(', ')}).`,
    labelNames: ['stage'] as const,
    buckets: SECONDS_BUCKETS,
    registers: [registry],
  }),
  ingestedBytes: new Counter({
    name: 'cmp_offload_ingested_bytes_total',
    help: 'Tarball bytes received from the repo-server.',
    registers: [registry],
  }),
  indexMemo: new Counter({
    name: 'cmp_offload_index_memo_lookups_total',
    help: 'Tarballs received in full and verified, by whether their tree index was remembered (hit: only hashed) or built (miss: gunzipped, parsed, every file hashed).',
    labelNames: ['result'] as const,
    registers: [registry],
  }),
  indexMemoBytes: new Gauge({
    name: 'cmp_offload_index_memo_bytes',
    help: 'Approximate size of the remembered tree indexes (CMP_OFFLOAD_INDEX_MEMO_BYTES bounds it).',
    registers: [registry],
  }),
  spooledTarballs: new Gauge({
    name: 'cmp_offload_spooled_tarballs',
    help: 'Distinct verified tarballs on the proxy disk, one file each: held by requests in flight, or kept (CMP_OFFLOAD_SPOOL_KEEP_BYTES, distributed proxies).',
    registers: [registry],
  }),
  cacheLookups: new Counter({
    name: 'cmp_offload_cache_lookups_total',
    help: 'Output cache lookups by result: hit, miss, coalesced (joined an identical run in flight), bypass (no key), index (answered from the tree index).',
    labelNames: ['result'] as const,
    registers: [registry],
  }),
  cacheStoredBytes: new Counter({
    name: 'cmp_offload_cache_stored_bytes_total',
    help: 'Bytes of plugin results written to the output cache.',
    registers: [registry],
  }),
  cacheBytes: new Gauge({
    name: 'cmp_offload_cache_bytes',
    help: 'Size of the in-memory output cache (standalone mode).',
    registers: [registry],
  }),
  cacheEntries: new Gauge({
    name: 'cmp_offload_cache_entries',
    help: 'Entries of the in-memory output cache (standalone mode).',
    registers: [registry],
  }),
  cacheUnstored: new Counter({
    name: 'cmp_offload_cache_unstored_total',
    help: 'Standalone runs answered but not stored, by reason: overlap (another plugin run was in progress during it: same uid, it could have changed this run\'s work dir), stray (a plugin process may have escaped its cmp-reap).',
    labelNames: ['reason'] as const,
    registers: [registry],
  }),
  strayPossible: new Gauge({
    name: 'cmp_offload_stray_process_possible',
    help: '1 while a plugin process may have escaped its cmp-reap in this standalone proxy (no answer is stored then), else 0.',
    registers: [registry],
  }),
  tracedCache: new Counter({
    name: 'cmp_offload_traced_cache_total',
    help: 'Traced-cache requests (CMP_OFFLOAD_CACHE=traced) by result: hit (no run), miss (ran and recorded its reads), fallback (ran with an incomplete record: only the whole-tree key was stored).',
    labelNames: ['result'] as const,
    registers: [registry],
  }),
  generatePathsApps: new Gauge({
    name: 'cmp_offload_generate_paths_apps',
    help: 'Applications with a current manifest-generate-paths value derived from traced reads (CMP_OFFLOAD_CACHE=traced; distributed mode: all proxies\' apps, counted at most once a minute).',
    registers: [registry],
  }),
  keeperPatches: new Counter({
    name: 'cmp_offload_keeper_patches_total',
    help: 'Applications the keeper patched, by action: set (the annotation applied), removed (no derived value), dry_run (logged only).',
    labelNames: ['action'] as const,
    registers: [registry],
  }),
  keeperSkipped: new Counter({
    name: 'cmp_offload_keeper_skipped_total',
    help: 'Apps the keeper left alone, by reason: not_served (multi-source, or its source names another plugin, path or repository), not_found (no such Application), bad_name (not an Application name).',
    labelNames: ['reason'] as const,
    registers: [registry],
  }),
  keeperErrors: new Counter({
    name: 'cmp_offload_keeper_errors_total',
    help: 'Keeper failures, by step: redis (reading the records), get and patch (Kubernetes API calls). The next notice or resync tries again.',
    labelNames: ['step'] as const,
    registers: [registry],
  }),
  keeperNotices: new Counter({
    name: 'cmp_offload_keeper_notices_total',
    help: 'Messages on the paths channel, by verdict: accepted, refused (unsigned, wrongly signed or stale: ignored).',
    labelNames: ['verdict'] as const,
    registers: [registry],
  }),
  coalesced: new Counter({
    name: 'cmp_offload_coalesced_requests_total',
    help: 'Requests that joined an identical run already in flight instead of starting their own.',
    registers: [registry],
  }),
  execTimeouts: new Counter({
    name: 'cmp_offload_exec_timeouts_total',
    help: 'Plugin commands that ran past ARGOCD_EXEC_TIMEOUT (their process group got SIGTERM).',
    registers: [registry],
  }),
  execKills: new Counter({
    name: 'cmp_offload_exec_kills_total',
    help: 'Plugin commands killed, by reason: fatal_timeout (SIGKILL after ARGOCD_EXEC_FATAL_TIMEOUT), canceled (caller deadline or cancel), output_limit.',
    labelNames: ['reason'] as const,
    registers: [registry],
  }),
  queueJobs: new Gauge({
    name: 'cmp_offload_queue_jobs',
    help: 'Jobs in the plugin queue by state (read from Redis at scrape time; the keys KEDA scales on).',
    labelNames: ['queue', 'state'] as const,
    registers: [registry],
  }),
  jobs: new Counter({
    name: 'cmp_offload_jobs_total',
    help: 'Jobs a worker finished, by outcome: completed, cached (an identical job had stored the result), failed, retried, requeued (handed back unrun: the runner refused the connection), skew (handed back unrun for a worker of the plugin spec of the job: a rollout under way), skipped (nobody waited), unrecorded (ran, but BullMQ could not record its end: lock lost; the job runs again).',
    labelNames: ['outcome'] as const,
    registers: [registry],
  }),
  resubmissions: new Counter({
    name: 'cmp_offload_resubmissions_total',
    help: 'Requests a proxy submitted anew (blob uploaded again, job added again), by cause: job_vanished, blob_lost, result_missing, job_removed, job_canceled, job_refused.',
    labelNames: ['cause'] as const,
    registers: [registry],
  }),
  concurrencyInUse: new Gauge({
    name: 'cmp_offload_concurrency_in_use',
    help: 'Plugin runs in progress in this process.',
    registers: [registry],
  }),
  concurrencyLimit: new Gauge({
    name: 'cmp_offload_concurrency_limit',
    help: 'Plugin runs this process allows at once (CMP_OFFLOAD_CONCURRENCY).',
    registers: [registry],
  }),
  inflightRequests: new Gauge({
    name: 'cmp_offload_inflight_requests',
    help: 'Streaming RPCs being served by this proxy.',
    registers: [registry],
  }),
  redisConnected: new Gauge({
    name: 'cmp_offload_redis_connected',
    help: '1 while this process is connected to Redis (distributed mode), else 0.',
    registers: [registry],
  }),
  redisUsedMemory: new Gauge({
    name: 'cmp_offload_redis_used_memory_bytes',
    help: 'used_memory of the Redis (on a Cluster: the master) holding our keys, from INFO memory at scrape time (distributed mode; the last value while Redis does not answer).',
    registers: [registry],
  }),
  redisMaxmemory: new Gauge({
    name: 'cmp_offload_redis_maxmemory_bytes',
    help: 'maxmemory of the Redis holding our keys (0: no limit), from INFO memory at scrape time (distributed mode; the last value while Redis does not answer).',
    registers: [registry],
  }),
  info: new Gauge({
    name: 'cmp_offload_info',
    help: 'Always 1; labels name the role, plugin and mode of this process.',
    labelNames: ['role', 'plugin', 'mode'] as const,
    registers: [registry],
  }),
};

/** Record one stage duration (milliseconds) in the histogram. */
export function observeStage(stage: Stage, ms: number): void {
  metrics.stageSeconds.observe({ stage }, ms / 1000);
}

countTraceEventsIn({
  stage: observeStage,
  cache(result) {
    metrics.cacheLookups.inc({ result });
    if (result === 'coalesced') metrics.coalesced.inc();
  },
  execFailure(timedOut, kill) {
    if (timedOut) metrics.execTimeouts.inc();
    if (kill) metrics.execKills.inc({ reason: kill });
  },
});

/** Names of every metric family this process exports (the contract of the dashboard and docs). */
export function metricNames(): string[] {
  return registry.getMetricsAsArray().map(m => m.name);
}

/** Approximate size of a plugin result (the manifests' text; other results are tiny). */
export function resultBytes(result: { kind: string; manifests?: string[] }): number {
  // A prepared result first: reading its manifests would decode them.
  const prepared = preparedOf(result);
  if (prepared) return prepared.bytes;
  if (result.kind !== 'generate' || !result.manifests) return 0;
  let n = 0;
  for (const m of result.manifests) n += Buffer.byteLength(m);
  return n;
}
