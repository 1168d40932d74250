import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes } from 'node:crypto';
import { Status } from '../grpc-status.js';
import type { EnvEntry, PluginRequest, RpcKind } from '../plugin/request.js';
import { sign, verify } from './signing.js';
import { parseTracestate, TRACESTATE_MAX_CHARS } from '../observe/tracing.js';

/**
 * What a proxy puts in a BullMQ job: references and metadata (docs/architecture.md#distributed). The
 * tarball travels as a content-addressed blob (a small one inside the job: `tgz`), the result comes back through a Redis key, so
 * job records and the events stream stay small. The HMAC covers every field: a worker runs
 * nothing it cannot verify. Redis is a trust boundary (docs/security.md#trust-boundary), so the job is also
 * bound to its own id (a signed job copied into another job is refused), expires with its
 * caller (a captured job cannot be replayed later), and carries the request env sealed
 * (AES-256-GCM): `ARGOCD_ENV_*` values may be tokens, and the queue dashboard shows job data.
 */
export interface JobRequest {
  kind: RpcKind;
  /** Queue = plugin name; a job moved to another plugin's queue does not verify there. */
  plugin: string;
  /** pluginSpecDigest of the proxy's plugin.yaml: workers refuse a different one (version skew). */
  specDigest: string;
  appRelPath: string;
  env: EnvEntry[];
  /** sha256 of the gzip tarball: names the blob and verifies its bytes. */
  blob: string;
  size: number;
  /** Output cache key, or null when the result must not be cached (then it goes to a result key). */
  cacheKey: string | null;
  /**
   * Random, chosen by the proxy: the BullMQ job id the job must have, and the name of the
   * result key of an uncached job. A worker refuses data found under any other job id.
   */
  resultId: string;
  /** Names the waiter counter: nobody waiting ⇒ the job is not run. */
  waitId: string;
  /** The first caller's deadline (ms since epoch), for logs; cancellation is explicit. */
  deadline: number | null;
  enqueuedAt: number;
  /** Workers refuse the job after this (ms since epoch): the caller's deadline, or a bounded age. */
  expiresAt: number;
  /**
   * Tracing: the W3C `traceparent` of the proxy's request span, so that the worker's spans join
   * the caller's trace. Absent when the request is not traced. Signed like every other field
   * (appended to the signed list only when present: a job without it signs and verifies exactly
   * as before, and a worker that predates it verifies a job with it and ignores it).
   */
  traceparent?: string;
  /** Tracing: the request span's W3C `tracestate` (the caller's vendor entries), when it has one; signed like `traceparent`. */
  tracestate?: string;
  /**
   * provideGitCreds: the request carries git credentials (an askpass nonce or credential files),
   * and its proxy answers this job's lookups (git-creds-relay.ts) while it waits. Signed like
   * `traceparent`, as a part of its own when present.
   */
  gitCreds?: true;
  /**
   * A small tarball (at most INLINE_TARBALL_BYTES) itself, base64, instead of a blob in Redis:
   * no upload, no fetch. Not a signed part of its own: its bytes must hash to the signed `blob`
   * and count the signed `size` (verifyJob), which binds them as tightly. A worker that predates
   * it ignores it and finds no blob: the job fails asking for a resubmission, and the proxy
   * submits anew with the blob uploaded (it inlines only a first submission).
   */
  tgz?: string;
  /**
   * The proxy reads generate results stored as their ManifestResponse (result-store.ts, CMPM1);
   * without it the worker stores the JSON form a proxy of an earlier version reads. Not signed:
   * both forms are signed and bound to the request, so a changed hint changes only the form.
   */
  resultForm?: 'manifests';
  /**
   * The proxy takes a small result inside the job's return value (JobReturn.sealed): no result
   * key for an uncached job, no read of the result for any. Not signed, like `resultForm`: the
   * result is signed and bound to the request either way, so a changed hint changes only where
   * the proxy reads it. A worker that predates it stores every result under its key, as before.
   */
  resultInline?: true;
}

