import { DEFAULT_ASKPASS_SOCKET } from '../askpass/git-creds-env.js';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { defaultProxyProcesses } from './available-cpus.js';
import {
  argoDuration,
  bytes,
  duration,
  envName,
  fail,
  GiB,
  goBool,
  integer,
  list,
  MiB,
  OptionsError,
  oneOf,
  positiveDuration,
  stringToString,
  type Env,
} from './env-values.js';
import { hashTag, redactRedisUrl, redisTarget, type RedisHost, type RedisTarget } from './redis-target.js';
import type { SettingName } from './settings.js';

export { hashTag, OptionsError, redactRedisUrl, redisTarget, type RedisHost, type RedisTarget };

/**
 * CMP_OFFLOAD_CACHE_REVISION: `auto` binds an entry to the revision only when its output
 * contains one of the revision values; `always` binds every entry (a plugin that uses the
 * revision without printing it is then safe, at the cost of no reuse across commits).
 */
export type RevisionRule = 'auto' | 'always';

/** The traced cache's recorder settings (CMP_OFFLOAD_TRACE*). */
export interface TraceOptions {
  /** CMP_OFFLOAD_TRACER: the cmp-trace binary; empty for the one built with the project. */
  tracer: string;
  /** CMP_OFFLOAD_TRACE_CPUS: whether a traced command and its tracer share one CPU (see cmp-trace.c). */
  cpus: 'one' | 'all';
  /** CMP_OFFLOAD_TRACE_MAX_PATHS: distinct paths one run may touch before its record is given up. */
  maxPaths: number;
  /** CMP_OFFLOAD_TRACE_MAX_BYTES: trace output one command may write before its record is given up. */
  maxTraceBytes: number;
}

/**
 * Every setting of the service, read once from the environment at start and frozen. Argo's own
 * knobs keep their names, defaults and leniency (an invalid ARGOCD_* value falls back to the
 * default, as Argo does); ours (`CMP_OFFLOAD_*`) are strict: a bad value stops the process with a
 * message naming the variable. The settings table (settings.ts, docs/configuration.md) lists the same names.
 */
