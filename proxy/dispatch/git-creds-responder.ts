import fs from 'node:fs/promises';
import { constants } from 'node:fs';
import { Status } from '../../cmp/grpc-status.js';
import type { RedisOptions } from '../../cmp/config/options.js';
import { messageOf } from '../../cmp/errors.js';
import type { Logger } from '../../cmp/log.js';
import type { GitCredsEnv } from '../../cmp/askpass/git-creds-env.js';
import { AskpassError } from '../../cmp/askpass/askpass-error.js';
import { getCredentials } from '../../cmp/askpass/askpass-grpc.js';
import { parseLookup, sealAnswer, type LookupAnswer, type LookupMessage } from '../../cmp/queue/git-creds-relay.js';
import type { KeySpace } from '../../cmp/queue/keys.js';
import { connectRedis, type RedisClient } from '../../cmp/queue/redis-connection.js';

/** Lookups one job may make (git asks twice per authenticated connection): a plugin looping on askpass stops here. */
export const MAX_LOOKUPS_PER_JOB = 256;
/** Answers being prepared at once, over all jobs of this proxy; further lookups wait for the worker's next ask. */
const MAX_ANSWERING = 32;
/** A file the env points to (a TLS client certificate or key, an SSH key, known hosts) is small. */
export const MAX_CREDS_FILE_BYTES = 1024 * 1024;
/** Argo points at four at most (a client certificate and key, or an SSH key and known hosts; a CA). */
const MAX_CREDS_FILES = 16;
const MAX_CREDS_FILES_BYTES = 4 * 1024 * 1024;
/** How long the repo-server's askpass may take for one answer. */
const ASKPASS_TIMEOUT_MS = 5_000;
/** An answer key outlives the worker's wait a little, never the job. */
const ANSWER_TTL_MS = 60_000;

interface Registration {
  creds: GitCredsEnv;
  expiresAt: number;
  lookups: number;
}

export interface GitCredsResponderDeps {
  ro: RedisOptions;
  /** The proxy's command connection: answers are written there. */
  redis: RedisClient;
  keys: KeySpace;
  signingKey: Buffer;
  log: Logger;
}

/**
 * The proxy's half of provideGitCreds in distributed mode. While one of its jobs carries git
 * credentials (the repo-server keeps the askpass nonce and the files alive only until its call
 * returns), the job is registered here; the job's worker asks on the git-creds channel, and this
 * proxy answers for its own registered jobs only: the nonce it asks the repo-server's askpass
 * with is the one of the job's request, whatever the worker says, and it reads only the files
 * that request's env names. Unregistered (the answer came, or the call ended), a job gets no
 * answer: its late lookups find nothing.
 */
export class GitCredsResponder {
  private readonly jobs = new Map<string, Registration>();
  private readonly subscriber: RedisClient;
  private answering = 0;

  constructor(private readonly deps: GitCredsResponderDeps) {
    this.subscriber = connectRedis(deps.ro, 'blocking', err => deps.log.debug({ err: err.message }, 'redis connection error'));
    this.subscriber.on('message', (_channel: string, raw: string) => this.onMessage(raw));
    // ioredis subscribes again by itself after a reconnect.
    this.subscriber.subscribe(deps.keys.gitCredsChannel()).catch(err => deps.log.warn({ err: messageOf(err) }, 'git credentials channel not subscribed yet'));
  }

  /** Answer the lookups of job `jobId` from now on, until the returned function is called or `expiresAt` (ms since epoch). */
  register(jobId: string, creds: GitCredsEnv, expiresAt: number): () => void {
    const reg: Registration = { creds, expiresAt, lookups: 0 };
    this.jobs.set(jobId, reg);
    return () => {
      if (this.jobs.get(jobId) === reg) this.jobs.delete(jobId);
    };
  }