/** The largest tarball a proxy sends inside its job (JobRequest.tgz) rather than as a blob. */
export const INLINE_TARBALL_BYTES = 16 * 1024;

/**
 * The largest stored result (signed, gzip) a worker returns inside the job's return value
 * (JobReturn.sealed). BullMQ copies return values into the job record and the events stream,
 * which every proxy reads and which keep up to 1,000 and about 2,000 entries: hence the small bound.
 */
export const INLINE_RESULT_BYTES = 8 * 1024;

/** A verified job: the request it describes, and its tarball when the job carries it. */
export type VerifiedJob = JobRequest & { tarball?: Buffer };

/** The job as stored in Redis: the request with its env sealed, and signed. */
export interface JobData extends Omit<JobRequest, 'env'> {
  v: 2;
  /** The request env's names, in order: what logs and the dashboard may show. */
  envNames: string[];
  /** base64 of nonce ‖ AES-256-GCM(JSON of the env entries) ‖ tag; see `sealEnv`. */
  envSealed: string;
  /** hex HMAC-SHA256 over all of the above. */
  sig: string;
}

/**
 * What a worker returns: the Redis key of the result and, for a job that asked for it
 * (JobRequest.resultInline), a small result itself (BullMQ copies return values into its events
 * stream, so they stay small). An uncached result returned so is not stored under its key.
 */
export interface JobReturn {
  key: string;
  /** The stored form of the result (what `key` holds or would hold), sealed for the job: `sealResult`. */
  sealed?: string;
}

const JOB_DOMAIN = 'cmp-offload/job/v2';
const FAILURE_DOMAIN = 'cmp-offload/failure/v2';
const FAILURE_PREFIX = 'cmp-offload/failure/v2:';
const REQUEST_DOMAIN = 'cmp-offload/request/v1';
const ENV_KEY_INFO = 'cmp-offload/env-seal/v1';
const RESULT_KEY_INFO = 'cmp-offload/result-seal/v1';
const NONCE_BYTES = 12;
const TAG_BYTES = 16;

export class InvalidJobError extends Error {}

/** A fresh result id (also the job id): 256 random bits, hex. */
export function newResultId(): string {
  return randomBytes(32).toString('hex');
}

/** AEAD keys derived from the signing key (never the key itself), one per use. */
const sealKeys = new Map<string, WeakMap<Buffer, Buffer>>();
function sealKey(signingKey: Buffer, info: string): Buffer {
  let byKey = sealKeys.get(info);
  if (!byKey) sealKeys.set(info, (byKey = new WeakMap()));
  let k = byKey.get(signingKey);
  if (!k) byKey.set(signingKey, (k = Buffer.from(hkdfSync('sha256', signingKey, Buffer.alloc(0), info, 32))));
  return k;
}

/** base64 of nonce ‖ AES-256-GCM(bytes) ‖ tag, with `aad` as associated data. */
function seal(key: Buffer, aad: string, bytes: Buffer): string {
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  cipher.setAAD(Buffer.from(aad, 'utf8'));
  const body = Buffer.concat([cipher.update(bytes), cipher.final()]);
  return Buffer.concat([nonce, body, cipher.getAuthTag()]).toString('base64');
}

/** The bytes `seal` sealed; undefined when they do not authenticate. */
function open(key: Buffer, aad: string, sealed: string): Buffer | undefined {
  const raw = Buffer.from(sealed, 'base64');
  if (raw.length < NONCE_BYTES + TAG_BYTES) return undefined;
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, NONCE_BYTES));
    decipher.setAAD(Buffer.from(aad, 'utf8'));
    decipher.setAuthTag(raw.subarray(raw.length - TAG_BYTES));
    return Buffer.concat([decipher.update(raw.subarray(NONCE_BYTES, raw.length - TAG_BYTES)), decipher.final()]);
  } catch {
    return undefined; // does not authenticate
  }
}

/** Seal env entries for one job: the result id is the associated data, so a sealed env opens only in its job. */
export function sealEnv(signingKey: Buffer, resultId: string, env: readonly EnvEntry[]): string {
  return seal(sealKey(signingKey, ENV_KEY_INFO), resultId, Buffer.from(JSON.stringify(env.map(e => [e.name, e.value])), 'utf8'));
}