export interface Options {
  /** `--config-dir-path`: where plugin.yaml lives. */
  configDirPath: string;
  /** ARGOCD_PLUGINSOCKFILEPATH: directory of the plugin socket. */
  socketDir: string;
  /** `<ARGOCD_CMP_WORKDIR or tmpdir>/_cmp_server`: per-request work dirs live here. */
  workRoot: string;
  /** ARGOCD_GRPC_MAX_SIZE_MB in bytes: max gRPC message size, both directions. */
  maxMessageBytes: number;
  /**
   * ARGOCD_ASK_PASS_SOCK of this process: the repo-server's askpass socket for provideGitCreds
   * requests that do not name one (repo-servers before 2.13), as Argo's helper falls back to it.
   */
  askpassSocket: string;
  /** ARGOCD_EXEC_TIMEOUT: SIGTERM to a command's process group after this long. */
  execTimeoutMs: number;
  /** ARGOCD_EXEC_FATAL_TIMEOUT: SIGKILL this long after the SIGTERM. */
  execFatalTimeoutMs: number;
  /**
   * CMP_OFFLOAD_CONCURRENCY: plugin runs at once in this process. A worker with runners defaults
   * to one per runner socket (an isolated runner runs one request at a time).
   */
  concurrency: number;
  /**
   * CMP_OFFLOAD_PROXY_PROCESSES: processes serving the plugin socket (proxy). 1 is one process
   * doing everything; N > 1 is a coordinator and N ingest processes (proxy/processes/).
   * Default: from the container's CPU and memory limits (defaultProxyProcesses).
   */
  proxyProcesses: number;
  /** Where proxyProcesses came from: the setting, or the limits that chose the default. */
  proxyProcessesFrom: string;
  cache: {
    /** CMP_OFFLOAD_CACHE: `traced` (input-traced, the default, see docs/traced-cache.md#input-traced-cache), `on` (content cache only) or `off`. */
    enabled: boolean;
    /** CMP_OFFLOAD_CACHE=traced: generate results are also keyed by the inputs their run read. */
    traced: boolean;
    /** CMP_OFFLOAD_CACHE_REVISION: `auto` or `always` (when a traced entry is bound to the revision). */
    revision: RevisionRule;
    /** The read recorder of the traced cache (CMP_OFFLOAD_TRACER, CMP_OFFLOAD_TRACE_*). */
    trace: TraceOptions;
    /** CMP_OFFLOAD_CACHE_TTL */
    ttlMs: number;
    /** CMP_OFFLOAD_CACHE_SALT, mixed into every key (e.g. the worker image tag). */
    salt: string;
    /** CMP_OFFLOAD_CACHE_IGNORE_ENV: request env names left out of the key. */
    ignoreEnv: ReadonlySet<string>;
    /**
     * CMP_OFFLOAD_CACHE_BYPASS_ENV: the Application's plugin env entry (without `ARGOCD_ENV_`)
     * that, set to `off`, keeps its requests out of the cache (not served, not stored). This is
     * the request env name `ARGOCD_ENV_<it>`.
     */
    bypassEnv: string;
    /** CMP_OFFLOAD_CACHE_MAX_BYTES: size of the in-memory cache (standalone mode). */
    maxBytes: number;
  };
  /** CMP_OFFLOAD_INDEX_MEMO_BYTES: memory for the tree indexes of tarballs ingested lately (proxy). */
  indexMemoBytes: number;
  /**
   * CMP_OFFLOAD_SPOOL_KEEP_BYTES: disk for copies of tarballs received lately that no request
   * holds (distributed proxy). Always 0 in standalone mode: its plugin commands run as the
   * proxy's uid and could read a kept copy of another tenant's repository.
   */
  spoolKeepBytes: number;
  limits: {
    /** CMP_OFFLOAD_MAX_TARBALL_BYTES: gzip bytes accepted per request. */
    tarballBytes: number;
    /** CMP_OFFLOAD_MAX_EXTRACTED_BYTES: bytes written when extracting. */
    extractedBytes: number;
    /** CMP_OFFLOAD_MAX_ENTRIES: tar entries per tarball. */
    entries: number;
    /** CMP_OFFLOAD_MAX_OUTPUT_BYTES: stdout kept from one plugin command. */
    outputBytes: number;
  };
  /** CMP_OFFLOAD_SHUTDOWN_GRACE: how long in-flight requests may finish after SIGTERM. */
  shutdownGraceMs: number;
  /**
   * CMP_OFFLOAD_HTTP_ADDR: `[host]:port` of /healthz, /readyz and /metrics, or `off`. Defaults
   * by role: `:9101` for the proxy, `:9102` for the worker; undefined (no HTTP) for the CLIs.
   */
  http: HttpAddress | undefined;
  /**
   * CMP_OFFLOAD_DASHBOARD_TOKEN or CMP_OFFLOAD_DASHBOARD_TOKEN_FILE: turns on the bull-board queue
   * dashboard on the worker's HTTP port, behind this bearer token. Off when unset.
   */
  dashboardToken: string | undefined;
  /** Distributed mode (docs/architecture.md#distributed): set when CMP_OFFLOAD_REDIS_URL is, else standalone. */
  redis: RedisOptions | undefined;
  /**
   * CMP_OFFLOAD_RUNNER_SOCKET: where a worker's plugin commands run. An absolute path: the unix
   * socket of the runner (runner/), which the runner listens on and the worker connects
   * to; or `in-process` (`IN_PROCESS`): inside the worker, for single-tenant installs only.
   * Undefined when unset: the worker and the runner refuse to start without it.
   */
  runnerSocket: string | undefined;
  /**
   * Every path of CMP_OFFLOAD_RUNNER_SOCKET (comma-separated: one runner container each; the
   * worker gives each job a free one). Empty when unset or `in-process`; `runnerSocket` is the first.
   */
  runnerSockets: readonly string[];
  /** The runner's own settings (runner/isolation.ts). */
  runner: RunnerOptions;
  /**
   * OpenTelemetry tracing: on when an OTLP endpoint is set (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
   * OTEL_EXPORTER_OTLP_ENDPOINT or Argo CD's ARGOCD_CMP_SERVER_OTLP_ADDRESS) and
   * OTEL_SDK_DISABLED is not `true`; undefined (off) otherwise.
   */
  otlp: OtlpOptions | undefined;
  /** `cmp-offload keeper`'s own settings (CMP_OFFLOAD_KEEPER_*); compiled for every role, used by the keeper only. */
  keeper: KeeperOptions;
}

/** The keeper: keeps Applications' manifest-generate-paths equal to the derived value (docs/traced-cache.md#the-keeper). */
export interface KeeperOptions {
  /** CMP_OFFLOAD_KEEPER_ARGOCD_NAMESPACE: where Applications named without `<namespace>_` live. */
  argocdNamespace: string;
  /** CMP_OFFLOAD_KEEPER_GRACE: how long paths a new value drops stay in the annotation (union with the old value). */
  graceMs: number;
  /** CMP_OFFLOAD_KEEPER_RESYNC: period of the full comparison with the records in Redis (repairs missed notices). */
  resyncMs: number;
  /** CMP_OFFLOAD_KEEPER_DRY_RUN (or `keeper --dry-run`): log what would be patched, patch nothing. */
  dryRun: boolean;
  /** CMP_OFFLOAD_KEEPER_API_QPS: Kubernetes API requests (GET and PATCH) per second at most. */
  apiQps: number;
  /**
   * CMP_OFFLOAD_KEEPER_API_URL: the Kubernetes API; default in-cluster,
   * https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT. Undefined when neither is set.
   */
  apiUrl: string | undefined;
  /** CMP_OFFLOAD_KEEPER_API_TOKEN_FILE: bearer token file (read again for every request: projected tokens rotate). */
  apiTokenFile: string;
  /** CMP_OFFLOAD_KEEPER_API_CA_FILE: CA bundle of the API's TLS certificate. */
  apiCaFile: string;
}