  private onMessage(raw: string): void {
    const m = parseLookup(this.deps.signingKey, raw);
    if (!m) return;
    const reg = this.jobs.get(m.jobId);
    // Another proxy's job, or one whose call has ended.
    if (!reg || Date.now() > reg.expiresAt) return;
    if (this.answering >= MAX_ANSWERING) return;
    this.answering++;
    void this.answer(m, reg)
      .catch(err => this.deps.log.warn({ jobId: m.jobId, err: messageOf(err) }, 'git credentials lookup not answered'))
      .finally(() => this.answering--);
  }

  private async answer(m: LookupMessage, reg: Registration): Promise<void> {
    reg.lookups++;
    let answer: LookupAnswer;
    if (reg.lookups > MAX_LOOKUPS_PER_JOB) {
      answer = { ok: false, code: Status.RESOURCE_EXHAUSTED, message: `cmp-offload: more than ${MAX_LOOKUPS_PER_JOB} git credential lookups by one job` };
    } else answer = m.what === 'credentials' ? await this.credentials(reg.creds) : await this.files(reg.creds);
    // Logged by name and outcome only, never by value.
    this.deps.log.debug({ jobId: m.jobId, what: m.what, ok: answer.ok }, 'git credentials lookup answered');
    // Never past the job's deadline: a lookup that late has no one left to answer.
    const ttl = Math.min(ANSWER_TTL_MS, reg.expiresAt - Date.now());
    if (ttl <= 0) return;
    await this.deps.redis.set(this.deps.keys.gitCredsAnswer(m.jobId, m.lookupId), sealAnswer(this.deps.signingKey, m, answer), 'PX', ttl);
  }

  private async credentials(creds: GitCredsEnv): Promise<LookupAnswer> {
    if (creds.nonce === undefined) return { ok: false, code: Status.NOT_FOUND, message: 'unknown nonce' };
    try {
      const c = await getCredentials(creds.socket, creds.nonce, ASKPASS_TIMEOUT_MS);
      return { ok: true, username: c.username, password: c.password };
    } catch (err) {
      if (err instanceof AskpassError) return { ok: false, code: err.code, message: err.details };
      return { ok: false, code: Status.UNAVAILABLE, message: messageOf(err) };
    }
  }

  /** The files the request's env points to, as they are now (the repo-server removes them when its call returns). */
  private async files(creds: GitCredsEnv): Promise<LookupAnswer> {
    if (creds.files.length > MAX_CREDS_FILES) return { ok: false, code: Status.FAILED_PRECONDITION, message: `the env names ${creds.files.length} files, more than ${MAX_CREDS_FILES}` };
    const files: [string, string][] = [];
    let total = 0;
    for (const file of creds.files) {
      let data: Buffer;
      try {
        data = await readSmallFile(file, MAX_CREDS_FILE_BYTES);
      } catch (err) {
        const why = (err as NodeJS.ErrnoException).code ?? messageOf(err);
        return { ok: false, code: Status.FAILED_PRECONDITION, message: `${file}: ${why}` };
      }
      total += data.length;
      if (total > MAX_CREDS_FILES_BYTES) return { ok: false, code: Status.FAILED_PRECONDITION, message: `the files exceed ${MAX_CREDS_FILES_BYTES} bytes together` };
      files.push([file, data.toString('base64')]);
    }
    return { ok: true, files };
  }

  close(): void {
    this.jobs.clear();
    this.subscriber.disconnect();
  }
}

/** A regular file of at most `max` bytes (opened non-blocking: a FIFO there cannot hang the proxy). */
async function readSmallFile(file: string, max: number): Promise<Buffer> {
  const h = await fs.open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const st = await h.stat();
    if (!st.isFile()) throw Object.assign(new Error('not a regular file'), { code: 'not a regular file' });
    if (st.size > max) throw Object.assign(new Error('too large'), { code: `larger than ${max} bytes` });
    const buf = Buffer.alloc(st.size);
    const { bytesRead } = await h.read(buf, 0, st.size, 0);
    return buf.subarray(0, bytesRead);
  } finally {
    await h.close();
  }
}