/** Open what `sealEnv` sealed; throws InvalidJobError when it does not authenticate. */
export function openEnv(signingKey: Buffer, resultId: string, sealed: string): EnvEntry[] {
  const opened = open(sealKey(signingKey, ENV_KEY_INFO), resultId, sealed);
  if (!opened) throw new InvalidJobError('job env does not open');
  try {
    const pairs = JSON.parse(opened.toString('utf8')) as unknown;
    if (!Array.isArray(pairs) || !pairs.every(p => Array.isArray(p) && p.length === 2 && typeof p[0] === 'string' && typeof p[1] === 'string')) {
      throw new Error('not a list of pairs');
    }
    return (pairs as [string, string][]).map(([name, value]) => ({ name, value }));
  } catch {
    throw new InvalidJobError('job env does not open');
  }
}

/**
 * Seal a stored result (result-store.ts) for the return value of job `jobId` (JobReturn.sealed):
 * return values rest in the job record and the events stream, which the queue dashboard shows,
 * and manifests may hold secrets (a vault plugin's output). The job id is the associated data.
 */
export function sealResult(signingKey: Buffer, jobId: string, stored: Buffer): string {
  return seal(sealKey(signingKey, RESULT_KEY_INFO), jobId, stored);
}

/** The stored result `sealResult` sealed for `jobId`; undefined when it is too long or does not authenticate. */
export function openResult(signingKey: Buffer, jobId: string, sealed: string): Buffer | undefined {
  // Checked before decoding: the value comes from Redis.
  if (sealed.length > 4 * Math.ceil((NONCE_BYTES + INLINE_RESULT_BYTES + TAG_BYTES) / 3)) return undefined;
  return open(sealKey(signingKey, RESULT_KEY_INFO), jobId, sealed);
}

function jobParts(d: Omit<JobData, 'sig'>): string[] {
  const parts = [
    JSON.stringify([
      d.v, d.kind, d.plugin, d.specDigest, d.appRelPath, d.envNames, d.envSealed,
      d.blob, d.size, d.cacheKey, d.resultId, d.waitId, d.deadline, d.enqueuedAt, d.expiresAt,
    ]),
  ];
  // A separate part (length-prefixed by `sign`), so no job without it can sign the same bytes.
  if (d.traceparent !== undefined) parts.push(`traceparent:${d.traceparent}`);
  if (d.tracestate !== undefined) parts.push(`tracestate:${d.tracestate}`);
  if (d.gitCreds) parts.push('git-creds');
  return parts;
}

/** Build the signed job data for a request. */
export function signJob(key: Buffer, r: JobRequest): JobData {
  const { env, ...rest } = r;
  const unsigned = { v: 2 as const, ...rest, envNames: env.map(e => e.name), envSealed: sealEnv(key, r.resultId, env) };
  return { ...unsigned, sig: sign(key, JOB_DOMAIN, jobParts(unsigned)).toString('hex') };
}

const HEX64 = /^[0-9a-f]{64}$/;
const TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
const KINDS: readonly RpcKind[] = ['generate', 'match', 'parameters'];

/**
 * Check the shape, the signature, the job id and the age of job data read from Redis (hostile
 * until proven otherwise) and return the request it describes, env unsealed; throws
 * InvalidJobError saying what is wrong. `jobId` is the BullMQ id the data was found under.
 */
