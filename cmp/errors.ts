import { Status } from './grpc-status.js';

/**
 * An error with a gRPC status code. Argo's handlers return Go errors wrapped with `%w` at every
 * layer, and grpc-go derives the status from the innermost status/context error in the chain
 * (docs/argo-contract.md#error-statuses). We keep the same shape: the message is the full wrapped text, the code
 * travels with it and survives wrapping.
 */
export class CmpError extends Error {
  readonly code: Status;
  /** Which of OUR_ERRORS this is (or wraps): callers that act on one test this, not the text. */
  readonly kind: OurErrorKind | undefined;
  constructor(message: string, code: Status = Status.UNKNOWN, kind?: OurErrorKind) {
    super(message);
    this.name = 'CmpError';
    this.code = code;
    this.kind = kind;
  }
}

/** `context deadline exceeded` / `context canceled`, as Go's context package words them. */
export const DEADLINE_EXCEEDED_TEXT = 'context deadline exceeded';
export const CANCELED_TEXT = 'context canceled';

export function deadlineExceeded(): CmpError {
  return new CmpError(DEADLINE_EXCEEDED_TEXT, Status.DEADLINE_EXCEEDED);
}

export function canceled(): CmpError {
  return new CmpError(CANCELED_TEXT, Status.CANCELLED);
}

/** The status code an arbitrary thrown value maps to (UNKNOWN unless it carries one). */
export function codeOf(err: unknown): Status {
  return err instanceof CmpError ? err.code : Status.UNKNOWN;
}

export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Go's `fmt.Errorf("<prefix>: %w", err)`: prefix the text, keep the code (and our kind). */
export function wrap(prefix: string, err: unknown): CmpError {
  return new CmpError(`${prefix}: ${messageOf(err)}`, codeOf(err), err instanceof CmpError ? err.kind : undefined);
}

/**
 * grpc-js's own refusal of a response over grpc.max_send_message_length (ARGOCD_GRPC_MAX_SIZE_MB),
 * `bytes` counting the 5-byte message prefix. The splitter gives it for manifests it stops
 * building at the limit, so that such an answer reads the same however it got too large.
 */
export function sentMessageTooLarge(bytes: number, max: number): CmpError {
  return new CmpError(`Sent message larger than max (${bytes} vs. ${max})`, Status.RESOURCE_EXHAUSTED);
}

/**
 * The errors cmp-offload adds to Argo's (Argo's own texts are reproduced where Argo produces them,
 * see docs/argo-contract.md#error-statuses). One entry per error: its gRPC status and its text.
 * The README's error table lists the same entries; a test keeps the two in step.
 */