/** Where Kubernetes mounts a pod's service account credentials. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/** OTEL_EXPORTER_OTLP_TRACES_PROTOCOL / OTEL_EXPORTER_OTLP_PROTOCOL. */
export const OTLP_PROTOCOLS = ['grpc', 'http/protobuf', 'http/json'] as const;
export type OtlpProtocol = (typeof OTLP_PROTOCOLS)[number];

/** OTEL_TRACES_SAMPLER. */
export const SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] as const;
export type SamplerName = (typeof SAMPLERS)[number];

/**
 * Tracing (cmp/observe/otel-sdk.ts). The OpenTelemetry exporter reads the standard
 * OTEL_EXPORTER_OTLP_* variables itself (endpoint, headers, certificates, insecure, timeout,
 * compression); what is here decides whether tracing is on, the protocol and the sampler, and
 * fills in Argo CD's settings where the standard one is unset.
 */
export interface OtlpOptions {
  protocol: OtlpProtocol;
  /** Where spans go, for the start log line: the standard endpoint variable's value, else Argo's address. */
  endpoint: string;
  /** ARGOCD_CMP_SERVER_OTLP_ADDRESS as the exporter's URL, when no standard endpoint variable is set. */
  url: string | undefined;
  /** ARGOCD_CMP_SERVER_OTLP_HEADERS, when neither standard headers variable is set (`key=value`, as gRPC metadata or HTTP headers). */
  headers: Record<string, string> | undefined;
  /** ARGOCD_CMP_SERVER_OTLP_ATTRS: `key:value,…`, added to the resource (OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME win). */
  attrs: Record<string, string>;
  /** OTEL_TRACES_SAMPLER (default parentbased_always_on) and OTEL_TRACES_SAMPLER_ARG (the ratio, default 1). */
  sampler: SamplerName;
  ratio: number;
  /** OTEL_BSP_*: the batch span processor's delay, export timeout, queue and batch bounds. */
  batch: { scheduledDelayMillis: number; exportTimeoutMillis: number; maxQueueSize: number; maxExportBatchSize: number };
}

/** CMP_OFFLOAD_RUNNER_SOCKET's value for plugin commands run inside the worker process. */
export const IN_PROCESS = 'in-process';

/** The settings of distributed mode, shared by proxy, worker and the `cache` CLI. */
export interface RedisOptions {
  /** CMP_OFFLOAD_REDIS_URL as given (it may hold a password: never log it, use `redacted`). */
  url: string;
  /** CMP_OFFLOAD_REDIS_URL without credentials, for logs and error texts. */
  redacted: string;
  /** What CMP_OFFLOAD_REDIS_URL points at: one Redis, a Sentinel group or a Cluster. */
  target: RedisTarget;
  /** CMP_OFFLOAD_QUEUE_PREFIX: prefixes every key and channel we write; a `{hash tag}` keeps them in one Cluster slot. */
  prefix: string;
  /**
   * CMP_OFFLOAD_SIGNING_KEY or CMP_OFFLOAD_SIGNING_KEY_FILE: HMAC key for jobs and cache entries.
   * Undefined here; the proxy and the worker refuse to start without it.
   */
  signingKey: Buffer | undefined;
  /** CMP_OFFLOAD_BLOB_TTL: how long an uploaded tarball stays in Redis (refreshed on reuse). */
  blobTtlMs: number;
  /** CMP_OFFLOAD_RESULT_TTL: lifetime of uncached results and of finished job records. */
  resultTtlMs: number;
  /** CMP_OFFLOAD_MAX_QUEUE_DEPTH: waiting jobs per plugin queue beyond which requests are refused. */
  maxQueueDepth: number;
  /** CMP_OFFLOAD_MAX_INFLIGHT: requests one proxy may have queued or running at once. */
  maxInflight: number;
  /** CMP_OFFLOAD_REDIS_TIMEOUT: bound of every Redis command of ours, from when it is issued (a reconnect within it is waited out). */
  timeoutMs: number;
  /** CMP_OFFLOAD_LOCK_DURATION: BullMQ job lock; a dead worker's job is free again after it. */
  lockDurationMs: number;
  /** CMP_OFFLOAD_STALLED_INTERVAL: how often workers look for jobs of dead workers. */
  stalledIntervalMs: number;
  /**
   * CMP_OFFLOAD_JOB_ATTEMPTS: runs of a job that may end in infrastructure failures (worker or
   * runner lost mid-run, lock lost, Redis errors, shutdown) before it is given up (`jobGaveUp`);
   * plugin failures never retry. The proxy sets it as each job's attempts; workers count runs
   * lost with their worker against it too (the smaller of the two applies).
   */
  jobAttempts: number;
  /**
   * CMP_OFFLOAD_RESUBMITS: how many times the proxy submits one request anew when its job, blob
   * or result vanished from Redis, or its job was removed, cancelled or refused under it.
   */
  resubmits: number;
}