export function verifyJob(key: Buffer, raw: unknown, jobId: string, now = Date.now()): VerifiedJob {
  if (!raw || typeof raw !== 'object') throw new InvalidJobError('job data is not an object');
  const d = raw as Record<string, unknown>;
  const str = (name: string) => {
    if (typeof d[name] !== 'string') throw new InvalidJobError(`job field ${name} is missing or not a string`);
    return d[name] as string;
  };
  const num = (name: string, nullable = false) => {
    const v = d[name];
    if (nullable && v === null) return null;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new InvalidJobError(`job field ${name} is not a number`);
    return v;
  };
  if (d.v !== 2) throw new InvalidJobError('unsupported job version');
  const sig = typeof d.sig === 'string' && HEX64.test(d.sig) ? d.sig : undefined;
  if (sig === undefined) throw new InvalidJobError('job is not signed');
  const kind = str('kind') as RpcKind;
  if (!KINDS.includes(kind)) throw new InvalidJobError('job field kind is invalid');
  if (!Array.isArray(d.envNames) || !d.envNames.every(n => typeof n === 'string')) throw new InvalidJobError('job field envNames is invalid');
  const blob = str('blob');
  if (!HEX64.test(blob)) throw new InvalidJobError('job field blob is invalid');
  const cacheKey = d.cacheKey === null ? null : str('cacheKey');
  if (cacheKey !== null && !HEX64.test(cacheKey)) throw new InvalidJobError('job field cacheKey is invalid');
  const resultId = str('resultId');
  if (!HEX64.test(resultId)) throw new InvalidJobError('job field resultId is invalid');
  const waitId = str('waitId');
  if (!HEX64.test(waitId)) throw new InvalidJobError('job field waitId is invalid');
  const traceparent = d.traceparent === undefined ? undefined : str('traceparent');
  if (traceparent !== undefined && !TRACEPARENT.test(traceparent)) throw new InvalidJobError('job field traceparent is invalid');
  const tracestate = d.tracestate === undefined ? undefined : str('tracestate');
  if (tracestate !== undefined && (traceparent === undefined || tracestate.length > TRACESTATE_MAX_CHARS || parseTracestate([tracestate]) !== tracestate)) {
    throw new InvalidJobError('job field tracestate is invalid');
  }
  if (d.gitCreds !== undefined && d.gitCreds !== true) throw new InvalidJobError('job field gitCreds is invalid');
  const tgz = d.tgz === undefined ? undefined : str('tgz');
  const job: JobData = {
    v: 2,
    kind,
    plugin: str('plugin'),
    specDigest: str('specDigest'),
    appRelPath: str('appRelPath'),
    envNames: d.envNames as string[],
    envSealed: str('envSealed'),
    blob,
    size: num('size')!,
    cacheKey,
    resultId,
    waitId,
    deadline: num('deadline', true),
    enqueuedAt: num('enqueuedAt')!,
    expiresAt: num('expiresAt')!,
    ...(traceparent !== undefined ? { traceparent } : {}),
    ...(tracestate !== undefined ? { tracestate } : {}),
    ...(d.resultForm === 'manifests' ? { resultForm: 'manifests' as const } : {}),
    ...(d.resultInline === true ? { resultInline: true as const } : {}),
    ...(d.gitCreds === true ? { gitCreds: true as const } : {}),
    sig,
  };
  if (!verify(key, JOB_DOMAIN, jobParts(job), Buffer.from(sig, 'hex'))) throw new InvalidJobError('job signature does not verify');
  // Signed data copied into another job (or re-added under a new id) is not this job's.
  if (jobId !== resultId) throw new InvalidJobError(`job data belongs to job ${resultId.slice(0, 12)}…, not to this one`);
  if (now > job.expiresAt) throw new InvalidJobError(`job expired ${now - job.expiresAt} ms ago (its callers are gone; replays are refused)`);
  const { v: _v, envNames: _n, envSealed, sig: _s, ...rest } = job;
  const tarball = tgz === undefined ? undefined : inlineTarball(tgz, job.blob, job.size);
  return { ...rest, env: openEnv(key, resultId, envSealed), ...(tarball ? { tarball } : {}) };
}

/** The bytes of an inline tarball, checked against the signed checksum and size (verifyJob). */
function inlineTarball(tgz: string, sha256: string, size: number): Buffer {
  // Lengths first: the field is not signed, so nothing of a longer one is decoded.
  if (size > INLINE_TARBALL_BYTES || tgz.length !== 4 * Math.ceil(size / 3)) throw new InvalidJobError('job field tgz is invalid');
  const bytes = Buffer.from(tgz, 'base64');
  if (bytes.length !== size || bytes.toString('base64') !== tgz) throw new InvalidJobError('job field tgz is invalid');
  if (createHash('sha256').update(bytes).digest('hex') !== sha256) throw new InvalidJobError('job field tgz does not match its checksum');
  return bytes;
}

