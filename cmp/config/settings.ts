/**
 * The one table of settings: every environment variable and flag the processes read, with its
 * default and meaning as operators read them. `npm run docs:config` (cmp/config/settings-doc.ts)
 * writes docs/configuration.md and the main settings of README.md from it, and a unit test fails
 * when either differs. The parser in options.ts takes its names as {@link SettingName}, so a
 * setting it reads through its helpers cannot be left out of the table
 * (test/unit/infra/settings-docs.test.ts checks the other reads). The defaults here are text for
 * the reader; the values are options.ts's.
 */

/** The sections of the configuration page, in order. */
export const SETTING_GROUPS = {
  argo: "Argo CD's settings",
  process: 'Processes, HTTP and shutdown',
  tracing: 'Tracing (OpenTelemetry)',
  cache: 'Output cache and traced cache',
  limits: 'Limits',
  redis: 'Distributed mode (Redis)',
  runner: 'Runner',
  keeper: 'Keeper',
} as const;

export interface Setting {
  readonly group: keyof typeof SETTING_GROUPS;
  /** The variable (and its `_FILE` form or flag), as the page's first column shows them. */
  readonly names: readonly string[];
  /** Markdown, links relative to docs/. */
  readonly default: string;
  /** Markdown, links relative to docs/. */
  readonly meaning: string;
  /** The short row of README.md's main settings, for the settings an operator sets first. */
  readonly summary?: { readonly default: string; readonly meaning: string };
}