/** Where an HTTP server listens; an empty host in the setting means all IPv4 interfaces. */
export interface HttpAddress {
  host: string;
  port: number;
}

/** The process kinds whose HTTP port has a default (CMP_OFFLOAD_HTTP_ADDR). */
export const DEFAULT_HTTP_ADDR = { proxy: ':9101', worker: ':9102', runner: 'off', keeper: ':9103' } as const;

export const DEFAULT_CONFIG_DIR = '/home/argocd/cmp-server/config';
export const DEFAULT_SOCKET_DIR = '/home/argocd/cmp-server/plugins';

export interface RunnerOptions {
  /**
   * CMP_OFFLOAD_RUNNER_ISOLATION: `isolated` (default): one request at a time, the runner alone
   * in its PID namespace (it refuses to start otherwise), and after every run a sweep that kills
   * every other process of the namespace and empties the reset dirs. `shared`: requests run at
   * once and nothing is swept (development only: runs can see and outlive each other).
   */
  isolation: 'isolated' | 'shared';
  /**
   * CMP_OFFLOAD_RUNNER_RESET_DIRS: absolute dirs whose contents the sweep removes after every run
   * (mount points inside them are kept), e.g. the runner's $HOME and /tmp emptyDirs. Only these
   * and the work root: a dir the operator did not name is never wiped.
   */
  resetDirs: readonly string[];
}

/**
 * Compile the options from the environment (and the proxy/worker `--config-dir-path` flag);
 * `role` picks the default HTTP address.
 */
export function compileOptions(env: Env, flags: { configDirPath?: string; role?: keyof typeof DEFAULT_HTTP_ADDR } = {}): Options {
  const maxMessageBytes = argoMaxMessageBytes(env.ARGOCD_GRPC_MAX_SIZE_MB);
  // traced by default (docs/traced-cache.md#the-default-and-what-recording-costs); a process where the
  // recorder cannot work runs as `on` (cmp/trace/tracer-probe.ts).
  const cacheSetting = oneOf(env, 'CMP_OFFLOAD_CACHE', ['on', 'traced', 'off'], 'traced');
  const redis = redisOptions(env);
  // Checked in both modes (one configuration may serve both), used only where no plugin runs.
  const spoolKeepBytes = bytes(env, 'CMP_OFFLOAD_SPOOL_KEEP_BYTES', 256 * MiB, true);
  const sockets = runnerSockets(env.CMP_OFFLOAD_RUNNER_SOCKET);
  const processesDefault = defaultProxyProcesses();
  const options: Options = {
    configDirPath: flags.configDirPath ?? DEFAULT_CONFIG_DIR,
    socketDir: env.ARGOCD_PLUGINSOCKFILEPATH || DEFAULT_SOCKET_DIR,
    workRoot: path.join(env.ARGOCD_CMP_WORKDIR || os.tmpdir(), '_cmp_server'),
    maxMessageBytes,
    askpassSocket: env.ARGOCD_ASK_PASS_SOCK || DEFAULT_ASKPASS_SOCKET,
    execTimeoutMs: argoDuration(env.ARGOCD_EXEC_TIMEOUT, 90_000),
    execFatalTimeoutMs: argoDuration(env.ARGOCD_EXEC_FATAL_TIMEOUT, 10_000),
    concurrency: integer(env, 'CMP_OFFLOAD_CONCURRENCY', sockets.length > 0 ? sockets.length : Math.max(1, os.availableParallelism()), 1),
    proxyProcesses: integer(env, 'CMP_OFFLOAD_PROXY_PROCESSES', processesDefault.processes, 1),
    proxyProcessesFrom: env.CMP_OFFLOAD_PROXY_PROCESSES ? 'CMP_OFFLOAD_PROXY_PROCESSES' : processesDefault.reason,
    cache: {
      enabled: cacheSetting !== 'off',
      traced: cacheSetting === 'traced',
      revision: oneOf(env, 'CMP_OFFLOAD_CACHE_REVISION', ['auto', 'always'], 'auto'),
      trace: {
        tracer: env.CMP_OFFLOAD_TRACER ?? '',
        cpus: oneOf(env, 'CMP_OFFLOAD_TRACE_CPUS', ['one', 'all'], 'one'),
        maxPaths: integer(env, 'CMP_OFFLOAD_TRACE_MAX_PATHS', 100_000, 1),
        maxTraceBytes: bytes(env, 'CMP_OFFLOAD_TRACE_MAX_BYTES', 512 * MiB),
      },
      ttlMs: duration(env, 'CMP_OFFLOAD_CACHE_TTL', 24 * 3600_000),
      salt: env.CMP_OFFLOAD_CACHE_SALT ?? '',
      ignoreEnv: new Set(list(env.CMP_OFFLOAD_CACHE_IGNORE_ENV)),
      bypassEnv: `ARGOCD_ENV_${envName(env, 'CMP_OFFLOAD_CACHE_BYPASS_ENV', 'CMP_OFFLOAD_CACHE')}`,
      maxBytes: bytes(env, 'CMP_OFFLOAD_CACHE_MAX_BYTES', 256 * MiB),
    },
    indexMemoBytes: bytes(env, 'CMP_OFFLOAD_INDEX_MEMO_BYTES', 64 * MiB),
    spoolKeepBytes: redis ? spoolKeepBytes : 0,
    limits: {
      tarballBytes: bytes(env, 'CMP_OFFLOAD_MAX_TARBALL_BYTES', 2 * GiB),
      extractedBytes: bytes(env, 'CMP_OFFLOAD_MAX_EXTRACTED_BYTES', 8 * GiB),
      entries: integer(env, 'CMP_OFFLOAD_MAX_ENTRIES', 500_000, 1),
      outputBytes: bytes(env, 'CMP_OFFLOAD_MAX_OUTPUT_BYTES', maxMessageBytes),
    },
    shutdownGraceMs: duration(env, 'CMP_OFFLOAD_SHUTDOWN_GRACE', 30_000),
    http: httpAddress(env.CMP_OFFLOAD_HTTP_ADDR || (flags.role ? DEFAULT_HTTP_ADDR[flags.role] : 'off')),
    dashboardToken: secretSetting(env, 'CMP_OFFLOAD_DASHBOARD_TOKEN', 'the dashboard token'),
    redis,
    runnerSocket: sockets[0] ?? (env.CMP_OFFLOAD_RUNNER_SOCKET === IN_PROCESS ? IN_PROCESS : undefined),
    runnerSockets: sockets,
    runner: {
      isolation: oneOf(env, 'CMP_OFFLOAD_RUNNER_ISOLATION', ['isolated', 'shared'], 'isolated'),
      resetDirs: resetDirs(env.CMP_OFFLOAD_RUNNER_RESET_DIRS),
    },
    otlp: otlpOptions(env),
    keeper: keeperOptions(env),
  };
  return deepFreeze(options);
}

