import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { status as Status } from '@grpc/grpc-js';
import type { Ctx } from '../../cmp/context.js';
import { CmpError, messageOf, wrap, ourError } from '../../cmp/errors.js';
import { metrics } from '../../cmp/observe/metrics.js';
import { TreeIndexer, type TreeIndex } from '../../cmp/tar/tree-index.js';
import type { AppStreamRequest, ManifestRequestMetadata } from '../../proto/generated/cmpserver/plugin/plugin.js';
import type { IndexMemo } from './index-memo.js';
import { copyOnDemand, type SpoolLease, type SpoolStore } from './spool-store.js';

/** The slice of a grpc-js client-streaming call that ingest reads from. */
export interface RepoStream {
  on(event: 'data', listener: (msg: AppStreamRequest) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  off(event: string, listener: (...args: any[]) => void): unknown;
  pause(): unknown;
  resume(): unknown;
}

export interface IngestOptions {
  ctx: Ctx;
  /**
   * Where the raw tarball is spooled (mode 0600) when it outgrows the receive buffer; the caller
   * removes it after the request (`spooled` says whether it was made).
   */
  tgzPath: string;
  /** Told once the spool file at `tgzPath` is being written. */
  spooled?: () => void;
  /** The RPC's prefix for the error of a tarball in memory that cannot be written when a run needs it. */
  receiveText?: string;
  /** Indexes of tarballs ingested lately: a tarball found there is only hashed. */
  memo: IndexMemo;
  /** The shared copies of tarballs in use or kept: a tarball found there is not spooled again. */
  spools: SpoolStore;
  maxTarballBytes: number;
  maxExtractedBytes: number;
  maxEntries: number;
}

export interface IngestedRepo {
  metadata: ManifestRequestMetadata;
  /** sha256 hex of the gzip bytes, verified equal to metadata.checksum. */
  checksum: string;
  size: number;
  /** The whole tarball when it fit in the receive buffer and no shared copy existed. */
  bytes?: Buffer;
  /** The shared copy of the tarball, written to the spool store on first use when in memory. */
  file(): Promise<string>;
  /** The tree as the tarball describes it, or undefined when it could not be indexed. */
  index: TreeIndex | undefined;
  /** Let go of the tarball (the request is done with it). */
  release(): Promise<void>;
}

/**
 * The receive buffer: the repo-server's default chunk is 1 KiB, so spool writes are batched, and
 * a tarball that ends within one batch is never written unless a run needs a file (a cache hit
 * touches no disk).
 */
const SPOOL_BATCH_BYTES = 256 * 1024;

/**
 * Receive one repo stream (docs/argo-contract.md#the-repo-stream): metadata first, then file chunks until the client
 * half-closes. While reading: sha256 of the bytes, the streaming tree index (gunzip + tar parse),
 * and the bytes kept in a buffer of SPOOL_BATCH_BYTES: a tarball that fits stays in memory until
 * the request ends, a larger one is spooled to disk. Memory stays bounded: the call is paused
 * while the spool file drains.
 *
 * A known tarball (its claimed checksum names a remembered index) is only hashed: no tree index
 * is built. Nothing is spooled while the spool store holds a copy of it (a request in flight
 * holds it, or it is kept). The remembered index and the copy are used only when the bytes hash
 * to that checksum; otherwise the answer is
 * the checksum error, as for any stream. Only a verified ingest with a complete index is
 * remembered, under the digest computed here.
 *
 * Our deliberate difference (docs/argo-contract.md#deliberate-differences): when an error is detected while receiving, the
 * rest of the stream is read and discarded (up to the tarball limit) and the error is reported
 * only after the client half-closes, so the repo-server sees the real status instead of EOF.
 * Errors carry the texts of Argo's ReceiveRepoStream; the RPC prefix is added by the caller.
 */
export function receiveRepoStream(stream: RepoStream, opts: IngestOptions): Promise<IngestedRepo> {
  return new Promise((resolve, reject) => {
    let metadata: ManifestRequestMetadata | undefined;
    let failure: CmpError | undefined;
    let settled = false;
    let received = 0;
    const hash = createHash('sha256');
    let indexer: TreeIndexer | undefined;
    /** The remembered index the claimed checksum names: a hint until the digest matches. */
    let known: TreeIndex | undefined;
    /** The shared copy of a known tarball, held from the metadata on. */
    let lease: SpoolLease | undefined;
    let spool: fs.WriteStream | undefined;
    let batch: Buffer[] = [];
    let batchBytes = 0;

    const finish = (err: CmpError | undefined, value?: IngestedRepo) => {
      if (settled) return;
      settled = true;
      // Only ingest's own listeners: the RPC's 'cancelled' listener must outlive ingest, or a
      // caller's cancel after the upload would no longer stop the run.
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('error', onError);
      opts.ctx.signal.removeEventListener('abort', onAbort);
      // Keep an 'error' listener: a late stream error must not crash the process.
      stream.on('error', () => {});
      if (err) {
        discardSpool();
        void indexer?.end().catch(() => {}); // the stream's own error is the one answered
        // The lease may be the last on its file: it is gone before the answer.
        void (lease?.release() ?? Promise.resolve()).then(() => reject(err));
      } else resolve(value!);
    };

    /** Record the first error; keep draining unless it must be answered at once. */
    const fail = (err: CmpError, now = false) => {
      failure ??= err;
      discardSpool();
      if (now) finish(failure);
    };

    /** Drop the spool file: its late errors mean nothing now, and a pending drain never comes. */
    const discardSpool = () => {
      if (!spool) return;
      spool.removeAllListeners();
      spool.on('error', () => {});
      spool.destroy();
      spool = undefined;
      stream.resume();
    };

    /** The spool file, opened when the tarball outgrows the buffer. */
    const openSpool = (): fs.WriteStream => {
      const file = fs.createWriteStream(opts.tgzPath, { mode: 0o600, flags: 'wx', highWaterMark: 4 * SPOOL_BATCH_BYTES });
      file.on('error', err => fail(new CmpError(`error receiving tgz file: error writing tgz file: ${messageOf(err)}`), true));
      opts.spooled?.();
      return file;
    };

    const flush = () => {
      if (batchBytes === 0) return;
      spool ??= openSpool();
      const buf = batch.length === 1 ? batch[0]! : Buffer.concat(batch, batchBytes);
      batch = [];
      batchBytes = 0;
      if (!spool.write(buf)) {
        stream.pause();
        spool.once('drain', () => stream.resume());
      }
    };

    const onAbort = () => {
      const reason = opts.ctx.signal.reason as CmpError;
      fail(wrap('error receiving tgz file: stream context error', reason), true);
    };
    opts.ctx.signal.addEventListener('abort', onAbort, { once: true });

    const onData = (msg: AppStreamRequest) => {
      if (failure) {
        received += msg.file?.chunk.length ?? 0;
        if (received > opts.maxTarballBytes) finish(failure);
        return;
      }
      if (!metadata) {
        if (!msg.metadata) return fail(new CmpError('error getting stream metadata: metadata is nil'));
        metadata = msg.metadata;
        known = opts.memo.peek(metadata.checksum);
        // A copy held or kept under the claimed checksum: a hint until the digest matches.
        lease = opts.spools.acquire(metadata.checksum);
        if (!known) indexer = new TreeIndexer({ maxExtractedBytes: opts.maxExtractedBytes, maxEntries: opts.maxEntries });
        // Go checks ctx before every Recv after the header: a context that was done before the
        // call began (no 'abort' event then) fails here, as it does when it ends mid-stream.
        if (opts.ctx.signal.aborted) onAbort();
        return;
      }
      if (!msg.file) return fail(new CmpError('error receiving tgz file: stream request file is nil'));
      const { chunk } = msg.file;
      received += chunk.length;
      if (received > opts.maxTarballBytes) {
        return fail(wrap('error receiving tgz file', ourError('tarballTooLarge', opts.maxTarballBytes)), true);
      }
      hash.update(chunk);
      indexer?.write(chunk);
      if (lease) return;
      batch.push(chunk);
      batchBytes += chunk.length;
      if (batchBytes >= SPOOL_BATCH_BYTES) flush();
    };

    const onError = (err: Error) => fail(new CmpError(`error receiving tgz file: stream Recv error: ${messageOf(err)}`), true);

    const onEnd = () => {
      if (failure) return finish(failure);
      if (!metadata) return finish(new CmpError('error receiving stream header: EOF'));
      const checksum = hash.digest('hex');
      if (spool) {
        flush();
        spool.end(() => void verified(checksum));
      } else {
        // Within the buffer: the tarball stays in memory (nothing when a shared copy is held).
        const bytes = lease ? undefined : batch.length === 1 ? batch[0]! : Buffer.concat(batch, batchBytes);
        batch = [];
        batchBytes = 0;
        void verified(checksum, bytes);
      }
    };

    /** Everything is received (and spooled): check the digest, find the index, share the copy. */
    const verified = async (checksum: string, bytes?: Buffer) => {
      if (settled) return;
      if (checksum !== metadata!.checksum) {
        return finish(new CmpError('error receiving tgz file: file checksum validation error'));
      }
      let index = known;
      if (!index) {
        try {
          index = await indexer!.end();
        } catch (err) {
          // Limits are known from the index already: answer now instead of shipping the
          // tarball to a worker. Other tar errors get their exact text from extraction.
          if (err instanceof CmpError && err.code === Status.RESOURCE_EXHAUSTED) {
            return finish(wrap('error decompressing tgz file', err));
          }
        }
      }
      if (settled) return;
      metrics.indexMemo.inc({ result: known ? 'hit' : 'miss' });
      if (index) opts.memo.remember(checksum, index);
      if (bytes) return finish(undefined, inMemory(opts, metadata!, checksum, bytes, index));
      let copy: SpoolLease;
      try {
        copy = lease ?? (await opts.spools.adopt(checksum, opts.tgzPath, received));
      } catch {
        // No shared copy (link refused): this request keeps its own, removed by the caller.
        copy = { path: opts.tgzPath, release: () => Promise.resolve() };
      }
      lease = copy;
      if (settled) return void copy.release();
      const file = Promise.resolve(copy.path);
      finish(undefined, { metadata: metadata!, checksum, size: received, index, file: () => file, release: () => copy.release() });
    };

    stream.on('data', onData);
    stream.on('error', onError);
    stream.on('end', onEnd);
  });
}

/** A tarball received into memory: a file (a shared copy in the spool store) only when asked for. */
function inMemory(opts: IngestOptions, metadata: ManifestRequestMetadata, checksum: string, bytes: Buffer, index: TreeIndex | undefined): IngestedRepo {
  const copy = copyOnDemand(opts.spools, checksum, bytes, err => {
    const text = `error receiving tgz file: error writing tgz file: ${messageOf(err)}`;
    return new CmpError(opts.receiveText ? `${opts.receiveText}: ${text}` : text);
  });
  return { metadata, checksum, size: bytes.length, bytes, index, ...copy };
}