/** The plugin request a job describes. */
export function requestOf(job: JobRequest): PluginRequest {
  return { kind: job.kind, appRelPath: job.appRelPath, env: job.env };
}

/**
 * What an uncached result is bound to: sha256 over plugin, spec, RPC, app path, env (in order:
 * the executor de-duplicates it, so order matters) and tarball. The worker signs the result
 * with the digest of the job it verified, the proxy checks it against its own request's, so
 * no stored answer counts for another request. (A cache entry is bound to its cache key,
 * which digests the same request parts over the tree.)
 */
export function requestDigest(r: Pick<JobRequest, 'kind' | 'plugin' | 'specDigest' | 'appRelPath' | 'env' | 'blob' | 'size'>): string {
  const encoded = JSON.stringify([REQUEST_DOMAIN, r.plugin, r.specDigest, r.kind, r.appRelPath, r.env.map(e => [e.name, e.value]), r.blob, r.size]);
  return createHash('sha256').update(encoded, 'utf8').digest('hex');
}

/** What a job's answer (its result or its failure) is bound to: the cache key, else the result id. */
export function answerBinding(job: Pick<JobRequest, 'cacheKey' | 'resultId'>): string {
  return job.cacheKey ?? job.resultId;
}

/**
 * How a job failed, as the caller must see it. `canceled`: stopped because its callers left.
 * `resubmit`: Redis lost what the job needs from the proxy (its blob vanished, or was corrupt and
 * has been removed): an infrastructure failure that no retry on a worker can mend, so the proxy
 * uploads and submits the request anew (within CMP_OFFLOAD_RESUBMITS) and shows `message` only
 * when it may not. Encoded as an optional fourth element: a proxy that predates it reads the
 * first three and relays the message, as it did before.
 */
export interface JobFailure {
  code: Status;
  message: string;
  canceled: boolean;
  resubmit?: boolean;
}

/**
 * Encode a failure as a BullMQ failedReason: signed and bound to the job id and to what the
 * job answers for (`answerBinding`), so a proxy relays only texts a worker produced for its
 * own request.
 */
export function encodeFailure(key: Buffer, jobId: string, binding: string, f: JobFailure): string {
  const body = JSON.stringify(f.resubmit ? [f.code, f.message, f.canceled, true] : [f.code, f.message, f.canceled]);
  return `${FAILURE_PREFIX}${sign(key, FAILURE_DOMAIN, [jobId, binding, body]).toString('hex')}:${body}`;
}

/** The binding of a worker's refusal of job data it cannot trust (it knows no request to bind to). */
export const REJECTED = 'rejected';

/** Decode a failedReason written by `encodeFailure`; undefined for anything else (BullMQ's own, forged, another request's). */
export function decodeFailure(key: Buffer, jobId: string, binding: string, reason: string): JobFailure | undefined {
  if (!reason.startsWith(FAILURE_PREFIX)) return undefined;
  const rest = reason.slice(FAILURE_PREFIX.length);
  const sig = rest.slice(0, 64);
  const body = rest.slice(65);
  if (!/^[0-9a-f]{64}$/.test(sig) || rest[64] !== ':') return undefined;
  if (!verify(key, FAILURE_DOMAIN, [jobId, binding, body], Buffer.from(sig, 'hex'))) return undefined;
  try {
    const [code, message, canceled, resubmit] = JSON.parse(body) as unknown[];
    if (typeof code !== 'number' || typeof message !== 'string' || typeof canceled !== 'boolean') return undefined;
    // Signed by a worker: its code is one it took from a CmpError (grpc-js's enum was as loose).
    return { code: code as Status, message, canceled, ...(resubmit === true ? { resubmit: true } : {}) };
  } catch {
    return undefined; // malformed: not a failure signed for this job
  }
}