function keeperOptions(env: Env): KeeperOptions {
  const namespace = env.CMP_OFFLOAD_KEEPER_ARGOCD_NAMESPACE || 'argocd';
  // A DNS-1123 label, as every namespace name.
  if (!/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(namespace)) fail('CMP_OFFLOAD_KEEPER_ARGOCD_NAMESPACE', namespace, 'a namespace name');
  const host = env.KUBERNETES_SERVICE_HOST;
  const inCluster = host ? `https://${host.includes(':') ? `[${host}]` : host}:${env.KUBERNETES_SERVICE_PORT || '443'}` : undefined;
  const apiUrl = env.CMP_OFFLOAD_KEEPER_API_URL || inCluster;
  if (apiUrl !== undefined && !/^https?:\/\/[^/\s]+\/?$/.test(apiUrl)) fail('CMP_OFFLOAD_KEEPER_API_URL', apiUrl, 'http(s)://host[:port] of the Kubernetes API');
  const qps = env.CMP_OFFLOAD_KEEPER_API_QPS;
  if (qps !== undefined && qps !== '' && !(/^\d+(\.\d+)?$/.test(qps) && Number(qps) > 0)) fail('CMP_OFFLOAD_KEEPER_API_QPS', qps, 'a positive number of requests per second');
  return {
    argocdNamespace: namespace,
    graceMs: duration(env, 'CMP_OFFLOAD_KEEPER_GRACE', 15 * 60_000),
    resyncMs: positiveDuration(env, 'CMP_OFFLOAD_KEEPER_RESYNC', 5 * 60_000),
    dryRun: oneOf(env, 'CMP_OFFLOAD_KEEPER_DRY_RUN', ['true', 'false'], 'false') === 'true',
    apiQps: qps ? Number(qps) : 5,
    apiUrl: apiUrl?.replace(/\/$/, ''),
    apiTokenFile: env.CMP_OFFLOAD_KEEPER_API_TOKEN_FILE || `${SERVICE_ACCOUNT_DIR}/token`,
    apiCaFile: env.CMP_OFFLOAD_KEEPER_API_CA_FILE || `${SERVICE_ACCOUNT_DIR}/ca.crt`,
  };
}

/**
 * The plugin.yaml annotation (`metadata.annotations`; Argo CD ignores unknown annotations) by
 * which one plugin opts out of CMP_OFFLOAD_CACHE's mode: `on` keeps it on the content cache
 * (no read recording), `off` turns its cache off, `traced` changes nothing. It only lowers
 * the mode (off < on < traced), never raises it.
 */
export const CACHE_ANNOTATION = 'cmp-offload.io/cache';

const CACHE_LEVELS = ['off', 'on', 'traced'] as const;

/**
 * The options for one plugin: CMP_OFFLOAD_CACHE lowered by the plugin's {@link CACHE_ANNOTATION}.
 * The proxy, its workers and their runners read the same plugin.yaml (a different one is
 * refused as version skew), so they agree on it without a setting on each: the worker asks its
 * runner to record reads only when the proxy keys by them. A bad value stops the process.
 */