export const OUR_ERRORS = {
  tarballTooLarge: {
    code: Status.RESOURCE_EXHAUSTED,
    text: (limit: number) => `tarball exceeds the limit of ${limit} bytes (CMP_OFFLOAD_MAX_TARBALL_BYTES)`,
  },
  extractedTooLarge: {
    code: Status.RESOURCE_EXHAUSTED,
    text: (limit: number) => `extracted size exceeds the limit of ${limit} bytes (CMP_OFFLOAD_MAX_EXTRACTED_BYTES)`,
  },
  tooManyEntries: {
    code: Status.RESOURCE_EXHAUSTED,
    text: (limit: number) => `tarball has more than ${limit} entries (CMP_OFFLOAD_MAX_ENTRIES)`,
  },
  pathTooLong: {
    // The same family as the entry and size limits above: an input over a fixed size bound
    // (as grpc reports an oversized message), answered during ingest before any extraction.
    code: Status.RESOURCE_EXHAUSTED,
    text: (quotedHead: string, bytes: number, longestName: number) =>
      `tarball path too long: ${quotedHead} has ${bytes} bytes and a ${longestName}-byte name ` +
      `(limits 4096 and 255 bytes, Linux PATH_MAX and NAME_MAX)`,
  },
  outputTooLarge: {
    code: Status.RESOURCE_EXHAUSTED,
    text: (limit: number) => `plugin output exceeds the limit of ${limit} bytes (CMP_OFFLOAD_MAX_OUTPUT_BYTES)`,
  },
  tooManyInflight: {
    code: Status.RESOURCE_EXHAUSTED,
    text: (limit: number) => `cmp-offload: too many requests in flight on this proxy (limit ${limit}, CMP_OFFLOAD_MAX_INFLIGHT)`,
  },
  queueFull: {
    code: Status.RESOURCE_EXHAUSTED,
    text: (plugin: string, depth: number, limit: number) =>
      `cmp-offload: the queue of plugin ${plugin} is full: ${depth} jobs waiting (limit ${limit}, CMP_OFFLOAD_MAX_QUEUE_DEPTH)`,
  },
  blobTooLarge: {
    code: Status.RESOURCE_EXHAUSTED,
    text: (size: number, limit: number) =>
      `cmp-offload: a ${size}-byte tarball cannot be stored in Redis, whose strings hold at most ${limit} bytes (proto-max-bulk-len); lower CMP_OFFLOAD_MAX_TARBALL_BYTES or use standalone mode`,
  },
  redisUnreachable: {
    code: Status.UNAVAILABLE,
    text: (url: string, cause: string) => `cmp-offload: Redis is unreachable at ${url} (CMP_OFFLOAD_REDIS_URL): ${cause}`,
  },
  blobExpired: {
    code: Status.UNAVAILABLE,
    text: (sha256: string) =>
      `cmp-offload: the tarball ${sha256} was gone from Redis when a worker fetched it (expired after CMP_OFFLOAD_BLOB_TTL, or lost by Redis)`,
  },
  blobCorrupt: {
    code: Status.DATA_LOSS,
    text: (sha256: string, detail: string) => `cmp-offload: the tarball blob ${sha256} ${detail}`,
  },
  jobFailed: {
    code: Status.UNAVAILABLE,
    text: (jobId: string, plugin: string, reason: string) => `cmp-offload: job ${jobId} of plugin ${plugin} failed: ${reason}`,
  },
  jobGaveUp: {
    // Not UNAVAILABLE (which gRPC clients retry by default): a run that kills its worker each
    // time would kill more workers on every retry of the caller.
    code: Status.ABORTED,
    text: (jobId: string, plugin: string, runs: number, detail: string) =>
      `cmp-offload: job ${jobId} of plugin ${plugin} was given up after ${runs} run${runs === 1 ? '' : 's'} ended in infrastructure failures (CMP_OFFLOAD_JOB_ATTEMPTS): ${detail}`,
  },
  jobRemoved: {
    code: Status.ABORTED,
    text: (jobId: string, plugin: string) => `cmp-offload: job ${jobId} of plugin ${plugin} was removed from the queue`,
  },
  jobLost: {
    code: Status.UNAVAILABLE,
    text: (jobId: string, plugin: string, submissions: number) =>
      `cmp-offload: job ${jobId} of plugin ${plugin} vanished from Redis (flushed, restarted empty, failed over or evicted); ` +
      `submissions made: ${submissions} (at most 1 + CMP_OFFLOAD_RESUBMITS)`,
  },
  resultMissing: {
    code: Status.UNAVAILABLE,
    text: (jobId: string) => `cmp-offload: the result of job ${jobId} is gone from Redis`,
  },
  badResultLocation: {
    code: Status.INTERNAL,
    text: (jobId: string) => `cmp-offload: job ${jobId} returned an unexpected result location`,
  },
  jobRejected: {
    code: Status.PERMISSION_DENIED,
    text: (reason: string) => `cmp-offload: job rejected by the worker: ${reason}`,
  },
  wrongQueue: {
    code: Status.PERMISSION_DENIED,
    text: (plugin: string, queue: string) => `cmp-offload: job for plugin ${plugin} rejected by a worker of ${queue}`,
  },
  versionSkew: {
    code: Status.FAILED_PRECONDITION,
    text: (plugin: string, proxyDigest: string, workerDigest: string) =>
      `cmp-offload: plugin configuration mismatch between proxy and worker (version skew): the proxy's plugin.yaml of ` +
      `${plugin} has spec digest ${proxyDigest}, the worker's has ${workerDigest}; roll out the same plugin.yaml to both`,
  },
  runnerSkew: {
    code: Status.FAILED_PRECONDITION,
    text: (workerDigest: string, runnerDigest: string) =>
      `cmp-offload: plugin configuration mismatch between worker and runner: the worker's plugin.yaml has spec digest ` +
      `${workerDigest}, the runner's has ${runnerDigest}; mount the same plugin.yaml in both containers`,
  },
  gitCredsUnanswered: {
    code: Status.UNAVAILABLE,
    text: (jobId: string, waited: string) =>
      `cmp-offload: no answer to the git credentials lookup of job ${jobId} within ${waited} (the proxy that submitted it is gone, or its call has ended)`,
  },
  gitCredsFiles: {
    code: Status.FAILED_PRECONDITION,
    text: (detail: string) =>
      `cmp-offload: the proxy cannot read the git credential files of this request: ${detail} (the sidecar must see the repo-server's /dev/shm and SSH known hosts at the same paths, docs/operations.md)`,
  },
  spoolChanged: {
    code: Status.DATA_LOSS,
    text: (sha256: string) =>
      `cmp-offload: the proxy's copy of tarball ${sha256} was changed on disk before its extraction (by a plugin command, which runs as the same uid in standalone mode); the next request receives it anew`,
  },
  extractionCrashed: {
    code: Status.INTERNAL,
    text: (detail: string) => `extraction worker failed: ${detail}`,
  },
  splitFailed: {
    code: Status.INTERNAL,
    text: (detail: string) => `cmp-offload: the plugin's output could not be split: ${detail}`,
  },
} as const;

type Table = typeof OUR_ERRORS;
export type OurErrorKind = keyof Table;

/** Build one of our errors: `ourError('queueFull', plugin, depth, limit)`. */
export function ourError<K extends keyof Table>(kind: K, ...args: Parameters<Table[K]['text']>): CmpError {
  const entry = OUR_ERRORS[kind];
  return new CmpError((entry.text as (...a: unknown[]) => string)(...args), entry.code, kind);
}
