import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import { Status } from '../grpc-status.js';
import type { KeySpace } from './keys.js';
import type { RedisClient } from './redis-connection.js';
import { sign, verify } from './signing.js';

/**
 * provideGitCreds in distributed mode: a worker asks the proxy that submitted a job for what the
 * repo-server's askpass holds, when the plugin asks, never in advance. The question goes by
 * pub/sub to every proxy (signed, dated, naming the job and a fresh lookup id); only the proxy
 * that registered the job answers, into a key named by job and lookup, sealed (AES-256-GCM, the
 * job, lookup and kind as associated data) and expiring with the job; the worker reads it once
 * (GETDEL). Redis never holds a credential in the clear, nor one another lookup could open.
 */
export type LookupKind = 'credentials' | 'files';

export interface LookupMessage {
  jobId: string;
  lookupId: string;
  what: LookupKind;
}

/** What the proxy answers: the askpass credentials, the files the env points to, or why not (a gRPC status). */
export type LookupAnswer =
  | { ok: true; username: string; password: string }
  | { ok: true; files: [path: string, base64: string][] }
  | { ok: false; code: number; message: string };

const LOOKUP_DOMAIN = 'cmp-offload/git-creds-lookup/v1';
const SEAL_INFO = 'cmp-offload/git-creds-seal/v1';
/** A lookup older (or newer: clock skew) than this is ignored, so a captured one is not answered later. */
export const LOOKUP_MAX_AGE_MS = 60_000;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const HEX = /^[0-9a-f]{64}$/;
const LOOKUP_ID = /^[0-9a-f]{32}$/;

function parts(m: LookupMessage, at: number): string[] {
  return [m.jobId, m.lookupId, m.what, String(at)];
}

export function newLookupId(): string {
  return randomBytes(16).toString('hex');
}

/** The worker's question, signed and dated. */
export function encodeLookup(signingKey: Buffer, m: LookupMessage, now = Date.now()): string {
  return JSON.stringify({ ...m, at: now, sig: sign(signingKey, LOOKUP_DOMAIN, parts(m, now)).toString('hex') });
}

/** A question of the channel, verified; undefined when it is not a fresh one of ours. */
export function parseLookup(signingKey: Buffer, raw: string, now = Date.now()): LookupMessage | undefined {
  try {
    const m = JSON.parse(raw) as Partial<LookupMessage & { at: number; sig: string }>;
    if (typeof m.jobId !== 'string' || !HEX.test(m.jobId) || typeof m.lookupId !== 'string' || !LOOKUP_ID.test(m.lookupId)) return undefined;
    if (m.what !== 'credentials' && m.what !== 'files') return undefined;
    if (typeof m.at !== 'number' || !Number.isSafeInteger(m.at) || Math.abs(now - m.at) > LOOKUP_MAX_AGE_MS) return undefined;
    if (typeof m.sig !== 'string' || !HEX.test(m.sig)) return undefined;
    const msg: LookupMessage = { jobId: m.jobId, lookupId: m.lookupId, what: m.what };
    return verify(signingKey, LOOKUP_DOMAIN, parts(msg, m.at), Buffer.from(m.sig, 'hex')) ? msg : undefined;
  } catch {
    return undefined; // malformed: dropped like any unsigned message
  }
}

const sealKeys = new WeakMap<Buffer, Buffer>();
function sealKey(signingKey: Buffer): Buffer {
  let k = sealKeys.get(signingKey);
  if (!k) sealKeys.set(signingKey, (k = Buffer.from(hkdfSync('sha256', signingKey, Buffer.alloc(0), SEAL_INFO, 32))));
  return k;
}

function aad(m: LookupMessage): Buffer {
  return Buffer.from(`${m.jobId}:${m.lookupId}:${m.what}`, 'utf8');
}

export function sealAnswer(signingKey: Buffer, m: LookupMessage, answer: LookupAnswer): Buffer {
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', sealKey(signingKey), nonce);
  cipher.setAAD(aad(m));
  const body = Buffer.concat([cipher.update(JSON.stringify(answer), 'utf8'), cipher.final()]);
  return Buffer.concat([nonce, body, cipher.getAuthTag()]);
}

/** The answer sealed for this very lookup, checked for shape; undefined for anything else. */
export function openAnswer(signingKey: Buffer, m: LookupMessage, sealed: Buffer): LookupAnswer | undefined {
  if (sealed.length < NONCE_BYTES + TAG_BYTES) return undefined;
  let a: Record<string, unknown>;
  try {
    const decipher = createDecipheriv('aes-256-gcm', sealKey(signingKey), sealed.subarray(0, NONCE_BYTES));
    decipher.setAAD(aad(m));
    decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
    const text = Buffer.concat([decipher.update(sealed.subarray(NONCE_BYTES, sealed.length - TAG_BYTES)), decipher.final()]).toString('utf8');
    a = JSON.parse(text) as Record<string, unknown>;
  } catch {
    return undefined; // does not open or is not JSON: as if no answer came
  }
  if (a === null || typeof a !== 'object') return undefined;
  if (a.ok === false) return Number.isSafeInteger(a.code) && typeof a.message === 'string' ? { ok: false, code: a.code as number, message: a.message } : undefined;
  if (a.ok !== true) return undefined;
  if (m.what === 'credentials') {
    return typeof a.username === 'string' && typeof a.password === 'string' ? { ok: true, username: a.username, password: a.password } : undefined;
  }
  const files = a.files;
  const valid = Array.isArray(files) && files.every(f => Array.isArray(f) && f.length === 2 && typeof f[0] === 'string' && typeof f[1] === 'string');
  return valid ? { ok: true, files: files as [string, string][] } : undefined;
}

export interface LookupDeps {
  redis: RedisClient;
  keys: KeySpace;
  signingKey: Buffer;
}

/** How often the worker looks for the answer, and asks again (a proxy's subscriber may have been reconnecting). */
const POLL_MS = 20;
const ASK_AGAIN_MS = 1_000;

/**
 * Worker side: ask for `what` of job `jobId` and wait for the sealed answer, at most `timeoutMs`
 * (or until `signal` aborts). Undefined when none came: the proxy is gone, or its call ended.
 * Redis errors are thrown.
 */
export async function lookUp(deps: LookupDeps, jobId: string, what: LookupKind, timeoutMs: number, signal?: AbortSignal): Promise<LookupAnswer | undefined> {
  const m: LookupMessage = { jobId, lookupId: newLookupId(), what };
  const answerKey = deps.keys.gitCredsAnswer(jobId, m.lookupId);
  const until = Date.now() + timeoutMs;
  let askedAt = 0;
  while (Date.now() < until && !signal?.aborted) {
    if (Date.now() - askedAt >= ASK_AGAIN_MS) {
      askedAt = Date.now();
      await deps.redis.publish(deps.keys.gitCredsChannel(), encodeLookup(deps.signingKey, m));
    }
    await new Promise(resolve => setTimeout(resolve, POLL_MS));
    const sealed = await deps.redis.getdelBuffer(answerKey);
    if (sealed) return openAnswer(deps.signingKey, m, sealed) ?? { ok: false, code: Status.INTERNAL, message: 'cmp-offload: the git credentials answer in Redis does not open (do proxy and workers share CMP_OFFLOAD_SIGNING_KEY?)' };
  }
  return undefined;
}