export function forPlugin(options: Options, annotations: Readonly<Record<string, string>>): Options {
  const raw = annotations[CACHE_ANNOTATION];
  if (raw === undefined) return options;
  const cap = CACHE_LEVELS.indexOf(raw as (typeof CACHE_LEVELS)[number]);
  if (cap < 0) throw new OptionsError(`invalid value ${JSON.stringify(raw)} for the plugin.yaml annotation ${CACHE_ANNOTATION}: expected one of ${CACHE_LEVELS.join(', ')}`);
  const current = CACHE_LEVELS.indexOf(cacheMode(options));
  if (cap >= current) return options;
  return deepFreeze({ ...options, cache: { ...options.cache, enabled: cap > 0, traced: cap === 2 } });
}

/** The cache mode options stand for, as CMP_OFFLOAD_CACHE spells it. */
export function cacheMode(options: Options): (typeof CACHE_LEVELS)[number] {
  return !options.cache.enabled ? 'off' : options.cache.traced ? 'traced' : 'on';
}

function redisOptions(env: Env): RedisOptions | undefined {
  const url = env.CMP_OFFLOAD_REDIS_URL;
  if (url === undefined || url === '') return undefined;
  const target = redisTarget(url);
  if (target.kind !== 'sentinel') {
    for (const name of SENTINEL_SETTINGS) {
      if (env[name]) throw new OptionsError(`${name} is set but CMP_OFFLOAD_REDIS_URL is not a redis+sentinel:// or rediss+sentinel:// URL`);
    }
  } else {
    target.sentinelUsername = env.CMP_OFFLOAD_REDIS_SENTINEL_USERNAME || undefined;
    target.sentinelPassword = sentinelPassword(env);
  }
  const prefix = env.CMP_OFFLOAD_QUEUE_PREFIX || '{cmp-offload}';
  if (!/^[\x21-\x7e]+$/.test(prefix) || prefix.includes(':')) {
    fail('CMP_OFFLOAD_QUEUE_PREFIX', prefix, 'printable ASCII without spaces or ":", such as {cmp-offload}');
  }
  // On a Cluster every multi-key command and script of ours and of BullMQ needs all its keys in
  // one slot: only a hash tag in the prefix guarantees it (otherwise CROSSSLOT at the first job).
  if (target.kind === 'cluster' && hashTag(prefix) === undefined) {
    fail('CMP_OFFLOAD_QUEUE_PREFIX', prefix, 'a prefix with a Redis Cluster hash tag such as {cmp-offload} (a non-empty {…}) when CMP_OFFLOAD_REDIS_URL is a cluster URL');
  }
  const lockDurationMs = duration(env, 'CMP_OFFLOAD_LOCK_DURATION', 10_000);
  const stalledIntervalMs = duration(env, 'CMP_OFFLOAD_STALLED_INTERVAL', 5_000);
  if (lockDurationMs < 1_000) fail('CMP_OFFLOAD_LOCK_DURATION', String(env.CMP_OFFLOAD_LOCK_DURATION), 'a duration of at least 1s');
  if (stalledIntervalMs < 500) fail('CMP_OFFLOAD_STALLED_INTERVAL', String(env.CMP_OFFLOAD_STALLED_INTERVAL), 'a duration of at least 500ms');
  return {
    url,
    redacted: redactRedisUrl(url),
    target,
    prefix,
    signingKey: signingKey(env),
    blobTtlMs: positiveDuration(env, 'CMP_OFFLOAD_BLOB_TTL', 15 * 60_000),
    resultTtlMs: positiveDuration(env, 'CMP_OFFLOAD_RESULT_TTL', 10 * 60_000),
    maxQueueDepth: integer(env, 'CMP_OFFLOAD_MAX_QUEUE_DEPTH', 1_000, 1),
    maxInflight: integer(env, 'CMP_OFFLOAD_MAX_INFLIGHT', 512, 1),
    timeoutMs: positiveDuration(env, 'CMP_OFFLOAD_REDIS_TIMEOUT', 2_000),
    lockDurationMs,
    stalledIntervalMs,
    jobAttempts: integer(env, 'CMP_OFFLOAD_JOB_ATTEMPTS', 3, 1),
    resubmits: integer(env, 'CMP_OFFLOAD_RESUBMITS', 3, 0),
  };
}

/** The Sentinel-only settings (refused with any other URL form: they would be silently ignored). */
const SENTINEL_SETTINGS = ['CMP_OFFLOAD_REDIS_SENTINEL_USERNAME', 'CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD', 'CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE'] as const;

/** CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD or the file CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE names (one of them); never echoed. */
function sentinelPassword(env: Env): string | undefined {
  const inline = env.CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD;
  const file = env.CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE;
  if (inline && file) throw new OptionsError('set only one of CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD and CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE');
  if (inline) return inline;
  if (!file) return undefined;
  try {
    return fs.readFileSync(file, 'utf8').replace(/\r?\n$/, '');
  } catch (err) {
    throw new OptionsError(`cannot read CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE ${JSON.stringify(file)}: ${(err as Error).message}`);
  }
}