export const SETTINGS = [
  {
    group: 'argo',
    names: ["--config-dir-path"],
    default: "`/home/argocd/cmp-server/config`",
    meaning: "directory holding `plugin.yaml`",
    summary: { default: "`/home/argocd/cmp-server/config`", meaning: "directory holding `plugin.yaml`" },
  },
  {
    group: 'argo',
    names: ["ARGOCD_PLUGINSOCKFILEPATH"],
    default: "`/home/argocd/cmp-server/plugins`",
    meaning: "directory of the plugin socket (must exist)",
    summary: { default: "`/home/argocd/cmp-server/plugins`", meaning: "directory of the plugin socket" },
  },
  {
    group: 'argo',
    names: ["ARGOCD_CMP_WORKDIR"],
    default: "`$TMPDIR` or `/tmp`",
    meaning: "work dirs live in `<this>/_cmp_server`",
  },
  {
    group: 'argo',
    names: ["ARGOCD_GRPC_MAX_SIZE_MB"],
    default: "`100`",
    meaning: "max gRPC message size, both directions; also where the splitter stops building manifests (YAML aliases included)",
  },
  {
    group: 'argo',
    names: ["ARGOCD_ASK_PASS_SOCK"],
    default: "`/tmp/reposerver-ask-pass.sock`",
    meaning: "`provideGitCreds`: the repo-server's askpass socket for requests that do not name one (repo-servers before 2.13 do not), as Argo's helper falls back to it; `components/git-creds` sets it on both containers (see [Git credentials](architecture.md#git-credentials-providegitcreds))",
  },
  {
    group: 'argo',
    names: ["ARGOCD_EXEC_TIMEOUT"],
    default: "`90s`",
    meaning: "per command: SIGTERM to its process group after this (Go duration; `0` disables)",
    summary: { default: "`90s`", meaning: "SIGTERM to a command's process group after this" },
  },
  {
    group: 'argo',
    names: ["ARGOCD_EXEC_FATAL_TIMEOUT"],
    default: "`10s`",
    meaning: "SIGKILL to the group this long after the SIGTERM",
    summary: { default: "`10s`", meaning: "SIGKILL to the group this long after the SIGTERM" },
  },
  {
    group: 'argo',
    names: ["ARGOCD_CMP_SERVER_LOGLEVEL", "--loglevel"],
    default: "`info`",
    meaning: "log level",
  },
  {
    group: 'argo',
    names: ["ARGOCD_CMP_SERVER_LOGFORMAT", "--logformat"],
    default: "`json`",
    meaning: "`json`: one JSON record per line shaped like Argo CD's logrus output (`level` as `debug`/`info`/`warning`/`error`, `time`, the record's fields, `msg`); `text`: logrus's `time=\"…\" level=info msg=\"…\" key=value` lines",
  },
  {
    group: 'argo',
    names: ["ARGOCD_LOG_FORMAT_TIMESTAMP"],
    default: "RFC3339 (`2006-01-02T15:04:05Z07:00`)",
    meaning: "Go time layout of `time` in both formats, local time, as Argo CD's components (`log.format.timestamp` in `argocd-cmd-params-cm`); e.g. `2006-01-02T15:04:05.000Z07:00` for milliseconds",
  },
  {
    group: 'process',
    names: ["CMP_OFFLOAD_CONCURRENCY"],
    default: "number of CPUs; a worker with runners: the number of runner sockets",
    meaning: "plugin runs at once per process (proxy in standalone mode, each worker); further requests wait. An isolated runner runs one request at a time: beyond the number of runner sockets, the extra jobs wait in the worker for a free runner (a warning says so). Standalone stores no answer of a run that overlapped another (see [Modes](architecture.md#modes)): `1` keeps every run cacheable",
    summary: { default: "the CPUs (worker: its runner sockets)", meaning: "plugin runs at once per process" },
  },
  {
    group: 'process',
    names: ["CMP_OFFLOAD_PROXY_PROCESSES"],
    default: "1 without a CPU limit; else the cgroup CPU quota (rounded up, within the affinity), at most 4 and at most memory limit ÷ 256Mi − 1",
    meaning: "proxy: processes serving the plugin socket. Above 1, a coordinator and this many ingest processes (see [sizing](operations.md#4-sizing-and-tuning), \"Proxy processes\"); `1`: one process doing everything",
    summary: { default: "1; with a CPU limit, that many (≤ 4)", meaning: "proxy processes serving the socket" },
  },
  {
    group: 'tracing',
    names: ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"],
    default: "unset (tracing off, unless `ARGOCD_CMP_SERVER_OTLP_ADDRESS` is set)",
    meaning: "the OTLP collector's endpoint; setting one (on the proxy **and** the workers, to get one trace from the repo-server to the plugin commands: [docs/operations.md, section 3.6](operations.md#36-tracing)) turns tracing on. As the OpenTelemetry SDK reads them: a URL; `…_TRACES_ENDPOINT` is used as it is, `OTEL_EXPORTER_OTLP_ENDPOINT` gets `/v1/traces` appended for the HTTP protocols; for `grpc`, `http://` means plaintext and `https://` TLS. When neither is set nor Argo's address, no tracing code is loaded",
  },
  {
    group: 'tracing',
    names: ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"],
    default: "`http/protobuf`; `grpc` when the endpoint is Argo's address",
    meaning: "`grpc`, `http/protobuf` or `http/json`; another value stops the process at start",
  },
  {
    group: 'tracing',
    names: ["OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"],
    default: "empty",
    meaning: "`key1=value1,key2=value2` (values URL-encoded): gRPC metadata or HTTP headers sent with every export, e.g. an `authorization` header; the two are merged, the `…_TRACES_` one winning on a key",
  },
  {
    group: 'tracing',
    names: ["OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"],
    default: "the system's CAs",
    meaning: "PEM file of the CAs that sign the collector's TLS certificate; `…_CLIENT_CERTIFICATE` and `…_CLIENT_KEY` (both) add a client certificate. `OTEL_EXPORTER_OTLP_TIMEOUT` (ms, default 10000) and `OTEL_EXPORTER_OTLP_COMPRESSION` (`gzip`, `none`) apply too, with their `…_TRACES_` forms: the SDK reads them",
  },
  {
    group: 'tracing',
    names: ["OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE"],
    default: "`false`",
    meaning: "`grpc` with an endpoint without a scheme: `true` for plaintext. With a scheme, the scheme decides",
  },
  {
    group: 'tracing',
    names: ["OTEL_TRACES_SAMPLER"],
    default: "`parentbased_always_on`",
    meaning: "which requests are traced: `always_on`, `always_off`, `traceidratio`, or `parentbased_always_on`, `parentbased_always_off`, `parentbased_traceidratio`, which follow the caller's `traceparent` (the repo-server's gRPC metadata) when there is one. A worker's job continues its request's decision (its `traceparent` travels in the job). Another value stops the process at start",
  },
  {
    group: 'tracing',
    names: ["OTEL_TRACES_SAMPLER_ARG"],
    default: "`1`",
    meaning: "the ratio of the `…traceidratio` samplers, from `0` (none) to `1` (all)",
  },
  {
    group: 'tracing',
    names: ["OTEL_SERVICE_NAME"],
    default: "`argocd-cmp-server` (proxy, as Argo CD's), `cmp-offload-worker` (worker)",
    meaning: "the `service.name` of the spans; `OTEL_RESOURCE_ATTRIBUTES` (`key=value,…`) adds resource attributes. The runner exports no spans: its stages are sent to its worker, which exports them under the job",
  },
  {
    group: 'tracing',
    names: ["OTEL_SDK_DISABLED"],
    default: "`false`",
    meaning: "`true` turns tracing off whatever else is set",
  },
  {
    group: 'tracing',
    names: ["OTEL_TRACES_EXPORTER"],
    default: "`otlp`",
    meaning: "`otlp`, or `none` to turn tracing off (as `OTEL_SDK_DISABLED=true`). Only OTLP is built in: another value (`console`, `zipkin`, a list) stops the process at start",
  },
  {
    group: 'tracing',
    names: ["OTEL_BSP_SCHEDULE_DELAY"],
    default: "`1000` (the SDK's is 5000: a request's spans are seconds apart anyway)",
    meaning: "ms between two exports of the batch span processor",
  },
  {
    group: 'tracing',
    names: ["OTEL_BSP_EXPORT_TIMEOUT"],
    default: "`30000`",
    meaning: "ms an export may take before it is abandoned",
  },
  {
    group: 'tracing',
    names: ["OTEL_BSP_MAX_QUEUE_SIZE"],
    default: "`2048`",
    meaning: "spans held for export at most; beyond, new spans are dropped (bounds the memory tracing takes when the collector is slow or gone)",
  },
  {
    group: 'tracing',
    names: ["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"],
    default: "`512`",
    meaning: "spans per export at most; must not exceed `OTEL_BSP_MAX_QUEUE_SIZE` (the process stops at start otherwise)",
  },
  {
    group: 'tracing',
    names: ["ARGOCD_CMP_SERVER_OTLP_ADDRESS", "--otlp-address"],
    default: "unset",
    meaning: "Argo CD's setting (`--otlp-address` of argocd-cmp-server): the collector's OTLP/gRPC `host:port`, used when no `OTEL_EXPORTER_OTLP_…ENDPOINT` is set (the standard variable wins when both are). The kustomize component `components/otlp` sets it on the proxy and the workers from one ConfigMap",
  },
  {
    group: 'tracing',
    names: ["ARGOCD_CMP_SERVER_OTLP_INSECURE", "--otlp-insecure"],
    default: "`true`",
    meaning: "with Argo's address: plaintext gRPC to the collector (Argo's default); `false` (`--otlp-insecure=false`) uses TLS (with `OTEL_EXPORTER_OTLP_CERTIFICATE`'s CAs if set, else the system's). `OTEL_EXPORTER_OTLP_INSECURE`, when set, wins. Go booleans; an invalid value means the default",
  },
  {
    group: 'tracing',
    names: ["ARGOCD_CMP_SERVER_OTLP_HEADERS", "--otlp-headers"],
    default: "empty",
    meaning: "`key1=value1,key2=value2`: sent with every export when neither `OTEL_EXPORTER_OTLP_…HEADERS` is set; an entry without `=` makes the whole list empty, as in Argo",
  },
  {
    group: 'tracing',
    names: ["ARGOCD_CMP_SERVER_OTLP_ATTRS", "--otlp-attrs"],
    default: "empty",
    meaning: "`key:value,…`: attributes added to the resource of every span (e.g. `k8s.cluster.name:prod`); entries without `:` are ignored. `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME` win on the same key",
  },
  {
    group: 'cache',
    names: ["CMP_OFFLOAD_CACHE"],
    default: "`traced`",
    meaning: "`traced`: the content cache plus the input-traced cache (see [Input-traced cache](traced-cache.md#input-traced-cache)), which also derives each app's [manifest-generate-paths](traced-cache.md#deriving-manifest-generate-paths); the default by the rule in [The default, and what recording costs](traced-cache.md#the-default-and-what-recording-costs), and where the read recorder cannot work the process runs as `on` and logs why ([Where the recorder works](traced-cache.md#where-the-recorder-works)). `on`: the content cache only. `off` disables the output cache and coalescing, for plugins whose output depends on outside state (Vault, unpinned charts). A plugin's `plugin.yaml` may lower it for that plugin with the annotation `cmp-offload.io/cache: on` or `off` (see [Opting a plugin out](traced-cache.md#opting-a-plugin-out))",
    summary: { default: "`traced`", meaning: "`traced`, `on` (content cache only) or `off`" },
  },
  {
    group: 'cache',
    names: ["CMP_OFFLOAD_CACHE_REVISION"],
    default: "`auto`",
    meaning: "traced cache: `auto` binds an entry to the commit only when its output contains `ARGOCD_APP_REVISION`, `_SHORT` or `_SHORT_8`; `always` binds every entry (no reuse across commits)",
  },
  {
    group: 'cache',
    names: ["CMP_OFFLOAD_TRACER"],
    default: "the built `cmp-trace`",
    meaning: "traced cache: the read recorder binary (`npm run build` compiles `cmp/trace/cmp-trace.c` with `cc`). Probed once at start where plugin commands run (standalone proxy, runner, in-process worker): when it is missing or cannot record here, one log line says why and that process runs as `on` (see [Where the recorder works](traced-cache.md#where-the-recorder-works))",
  },
  {
    group: 'cache',
    names: ["CMP_OFFLOAD_TRACE_CPUS"],
    default: "`one`",
    meaning: "traced cache: `one` runs each traced command and its tracer on one CPU, the one the kernel started the tracer on (each recorded syscall then costs a local context switch instead of cross-CPU wake-ups, several times cheaper on a VM; the command loses its own parallelism on a miss); `all` leaves it every CPU. `one` stays the default because `all` was not at or below it for every real tool in the latest quiet run (the node generator over 10 templates: +5 % against +3 %); a kustomize plugin over many bases does better with `all` (see [The default, and what recording costs](traced-cache.md#the-default-and-what-recording-costs))",
  },
  {
    group: 'cache',
    names: ["CMP_OFFLOAD_TRACE_MAX_PATHS"],
    default: "`100000`",
    meaning: "traced cache: distinct paths one run may touch before its record is given up (fallback)",
  },
  {
    group: 'cache',
    names: ["CMP_OFFLOAD_TRACE_MAX_BYTES"],
    default: "`512Mi`",
    meaning: "traced cache: trace output one command may write before its record is given up (fallback)",
  },
  {
    group: 'cache',
    names: ["CMP_OFFLOAD_CACHE_TTL"],
    default: "`24h`",
    meaning: "lifetime of a cached output",
    summary: { default: "`24h`", meaning: "lifetime of a cached output" },
  },
  {
    group: 'cache',
    names: ["CMP_OFFLOAD_CACHE_SALT"],
    default: "empty",
    meaning: "mixed into every cache key (e.g. the worker image tag, so that new tools invalidate)",
  },
  {
    group: 'cache',
    names: ["CMP_OFFLOAD_CACHE_IGNORE_ENV"],
    default: "empty",
    meaning: "comma-separated request env names left out of the cache key",
  },
  {
    group: 'cache',
    names: ["CMP_OFFLOAD_CACHE_BYPASS_ENV"],
    default: "`CMP_OFFLOAD_CACHE`",
    meaning: "name of the Application plugin env entry (`spec.source.plugin.env`, without Argo's `ARGOCD_ENV_` prefix) that, set to `off`, keeps that Application's requests out of the output cache: never served from it, never stored in it (see [Output cache](traced-cache.md#output-cache)). Read by the proxy",
  },
  {
    group: 'cache',
    names: ["CMP_OFFLOAD_CACHE_MAX_BYTES"],
    default: "`256Mi`",
    meaning: "size of the in-memory cache (standalone mode)",
  },
  {
    group: 'cache',
    names: ["CMP_OFFLOAD_INDEX_MEMO_BYTES"],
    default: "`64Mi`",
    meaning: "proxy: memory for the tree indexes of tarballs received lately, by their sha256. The repo-server sends the whole repository for every Application; a tarball whose bytes hash to a remembered one is only hashed (no gunzip, tar parsing or per-file hashing). Roughly 370 bytes plus 6 per path character per file",
  },
  {
    group: 'cache',
    names: ["CMP_OFFLOAD_SPOOL_KEEP_BYTES"],
    default: "`256Mi`",
    meaning: "distributed proxy: disk in the work dir for copies of verified tarballs that no request holds now, the most recently used kept: a tarball sent again (the next Application of a refresh) is then neither indexed nor written again, only hashed. `0`: a copy is removed with its last request. Per ingest process with `CMP_OFFLOAD_PROXY_PROCESSES` > 1. Standalone keeps none whatever it says (its plugins run as its uid and could read them; the value is still checked)",
  },
  {
    group: 'limits',
    names: ["CMP_OFFLOAD_MAX_TARBALL_BYTES"],
    default: "`2Gi`",
    meaning: "largest tarball accepted",
  },
  {
    group: 'limits',
    names: ["CMP_OFFLOAD_MAX_EXTRACTED_BYTES"],
    default: "`8Gi`",
    meaning: "largest extracted size",
  },
  {
    group: 'limits',
    names: ["CMP_OFFLOAD_MAX_ENTRIES"],
    default: "`500000`",
    meaning: "most tar entries",
  },
  {
    group: 'limits',
    names: ["CMP_OFFLOAD_MAX_OUTPUT_BYTES"],
    default: "the gRPC max message size",
    meaning: "most stdout kept from one plugin command",
  },
  {
    group: 'process',
    names: ["CMP_OFFLOAD_SHUTDOWN_GRACE"],
    default: "`30s`",
    meaning: "after SIGTERM, how long in-flight requests (proxy) or jobs (worker) may finish",
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_REDIS_URL"],
    default: "unset (standalone)",
    meaning: "distributed mode. One Redis: `redis://[user:password@]host:port[/db]`; Sentinel: `redis+sentinel://[user:password@]host:port,host:port,…/<master name>[/db]` (sentinel port defaults to 26379; the credentials are the data nodes'); Cluster: `redis+cluster://[user:password@]host:port,host:port,…` (seed nodes, database 0). `rediss…` for TLS (Sentinel: to the sentinels and the data nodes). Percent-encode reserved characters of the password. See [Redis Sentinel and Cluster](operations.md#16-redis-sentinel-and-cluster)",
    summary: { default: "unset (standalone)", meaning: "distributed mode: `redis://`, `rediss://`, `redis+sentinel://…`, `redis+cluster://…`" },
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_REDIS_SENTINEL_USERNAME"],
    default: "unset",
    meaning: "Sentinel only: user name for the sentinels themselves (ACL)",
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD", "CMP_OFFLOAD_REDIS_SENTINEL_PASSWORD_FILE"],
    default: "unset (sentinels without AUTH)",
    meaning: "Sentinel only: the sentinels' own password (`requirepass` of `sentinel.conf`; Argo CD's redis-ha with `sentinel.auth`); refused with other URL forms",
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_QUEUE_PREFIX"],
    default: "`{cmp-offload}`",
    meaning: "prefix of every Redis key and channel (no `:`); with a cluster URL it must hold a hash tag (a non-empty `{…}`), which keeps every key in one slot",
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_SIGNING_KEY", "CMP_OFFLOAD_SIGNING_KEY_FILE"],
    default: "unset",
    meaning: "HMAC key for jobs and cache entries (one of the two; ≥ 16 bytes); required in distributed mode",
    summary: { default: "unset", meaning: "HMAC key shared by proxy and workers (required in distributed mode)" },
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_BLOB_TTL"],
    default: "`15m`",
    meaning: "how long an uploaded tarball stays in Redis (refreshed on reuse)",
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_RESULT_TTL"],
    default: "`10m`",
    meaning: "lifetime of uncached results and of finished job records",
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_MAX_QUEUE_DEPTH"],
    default: "`1000`",
    meaning: "waiting jobs per plugin queue beyond which requests are refused",
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_MAX_INFLIGHT"],
    default: "`512`",
    meaning: "requests one proxy may have queued or running at once",
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_REDIS_TIMEOUT"],
    default: "`2s`",
    meaning: "bound of every Redis command of the proxy, the workers and the CLI, counted from when it is issued: a reconnect within it (restart, Sentinel failover, Cluster node back) is waited out, a longer outage fails the call with `UNAVAILABLE`; also the connect timeout",
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_LOCK_DURATION"],
    default: "`10s`",
    meaning: "BullMQ job lock (≥ 1s); a dead worker's job is free again after it",
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_STALLED_INTERVAL"],
    default: "`5s`",
    meaning: "how often workers look for jobs of dead workers (≥ 500ms)",
  },
  {
    group: 'runner',
    names: ["CMP_OFFLOAD_RUNNER_SOCKET"],
    default: "unset (the worker and the runner refuse to start)",
    meaning: "the runner's unix socket path: the runner listens there (mode 0600), the worker sends each job's plugin run there. The worker takes several, comma-separated (one per runner container): each job goes to a free runner. `in-process` (worker only) runs plugin commands inside the worker: only for single-tenant installs where every repository is trusted, since plugin code can then read the worker's Redis URL and signing key (a warning is logged at start)",
    summary: { default: "unset", meaning: "the runner's socket(s), for worker and runner" },
  },
  {
    group: 'runner',
    names: ["CMP_OFFLOAD_RUNNER_ISOLATION"],
    default: "`isolated`",
    meaning: "`isolated`: the runner runs one request at a time and, after each, kills every other process of its PID namespace and empties its work root and `CMP_OFFLOAD_RUNNER_RESET_DIRS`; it refuses to start unless it is alone in its PID namespace under an init ([Runner isolation](security.md#runner-isolation)). `shared`: requests run at once, nothing is swept, runs can see and outlive each other (development only; a warning at start)",
  },
  {
    group: 'runner',
    names: ["CMP_OFFLOAD_RUNNER_RESET_DIRS"],
    default: "empty",
    meaning: "the runner's dirs a run can write besides the work root (its `$HOME`, `/tmp`), comma-separated absolute paths: emptied after every run, mount points inside kept. Only what is listed is wiped; the runner refuses to start if one holds its own code, plugin.yaml or socket",
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_JOB_ATTEMPTS"],
    default: "`3`",
    meaning: "runs a job gets when its runs end in infrastructure failures — its worker or runner lost mid-run (killed, OOM, node loss), lock lost, Redis errors, shutdown — within its deadline; then it fails with `jobGaveUp` (a poison job stops here). A run that could not reach its runner does not count; plugin failures never retry. Proxy (each job's attempts) and worker (lost runs): set both alike, the smaller applies",
  },
  {
    group: 'redis',
    names: ["CMP_OFFLOAD_RESUBMITS"],
    default: "`3`",
    meaning: "proxy: how many times one request is submitted anew (blob uploaded again, job added again) when its job, blob or result vanished from Redis or its job was removed, cancelled or refused under it; `0` turns re-submission off",
  },
  {
    group: 'process',
    names: ["CMP_OFFLOAD_HTTP_ADDR"],
    default: "`:9101` (proxy), `:9102` (worker), `:9103` (keeper)",
    meaning: "`[host]:port` of `/healthz`, `/readyz` and `/metrics` (and the proxy's `/generate-paths` with the traced cache); `off` disables. A port already taken is logged and the process serves on without HTTP",
    summary: { default: "`:9101` proxy, `:9102` worker", meaning: "`/healthz`, `/readyz`, `/metrics`" },
  },
  {
    group: 'process',
    names: ["CMP_OFFLOAD_DASHBOARD_TOKEN", "CMP_OFFLOAD_DASHBOARD_TOKEN_FILE"],
    default: "unset (off)",
    meaning: "turns on the bull-board queue dashboard at `/queues` on the worker's HTTP port, and the proxy's `/generate-paths` (traced cache, see [Deriving manifest-generate-paths](traced-cache.md#deriving-manifest-generate-paths)), behind this token (≥ 16 bytes)",
  },
  {
    group: 'keeper',
    names: ["CMP_OFFLOAD_KEEPER_ARGOCD_NAMESPACE"],
    default: "`argocd`",
    meaning: "keeper: the namespace of Applications whose `ARGOCD_APP_NAME` has no `<namespace>_` (Argo CD's own; the component sets the pod's namespace)",
  },
  {
    group: 'keeper',
    names: ["CMP_OFFLOAD_KEEPER_GRACE"],
    default: "`15m`",
    meaning: "keeper: how long paths a new value drops stay in the annotation (the union of old and new) before it is narrowed; see [The keeper](traced-cache.md#the-keeper)",
  },
  {
    group: 'keeper',
    names: ["CMP_OFFLOAD_KEEPER_RESYNC"],
    default: "`5m`",
    meaning: "keeper: period of the comparison of every app's record with what the keeper last did (repairs missed notices); also done at start",
  },
  {
    group: 'keeper',
    names: ["CMP_OFFLOAD_KEEPER_DRY_RUN"],
    default: "`false`",
    meaning: "keeper: `true` (or `keeper --dry-run`) logs each patch it would make and patches nothing",
  },
  {
    group: 'keeper',
    names: ["CMP_OFFLOAD_KEEPER_API_QPS"],
    default: "`5`",
    meaning: "keeper: Kubernetes API requests (GET and PATCH) per second at most",
  },
  {
    group: 'keeper',
    names: ["CMP_OFFLOAD_KEEPER_API_URL"],
    default: "in-cluster: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`",
    meaning: "keeper: the Kubernetes API (`http(s)://host[:port]`; e.g. `kubectl proxy`'s for a test)",
  },
  {
    group: 'keeper',
    names: ["CMP_OFFLOAD_KEEPER_API_TOKEN_FILE"],
    default: "`/var/run/secrets/kubernetes.io/serviceaccount/token`",
    meaning: "keeper: bearer token file, read for every request (projected tokens rotate)",
  },
  {
    group: 'keeper',
    names: ["CMP_OFFLOAD_KEEPER_API_CA_FILE"],
    default: "`/var/run/secrets/kubernetes.io/serviceaccount/ca.crt`",
    meaning: "keeper: CA bundle of the API's certificate (the system's CAs when the file is missing)",
  },
] as const satisfies readonly Setting[];

/** A name the table documents: the parser's helpers take only these. */
export type SettingName = (typeof SETTINGS)[number]['names'][number];
