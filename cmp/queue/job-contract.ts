import { status as Status } from '@grpc/grpc-js';
import type { EnvEntry, PluginRequest, RpcKind } from '../plugin/request.js';
import { sign, verify } from './signing.js';

/**
 * What a proxy puts in a BullMQ job: references and metadata only (architecture §5). The
 * tarball travels as a content-addressed blob, the result comes back through a Redis key, so
 * job records and the events stream stay small. The HMAC covers every field: a worker runs
 * nothing it cannot verify.
 */
export interface JobData {
  v: 1;
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
  /** Names the waiter counter: nobody waiting ⇒ the job is not run. */
  waitId: string;
  /** The first caller's deadline (ms since epoch), for logs; cancellation is explicit. */
  deadline: number | null;
  enqueuedAt: number;
  /** hex HMAC-SHA256 over all of the above. */
  sig: string;
}

/**
 * What a worker returns: only the Redis key it stored the result under (BullMQ copies return
 * values into its events stream, so they must stay tiny).
 */
export interface JobReturn {
  key: string;
}

const JOB_DOMAIN = 'cmp-offload/job/v1';
const FAILURE_DOMAIN = 'cmp-offload/failure/v1';
const FAILURE_PREFIX = 'cmp-offload/failure/v1:';

export class InvalidJobError extends Error {}

function jobParts(d: Omit<JobData, 'sig'>): string[] {
  return [
    JSON.stringify([
      d.v, d.kind, d.plugin, d.specDigest, d.appRelPath, d.env.map(e => [e.name, e.value]),
      d.blob, d.size, d.cacheKey, d.waitId, d.deadline, d.enqueuedAt,
    ]),
  ];
}

/** Build the signed job data for a request. */
export function signJob(key: Buffer, d: Omit<JobData, 'v' | 'sig'>): JobData {
  const unsigned = { v: 1 as const, ...d };
  return { ...unsigned, sig: sign(key, JOB_DOMAIN, jobParts(unsigned)).toString('hex') };
}

const HEX64 = /^[0-9a-f]{64}$/;
const KINDS: readonly RpcKind[] = ['generate', 'match', 'parameters'];

/**
 * Check the shape and the signature of job data read from Redis (hostile until proven
 * otherwise) and return it typed; throws InvalidJobError saying what is wrong.
 */
export function verifyJob(key: Buffer, raw: unknown): JobData {
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
  if (d.v !== 1) throw new InvalidJobError('unsupported job version');
  const sig = typeof d.sig === 'string' && HEX64.test(d.sig) ? d.sig : undefined;
  if (sig === undefined) throw new InvalidJobError('job is not signed');
  const kind = str('kind') as RpcKind;
  if (!KINDS.includes(kind)) throw new InvalidJobError('job field kind is invalid');
  if (!Array.isArray(d.env) || !d.env.every(e => e && typeof e.name === 'string' && typeof e.value === 'string')) {
    throw new InvalidJobError('job field env is invalid');
  }
  const blob = str('blob');
  if (!HEX64.test(blob)) throw new InvalidJobError('job field blob is invalid');
  const cacheKey = d.cacheKey === null ? null : str('cacheKey');
  if (cacheKey !== null && !HEX64.test(cacheKey)) throw new InvalidJobError('job field cacheKey is invalid');
  const waitId = str('waitId');
  if (!HEX64.test(waitId)) throw new InvalidJobError('job field waitId is invalid');
  const job: JobData = {
    v: 1,
    kind,
    plugin: str('plugin'),
    specDigest: str('specDigest'),
    appRelPath: str('appRelPath'),
    env: (d.env as EnvEntry[]).map(e => ({ name: e.name, value: e.value })),
    blob,
    size: num('size')!,
    cacheKey,
    waitId,
    deadline: num('deadline', true),
    enqueuedAt: num('enqueuedAt')!,
    sig,
  };
  if (!verify(key, JOB_DOMAIN, jobParts(job), Buffer.from(sig, 'hex'))) throw new InvalidJobError('job signature does not verify');
  return job;
}

/** The plugin request a job describes. */
export function requestOf(job: JobData): PluginRequest {
  return { kind: job.kind, appRelPath: job.appRelPath, env: job.env };
}

/** How a job failed, as the caller must see it. `canceled`: stopped because its callers left. */
export interface JobFailure {
  code: Status;
  message: string;
  canceled: boolean;
}

/**
 * Encode a failure as a BullMQ failedReason: signed and bound to the job id, so a proxy
 * relays only texts a worker produced for this very job.
 */
export function encodeFailure(key: Buffer, jobId: string, f: JobFailure): string {
  const body = JSON.stringify([f.code, f.message, f.canceled]);
  return `${FAILURE_PREFIX}${sign(key, FAILURE_DOMAIN, [jobId, body]).toString('hex')}:${body}`;
}

/** Decode a failedReason written by `encodeFailure`; undefined for anything else (BullMQ's own, forged). */
export function decodeFailure(key: Buffer, jobId: string, reason: string): JobFailure | undefined {
  if (!reason.startsWith(FAILURE_PREFIX)) return undefined;
  const rest = reason.slice(FAILURE_PREFIX.length);
  const sig = rest.slice(0, 64);
  const body = rest.slice(65);
  if (!/^[0-9a-f]{64}$/.test(sig) || rest[64] !== ':') return undefined;
  if (!verify(key, FAILURE_DOMAIN, [jobId, body], Buffer.from(sig, 'hex'))) return undefined;
  try {
    const [code, message, canceled] = JSON.parse(body) as unknown[];
    if (typeof code !== 'number' || typeof message !== 'string' || typeof canceled !== 'boolean') return undefined;
    return { code, message, canceled };
  } catch {
    return undefined;
  }
}