/** Longest unix socket path Linux accepts (sun_path is 108 bytes with its NUL). */
const MAX_SOCKET_PATH_BYTES = 107;

/** The runner socket paths (none for unset or `in-process`), each once. */
function runnerSockets(raw: string | undefined): string[] {
  if (raw === undefined || raw === '' || raw === IN_PROCESS) return [];
  const paths = raw.split(',').map(s => s.trim());
  const expected = `an absolute socket path of at most ${MAX_SOCKET_PATH_BYTES} bytes (or several, comma-separated: one per runner container), or ${IN_PROCESS}`;
  for (const p of paths) {
    if (!path.isAbsolute(p) || Buffer.byteLength(p) > MAX_SOCKET_PATH_BYTES || p.includes('\0')) fail('CMP_OFFLOAD_RUNNER_SOCKET', raw, expected);
  }
  const normalized = paths.map(p => path.normalize(p));
  if (new Set(normalized).size !== normalized.length) fail('CMP_OFFLOAD_RUNNER_SOCKET', raw, `${expected}, each path once`);
  return normalized;
}

/** CMP_OFFLOAD_RUNNER_RESET_DIRS: comma-separated absolute dirs, never `/` (see RunnerOptions). */
function resetDirs(raw: string | undefined): string[] {
  const dirs = list(raw);
  for (const d of dirs) {
    if (!path.isAbsolute(d) || path.normalize(d) === '/' || d.includes('\0')) {
      fail('CMP_OFFLOAD_RUNNER_RESET_DIRS', raw!, 'comma-separated absolute directories other than /, such as /tmp,/home/argocd');
    }
  }
  return [...new Set(dirs.map(d => path.normalize(d).replace(/\/$/, '')))];
}

/** `off`, `:9101`, `127.0.0.1:9101` or `[::1]:9101` (port 0 = any free port). */
function httpAddress(raw: string): HttpAddress | undefined {
  if (raw === 'off') return undefined;
  const m = /^(\[[0-9A-Fa-f:.]+\]|[^\s:[\]]*):(\d{1,5})$/.exec(raw);
  if (!m || Number(m[2]) > 65535) fail('CMP_OFFLOAD_HTTP_ADDR', raw, '[host]:port such as :9101 or 127.0.0.1:9101, or off');
  const host = m[1]!.replace(/^\[|\]$/g, '');
  return { host: host === '' ? '0.0.0.0' : host, port: Number(m[2]) };
}

const MIN_DASHBOARD_TOKEN_BYTES = 16;

/** A secret given inline (`NAME`) or as a file (`NAME_FILE`, one trailing newline dropped); never echoed. */
function secretSetting(env: Env, name: SettingName, what: string): string | undefined {
  const inline = env[name];
  const file = env[`${name}_FILE`];
  if (inline && file) throw new OptionsError(`set only one of ${name} and ${name}_FILE`);
  let value: string;
  if (inline) value = inline;
  else if (file) {
    try {
      value = fs.readFileSync(file, 'utf8').replace(/\r?\n$/, '');
    } catch (err) {
      throw new OptionsError(`cannot read ${name}_FILE ${JSON.stringify(file)}: ${(err as Error).message}`);
    }
  } else return undefined;
  if (Buffer.byteLength(value) < MIN_DASHBOARD_TOKEN_BYTES) {
    throw new OptionsError(`${inline ? name : `${name}_FILE`}: ${what} must be at least ${MIN_DASHBOARD_TOKEN_BYTES} bytes`);
  }
  return value;
}

const MIN_SIGNING_KEY_BYTES = 16;

/** The HMAC key from CMP_OFFLOAD_SIGNING_KEY or the file CMP_OFFLOAD_SIGNING_KEY_FILE names (one of them). */
function signingKey(env: Env): Buffer | undefined {
  const inline = env.CMP_OFFLOAD_SIGNING_KEY;
  const file = env.CMP_OFFLOAD_SIGNING_KEY_FILE;
  if (inline && file) throw new OptionsError('set only one of CMP_OFFLOAD_SIGNING_KEY and CMP_OFFLOAD_SIGNING_KEY_FILE');
  let key: Buffer;
  let name: string;
  if (inline) {
    key = Buffer.from(inline, 'utf8');
    name = 'CMP_OFFLOAD_SIGNING_KEY';
  } else if (file) {
    name = 'CMP_OFFLOAD_SIGNING_KEY_FILE';
    try {
      // Read as bytes: a binary key stays exact. Secrets mounted from files usually end with a
      // newline that is not part of the key.
      key = fs.readFileSync(file);
      if (key.at(-1) === 0x0a) key = key.subarray(0, key.at(-2) === 0x0d ? -2 : -1);
    } catch (err) {
      throw new OptionsError(`cannot read ${name} ${JSON.stringify(file)}: ${(err as Error).message}`);
    }
  } else return undefined;
  // Never echo the key itself.
  if (key.length < MIN_SIGNING_KEY_BYTES) throw new OptionsError(`${name}: the signing key must be at least ${MIN_SIGNING_KEY_BYTES} bytes`);
  return key;
}

/** Argo: integer MiB in 0..2^31-1, anything else means the default of 100. */
function argoMaxMessageBytes(raw: string | undefined): number {
  const n = raw !== undefined && /^[+-]?\d+$/.test(raw.trim()) ? Number(raw) : NaN;
  const mb = Number.isInteger(n) && n >= 0 && n <= 2 ** 31 - 1 ? n : 100;
  // grpc-js takes a signed 32-bit length: clamp what Argo would accept beyond it.
  return Math.min(mb * MiB, 2 ** 31 - 1);
}

/**
 * Tracing's settings: the standard OpenTelemetry variables, with Argo CD's OTLP settings
 * (argocd-cmp-server's flags `--otlp-address`, `--otlp-insecure`, `--otlp-headers`,
 * `--otlp-attrs` read these variables) as aliases: a standard variable that is set wins. Argo's
 * keep Argo's leniency (an invalid boolean or header list means the default); the standard
 * protocol and sampler are checked.
 */
function otlpOptions(env: Env): OtlpOptions | undefined {
  const set = (v: string | undefined): string | undefined => (v === undefined || v.trim() === '' ? undefined : v.trim());
  if (set(env.OTEL_SDK_DISABLED)?.toLowerCase() === 'true') return undefined;
  if (oneOf(env, 'OTEL_TRACES_EXPORTER', ['otlp', 'none'], 'otlp') === 'none') return undefined;
  const standard = set(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) ?? set(env.OTEL_EXPORTER_OTLP_ENDPOINT);
  const address = set(env.ARGOCD_CMP_SERVER_OTLP_ADDRESS);
  if (standard === undefined && address === undefined) return undefined;
  // Argo's address is OTLP/gRPC; the standard endpoints default to the standard protocol.
  const protocolName = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL' : 'OTEL_EXPORTER_OTLP_PROTOCOL';
  const protocol = oneOf(env, protocolName, OTLP_PROTOCOLS, standard === undefined ? 'grpc' : 'http/protobuf');
  let url: string | undefined;
  if (standard === undefined) {
    // A scheme picks plaintext or TLS; without one the exporter follows OTEL_EXPORTER_OTLP_INSECURE.
    const standardInsecure = set(env.OTEL_EXPORTER_OTLP_TRACES_INSECURE) ?? set(env.OTEL_EXPORTER_OTLP_INSECURE);
    const scheme = goBool(env.ARGOCD_CMP_SERVER_OTLP_INSECURE, true) ? 'http://' : 'https://';
    if (protocol !== 'grpc') url = `${scheme}${address}/v1/traces`;
    else url = standardInsecure !== undefined ? address : `${scheme}${address}`;
  }
  const standardHeaders = set(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS) ?? set(env.OTEL_EXPORTER_OTLP_HEADERS);
  const attrs: Record<string, string> = {};
  for (const a of list(env.ARGOCD_CMP_SERVER_OTLP_ATTRS)) {
    const colon = a.indexOf(':');
    if (colon > 0) attrs[a.slice(0, colon)] = a.slice(colon + 1);
  }
  const sampler = oneOf(env, 'OTEL_TRACES_SAMPLER', SAMPLERS, 'parentbased_always_on');
  const rawRatio = set(env.OTEL_TRACES_SAMPLER_ARG);
  let ratio = 1;
  if (rawRatio !== undefined && sampler.endsWith('traceidratio')) {
    ratio = Number(rawRatio);
    if (!/^[0-9.eE+-]+$/.test(rawRatio) || !(ratio >= 0 && ratio <= 1)) fail('OTEL_TRACES_SAMPLER_ARG', rawRatio, 'a ratio from 0 to 1');
  }
  const batch = {
    scheduledDelayMillis: integer(env, 'OTEL_BSP_SCHEDULE_DELAY', 1000, 0),
    exportTimeoutMillis: integer(env, 'OTEL_BSP_EXPORT_TIMEOUT', 30_000, 1),
    maxQueueSize: integer(env, 'OTEL_BSP_MAX_QUEUE_SIZE', 2048, 1),
    maxExportBatchSize: integer(env, 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 512, 1),
  };
  if (batch.maxExportBatchSize > batch.maxQueueSize) {
    fail('OTEL_BSP_MAX_EXPORT_BATCH_SIZE', String(batch.maxExportBatchSize), `at most OTEL_BSP_MAX_QUEUE_SIZE (${batch.maxQueueSize})`);
  }
  return {
    protocol,
    endpoint: standard ?? address!,
    url,
    headers: standardHeaders === undefined ? stringToString(env.ARGOCD_CMP_SERVER_OTLP_HEADERS) : undefined,
    attrs,
    sampler,
    ratio,
    batch,
  };
}

function deepFreeze<T>(o: T): T {
  for (const v of Object.values(o as object)) {
    if (v && typeof v === 'object' && !(v instanceof Set) && !Buffer.isBuffer(v)) deepFreeze(v);
  }
  return Object.freeze(o);
}
